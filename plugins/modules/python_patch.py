#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module gpuserve.vllm.python_patch: AST-located, validated, reversible source edits."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: python_patch
short_description: Apply structural, verified and reversible edits to installed Python files
version_added: 0.1.0
description:
  - Changes installed Python source files (for example a vLLM release in a virtual environment)
    with edits that are located by Python's C(ast) module, never by line numbers or regular
    expressions. Only the lines of the statements an edit touches change; comments and
    formatting elsewhere are kept, as are PEP 263 coding cookies, CRLF line endings and tab
    indentation.
  - Every result is re-parsed and checked to contain the intended change, compiled with the
    interpreter given in O(python), optionally checked with O(validate), written atomically
    (temporary file in the same directory, fsync, rename) keeping mode and owner, and its stale
    C(__pycache__) bytecode is removed.
  - Several files given in O(files) are changed all-or-nothing. Every file is computed,
    compiled and validated before the first one is replaced; when O(import_check) fails after
    writing, every file is put back.
  - Each run is a transaction under the files' locks. Before the first record change or
    replacement, a journal under O(state_dir) (fsynced) holds the bytes before, the sha256 after,
    the temporary files and the record files as they were. It is removed once every file is
    written and checked. A run killed before that point (SIGKILL, power loss, Ansible timeout)
    is rolled back by the next run on any of its files, before anything else, with a warning and
    RV(recovered) saying so; a file whose O(import_check) never completed is thus patched and
    checked again by that next run.
  - The module keeps, per file it changed, a record under O(state_dir) holding the original
    bytes, so O(state=absent) can put back exactly what was there before, and only when the
    file is still exactly what the module wrote.
  - Re-running with the same edits reports no change. The edits being already present (for
    example in a newer release that ships the change natively) is not an error.
author:
  - gpuserve maintainers (@gpuserve)
requirements:
  - Python 3.9 or newer on the managed node (standard library only).
  - The interpreter given in O(python) must be Python 3.
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details:
      - Predicts the change and writes nothing, not even bytecode or lock files. The compile
        check runs in memory; O(validate) runs on a copy in a private temporary directory.
      - O(import_check) cannot run in check mode, because the new files do not exist yet.
  diff_mode:
    support: full
    details:
      - Returns one unified diff per changed file.
  idempotent:
    support: full
  platform:
    platforms: posix
    support: full
