# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Applying parsed edits: plan, splice, re-parse and verify (all at once when possible)."""

from __future__ import annotations

import typing as t

from ._common import (STATUS_ALREADY, STATUS_APPLIED, STATUS_SKIPPED, Edit, EditResult, PatchResult, PyEditError,
                      SourceSyntaxError, TargetNotFoundError, VerificationError)
from ._source import _Already, _Doc, _Missing, _Outcome, _parse_doc, _Splice, _syntax_error_text
from ._spec import KINDS


def apply_edits(source: str, edits: t.Sequence[Edit], *, path: str = "<string>") -> PatchResult:
    """Apply edits in order (each to the previous result); parse before, verify after.

    Fast path: when every edit can be planned on the original text and their splices are
    apart from each other, all splices are made at once and the result is parsed and verified
    once (a 2,000-line file parses in ~10 ms; one parse per edit would cost the budget). If
    anything in that path is off, the edits are applied one by one, which gives the same text
    whenever the fast path succeeds and names the failing edit when one fails.
    """
    try:
        doc = _parse_doc(source)
    except SyntaxError as exc:
        raise _source_error("parse", exc, source, path) from None
    done = _apply_together(doc, edits, path)
    if done is None:
        done = _apply_in_turn(doc, edits, path)
    new_doc, results = done
    return PatchResult(source=new_doc.text, results=tuple(results))


def _apply_in_turn(doc: _Doc, edits: t.Sequence[Edit], path: str) -> t.Tuple[_Doc, t.List[EditResult]]:
    """Each edit planned, spliced and verified on the previous edit's result."""
    results = []
    history: t.List[t.Tuple[Edit | None, _Doc]] = [(None, doc)]
    for edit in edits:
        doc, result = _apply_one(doc, edit, path)
        results.append(result)
        if result.status == STATUS_APPLIED:
            history.append((edit, doc))
    if len(history) > 1:
        _check_compiles(history, path)
    return doc, results


def _apply_together(doc: _Doc, edits: t.Sequence[Edit],
                    path: str) -> t.Tuple[_Doc, t.List[EditResult]] | None:
    """All edits planned on the original text, spliced at once, verified on one parse.

    Returns None (use _apply_in_turn) when a plan fails, splices overlap or insert at the same
    place, or the result does not show every edit as done: then the order of edits may matter.
    """
    outcomes: t.List[t.Union[_Outcome, _Missing]] = []
    for edit in edits:
        try:
            outcomes.append(KINDS[edit.kind].plan(doc, edit.spec))
        except _Missing as exc:
            if edit.when_missing != "skip":
                return None
            outcomes.append(exc)
        except PyEditError:
            return None
    splices = sorted((o for o in outcomes if isinstance(o, _Splice)), key=lambda s: (s.first, s.last))
    for earlier, later in zip(splices, splices[1:]):
        if later.first <= earlier.last or (later.first, later.last) == (earlier.first, earlier.last):
            return None  # overlapping lines, or two insertions at one place: order matters
    new_doc = doc
    if splices:
        lines = list(doc.lines)
        for splice in reversed(splices):
            lines[splice.first - 1:splice.last] = splice.lines
        try:
            new_doc = _parse_doc("".join(lines))
            compile(new_doc.tree, path, "exec", dont_inherit=True)
        except SyntaxError:
            return None
        if not all(_still_done(new_doc, edit, outcome) for edit, outcome in zip(edits, outcomes)):
            return None
    return new_doc, [_result(edit, outcome) for edit, outcome in zip(edits, outcomes)]


def _still_done(doc: _Doc, edit: Edit, outcome: t.Union[_Outcome, _Missing]) -> bool:
    """Re-planning on the result: applied and already edits must be done, skipped ones missing."""
    try:
        again = KINDS[edit.kind].plan(doc, edit.spec)
    except _Missing:
        return isinstance(outcome, _Missing)
    except PyEditError:
        return False
    return isinstance(again, _Already) and not isinstance(outcome, _Missing)


def _result(edit: Edit, outcome: t.Union[_Outcome, _Missing]) -> EditResult:
    if isinstance(outcome, _Missing):
        return EditResult(edit.id, edit.kind, STATUS_SKIPPED, f"skipped: {outcome}")
    status = STATUS_APPLIED if isinstance(outcome, _Splice) else STATUS_ALREADY
    return EditResult(edit.id, edit.kind, status, outcome.detail)


def _source_error(verb: str, exc: SyntaxError, source: str, path: str) -> SourceSyntaxError:
    message, line = _syntax_error_text(exc, source)
    return SourceSyntaxError(f"does not {verb} before editing: {message} — restore the pristine file "
                             "(e.g. pip install --force-reinstall --no-deps <package>)",
                             lineno=exc.lineno, offset=exc.offset, line=line, path=path)


def _check_compiles(history: t.Sequence[t.Tuple[Edit | None, _Doc]], path: str) -> None:
    """Compile the result: the parser accepts code the compiler refuses (a misplaced
    'from __future__', 'return' outside a function). Only when that fails are the earlier
    states compiled too, to name the edit that broke it."""
    try:
        compile(history[-1][1].tree, path, "exec", dont_inherit=True)
        return
    except SyntaxError:
        pass
    for edit, doc in history:
        try:
            compile(doc.tree, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            if edit is None:
                raise _source_error("compile", exc, doc.text, path) from None
            message = _syntax_error_text(exc, doc.text)[0]
            raise VerificationError(f"the edited source does not compile ({message}); nothing was "
                                    "changed", path=path, edit_id=edit.id, kind=edit.kind) from None


def _apply_one(doc: _Doc, edit: Edit, path: str) -> t.Tuple[_Doc, EditResult]:
    context = {"path": path, "edit_id": edit.id, "kind": edit.kind}
    try:
        outcome = KINDS[edit.kind].plan(doc, edit.spec)
    except _Missing as exc:
        if edit.when_missing == "skip":
            return doc, _result(edit, exc)
        raise TargetNotFoundError(str(exc), **context) from None
    except PyEditError as exc:
        exc.path, exc.edit_id, exc.kind = path, edit.id, edit.kind
        raise
    if isinstance(outcome, _Splice):
        doc = _verify(doc, outcome, edit, context)
    return doc, _result(edit, outcome)


def _verify(doc: _Doc, splice: _Splice, edit: Edit, context: t.Mapping[str, t.Any]) -> _Doc:
    """Parse the spliced text and check that planning the same edit now finds it done."""
    text = splice.apply(doc.lines)
    try:
        new_doc = _parse_doc(text)
    except SyntaxError as exc:
        message = _syntax_error_text(exc, text)[0]
        raise VerificationError(f"the edited source does not parse ({message}); nothing was changed",
                                **context) from None
    try:
        outcome = KINDS[edit.kind].plan(new_doc, edit.spec)
    except (PyEditError, _Missing) as exc:
        reason = getattr(exc, "message", str(exc))
        raise VerificationError(f"after editing, the change cannot be found again ({reason}); "
                                "nothing was changed", **context) from None
    if not isinstance(outcome, _Already):
        raise VerificationError("after editing, re-parsing does not show the intended change "
                                f"({outcome.detail!r} would still be needed); nothing was changed",
                                **context)
    return new_doc
