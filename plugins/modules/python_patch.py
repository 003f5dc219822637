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
    C(module_utils/_pyedit.py); file handling in C(module_utils/_patchfiles.py).
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
  description: Whether any file changed (or would change, in check mode).
  returned: always
  type: bool
  sample: true
recovered:
  description:
    - One sentence per unfinished run (killed before its end) that this run rolled back before
      doing its own work; empty when there was none.
  returned: always
  type: list
  elements: str
  sample: ["rolled back an unfinished run (pid 4242, started 2026-11-30T15:00:00Z, killed or failed before its end): /srv/a.py, /srv/b.py hold their bytes from before it again"]
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

import base64
import contextlib
import json
import os
import shutil
import sys
import tempfile
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils import _patchfiles as pf
from ansible_collections.gpuserve.vllm.plugins.module_utils import _patchtxn as px
from ansible_collections.gpuserve.vllm.plugins.module_utils._pyedit import (
    EDIT_KINDS,
    ON_CONFLICT_CHOICES,
    STATUS_ALREADY,
    STATUS_APPLIED,
    STATUS_REVERTED,
    STATUS_SKIPPED,
    WHEN_MISSING_CHOICES,
    Edit,
    PyEditError,
    SourceSyntaxError,
    apply_edits,
    decode_source,
    encode_source,
    parse_edits,
    unified_diff,
)

# Compiles every file given on stdin (JSON list of [name, base64 bytes]) in memory; prints the
# interpreter's version and the SyntaxErrors as JSON. Runs under the target interpreter.
_COMPILE_SCRIPT = r"""
import base64, json, sys
errors = []
for name, data in json.load(sys.stdin):
    try:
        compile(base64.b64decode(data), name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        errors.append({"path": name, "msg": exc.msg, "lineno": exc.lineno,
                       "offset": exc.offset, "text": (exc.text or "").rstrip("\r\n")})
    except (ValueError, TypeError) as exc:
        errors.append({"path": name, "msg": str(exc), "lineno": None, "offset": None, "text": ""})
sys.stdout.write(json.dumps({"version": "%d.%d.%d" % sys.version_info[:3], "errors": errors}))
"""

# Imports the modules named in argv; on failure prints which one and the traceback, exits 1.
_IMPORT_SCRIPT = r"""
import importlib, sys, traceback
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException:
        sys.stderr.write("import %s failed:\n%s" % (name, traceback.format_exc()))
        raise SystemExit(1)
"""

def _edit_suboptions() -> t.Dict[str, t.Any]:
    """Argument spec of one edit: its kind key is validated here, its semantics by the engine."""
    return {
        "id": {"type": "str"},
        "when_missing": {"type": "str", "choices": list(WHEN_MISSING_CHOICES), "default": "fail"},
        "import": {"type": "dict", "options": {
            "module": {"type": "str", "required": True},
            "names": {"type": "list", "elements": "str", "required": True},
        }},
        "base": {"type": "dict", "options": {
            "class": {"type": "str", "required": True},
            "names": {"type": "list", "elements": "str", "required": True},
        }},
        "member": {"type": "dict", "options": {
            "class": {"type": "str", "required": True},
            "source": {"type": "str", "required": True},
            "on_conflict": {"type": "str", "choices": list(ON_CONFLICT_CHOICES), "default": "fail"},
        }},
        "replace": {"type": "dict", "options": {
            "scope": {"type": "str", "default": ""},
            "old": {"type": "str", "required": True},
            "new": {"type": "str", "required": True},
        }},
        "element": {"type": "dict", "options": {
            "scope": {"type": "str", "default": ""},
            "name": {"type": "str", "required": True},
            "values": {"type": "list", "elements": "raw", "required": True},
        }},
    }


def _edits_spec(default: t.Any = None) -> t.Dict[str, t.Any]:
    spec: t.Dict[str, t.Any] = {
        "type": "list", "elements": "dict", "options": _edit_suboptions(),
        "mutually_exclusive": [list(EDIT_KINDS)], "required_one_of": [list(EDIT_KINDS)],
    }
    if default is not None:
        spec["default"] = default
    return spec


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