options:
  path:
    description:
      - The Python file to change. Symbolic links are followed and the file they point to is
        changed.
      - Mutually exclusive with O(files). One of O(path) or O(files) is required.
    type: path
    aliases: [dest]
  edits:
    description:
      - The edits to apply to O(path), in order; each edit sees the result of the previous one.
      - Each element has an optional O(edits[].id), an optional O(edits[].when_missing) and
        exactly one kind key, one of O(edits[].import), O(edits[].base), O(edits[].member),
        O(edits[].replace), O(edits[].element).
      - Required with O(path) when O(state=present). With O(state=absent) what is restored
        comes from the record; the edits may be omitted and only serve, when there is no
        record, to report per edit whether its change is in the file.
      - Every edit is checked by the collection's edit engine before any file is read (the one
        schema for edits, whose keys are documented below); a missing or unknown key, or a value
        outside its choices, fails naming the file and the edit.
    type: list
    elements: dict
    suboptions: &edit_suboptions
      id:
        description:
          - A name for the edit, used in results, errors and the record.
          - Defaults to a name derived from the edit's kind and position.
        type: str
      when_missing:
        description:
          - What to do when the edit's target (class, scope, assignment, import anchor) does not
            exist in the file.
          - V(fail) fails the module naming what does exist; V(skip) reports the edit as
            C(skipped) and goes on (the module itself is then ok, never skipped).
        type: str
        choices: [fail, skip]
        default: fail
      import:
        description:
          - Ensure names are imported C(from module). They are merged into an existing
            C(from module import ...) statement (relative or absolute), keeping its style and
            comments; a one-line import that would become too long turns into a parenthesised
            multi-line one. Without such a statement a new one is added after the last
            top-level import.
        type: dict
        suboptions:
          module:
            description: The module imported from, as written in the file, for example C(.interfaces).
            type: str
            required: true
          names:
            description: The names that must be imported; V(X as Y) imports C(X) under the alias C(Y).
            type: list
            elements: str
            required: true
      base:
        description:
          - Ensure a class lists the given bases, after its existing positional bases and
            before any keyword arguments (such as C(metaclass=)).
        type: dict
        suboptions:
          class:
            description: Name of the class, as defined at module level.
            type: str
            required: true
          names:
            description: Base class expressions that must be listed.
            type: list
            elements: str
            required: true
      member:
        description:
          - Ensure a class defines a method or attribute given as source text. Already present
            and equal by AST (formatting and comments ignored) means nothing to do.
        type: dict
        suboptions:
          class:
            description: Name of the class.
            type: str
            required: true
          source:
            description: "The complete definition, for example C(def f(self): ...), indented as at module level."
            type: str
            required: true
          on_conflict:
            description:
              - What to do when the class already defines the member differently.
              - V(fail) fails naming the line of the existing definition, V(keep) leaves it and
                reports C(already), V(replace) replaces it with O(edits[].member.source).
            type: str
            choices: [fail, keep, replace]
            default: fail
      replace:
        description:
          - Inside O(edits[].replace.scope), find the one statement or run of consecutive
            statements whose AST equals O(edits[].replace.old) (formatting and comments
            ignored) and replace it with O(edits[].replace.new), re-indented. Nested blocks
            (if/else, for, while, try, with) are searched, nested functions and classes are not.
          - O(edits[].replace.new) already present means nothing to do. No match or several
            matches fail, naming the line numbers.
        type: dict
        suboptions:
          scope:
            description:
              - Dotted path of classes and functions, for example C(DeepseekV2Model.forward).
                Empty means module level.
            type: str
            default: ''
          old:
            description: The statement(s) to find.
            type: str
            required: true
          new:
            description: The statement(s) to put in their place.
            type: str
            required: true
      element:
        description:
          - Ensure values are in the list, tuple or set literal assigned to a name in a scope.
        type: dict
        suboptions:
          scope:
            description: Dotted path of classes and functions; empty means module level.
            type: str
            default: ''
          name:
            description: The name the literal is assigned to.
            type: str
            required: true
          values:
            description: Literal values (strings, numbers) that must be elements.
            type: list
            elements: raw
            required: true
  files:
    description:
      - Several files changed all-or-nothing. Mutually exclusive with O(path) and O(edits).
      - Every file is read, edited, compiled and validated before the first is written; a
        failure anywhere leaves every file byte-identical to before.
    type: list
    elements: dict
    suboptions:
      path:
        description: The Python file to change.
        type: path
        required: true
      edits:
        description: The edits for this file, as in O(edits).
        type: list
        elements: dict
        default: []
        suboptions: *edit_suboptions
  state:
    description:
      - V(present) applies the edits.
      - V(absent) puts back the bytes from before the module changed the file, using the record
        in O(state_dir), but only when the file is still exactly what the module wrote. A file
        changed since (a package upgrade, a hand edit) is left alone, reported with
        C(replaced_since) and a warning naming the C(.orig) file that keeps the original bytes;
        that is not a failure. Without a record there is nothing to revert and nothing changes.
      - With O(state=present), a file whose record no longer matches (an upgrade replaced it)
        is treated as the new original; the edits are applied to it, the old record is kept as a
        superseded copy and a new one written. If the changed file already contains every edit
        (a release that ships the change, a hand edit), the record is kept as it is, with a
        warning, and nothing is reported as changed.
    type: str
    choices: [present, absent]
    default: present
  python:
    description:
      - Interpreter used to compile the result and to run O(import_check), typically the one of
        the environment the patched files belong to (for example C(/opt/ml-env/bin/python)).
      - Defaults to the interpreter running the module (C(ansible_python_interpreter)).
      - The compile check is done in memory with C(compile()) and C(PYTHONDONTWRITEBYTECODE=1);
        no bytecode is written.
    type: path
  import_check:
    description:
      - Module names imported with O(python) after the files are written, in one process with
        C(PYTHONDONTWRITEBYTECODE=1). If any import fails, every file of this call is put back,
        the records written by this call are undone and the module fails with the traceback's
        last lines.
      - Runs only when a file changed, and not in check mode.
      - The process inherits the task's environment, so C(environment:) can set
        C(PYTHONPATH) or CUDA variables for it. It is bounded by O(check_timeout).
    type: list
    elements: str
    default: []
  backup:
    description:
      - Keep a copy of each file before the module replaces it, and return its path in
        RV(files[].backup_file).
    type: bool
    default: false
  backup_dir:
    description:
      - Where backups go. The file's absolute path is mirrored under this directory, with a
        timestamp suffix. Default is next to the file, as C(<path>.<timestamp>~).
      - Only used with O(backup=true).
    type: path
  validate:
    description:
      - Command run on each changed file before it replaces the original, with C(%s) standing for
        the path of the temporary copy (whose name does not end in C(.py)). A non-zero exit fails
        the module and leaves every file as it was.
      - Runs without a shell, bounded by O(check_timeout). In check mode it runs on a copy in a
        private temporary directory.
    type: str
  state_dir:
    description:
      - Directory of the module's records and locks. C(records/<basename>-<hash>.json) describes
        one changed file (path, sha256 of the original and of the written bytes, edit ids and
        kinds, timestamp); C(records/<basename>-<hash>.orig) holds its original bytes.
        C(locks/<basename>-<hash>.lock) serialises concurrent runs on that file. C(<hash>) is the
        first 16 hex digits of the sha256 of the file's real path.
      - Created with mode 0700 on first use (not in check mode). C(journal/txn-<time>.json) is
        the journal of a run in progress (see above).
      - Only the user running the module (root) may own and change it, since its records and
        journals say what the module writes. Every run narrows entries wider than 0700 (folders) or 0600
        (files), reports them in RV(state_dir_narrowed) and counts that as a change (an older
        release or an operator left them readable). A state_dir another user owns, a link in it,
        or a folder above it another user could change is refused, nothing written.
      - A record is never overwritten or deleted by a run that did not write it, except by
        O(state=absent) putting its original bytes back. When a file changed since the module
        wrote it and is patched again, the old record is first copied to
        C(records/<basename>-<hash>.superseded-<time>.json) and C(.orig).
    type: path
    default: /var/lib/gpuserve/python_patch
  check_timeout:
    description:
      - Seconds the compile check, each O(validate) command and the O(import_check) may run.
        Each runs in its own process group, which is killed whole when the time is up; the run
        then fails naming the command and the limit, and every file is put back.
    type: int
    default: 600
  lock_timeout:
    description:
      - Seconds to wait for the lock of a file held by another run, which the failure then
        names (pid and start time). Should exceed O(check_timeout).
    type: int
    default: 900
