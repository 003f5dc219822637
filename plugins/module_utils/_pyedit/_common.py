# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Constants, errors, result types and spec-checking helpers shared by every edit kind."""

from __future__ import annotations

import ast
import dataclasses
import textwrap
import typing as t
from collections import abc


EDIT_KINDS = ("import", "base", "member", "replace", "element")
WHEN_MISSING_CHOICES = ("fail", "skip")
ON_CONFLICT_CHOICES = ("fail", "keep", "replace")

STATUS_APPLIED = "applied"
STATUS_ALREADY = "already"
STATUS_SKIPPED = "skipped"
STATUS_REVERTED = "reverted"  # set by the module on state=absent, never by the engine

MAX_LINE_LENGTH = 88  # a merged one-line import longer than this becomes parenthesised
DEFAULT_INDENT = "    "


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
        where = []
        if self.path is not None:
            where.append(self.path)
        if self.edit_id is not None:
            edit = f"edit '{self.edit_id}'"
            where.append(edit if self.kind is None else f"{edit} ({self.kind})")
        elif self.kind is not None:
            where.append(f"({self.kind})")
        return ": ".join(where + [self.message])


class EditSpecError(PyEditError):
    """The edit mapping itself is malformed (unknown kind, two kinds, missing key...)."""


class SourceSyntaxError(PyEditError):
    """The file does not parse before editing. Carries lineno, offset and the offending line."""

    def __init__(self, message: str, *, lineno: int | None = None, offset: int | None = None,
                 line: str | None = None, **context: t.Any) -> None:
        super().__init__(message, **context)
        self.lineno = lineno
        self.offset = offset
        self.line = line


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


_SCALARS = (str, int, float, bool, type(None))


def _require_choice(key: str, value: t.Any, choices: t.Sequence[str]) -> None:
    if value not in choices:
        raise EditSpecError(f"'{key}' must be one of {', '.join(choices)}, got {value!r}")


def _require_str(key: str, value: t.Any, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str) or (not empty_ok and not value.strip()):
        raise EditSpecError(f"'{key}' must be a non-empty string, got {value!r}")
    return value.strip()


def _require_code(key: str, value: t.Any) -> str:
    """Code keeps its own indentation: the first line's spaces matter to dedent."""
    _require_str(key, value)
    return value


def _require_list(key: str, value: t.Any) -> t.List[t.Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, abc.Sequence) or not value:
        raise EditSpecError(f"'{key}' must be a non-empty list, got {value!r}")
    return list(value)


def _require_dotted(key: str, value: t.Any, *, empty_ok: bool = False) -> str:
    text = _require_str(key, "" if value is None and empty_ok else value, empty_ok=empty_ok)
    if text and not all(part.isidentifier() for part in text.split(".")):
        raise EditSpecError(f"'{key}' must be a dotted name like Class.method, got {value!r}")
    return text


def _parse_snippet(key: str, source: str) -> t.List[ast.stmt]:
    """Parse user code given in YAML (indented or not); a syntax error is a spec error."""
    try:
        body = ast.parse(textwrap.dedent(source)).body
    except SyntaxError as exc:
        raise EditSpecError(f"'{key}' does not parse: {exc.msg} at line {exc.lineno} of {key}") from None
    if not body:
        raise EditSpecError(f"'{key}' holds no statement")
    return body


def _dump(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=False)


def _dump_all(nodes: t.Sequence[ast.AST]) -> t.List[str]:
    return [_dump(node) for node in nodes]
