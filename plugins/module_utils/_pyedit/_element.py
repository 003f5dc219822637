# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Edit kind ``element: {scope, name, values}``: constants added to a list/tuple/set literal."""

from __future__ import annotations

import ast
import typing as t

from ._common import _SCALARS, AmbiguousTargetError, EditSpecError, PyEditError, _require_dotted, _require_list, _require_str
from ._scopes import _blocks, _find_scope, _line_list, _scope_label, _span
from ._source import _Already, _Doc, _insert_text, _leading_ws, _Missing, _Outcome, _Splice


KEYS = (("name", "values"), ("scope",))  # (required, optional)


def parse_spec(spec: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    name = _require_str("name", spec["name"])
    try:
        target = ast.parse(name, mode="eval").body
    except SyntaxError:
        target = None
    if not isinstance(target, (ast.Name, ast.Attribute)):
        raise EditSpecError(f"'name' must be a variable or attribute like self.x, got {name!r}")
    values = _require_list("values", spec["values"])
    bad = [value for value in values if not isinstance(value, _SCALARS)]
    if bad:
        raise EditSpecError(f"'values' may hold strings, numbers, booleans and null only, got {bad!r}")
    return {"scope": _require_dotted("scope", spec.get("scope"), empty_ok=True),
            "name": ast.unparse(target), "values": values}


def _target_text(target: ast.expr) -> str | None:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return ast.unparse(target)
    return None


def _assignments(body: t.List[ast.stmt], name: str) -> t.List[ast.stmt]:
    found = []
    for block in _blocks(body):
        for stmt in block:
            if isinstance(stmt, ast.Assign):
                targets = stmt.targets
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                targets = [stmt.target]
            else:
                continue
            if any(_target_text(target) == name for target in targets):
                found.append(stmt)
    return found


def plan(doc: _Doc, spec: t.Mapping[str, t.Any]) -> _Outcome:
    scope = _find_scope(doc, spec["scope"])
    label = _scope_label(spec["scope"])
    name = spec["name"]
    found = _assignments(scope.body, name)
    if not found:
        raise _Missing(f"no assignment to {name} in {label}{_span(scope)}")
    if len(found) > 1:
        raise AmbiguousTargetError(f"{name} is assigned {len(found)} times in {label}, at lines "
                                   f"{_line_list(found)}")
    literal = found[0].value
    if not isinstance(literal, (ast.List, ast.Tuple, ast.Set)):
        raise PyEditError(f"{name} in {label} (line {found[0].lineno}) is assigned a "
                          f"{type(literal).__name__}, not a list, tuple or set literal")
    have = {(type(e.value), e.value) for e in literal.elts if isinstance(e, ast.Constant)}
    missing = [value for value in spec["values"] if (type(value), value) not in have]
    if not missing:
        return _Already(f"{name} (line {found[0].lineno}) already holds "
                        f"{', '.join(map(repr, spec['values']))}")
    texts = [_render_value(value, _quote_style(doc, literal)) for value in missing]
    detail = f"added {', '.join(texts)} to {name} in {label} (line {found[0].lineno})"
    return _add_elements(doc, literal, texts, detail)


def _add_elements(doc: _Doc, literal: ast.expr, texts: t.List[str], detail: str) -> _Splice:
    if not literal.elts:
        row, col = doc.end(literal)
        single_tuple = isinstance(literal, ast.Tuple) and len(texts) == 1
        return _insert_text(doc, row, col - 1, ", ".join(texts) + ("," if single_tuple else ""), detail)
    last = literal.elts[-1]
    row, col = doc.end(last)
    if literal.end_lineno > row:  # closing bracket on a later line: one line per element
        trailing = doc.line(row)[col:].lstrip().startswith(",")
        indent = _leading_ws(doc.line(last.lineno))
        new = [indent + text + "," for text in texts]
        if not trailing:
            new[-1] = new[-1][:-1]
        return _insert_text(doc, row, col, "" if trailing else ",", detail, new)
    return _insert_text(doc, row, col, ", " + ", ".join(texts), detail)


def _quote_style(doc: _Doc, literal: ast.expr) -> str:
    """The quote character the literal's existing strings use (double when there are none)."""
    for element in literal.elts:
        if isinstance(element, ast.Constant) and isinstance(element.value, str):
            row, col = doc.start(element)
            text = doc.line(row)[col:].lstrip("rRuUbBfF")
            if text[:1] in ("'", '"'):
                return text[0]
    return '"'


def _render_value(value: t.Any, quote: str) -> str:
    text = repr(value)
    if isinstance(value, str) and quote == '"' and text.startswith("'") and '"' not in value:
        return '"' + text[1:-1].replace("\\'", "'") + '"'
    return text