notes:
  - The engine that locates and verifies edits lives in the collection's private
    C(module_utils/_pyedit); the run in C(module_utils/_patch/_run.py) (per-file planning in
    C(_plan.py), checks in C(_check.py)), the transaction and journal in
    C(_txn.py), records, locks and atomic writes in C(_files.py).
  - 'To find the record of a file, run C(grep -l "/the/file.py" <state_dir>/records/*.json).'
  - SELinux contexts are not managed; the rename keeps the directory's default context.
seealso:
  - module: ansible.builtin.lineinfile
  - module: ansible.posix.patch
"""

EXAMPLES = r"""
- name: Make DeepseekV2ForCausalLM support EAGLE-3
  gpuserve.vllm.python_patch:
    path: /opt/ml-env/lib/python3.12/site-packages/vllm/model_executor/models/deepseek_v2.py
    python: /opt/ml-env/bin/python
    edits:
      - id: import-supports-eagle3
        import:
          module: .interfaces
          names: [SupportsEagle3]
      - id: base-supports-eagle3
        base:
          class: DeepseekV2ForCausalLM
          names: [SupportsEagle3]
      - id: set-aux-layers
        member:
          class: DeepseekV2ForCausalLM
          source: |
            def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
                self.model.aux_hidden_state_layers = layers

