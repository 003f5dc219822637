# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Structural, verified edits of Python source text (the engine behind python_patch).

Pure functions: source text in, source text out, typed errors. Stdlib only, Python 3.9+,
no Ansible imports: this package runs on the managed node under whatever interpreter is there.

How an edit is applied, and why:
- Targets are located with ``ast`` node positions, never with regular expressions or line
  numbers, so an edit finds its class/function/statement wherever a release moved it.
- Only the lines of the touched statements are rewritten; every other byte (comments, blank
  lines, formatting, CRLF line endings, tab indentation) stays as it was.
- After splicing, the text is parsed again, compiled, and planning each edit again must
  report ``already``: a splice that does not show the intended change raises
  VerificationError. The same check makes re-applying an edit set a no-op.

Edit mappings (see ``parse_edits``): ``{id?, when_missing?: fail|skip, <kind>: {...}}``. An
edit without an ``id`` gets ``edits[<index>]`` (its 0-based position in the list, as Ansible
names list items). Kinds:
- ``import: {module, names}``: names merged into the first top-level ``from module import``
  (module compared literally: ``.interfaces`` and its absolute name differ), else a new
  statement after the last top-level import. Never "missing", so when_missing does not apply.
- ``base: {class, names}``: base expressions appended after the positional bases.
- ``member: {class, source, on_conflict}``: a def/async def/assignment in the class body,
  compared by AST; appended at the end of the body when absent.
- ``replace: {scope, old, new}``: the one run of statements equal (by AST) to ``old`` in the
  scope's blocks, not in nested defs/classes, becomes ``new``; comments on the replaced
  lines go with them.
- ``element: {scope, name, values}``: constants added to the list/tuple/set literal assigned
  to ``name`` (``x`` or ``self.x``).
Line numbers in result details refer to the text as it was when that edit was planned.

Column offsets from ``ast`` count UTF-8 bytes; they are converted to characters before the
text is sliced, so lines with non-ASCII characters before the touched column work.

Layout: one file per edit kind (_import, _base, _member, _replace, _element), each with its
KEYS, parse_spec() and plan(); _spec validates edit mappings, _apply plans/splices/verifies,
_source holds text handling and splices, _scopes finds targets, _common the shared types.
"""

from __future__ import annotations

from ._apply import apply_edits
from ._common import (
    DEFAULT_INDENT,
    EDIT_KINDS,
    MAX_LINE_LENGTH,
    ON_CONFLICT_CHOICES,
    STATUS_ALREADY,
    STATUS_APPLIED,
    STATUS_REVERTED,
    STATUS_SKIPPED,
    WHEN_MISSING_CHOICES,
    AmbiguousTargetError,
    ConflictError,
    Edit,
    EditResult,
    EditSpecError,
    PatchResult,
    PyEditError,
    SourceSyntaxError,
    TargetNotFoundError,
    VerificationError,
)
from ._source import decode_source, encode_source, unified_diff
from ._spec import parse_edits

__all__ = [
    "DEFAULT_INDENT", "EDIT_KINDS", "MAX_LINE_LENGTH", "ON_CONFLICT_CHOICES", "STATUS_ALREADY",
    "STATUS_APPLIED", "STATUS_REVERTED", "STATUS_SKIPPED", "WHEN_MISSING_CHOICES",
    "AmbiguousTargetError", "ConflictError", "Edit", "EditResult", "EditSpecError", "PatchResult",
    "PyEditError", "SourceSyntaxError", "TargetNotFoundError", "VerificationError",
    "apply_edits", "decode_source", "encode_source", "parse_edits", "unified_diff",
]
