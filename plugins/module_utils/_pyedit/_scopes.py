# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Finding classes, functions and statement runs in a parsed document."""

from __future__ import annotations

import ast
import dataclasses
import textwrap
import typing as t

from ._common import AmbiguousTargetError
from ._source import _Doc, _Missing


_LISTED_NAMES_MAX = 40  # how many existing names an error message lists
_DEFS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _blocks(body: t.List[ast.stmt]) -> t.Iterator[t.List[ast.stmt]]:
    """Statement lists reachable from ``body`` through if/for/while/try/with/match blocks,
    not through nested functions or classes (their code is another scope)."""
    yield body
    for stmt in body:
        if isinstance(stmt, _DEFS):
            continue
        for child in _child_blocks(stmt):
            yield from _blocks(child)


def _child_blocks(stmt: ast.stmt) -> t.Iterator[t.List[ast.stmt]]:
    for field in ("body", "orelse", "finalbody"):
        block = getattr(stmt, field, None)
        if isinstance(block, list) and block:
            yield block
    for holder in getattr(stmt, "handlers", []) + getattr(stmt, "cases", []):
        yield holder.body


def _defs_in(body: t.List[ast.stmt]) -> t.List[ast.stmt]:
    return [stmt for block in _blocks(body) for stmt in block if isinstance(stmt, _DEFS)]


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Module):
        return "module level"
    kind = "class" if isinstance(node, ast.ClassDef) else "function"
    return f"{kind} '{node.name}'"


def _name_list(names: t.Sequence[str]) -> str:
    unique = list(dict.fromkeys(names))
    if not unique:
        return "(none)"
    more = len(unique) - _LISTED_NAMES_MAX
    return ", ".join(unique[:_LISTED_NAMES_MAX]) + (f" and {more} more" if more > 0 else "")


def _find_scope(doc: _Doc, dotted: str) -> ast.AST:
    """The module, class or function named by a dotted path (empty = the module)."""
    node: ast.AST = doc.tree
    for part in dotted.split(".") if dotted else []:
        node = _one_named(_defs_in(node.body), part, node, "")
    return node


def _find_class(doc: _Doc, dotted: str) -> ast.ClassDef:
    outer, name = dotted.rpartition(".")[::2]
    scope = _find_scope(doc, outer)
    classes = [d for d in _defs_in(scope.body) if isinstance(d, ast.ClassDef)]
    return _one_named(classes, name, scope, "class")


def _one_named(candidates: t.List[ast.stmt], name: str, scope: ast.AST, kind: str) -> t.Any:
    """The one candidate called name; none is _Missing (listing what is there), several ambiguous."""
    found = [d for d in candidates if d.name == name]
    what = f"{kind} '{name}'".lstrip()
    if not found:
        listed = "classes defined there" if kind == "class" else "defined there"
        raise _Missing(f"{what} not found in {_describe(scope)}; {listed}: "
                       f"{_name_list([d.name for d in candidates])}")
    if len(found) > 1:
        raise AmbiguousTargetError(f"{what} is defined {len(found)} times in {_describe(scope)}, "
                                   f"at lines {_line_list(found)}")
    return found[0]


def _line_list(nodes: t.Sequence[ast.AST]) -> str:
    return ", ".join(str(node.lineno) for node in nodes)


def _scope_label(dotted: str) -> str:
    return dotted or "module level"


def _first_line(source: str) -> str:
    return textwrap.dedent(source).strip().splitlines()[0]


@dataclasses.dataclass(frozen=True)
class _Run:
    """Consecutive statements of one block that match a snippet."""

    stmts: t.Tuple[ast.stmt, ...]

    @property
    def first(self) -> int:
        head = self.stmts[0]
        return min([head.lineno] + [d.lineno for d in getattr(head, "decorator_list", [])])

    @property
    def last(self) -> int:
        return self.stmts[-1].end_lineno

    def inside(self, other: _Run) -> bool:
        return other.first <= self.first and self.last <= other.last


def _span(scope: ast.AST) -> str:
    if isinstance(scope, ast.Module):
        return ""
    return f" (lines {scope.lineno}-{scope.end_lineno})"
