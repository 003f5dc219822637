# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Edit kind ``replace: {scope, old, new}``: one run of statements, found by AST, replaced."""

from __future__ import annotations

import ast
import typing as t

from ._common import AmbiguousTargetError, EditSpecError, _dump, _dump_all, _parse_snippet, _require_code, _require_dotted
from ._scopes import _blocks, _find_scope, _first_line, _Run, _scope_label, _span
from ._source import _Already, _check_own_lines, _Doc, _leading_ws, _Missing, _Outcome, _reindent, _Splice


KEYS = (("old", "new"), ("scope",))  # (required, optional)


def parse_spec(spec: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    old = _require_code("old", spec["old"])
    new = _require_code("new", spec["new"])
    if _dump_all(_parse_snippet("old", old)) == _dump_all(_parse_snippet("new", new)):
        raise EditSpecError("'old' and 'new' are the same code")
    return {"scope": _require_dotted("scope", spec.get("scope"), empty_ok=True), "old": old, "new": new}


def _find_runs(body: t.List[ast.stmt], snippet: t.List[str], cache: t.Dict[int, str]) -> t.List[_Run]:
    """Every run of consecutive statements in body's blocks whose AST equals the snippet's."""
    runs = []
    width = len(snippet)
    for block in _blocks(body):
        for start in range(len(block) - width + 1):
            candidate = block[start:start + width]
            if all(_cached_dump(stmt, cache) == want for stmt, want in zip(candidate, snippet)):
                runs.append(_Run(tuple(candidate)))
    return runs


def _cached_dump(stmt: ast.stmt, cache: t.Dict[int, str]) -> str:
    key = id(stmt)
    if key not in cache:
        cache[key] = _dump(stmt)
    return cache[key]


def plan(doc: _Doc, spec: t.Mapping[str, t.Any]) -> _Outcome:
    scope = _find_scope(doc, spec["scope"])
    label = _scope_label(spec["scope"])
    cache: t.Dict[int, str] = {}
    olds = _find_runs(scope.body, _dump_all(_parse_snippet("old", spec["old"])), cache)
    news = _find_runs(scope.body, _dump_all(_parse_snippet("new", spec["new"])), cache)
    # A snippet that contains the other one matches inside it; such matches do not count.
    olds_alone = [run for run in olds if not any(run.inside(new) for new in news)]
    news_alone = [run for run in news if not any(run.inside(old) for old in olds)]
    if not olds_alone:
        if news:
            return _Already(f"'new' is already in {label} (line {news[0].first})")
        raise _Missing(f"no statement run in {label}{_span(scope)} matches 'old' "
                       f"(first line: {_first_line(spec['old'])!r}), and 'new' is not there either")
    if len(olds_alone) > 1:
        raise AmbiguousTargetError(f"'old' matches {len(olds_alone)} statement runs in {label}, at lines "
                                   f"{', '.join(str(run.first) for run in olds_alone)}; make 'old' "
                                   "longer so that it matches one")
    if news_alone:
        raise AmbiguousTargetError(f"both 'old' (line {olds_alone[0].first}) and 'new' (line "
                                   f"{news_alone[0].first}) are in {label}; cannot tell whether the "
                                   "edit was applied")
    run = olds_alone[0]
    first, last = _check_own_lines(doc, run.stmts[0], run.stmts[-1], f"'old' in {label}")
    indent = _leading_ws(doc.line(first))
    lines = _reindent(spec["new"], indent, doc.indent_unit)
    return _Splice(first, last, tuple(line + doc.newline for line in lines),
                   f"replaced lines {first}-{last} of {label}")
