# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Structural, verified edits of Python source text (the engine behind python_patch).

CONTRACT SKELETON written by the lead; the engine helper replaces the bodies and may add
private helpers, but keeps these public names and signatures (the module codes against them).

Pure functions: source text in, source text out, typed errors. Stdlib only, Python 3.9+,
no Ansible imports: this file runs on the managed node under whatever interpreter is there.
"""

from __future__ import annotations

import dataclasses
import typing as t

EDIT_KINDS = ("import", "base", "member", "replace", "element")
WHEN_MISSING_CHOICES = ("fail", "skip")
ON_CONFLICT_CHOICES = ("fail", "keep", "replace")

STATUS_APPLIED = "applied"
STATUS_ALREADY = "already"
STATUS_SKIPPED = "skipped"
STATUS_REVERTED = "reverted"  # set by the module on state=absent, never by the engine


class PyEditError(Exception):
    """An error an operator can act on; str() names the file, the edit and what was found."""

    def __init__(self, message: str, *, path: str | None = None, edit_id: str | None = None,
                 kind: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.edit_id = edit_id
        self.kind = kind

    def __str__(self) -> str:  # "<path>: edit '<id>' (<kind>): <message>"
        raise NotImplementedError


class EditSpecError(PyEditError):
    """The edit mapping itself is malformed (unknown kind, two kinds, missing key...)."""


class SourceSyntaxError(PyEditError):
    """The file does not parse before editing. Carries lineno, offset and the offending line."""

    lineno: int | None
    offset: int | None
    line: str | None


class TargetNotFoundError(PyEditError):
    """Class, scope, assignment or statement not found; the message lists what does exist."""


class AmbiguousTargetError(PyEditError):
    """Several candidates matched; the message lists their line numbers."""


class ConflictError(PyEditError):
    """A member exists with a different definition and on_conflict is 'fail'."""


class VerificationError(PyEditError):
    """The spliced result does not parse, or re-parsing does not show the intended change."""


@dataclasses.dataclass(frozen=True)
class Edit:
    id: str
    kind: str  # one of EDIT_KINDS
    spec: t.Mapping[str, t.Any]  # the kind's mapping, validated and with defaults filled in
    when_missing: str = "fail"


@dataclasses.dataclass(frozen=True)
class EditResult:
    id: str
    kind: str
    status: str  # STATUS_APPLIED | STATUS_ALREADY | STATUS_SKIPPED
    detail: str  # one sentence, e.g. "added SupportsEagle3 to 'from .interfaces import ...' (line 61)"


@dataclasses.dataclass(frozen=True)
class PatchResult:
    source: str  # the new text; equal to the input when nothing changed
    results: t.Tuple[EditResult, ...]

    @property
    def changed(self) -> bool:
        return any(r.status == STATUS_APPLIED for r in self.results)


def parse_edits(raw_edits: t.Sequence[t.Mapping[str, t.Any]], *, path: str | None = None) -> t.List[Edit]:
    """Validate user-supplied edit mappings ({id?, when_missing?, <kind>: {...}}) into Edits."""
    raise NotImplementedError


def apply_edits(source: str, edits: t.Sequence[Edit], *, path: str = "<string>") -> PatchResult:
    """Apply edits in order (each to the previous result); parse before, verify after."""
    raise NotImplementedError


def decode_source(data: bytes, *, path: str = "<string>") -> t.Tuple[str, str]:
    """Bytes -> (text, encoding) honouring PEP 263 cookies and BOMs; newlines kept as they are."""
    raise NotImplementedError


def encode_source(text: str, encoding: str) -> bytes:
    """Inverse of decode_source (a BOM that was there is written back)."""
    raise NotImplementedError


def unified_diff(before: str, after: str, path: str) -> str:
    """A unified diff of two texts for diff mode ('' when equal)."""
    raise NotImplementedError
