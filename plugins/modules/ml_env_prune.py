#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: remove old side-by-side envs, never the serving, previous or protected ones."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ml_env_prune
short_description: Remove old side-by-side envs from the env store, keeping the newest
version_added: 0.2.0
description:
  - Envs live side by side in O(store_dir) (one directory each); the stable path O(link) names
    the one that serves and C(<link>.previous) the one that served before. This module keeps the
    newest O(keep) envs, by the C(created) time of their C(gpuserve-env.json) (the directory's
    modification time when there is none, as for a C(legacy-*) env), and removes the rest.
  - Never removed, and counted towards O(keep), are the env O(link) names, the env
    C(<link>.previous) names, every path in O(protect) and every absolute path any record in
    O(protect_records) holds.
  - A record in O(protect_records) that cannot be read safely (a link, not a regular file, not
    root's or writable by others, over 1 MiB, not JSON) removes nothing at all - what it names is
    not known, so every env stays, with a warning naming it.
  - An env is first renamed to C(.<name>.removing) (no longer an env to anyone), then deleted;
    such a directory left by a killed run is removed by the next run.
options:
  store_dir:
    description: Directory holding the envs side by side. A missing directory has nothing to prune.
    type: path
    required: true
  link:
    description: The stable path (a symlink to the serving env); it and C(<link>.previous) are protected.
    type: path
    required: true
  keep:
    description: How many envs stay, protected ones included (at least 1).
    type: int
    default: 2
  protect:
    description: Further envs never to remove, for example the one this run builds.
    type: list
    elements: path
    default: []
  protect_records:
    description:
      - Root-owned JSON records (for example the vLLM serve plan's journal and rollback hold) whose
        absolute paths are envs never to remove, whatever they mean to the role that wrote them.
      - An absent record names nothing.
    type: list
    elements: path
    default: []
    version_added: 0.7.0
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Lists what it would remove; removes nothing.
  diff_mode:
    support: full
    details: The store's envs before and after.
  idempotent:
    support: full
  platform:
    platforms: posix
seealso:
  - module: gpuserve.vllm.ml_env_switch
"""

EXAMPLES = r"""
- name: Keep the two newest envs (and always the serving and previous ones)
  gpuserve.vllm.ml_env_prune:
    store_dir: /opt/ml-env.d
    link: /opt/ml-env
    keep: 2
    protect: [/opt/ml-env.d/vllm-0.18.0-0a1b2c3d4e5f]
    protect_records: [/var/lib/gpuserve/vllm_server.plan.json, /var/lib/gpuserve/vllm_server.rollback.json]
"""

RETURN = r"""
removed:
  description: Envs removed (in check mode, that would be), and leftovers of a killed removal.
  returned: always
  type: list
  elements: str
  sample: [/opt/ml-env.d/vllm-0.16.0-8c01d2e3f4a5]
kept:
  description: Envs that stay, newest first.
  returned: always
  type: list
  elements: str
  sample: [/opt/ml-env.d/vllm-0.18.0-0a1b2c3d4e5f, /opt/ml-env.d/vllm-0.17.0-3f2a9c1b7d40]
unreadable:
  description: The records of O(protect_records) that could not be read safely, and why (then nothing is removed).
  returned: always
  type: list
  elements: str
msg:
  description: One line saying what was (or would be) removed.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _records as er
from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _store as es


def main() -> None:
    """List the store, plan, remove (rename first, then delete)."""
    module = AnsibleModule(
        argument_spec={
            "store_dir": {"type": "path", "required": True},
            "link": {"type": "path", "required": True},
            "keep": {"type": "int", "default": 2},
            "protect": {"type": "list", "elements": "path", "default": []},
            "protect_records": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["keep"] < 1:
        module.fail_json(msg=f"keep: must be at least 1 (the serving env always stays), got {p['keep']}")
    link = os.path.abspath(p["link"]).rstrip("/")
    protect = list(p["protect"])
    for path in (link, es.previous_path(link)):
        if os.path.lexists(path):
            protect.append(os.path.realpath(path))
    named, unreadable = er.protected_by(p["protect_records"])
    envs, leftovers = es.list_store(p["store_dir"])
    # A record that could not be read may name any env: every one stays (unknown is not no).
    remove, kept = es.plan_prune(envs, p["keep"], protect + named + ([e.path for e in envs] if unreadable else []))
    removed = [] if unreadable else [e.path for e in remove] + leftovers
    for problem in unreadable:
        module.warn(f"protect_records: {problem}; it may name any env, so nothing was pruned")
    result = {
        "changed": bool(removed), "removed": removed, "kept": [e.path for e in kept], "unreadable": unreadable,
        "diff": {"before": "".join(f"{e.path}\n" for e in envs),
                 "after": "".join(f"{e.path}\n" for e in kept)},
    }
    verb = "would remove" if module.check_mode else "removed"
    result["msg"] = (f"{verb} {', '.join(removed)}; kept {', '.join(result['kept']) or 'nothing'}"
                     if removed else f"nothing to prune in {p['store_dir']} (keep {p['keep']})")
    if unreadable:
        result["msg"] = (f"pruned nothing in {p['store_dir']}: every env stays, since a record that may "
                         f"name any of them could not be read ({'; '.join(unreadable)})")
    if not module.check_mode:
        for path in removed:
            try:
                es.remove_env(path)
            except OSError as exc:
                module.fail_json(msg=f"could not remove the env {path}: {exc}; remove it by hand "
                                     f"(rm -rf) or fix the cause and re-run", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
