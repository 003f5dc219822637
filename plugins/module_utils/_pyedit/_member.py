# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Edit kind ``member: {class, source, on_conflict}``: a def or assignment in a class body."""

from __future__ import annotations

import ast
import textwrap
import typing as t

from ._common import (ON_CONFLICT_CHOICES, AmbiguousTargetError, ConflictError, EditSpecError, PyEditError,
                      _dump, _parse_snippet, _require_choice, _require_code, _require_dotted)
from ._scopes import _DEFS, _find_class, _first_line, _line_list
from ._source import _Already, _check_own_lines, _Doc, _insert_after, _leading_ws, _Outcome, _reindent, _Splice


KEYS = (("class", "source"), ("on_conflict",))  # (required, optional)


def parse_spec(spec: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    on_conflict = spec.get("on_conflict", "fail")
    _require_choice("on_conflict", on_conflict, ON_CONFLICT_CHOICES)
    source = _require_code("source", spec["source"])
    body = _parse_snippet("source", source)
    if len(body) != 1 or _member_name(body[0]) is None:
        raise EditSpecError("'source' must be exactly one def, async def or assignment to one name")
    return {"class": _require_dotted("class", spec["class"]), "source": source,
            "on_conflict": on_conflict}


def _member_name(stmt: ast.stmt) -> str | None:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return stmt.name
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id
    return None


def _defines(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return stmt.name == name
    if isinstance(stmt, ast.Assign):
        return any(isinstance(target, ast.Name) and target.id == name for target in stmt.targets)
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == name
    return False


def plan(doc: _Doc, spec: t.Mapping[str, t.Any]) -> _Outcome:
    cls = _find_class(doc, spec["class"])
    wanted = ast.parse(textwrap.dedent(spec["source"])).body[0]
    name = _member_name(wanted)
    existing = [stmt for stmt in cls.body if _defines(stmt, name)]
    if not existing:
        return _add_member(doc, cls, wanted, spec["source"])
    where = f"class {cls.name}"
    equal = [stmt for stmt in existing if _dump(stmt) == _dump(wanted)]
    if equal:
        return _Already(f"{where} already defines {name} as given (line {equal[0].lineno})")
    if spec["on_conflict"] == "keep":
        return _Already(f"kept existing definition of {name} in {where} (differs, line "
                        f"{_line_list(existing)})")
    if spec["on_conflict"] == "fail":
        found = doc.line(existing[0].lineno).strip()
        raise ConflictError(f"{where} already defines {name} differently at line {existing[0].lineno}: "
                            f"{found!r} (wanted: {_first_line(spec['source'])!r}); set on_conflict "
                            f"to replace or keep")
    if len(existing) > 1:
        raise AmbiguousTargetError(f"{where} defines {name} {len(existing)} times, at lines "
                                   f"{_line_list(existing)}; cannot tell which one to replace")
    first, last = _check_own_lines(doc, existing[0], existing[0], f"{name} in {where}")
    indent = _leading_ws(doc.line(first))
    lines = _reindent(spec["source"], indent, doc.indent_unit)
    return _Splice(first, last, tuple(line + doc.newline for line in lines),
                   f"replaced {name} in {where} (lines {first}-{last})")


def _add_member(doc: _Doc, cls: ast.ClassDef, wanted: ast.stmt, source: str) -> _Splice:
    last = cls.body[-1]
    row, col = doc.start(cls.body[0])
    if doc.line(row)[:col].strip():  # 'class A: pass' or '): ...' closing a long header
        raise PyEditError(f"class {cls.name} (line {cls.lineno}) has its body on the line of its "
                          "header; members can only be added to a class with an indented body")
    indent = _leading_ws(doc.line(cls.body[0].lineno))
    blank = [""] if isinstance(wanted, _DEFS) or isinstance(last, _DEFS) else []
    lines = blank + _reindent(source, indent, doc.indent_unit)
    return _insert_after(doc, last.end_lineno, lines,
                         f"added {_member_name(wanted)} to class {cls.name} after line {last.end_lineno}")
