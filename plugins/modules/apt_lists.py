#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module gpuserve.vllm.apt_lists: apt's package lists, refreshed when they cannot offer what a task installs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_lists
short_description: Refresh apt's package lists when they cannot offer the packages a role is about to install
version_added: 0.1.0
description:
  - Asks C(apt-cache policy) for O(packages). When one has no candidate the lists are refreshed
    (C(apt-get update)) at once; otherwise only when they are older than O(valid_time) seconds.
  - Why not C(ansible.builtin.apt)'s C(cache_valid_time) alone - it trusts the modification time of
    C(/var/lib/apt/lists) (Debian keeps no update-success stamp), which C(rm -rf /var/lib/apt/lists/*)
    or a source added under C(/etc/apt/sources.list.d) leaves recent, so the lists look fresh and offer
    nothing, and the install fails with "No package matching".
  - Then says which packages still have no candidate (RV(without_candidate)), so that a role can refuse
    by name before anything is installed, and returns C(apt-cache policy)'s output (RV(policy)).
  - A source that does not answer (an air-gapped node, a mirror down) is not a failure - C(apt-get update)
    keeps the lists it had, exiting 0 or 100 depending on which of the source's files it missed - but
    RV(fetch_failures) names it, so that a role can say why a package has no candidate, or fall back
    knowingly (nccl-tests to its source build). Any other failure of C(apt-get update) fails the module.
  - Refreshing the lists changes nothing a node runs, so C(changed) is always false (RV(refreshed) says
    whether it happened). In check mode the lists are not refreshed (as C(ansible.builtin.apt));
    RV(reason) says why they would be.
options:
  packages:
    description:
      - The packages about to be installed, as C(ansible.builtin.apt) takes them (C(name), C(name=version)).
    type: list
    elements: str
    required: true
  valid_time:
    description:
      - Seconds for which lists that offer every package are trusted (C(cache_valid_time)).
    type: int
    default: 3600
  refresh:
    description:
      - Refresh at all. V(false) (an operator's mirror refreshed by other means) only reports.
    type: bool
    default: true
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reads the lists and says whether it would refresh them; refreshes nothing.
  diff_mode:
    support: none
    details: The lists are apt's cache, not configuration; there is no diff.
  idempotent:
    support: full
    details: C(changed) is always false; a second run within O(valid_time) refreshes nothing.
  platform:
    support: full
    platforms: debian
"""

EXAMPLES = r"""
- name: Make apt's lists offer the driver packages (a source added or the lists emptied within the hour)
  gpuserve.vllm.apt_lists:
    packages: [nvidia-open]
  register: lists

- name: Refuse by name a package no configured source offers
  ansible.builtin.assert:
    that: lists.without_candidate | length == 0
    fail_msg: "no apt source offers {{ lists.without_candidate | join(', ') }}"
"""

RETURN = r"""
refreshed:
  description: Whether C(apt-get update) ran.
  returned: always
  type: bool
  sample: true
reason:
  description: Why the lists were (or in check mode would be) refreshed; empty when not.
  returned: always
  type: str
  sample: no candidate for nvidia-open in apt's lists
without_candidate:
  description: The packages of O(packages) no configured source offers, after the refresh.
  returned: always
  type: list
  elements: str
  sample: []
fetch_failures:
  description:
    - The sources C(apt-get update) could not fetch (its C(Err) lines); empty when it fetched them all or did not run.
  returned: always
  type: list
  elements: str
  sample: ["http://127.0.0.1:9 ./ InRelease (Could not connect to 127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused))"]
policy:
  description: C(apt-cache policy)'s output for O(packages), after the refresh.
  returned: always
  type: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils import _apt

C_LOCALE = {"LC_ALL": "C", "LANG": "C"}


def lists_age(now: float) -> float | None:
    """Seconds since apt's last refresh, as cache_valid_time reads it; None when nothing tells."""
    for path in (_apt.UPDATE_STAMP, _apt.LISTS_DIR):
        try:
            return now - os.stat(path).st_mtime
        except OSError:
            continue
    return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={"packages": {"type": "list", "elements": "str", "required": True},
                       "valid_time": {"type": "int", "default": 3600},
                       "refresh": {"type": "bool", "default": True}},
        supports_check_mode=True,
    )
    names = [_apt.package_name(spec) for spec in module.params["packages"]]

    def policy() -> str:
        rc, out, err = module.run_command(["apt-cache", "policy", "--"] + names, environ_update=C_LOCALE)
        if rc != 0:
            module.fail_json(msg=f"apt-cache policy {' '.join(names)} failed (rc {rc}): {err.strip()}", changed=False)
        return out

    out = policy()
    reason = _apt.refresh_reason(_apt.without_candidate(names, out), lists_age(time.time()), module.params["valid_time"])
    refreshed, fetch_failures = False, []
    if reason and module.params["refresh"] and not module.check_mode:
        # Not a failure when it reaches no source (air-gapped, a mirror down): the lists stay as they
        # were, and what they do not offer is refused by name with what could not be fetched.
        rc, update_out, err = module.run_command(["apt-get", "update", "-q"], environ_update=C_LOCALE)
        refreshed, fetch_failures = True, _apt.fetch_failures(update_out)
        if rc != 0 and not fetch_failures:
            module.fail_json(msg=f"apt-get update failed (rc {rc}; refreshing because {reason}): {err.strip()}",
                             stdout=update_out, changed=False)
        out = policy()
    module.exit_json(changed=False, refreshed=refreshed, reason=reason if module.params["refresh"] else "",
                     without_candidate=_apt.without_candidate(names, out), fetch_failures=fetch_failures, policy=out)


if __name__ == "__main__":
    main()
