#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: say whether a node is as the last full run left it, or record that it is."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_converged
short_description: Record, and later compare, digests of everything a run converged on a node
version_added: 0.5.0
description:
  - With O(state=record), at the end of a full run, reads every artefact in O(artefacts) and
    writes their digests and O(inputs) to O(path) (root's, temp file and atomic rename).
  - With O(state=read), reads them again and returns RV(converged) true only when O(inputs) and
    every artefact's digest are the ones recorded. Anything unreadable, missing from the record
    or present in it but no longer read is a difference, named in RV(reasons) (unknown is never
    "the same"). A record another user than root could have written is not trusted.
  - "A file or link is read by C(lstat): type, mode, owner, group, size, inode, modification and
    status-change times, a link's target; a folder (O(artefacts[].kind=tree)) by its own
    mode and owner and every entry below it; contents are not read (kind C(content) reads a
    small file, for /proc)."
  - A change made less than two seconds before a record could hide within the file system's
    timestamp granularity (racily clean), so the record waits that long once and reads again.
options:
  state:
    description: C(read) compares; C(record) writes the record.
    type: str
    choices: [read, record]
    default: read
  path:
    description: The record file.
    type: path
    default: /var/lib/gpuserve/converged.json
  inputs:
    description:
      - A digest of what the run was given (the roles' options, the collection, the wheelhouse),
        made on the controller by the
        P(gpuserve.vllm.node_converged_inputs#filter) filter.
    type: str
    required: true
  handoff:
    description:
      - O(state=record) only. Values the run derived from these inputs and this node (the name of
        the env it built), kept in the record and returned by a read that finds the node
        converged (RV(handoff)), so that the next run need not derive them again.
    type: dict
    default: {}
  unless_exists:
    description:
      - Paths whose existence says the node is not converged, whatever the digests say (a reboot
        request the serve plays act on). With one there, nothing is recorded.
    type: list
    elements: path
    default: []
  artefacts:
    description: What the run converges.
    type: list
    elements: dict
    required: true
    suboptions:
      kind:
        description:
          - C(tree) a folder and everything below it; C(path) one file, folder or link (and what
            a link resolves to); C(unit) a systemd unit's load, active and enablement state;
            C(content) a small file's bytes (up to 1 MiB); C(listing) the names in a folder.
        type: str
        required: true
        choices: [tree, path, unit, content, listing]
      path:
        description: Absolute path (all kinds but C(unit)).
        type: path
      name:
        description: The unit's name (kind C(unit)).
        type: str
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: C(read) runs as usual; C(record) reads and says whether it would write, writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A record equal to the one on disk (but for its time) is not written again.
  platform:
    platforms: posix
seealso:
  - name: The fast path of site.yml
    description: docs/operations.md, "A run with nothing to change"
    link: https://github.com/gpuserve/vllm/blob/main/docs/operations.md
"""

EXAMPLES = r"""
- name: Is this node as the last full run left it?
  gpuserve.vllm.node_converged:
    state: read
    inputs: "{{ {'ml_env_dir': ml_env_dir} | gpuserve.vllm.node_converged_inputs }}"
    artefacts:
      - {kind: tree, path: /opt/ml-env.d}
      - {kind: path, path: /etc/nccl.conf}
      - {kind: unit, name: nvidia-persistenced.service}
  register: converged
"""

RETURN = r"""
converged:
  description: O(state=read) only. Inputs and every artefact as recorded.
  returned: always
  type: bool
handoff:
  description: O(state=read) only. The recorded O(handoff) when RV(converged), else empty.
  returned: always
  type: dict
  sample: {ml_env_build_dir: /opt/ml-env.d/py3.11-vllm0.17.1-3f2a}
reasons:
  description: What differs (or, for O(state=record), why nothing was recorded); empty when none.
  returned: always
  type: list
  elements: str
  sample: ["tree:/opt/ml-env.d: changed"]
recorded:
  description: O(state=record) only. Whether a record is on disk that matches this read.
  returned: always
  type: bool
msg:
  description: One line for the operator.
  returned: always
  type: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._env._pyenv import path_problem
from ansible_collections.gpuserve.vllm.plugins.module_utils._node import _converged as nc
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._manifest import write_text_atomic


def _trusted_record(path: str) -> tuple:
    """(record or None, reasons): a record another user could have written is not used."""
    problem = path_problem(path, trusted={0})
    if problem:
        return None, [f"{path}: not trusted ({problem})"]
    try:
        return nc.load(path), []
    except nc.ConvergedError as exc:
        return None, [str(exc)]


def main() -> None:
    """Read every artefact; compare with the record, or write it."""
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["read", "record"], "default": "read"},
            "path": {"type": "path", "default": "/var/lib/gpuserve/converged.json"},
            "inputs": {"type": "str", "required": True},
            "handoff": {"type": "dict", "default": {}},
            "unless_exists": {"type": "list", "elements": "path", "default": []},
            "artefacts": {"type": "list", "elements": "dict", "required": True, "options": {
                "kind": {"type": "str", "required": True, "choices": list(nc.KINDS)},
                "path": {"type": "path"},
                "name": {"type": "str"},
            }},
        },
        supports_check_mode=True,
    )
    p = module.params
    result = {"changed": False, "converged": False, "recorded": False, "reasons": [], "handoff": {}}
    try:
        for artefact in p["artefacts"]:
            nc.part_name(artefact)
    except nc.ConvergedError as exc:
        module.fail_json(msg=f"artefacts: {exc}", **result)
    record, problems = _trusted_record(p["path"])
    pending = [f"{path} exists" for path in p["unless_exists"] if path and os.path.lexists(path)]
    if p["state"] == "read":
        verdict = nc.compare(record, p["inputs"], nc.read(p["artefacts"]))
        reasons = pending + (problems or verdict.reasons)
        converged = verdict.converged and not problems and not pending
        result.update(converged=converged, reasons=reasons, handoff=record["handoff"] if converged else {},
                      msg=("as the last full run left it: nothing to prepare" if converged else
                           f"to prepare: {reasons[0]}" + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "")))
        module.exit_json(**result)
    if os.geteuid() != 0:
        module.fail_json(msg=f"{p['path']}: only root records a converged run (running as uid {os.geteuid()})", **result)
    try:
        if pending:
            raise nc.ConvergedError("not recorded: " + "; ".join(pending))
        new = nc.record_for(p["inputs"], nc.settled_read(p["artefacts"]), p["handoff"])
    except nc.ConvergedError as exc:
        # Nothing may be left that vouches for a state this run could not read: the next run
        # prepares in full.
        stale = os.path.lexists(p["path"])
        if stale and not module.check_mode:
            os.unlink(p["path"])
        result.update(changed=stale, reasons=[str(exc)], msg=str(exc))
        module.exit_json(**result)
    if record is not None and nc.same_record(record, new):
        result.update(recorded=True, msg=f"{p['path']}: already recorded")
        module.exit_json(**result)
    if not module.check_mode:
        new["recorded_at"] = time.time()
        write_text_atomic(p["path"], nc.dumps(new), ".converged.")
    result.update(changed=True, recorded=not module.check_mode,
                  msg=f"{p['path']}: {'would record' if module.check_mode else 'recorded'} {len(new['parts'])} artefacts")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