- name: Several files, all or nothing, then import them in the target environment
  gpuserve.vllm.python_patch:
    files:
      - path: "{{ vllm_dir }}/config/speculative.py"
        edits:
          - id: allow-kimi
            when_missing: skip
            element:
              scope: SpeculativeConfig._verify_args
              name: eagle3_target_supported
              values: [kimi_k2, deepseek_v3]
      - path: "{{ vllm_dir }}/v1/spec_decode/eagle.py"
        edits:
          - id: kimi-image-token
            replace:
              scope: SpecDecodeBaseProposer.load_model
              old: |
                self.model.config.image_token_index = target_model.config.image_token_index
              new: |
                self.model.config.image_token_index = getattr(
                    target_model.config, "image_token_index", None)
    python: /opt/ml-env/bin/python
    import_check:
      - vllm.config.speculative
    backup: true
  register: patched

- name: Put back the original bytes (files replaced by an upgrade are left alone)
  gpuserve.vllm.python_patch:
    path: /opt/ml-env/lib/python3.12/site-packages/vllm/model_executor/models/deepseek_v2.py
    state: absent

- name: Check what would change, with a diff
  gpuserve.vllm.python_patch:
    path: /srv/app/settings.py
    edits:
      - replace:
          old: DEBUG = True
          new: DEBUG = False
    validate: /usr/bin/python3 -m py_compile %s
  check_mode: true
  diff: true
"""

RETURN = r"""
changed:
  description: Whether any file or the mode of a O(state_dir) entry changed (or would change, in check mode).
  returned: always
  type: bool
  sample: true
state_dir_narrowed:
  description: Entries of O(state_dir) whose mode was narrowed to root only (in check mode, would be).
  returned: always
  type: list
  elements: str
  sample: [/var/lib/gpuserve/python_patch/records]
recovered:
  description:
    - One sentence per unfinished run (killed before its end) that this run rolled back before
      doing its own work; empty when there was none.
  returned: always
  type: list
  elements: str
  sample:
    - "rolled back an unfinished run (pid 4242, started 2026-11-30T15:00:00Z, killed or failed
      before its end): /srv/a.py, /srv/b.py hold their bytes from before it again"
