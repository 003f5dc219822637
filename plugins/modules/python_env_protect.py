#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: give Python environments to root, so the service user cannot change them."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: python_env_protect
short_description: Give Python environments to root, writable by nobody else
version_added: 0.2.0
description:
  - Root runs the interpreters of the environments this collection builds (facts, the vLLM
    preflight, the EAGLE-3 checks, installs). Whoever can write into such an environment can
    make root run their code, for example with a C(.pth) file in its site-packages. This module
    gives every entry under O(paths) to the user and group running it (root, with C(become)),
    removes group and world write, and removes set-user-ID and set-group-ID bits from files.
  - A folder is fixed before its entries are read, so that nobody else can swap an entry while
    the walk goes on. Symbolic links are given to root and never followed (a link given as one of
    O(paths) is, and its target walked). Nothing is removed, so what another user already wrote
    into an environment stays (rebuild the environment to be rid of it).
  - An environment that is already root's is only read, so a second run reports no change.
options:
  paths:
    description:
      - Folders to walk (environments, the env store, the uv tools env). Missing paths are skipped.
    type: list
    elements: path
    required: true
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Counts and names what it would fix; changes nothing.
  diff_mode:
    support: none
    details: RV(examples) names what changed.
  idempotent:
    support: full
  platform:
    platforms: posix
seealso:
  - module: gpuserve.vllm.python_env_facts
"""

EXAMPLES = r"""
- name: Give the env store and the uv tools back to root (an older release gave them to vllm)
  gpuserve.vllm.python_env_protect:
    paths: [/opt/ml-env.d, /opt/ml-env-tools]
"""

RETURN = r"""
checked:
  description: Entries looked at.
  returned: always
  type: int
  sample: 61234
fixed:
  description: Entries whose owner or mode changed (in check mode, would change).
  returned: always
  type: int
  sample: 61234
examples:
  description: The first ten fixed entries and what changed.
  returned: always
  type: list
  elements: str
  sample: ["/opt/ml-env.d/vllm-0.17.0-3f2a9c1b7d40: owner 998:998 -> 0:0"]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _protect


def main() -> None:
    """Walk the paths, fix (or count) what another user could change."""
    module = AnsibleModule(
        argument_spec={"paths": {"type": "list", "elements": "path", "required": True}},
        supports_check_mode=True,
    )
    try:
        report = _protect.protect(module.params["paths"], os.geteuid(), os.getegid(),
                                  check=module.check_mode)
    except OSError as exc:
        module.fail_json(msg=f"could not give {exc.filename or 'an entry'} to uid "
                             f"{os.geteuid()}: {exc.strerror}; run the task with become: true")
    module.exit_json(changed=report.fixed > 0, checked=report.checked, fixed=report.fixed,
                     examples=report.examples)


if __name__ == "__main__":
    main()