def _strip_none(value: t.Any) -> t.Any:
    """Drop the None that AnsibleModule fills in for every unset suboption."""
    if isinstance(value, dict):
        return {k: _strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_none(v) for v in value]
    return value



class PatchFailed(Exception):
    """A failure to report with fail_json; extra keys go into the result."""

    def __init__(self, msg: str, **extra: t.Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.extra = extra


class FileJob:
    """One file of the call: what was there, what should be there, and what was done."""

    # pylint: disable=too-many-instance-attributes,too-few-public-methods

    def __init__(self, path: str, raw_edits: t.List[t.Dict[str, t.Any]]) -> None:
        self.path = path
        self.real = os.path.realpath(path)
        self.raw_edits = raw_edits
        self.edits: t.List[Edit] = []
        self.exists = False
        self.before = b""
        self.after = b""
        self.stat: os.stat_result | None = None
        self.results: t.List[t.Dict[str, str]] = []
        self.record: pf.Record | None = None
        self.replaced_since = False
        # ("save", original bytes, edit list, supersede) | ("delete",) | None
        self.record_action: t.Tuple[t.Any, ...] | None = None
        self.record_out: str | None = None
        self.change: px.Change | None = None

    @property
    def changed(self) -> bool:
        return self.exists and self.after != self.before

    def result(self) -> t.Dict[str, t.Any]:
        return {
            "path": self.path,
            "changed": self.changed,
            "sha256_before": pf.sha256_bytes(self.before) if self.exists else None,
            "sha256_after": pf.sha256_bytes(self.after) if self.exists else None,
            "backup_file": self.change.backup if self.change else None,
            "record": self.record_out,
            "replaced_since": self.replaced_since,
            "edits": self.results,
        }


def _python_version() -> str:
    return "%d.%d.%d" % sys.version_info[:3]


class PythonPatch:
    """The module's run: read and compute everything, check it, then write it all or nothing."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        params = module.params
        self.state: str = params["state"]
        self.state_dir: str = params["state_dir"]
        self.python: str = params["python"] or sys.executable
        self.timeout: int = params["check_timeout"]
        self.check = module.check_mode
        self.recovered: t.List[str] = []
        if params["files"] is not None:
            specs = [(f["path"], f.get("edits") or []) for f in params["files"]]
        else:
            if self.state == "present" and not params["edits"]:
                raise PatchFailed("edits is required with path when state=present")
            specs = [(params["path"], params["edits"] or [])]
        self.jobs = [FileJob(path, _strip_none(edits)) for path, edits in specs]
        seen: t.Dict[str, str] = {}
        for job in self.jobs:
            if job.real in seen:
                raise PatchFailed("%s and %s are the same file (%s); give each file once"
                                  % (seen[job.real], job.path, job.real))
            seen[job.real] = job.path

    # ---- phase 1: read and compute (no writes) -------------------------------------------

    def _read(self, job: FileJob) -> None:
        try:
            job.edits = parse_edits(job.raw_edits, path=job.path)
        except PyEditError as exc:
            raise PatchFailed(str(exc), file=job.path, edit_id=exc.edit_id) from exc
        try:
            job.record = pf.load_record(self.state_dir, job.real)
        except (ValueError, KeyError, OSError) as exc:
            raise PatchFailed("%s: cannot read its record: %s" % (job.path, exc),
                              file=job.path) from exc
        if not os.path.lexists(job.real):
            return
        if not os.path.isfile(job.real):
            raise PatchFailed("%s is not a regular file" % job.path, file=job.path)
        try:
            job.stat = os.stat(job.real)
            job.before = pf.read_bytes(job.real)
        except OSError as exc:
            raise PatchFailed("read %s: %s" % (job.path, exc.strerror or exc),
                              file=job.path) from exc
        job.after = job.before
        job.exists = True

    def _engine(self, job: FileJob) -> t.Tuple[bytes, t.List[t.Any]]:
        """Run the engine on the current bytes: (new bytes, EditResults)."""
        try:
            text, encoding = decode_source(job.before, path=job.path)
            patch = apply_edits(text, job.edits, path=job.path)
        except SourceSyntaxError as exc:
            raise PatchFailed(
                self._newer_syntax(job, exc) or "%s (refused; nothing was written)" % exc,
                file=job.path,
                syntax_error={"lineno": getattr(exc, "lineno", None),
                              "offset": getattr(exc, "offset", None),
                              "line": getattr(exc, "line", None)}) from exc
        except PyEditError as exc:
            raise PatchFailed("%s (nothing was written)" % exc, file=job.path,
                              edit_id=exc.edit_id) from exc
        new = job.before
        if patch.changed:
            # Re-encode only when something changed, so untouched files stay byte-identical.
            try:
                new = encode_source(patch.source, encoding)
            except UnicodeEncodeError as exc:
                bad = exc.object[exc.start:exc.end]
                ids = [e.id for e, raw in zip(job.edits, job.raw_edits) if bad in json.dumps(
                    raw, ensure_ascii=False)] or [r.id for r in patch.results
                                                  if r.status == STATUS_APPLIED]
                raise PatchFailed(
                    "%s: edit %s adds %r, which the file's encoding %s (its coding cookie or "
                    "the default utf-8) cannot encode; write it as an escape (for example %s) or "
                    "change the edit; nothing was written"
                    % (job.path, ", ".join(repr(i) for i in ids), bad, encoding,
                       bad.encode("ascii", "backslashreplace").decode("ascii")),
                    file=job.path, edit_id=ids[0] if ids else None) from exc
        return new, list(patch.results)

    def _newer_syntax(self, job: FileJob, exc: SourceSyntaxError) -> str:
        """When the target interpreter compiles what ours cannot parse, say so and what to do."""
        if exc.lineno is None or os.path.realpath(self.python) == os.path.realpath(sys.executable):
            return ""
        try:
            version, errors = self._compile([job.real], [job.before])
        except PatchFailed:
            return ""
        if errors:
            return ""
        return ("%s: uses syntax newer than Python %s, which runs this module (%s) and cannot "
                "parse line %s (%r); Python %s (the `python` option, %s) compiles it. Run the "
                "module with ansible_python_interpreter set to Python %s or newer, for example "
                "the `python` option's interpreter (refused; nothing was written)"
                % (job.path, _python_version(), sys.executable, exc.lineno,
                   (exc.line or "").strip(), version, self.python, version))

    def _compute_present(self, job: FileJob) -> None:
        if not job.exists:
            raise PatchFailed("%s: file not found (nothing was written)" % job.path, file=job.path)
        job.after, results = self._engine(job)
        job.results = [{"id": r.id, "kind": r.kind, "status": r.status, "detail": r.detail}
                       for r in results]
        current = pf.sha256_bytes(job.before)
        record = job.record
        if record is not None and record.sha256_written != current:
            job.replaced_since = True
        if record is not None:
            job.record_out = record.json_path
        if job.changed:
            # The record lists the edits this module applied since the original: the earlier
            # ones (when the file is still ours) plus those applied now.
            applied = [{"id": r.id, "kind": r.kind} for r in results if r.status == STATUS_APPLIED]
            if record is not None and not job.replaced_since:
                original = self._record_original(job)
                now = {e["id"] for e in applied}
                kept = [e for e in record.edits if e["id"] not in now]
            else:
                original, kept = job.before, []
            job.record_action = ("save", original, kept + applied, job.replaced_since)
            job.record_out = pf.record_paths(self.state_dir, job.real)[0]
        if job.replaced_since and record is not None:
            # Never drop a record this run did not write: it holds the only pristine bytes.
            what = ("the edits are applied to the new file; the record is rewritten and the "
                    "old one kept as %s.superseded-<time>.json/.orig"
                    % record.json_path[:-len(".json")]) if job.changed else (
                "it already contains the edits; the record is kept, so state=absent leaves "
                "the file alone")
            self.module.warn("%s was changed since python_patch wrote it (sha256 %s, record "
                             "expected %s); %s. The bytes from before python_patch's change "
                             "remain in %s" % (job.path, current, record.sha256_written, what,
                                               record.orig_path))

    def _record_original(self, job: FileJob) -> bytes:
        if job.record is None:
            raise PatchFailed("%s: no record to restore from" % job.path, file=job.path)
        try:
            return job.record.original()
        except (OSError, ValueError) as exc:
            raise PatchFailed("%s: its record is damaged: %s" % (job.path, exc),
                              file=job.path) from exc

    def _compute_absent(self, job: FileJob) -> None:
        record = job.record
        if record is not None:
            current = pf.sha256_bytes(job.before) if job.exists else None
            if current == record.sha256_written:
                job.after = self._record_original(job)
                job.record_action = ("delete",)
                job.record_out = None
                detail = ("put back the bytes from before python_patch changed the file "
                          "(record %s of %s)" % (record.json_path, record.timestamp))
                job.results = [{"id": e["id"], "kind": e["kind"], "status": STATUS_REVERTED,
                                "detail": detail} for e in record.edits]
                return
            job.replaced_since = True
            job.record_out = record.json_path
            why = ("no longer exists" if not job.exists else
                   "was changed since python_patch wrote it (sha256 %s, record expected %s)"
                   % (current, record.sha256_written))
            self.module.warn("%s %s; refusing to put back the bytes from before python_patch's "
                             "change over it. They remain in %s (copy them back by hand if "
                             "that is what you want)" % (job.path, why, record.orig_path))
            job.results = [{"id": e["id"], "kind": e["kind"], "status": STATUS_SKIPPED,
                            "detail": "not reverted: the file %s" % why} for e in record.edits]
            return
        # No record: nothing of ours to revert. Say, per edit, whether its change is there.
        if not job.exists:
            job.results = [{"id": e.id, "kind": e.kind, "status": STATUS_ALREADY,
                            "detail": "the file does not exist"} for e in job.edits]
            return
        try:
            results = self._engine(job)[1]
        except PatchFailed as exc:
            job.results = [{"id": e.id, "kind": e.kind, "status": STATUS_ALREADY,
                            "detail": "not present: %s" % exc.msg} for e in job.edits]
            return
        job.results = []
        for res in results:
            if res.status == STATUS_ALREADY:
                status, detail = STATUS_SKIPPED, ("present, but not written by python_patch (no "
                                                  "record), so left alone")
            else:
                status, detail = STATUS_ALREADY, "not present: %s" % res.detail
            job.results.append({"id": res.id, "kind": res.kind, "status": status,
                                "detail": detail})

    # ---- phase 2: checks on the new bytes, each bounded by check_timeout ------------------

    def _require_python(self) -> None:
        if shutil.which(self.python) is None:
            raise PatchFailed("python %s (the interpreter for the compile and import checks) is "
                              "not an executable file; set python to the environment's "
                              "interpreter; nothing was written" % self.python)

    def _run(self, what: str, argv: t.List[str], data: bytes | None = None) -> t.Tuple[int, str, str]:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        try:
            rc, out, err = px.run_bounded(argv, self.timeout, data=data, env=env, cwd="/")
        except OSError as exc:
            raise PatchFailed("%s: cannot run %s: %s" % (what, argv[0], exc)) from exc
        if rc is None:
            shown = " ".join(argv) if len(" ".join(argv)) < 300 else argv[0] + " ..."
            raise PatchFailed("%s did not finish within %s s (check_timeout): its process group "
                              "was killed; command: %s" % (what, self.timeout, shown),
                              timed_out=True, command=argv)
        return rc, out, err

    def _compile(self, names: t.List[str], datas: t.List[bytes]) -> t.Tuple[str, t.List[t.Any]]:
        self._require_python()
        payload = json.dumps([[n, base64.b64encode(d).decode("ascii")]
                              for n, d in zip(names, datas)]).encode("utf-8")
        rc, out, err = self._run("the compile check with %s" % self.python,
                                 [self.python, "-c", _COMPILE_SCRIPT], payload)
        try:
            found = json.loads(out) if rc == 0 else None
        except ValueError:
            found = None
        if found is None:
            raise PatchFailed("the compile check with %s did not run (rc=%s): %s; nothing was "
                              "written" % (self.python, rc, (err or out).strip()[-2000:]),
                              rc=rc, stdout=out, stderr=err)
        return found["version"], found["errors"]

    def _compile_check(self, jobs: t.List[FileJob]) -> None:
        errors = self._compile([j.real for j in jobs], [j.after for j in jobs])[1]
        if errors:
            lines = []
            by_real = {j.real: j for j in jobs}
            for e in errors:
                job = by_real.get(e["path"])
                ids = ", ".join(r["id"] for r in job.results if r["status"] == STATUS_APPLIED) \
                    if job else ""
                lines.append("%s: the edited file does not compile with %s: %s (line %s: %r); "
                             "edits applied: %s" % (job.path if job else e["path"], self.python,
                                                    e["msg"], e["lineno"], e["text"], ids))
            raise PatchFailed("; ".join(lines) + "; nothing was written", compile_errors=errors)

    def _validate(self, job: FileJob, tmp: str) -> None:
        cmd = self.module.params["validate"] % tmp
        rc, out, err = self._run("%s: validate command %r" % (job.path, cmd), px.split_command(cmd))
        if rc != 0:
            ids = ", ".join(r["id"] for r in job.results
                            if r["status"] in (STATUS_APPLIED, STATUS_REVERTED))
            raise PatchFailed(
                "%s: validate command %r failed (rc=%s) on the new content (edits %s): %s"
                % (job.path, cmd, rc, ids, (err or out).strip()[-2000:]),
                file=job.path, rc=rc, stdout=out, stderr=err)

    def _import_check(self) -> None:
        names = self.module.params["import_check"]
        rc, out, err = self._run("import_check with %s" % self.python,
                                 [self.python, "-c", _IMPORT_SCRIPT] + list(names))
        if rc != 0:
            tail = "\n".join((err or out).strip().splitlines()[-6:])
            raise PatchFailed(
                "import_check failed with %s after writing %s: %s"
                % (self.python, ", ".join(j.path for j in self.jobs if j.changed), tail),
                rc=rc, stdout=out, stderr=err)

    # ---- phase 3: writes, all or nothing (see _patchtxn) ----------------------------------

    def _transaction(self, changed: t.List[FileJob]) -> None:
        params = self.module.params
        for job in self.jobs:
            if job.changed or job.record_action is not None:
                job.change = px.Change(job.real, job.before, job.after, job.stat,
                                       job.record_action)
        txn = px.Transaction(self.state_dir, [j.change for j in self.jobs if j.change],
                             pf.backup_stamp())
        by_real = {j.real: j for j in self.jobs}
        try:
            txn.prepare((lambda change, tmp: self._validate(by_real[change.real], tmp))
                        if params["validate"] else None, params["backup_dir"], params["backup"])
            txn.apply()
            if changed and params["import_check"]:
                self._import_check()
            txn.commit()
        except BaseException as exc:
            try:
                problems = txn.rollback()
            except (OSError, ValueError, pf.DiskError) as again:
                problems = [str(again)]
            if isinstance(exc, PatchFailed):
                msg = exc.msg
            elif isinstance(exc, (pf.DiskError, OSError)):
                msg = "writing failed: %s" % exc
            else:
                raise
            if problems:
                msg += ("; putting back failed for: %s. The journal %s keeps what is needed; the "
                        "next run on these files finishes putting them back"
                        % ("; ".join(problems), txn.journal))
            else:
                msg += "; every file and record was put back, nothing was changed"
            raise PatchFailed(msg, **(exc.extra if isinstance(exc, PatchFailed) else {})) from exc
        for warning in txn.warnings:
            self.module.warn(warning)

    # ---- the run ----------------------------------------------------------------------------

    def run(self) -> t.Dict[str, t.Any]:
        if self.check:  # check mode writes nothing, not even a lock file
            self._warn_unfinished()
            return self._run_locked()
        paths = {j.real for j in self.jobs}
        for _attempt in range(10):
            with self._locks(paths):
                extra = self._recover(paths)
                if not extra:
                    return self._run_locked()
            paths |= extra  # an unfinished run touched other files too: lock them as well
        raise PatchFailed("unfinished runs in %s keep touching more files; roll them back by "
                          "hand" % os.path.join(self.state_dir, px.JOURNAL_SUBDIR))

    @contextlib.contextmanager
    def _locks(self, paths: t.Set[str]) -> t.Iterator[None]:
        try:
            with pf.phase("state_dir", self.state_dir):
                pf._makedirs(self.state_dir)  # pylint: disable=protected-access
            with pf.locked(self.state_dir, paths, self.module.params["lock_timeout"]):
                yield
        except pf.LockTimeout as exc:
            raise PatchFailed("%s (lock_timeout); nothing was written" % exc) from exc
        except pf.DiskError as exc:
            raise PatchFailed("cannot take the lock in state_dir %s: %s (set state_dir to a "
                              "writable directory)" % (self.state_dir, exc)) from exc

    def _unfinished(self, paths: t.Set[str]) -> t.Dict[str, t.Set[str]]:
        try:
            found = px.journal_files(self.state_dir)
        except (ValueError, KeyError, pf.DiskError) as exc:
            raise PatchFailed("cannot read the journal of an unfinished run: %s; nothing was "
                              "written" % exc) from exc
        return {path: files for path, files in found.items() if files & paths}

    def _warn_unfinished(self) -> None:
        for journal in self._unfinished({j.real for j in self.jobs}):
            self.module.warn("an unfinished run left %s; the next run (not in check mode) rolls "
                             "it back first, which this prediction does not include" % journal)

    def _recover(self, paths: t.Set[str]) -> t.Set[str]:
        """Roll back unfinished runs on our (locked) files; return files we must lock first."""
        found = self._unfinished(paths)
        extra = set().union(*found.values()) - paths if found else set()
        if extra:
            return extra
        for journal in found:
            data, problems = px.rollback_journal(self.state_dir, journal)
            if problems:
                raise PatchFailed("an unfinished run (pid %s, started %s) left %s; rolling it "
                                  "back failed for: %s; nothing else was done"
                                  % (data.get("pid"), data.get("started"), journal,
                                     "; ".join(problems)))
            note = ("rolled back an unfinished run (pid %s, started %s, killed or failed before "
                    "its end): %s hold their bytes from before it again"
                    % (data.get("pid"), data.get("started"),
                       ", ".join(f["path"] for f in data["files"])))
            self.recovered.append(note)
            self.module.warn(note)
        strays = px.dead_journal_temps(self.state_dir)
        for real in paths:  # temp files of a run killed before it wrote its journal
            strays += pf.stray_temps(real)
            strays += [p for r in pf.record_paths(self.state_dir, real) for p in pf.stray_temps(r)]
        for stray in strays:
            with contextlib.suppress(OSError):
                os.unlink(stray)
        return set()

    def _run_locked(self) -> t.Dict[str, t.Any]:
        for job in self.jobs:
            self._read(job)
        for job in self.jobs:
            if self.state == "present":
                self._compute_present(job)
            else:
                self._compute_absent(job)
        changed = [j for j in self.jobs if j.changed]
        if changed and self.state == "present":
            self._compile_check(changed)
        if self.check:
            self._check_mode_validate(changed)
        elif changed or any(j.record_action for j in self.jobs):
            self._transaction(changed)
        result: t.Dict[str, t.Any] = {
            "changed": bool(changed),
            "files": [j.result() for j in self.jobs],
            "recovered": self.recovered,
        }
        if self.module._diff:  # pylint: disable=protected-access
            result["diff"] = [self._diff(j) for j in changed]
        return result

    def _check_mode_validate(self, changed: t.List[FileJob]) -> None:
        if not changed or not self.module.params["validate"]:
            return
        with tempfile.TemporaryDirectory(prefix="python_patch-") as tmpdir:
            for job in changed:
                tmp = os.path.join(tmpdir, os.path.basename(job.real))
                with open(tmp, "wb") as handle:
                    handle.write(job.after)
                self._validate(job, tmp)
                os.unlink(tmp)

    def _diff(self, job: FileJob) -> t.Dict[str, str]:
        before = decode_source(job.before, path=job.path)[0]
        after = decode_source(job.after, path=job.path)[0]
        return {"before_header": job.path, "after_header": job.path,
                "prepared": unified_diff(before, after, job.path)}


def main() -> None:
    """Entry point: translate results and errors for Ansible."""
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
        patch = PythonPatch(module)
        result = patch.run()
    except PatchFailed as exc:
        module.fail_json(msg=exc.msg, changed=False, **exc.extra)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