files:
  description: One entry per file, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The path as given.
      type: str
      sample: /opt/ml-env/lib/python3.12/site-packages/vllm/model_executor/models/deepseek_v2.py
    changed:
      description: Whether this file changed (or would change).
      type: bool
      sample: true
    sha256_before:
      description: sha256 of the file's bytes before the module ran; null when the file does not exist.
      type: str
      sample: 9f2c5e0c8b6b1e4d0a0f5d8f8e7b6c1a2b3c4d5e6f708192a3b4c5d6e7f80912
    sha256_after:
      description: sha256 of the file's bytes after the module ran (predicted in check mode).
      type: str
      sample: 1c2b3a4d5e6f708192a3b4c5d6e7f809129f2c5e0c8b6b1e4d0a0f5d8f8e7b6c
    backup_file:
      description: Path of the backup made before the file was replaced; null when none was made.
      type: str
      sample: /opt/ml-env/lib/python3.12/site-packages/vllm/model_executor/models/deepseek_v2.py.2026-11-29T193012.123456Z.4242~
    record:
      description:
        - Path of the JSON record describing the module's change to this file; null when there
          is none (nothing changed by the module, or reverted).
        - In check mode, the path the record would have.
      type: str
      sample: /var/lib/gpuserve/python_patch/records/deepseek_v2.py-0123456789abcdef.json
    replaced_since:
      description:
        - True when a record exists but the file is no longer what the module wrote (for
          example a package upgrade replaced it). With O(state=absent) the file is then left
          alone; with O(state=present) it is treated as the new original.
      type: bool
      sample: false
    edits:
      description: One entry per edit.
      type: list
      elements: dict
      contains:
        id:
          description: The edit's id.
          type: str
          sample: import-supports-eagle3
        kind:
          description: The edit's kind.
          type: str
          sample: import
        status:
          description:
            - V(applied) the edit changed the file (or would); V(already) nothing to do; V(skipped)
              the target is missing and O(edits[].when_missing=skip), or with O(state=absent) the
              change cannot be reverted (present without a record, or the file was replaced);
              V(reverted) the original bytes were put back.
          type: str
          sample: applied
        detail:
          description: One sentence saying what was done or found.
          type: str
          sample: added SupportsEagle3 to 'from .interfaces import ...' (line 61)
  sample:
    - path: /srv/app/models.py
      changed: true
      sha256_before: 9f2c5e0c8b6b1e4d0a0f5d8f8e7b6c1a2b3c4d5e6f708192a3b4c5d6e7f80912
      sha256_after: 1c2b3a4d5e6f708192a3b4c5d6e7f809129f2c5e0c8b6b1e4d0a0f5d8f8e7b6c
      backup_file: null
      record: /var/lib/gpuserve/python_patch/records/models.py-0123456789abcdef.json
      replaced_since: false
      edits:
        - id: base-supports-eagle3
          kind: base
          status: applied
          detail: added SupportsEagle3 to the bases of class Model (line 12)
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._patch._plan import PatchFailed
from ansible_collections.gpuserve.vllm.plugins.module_utils._patch._run import PythonPatch


def _edits_spec(**extra: t.Any) -> t.Dict[str, t.Any]:
    """Only the list shape: each edit is validated by the engine's parser (_pyedit.parse_edits),
    the one schema, whose errors name the file and the edit (tests check the docs against it)."""
    return dict({"type": "list", "elements": "dict"}, **extra)


def argument_spec() -> t.Dict[str, t.Any]:
    """The module's argument spec (docs above must match it: validate-modules checks)."""
    return {
        "path": {"type": "path", "aliases": ["dest"]},
        "edits": _edits_spec(),
        "files": {"type": "list", "elements": "dict", "options": {
            "path": {"type": "path", "required": True},
            "edits": _edits_spec(default=[]),
        }},
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "python": {"type": "path"},
        "import_check": {"type": "list", "elements": "str", "default": []},
        "backup": {"type": "bool", "default": False},
        "backup_dir": {"type": "path"},
        "validate": {"type": "str"},
        "state_dir": {"type": "path", "default": "/var/lib/gpuserve/python_patch"},
        "check_timeout": {"type": "int", "default": 600},
        "lock_timeout": {"type": "int", "default": 900},
    }


def main() -> None:
    """Entry point: the run lives in module_utils/_patch/_run.py; this translates for Ansible."""
    module = AnsibleModule(
        argument_spec=argument_spec(),
        mutually_exclusive=[["path", "files"], ["edits", "files"]],
        required_one_of=[["path", "files"]],
        required_by={"edits": "path"},
        supports_check_mode=True,
    )
    if module.params["validate"] is not None and "%s" not in module.params["validate"]:
        module.fail_json(msg="validate must contain %%s: %s" % module.params["validate"])
    try:
        patch = PythonPatch(module.params, check=module.check_mode,
                            diff=module._diff,  # pylint: disable=protected-access
                            warn=module.warn)
        result = patch.run()
    except PatchFailed as exc:
        module.fail_json(msg=exc.msg, changed=False, **exc.extra)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
