#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: root's folders and files of a role, converged in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: root_files
short_description: Converge root's folders and files (scripts root runs, their configuration, units) in one run
version_added: 0.6.0
description:
  - Makes each folder of O(directories) and writes each file of O(files) whose bytes, mode or
    owner differ, all owned by root (user and group 0). A file is written to a temp file beside
    it and renamed over it, so a reader sees the old file or the new one; a link at a file's
    path is replaced, never followed.
  - Every entry is read and judged before anything is written; a bad one fails the task naming
    it and changes nothing. Refused, among others - a mode with a group or other write bit, a
    file whose folder does not exist and is not listed, a folder from / down to a file that a
    user other than root could change (what root runs from there could be swapped).
  - One module run for all of them, where M(ansible.builtin.copy) or M(ansible.builtin.template)
    take two module runs a file even when nothing changes. The content is given (render
    templates on the controller with P(ansible.builtin.template#lookup)); it shows in a diff, so
    it is not for secrets.
options:
  directories:
    description: Folders to make (or give back to root with this mode), parents before children.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute, normalized path.
        type: path
        required: true
      mode:
        description: Octal mode as a string; no group or other write bit.
        type: str
        default: "0755"
  files:
    description: Files to write when they differ.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute, normalized path; its folder exists or is in O(directories).
        type: path
        required: true
      content:
        description: The file's text (written as UTF-8).
        type: str
        required: true
      mode:
        description: Octal mode as a string; no group or other write bit.
        type: str
        default: "0644"
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reads and judges every entry and says what would change; writes nothing.
  diff_mode:
    support: full
    details: Each file that changes, before and after (a file over 64 KiB as its size).
  idempotent:
    support: full
  platform:
    platforms: posix
notes:
  - Runs as root (become); the files are root's whatever the connection user.
seealso:
  - module: ansible.builtin.copy
  - module: ansible.builtin.template
"""

EXAMPLES = r"""
- name: A root script, what it reads and its timer
  gpuserve.vllm.root_files:
    directories:
      - path: /usr/local/lib/gpuserve
      - path: /etc/gpuserve
    files:
      - path: /usr/local/lib/gpuserve/collector.py
        content: "{{ lookup('ansible.builtin.file', 'collector.py') }}"
      - path: /etc/gpuserve/collector.json
        content: "{{ {'url': 'http://127.0.0.1:30000/workers'} | to_nice_json }}"
      - path: /etc/systemd/system/collector.timer
        content: "{{ lookup('ansible.builtin.template', 'collector.timer.j2') }}"
  register: written

- name: Reload systemd when a unit changed
  ansible.builtin.systemd_service:
    daemon_reload: true
  when: written.changed_paths | select('match', '/etc/systemd/system/') | list | length > 0
"""

RETURN = r"""
changed_paths:
  description: Each folder and file that was (in check mode, would be) made or written.
  returned: always
  type: list
  elements: str
  sample: [/etc/systemd/system/collector.timer]
changes:
  description: What differed, a line each (absent, mode, owner, content, not a regular file).
  returned: always
  type: list
  elements: str
  sample: ["/etc/systemd/system/collector.timer: content"]
msg:
  description: One line for the operator.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._node import _rootfiles as rf


def main() -> None:
    """Judge every entry, then make and write what differs."""
    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "mode": {"type": "str", "default": "0755"},
            }},
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "content": {"type": "str", "required": True},
                "mode": {"type": "str", "default": "0644"},
            }},
        },
        supports_check_mode=True,
    )
    result = {"changed": False, "changed_paths": [], "changes": []}
    if os.geteuid() != 0:
        module.fail_json(msg="root_files writes root's files: run it as root (become), not uid %d" % os.geteuid(),
                         **result)
    try:
        folders, files = rf.parse(module.params["directories"], module.params["files"])
        outcome = rf.converge(folders, files, check=module.check_mode, want_diff=module._diff)
    except rf.RootFilesError as exc:
        module.fail_json(msg="root_files: %s; nothing was written" % exc, **result)
    except OSError as exc:
        module.fail_json(msg="root_files: %s" % exc, **result)
    result.update(changed=bool(outcome.changes), changes=outcome.changes,
                  changed_paths=[line.split(": ", 1)[0] for line in outcome.changes],
                  msg=("%d of %d %s: %s" % (len(outcome.changes), len(folders) + len(files),
                                            "would change" if module.check_mode else "changed",
                                            "; ".join(outcome.changes))
                       if outcome.changes else "%d folders and files as wanted" % (len(folders) + len(files))))
    if module._diff:
        result["diff"] = outcome.diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
