# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Edit kind ``import: {module, names}``: names merged into a top-level ``from module import``."""

from __future__ import annotations

import ast
import tokenize
import typing as t
from collections import abc

from ._common import MAX_LINE_LENGTH, EditSpecError, _require_list, _require_str
from ._scopes import _line_list, _Run
from ._source import _Already, _Doc, _insert_after, _insert_text, _leading_ws, _Outcome, _Splice


KEYS = (("module", "names"), ())  # (required, optional)


def parse_spec(spec: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    module = _require_str("module", spec["module"])
    level = len(module) - len(module.lstrip("."))
    rest = module[level:]
    if rest and not all(part.isidentifier() for part in rest.split(".")) or not rest and not level:
        raise EditSpecError(f"'module' must be a module name like .interfaces or a.b, got {module!r}")
    return {"module": module, "names": [_parse_alias(item) for item in _require_list("names", spec["names"])]}


def _parse_alias(item: t.Any) -> t.Dict[str, t.Any]:
    """An imported name: 'X', 'X as Y' or {name: X, asname: Y}."""
    if isinstance(item, abc.Mapping):
        name, asname = item.get("name"), item.get("asname")
        extra = set(item) - {"name", "asname"}
        if extra:
            raise EditSpecError(f"unknown key(s) in a name: {', '.join(sorted(map(str, extra)))}")
    elif isinstance(item, str):
        parts = item.split()
        if len(parts) == 3 and parts[1] == "as":
            name, asname = parts[0], parts[2]
        else:
            name, asname = item.strip(), None
    else:
        raise EditSpecError(f"an imported name must be a string or a mapping, got {item!r}")
    if not isinstance(name, str) or not name.isidentifier():
        raise EditSpecError(f"invalid imported name {item!r}")
    if asname is not None and (not isinstance(asname, str) or not asname.isidentifier()):
        raise EditSpecError(f"invalid alias in {item!r}")
    return {"name": name, "asname": asname}


def _alias_text(alias: t.Mapping[str, t.Any]) -> str:
    return alias["name"] if alias["asname"] is None else f"{alias['name']} as {alias['asname']}"


def plan(doc: _Doc, spec: t.Mapping[str, t.Any]) -> _Outcome:
    module = spec["module"]
    level = len(module) - len(module.lstrip("."))
    name = module[level:] or None
    matches = [node for node in doc.tree.body
               if isinstance(node, ast.ImportFrom) and node.module == name and node.level == level]
    have = {(a.name, a.asname) for node in matches for a in node.names}
    missing = [a for a in spec["names"] if (a["name"], a["asname"]) not in have]
    texts = [_alias_text(a) for a in missing]
    if not missing:
        lines = _line_list(matches)
        return _Already(f"{', '.join(map(_alias_text, spec['names']))} already imported from {module} "
                        f"(line {lines})")
    mergeable = [node for node in matches if node.names[0].name != "*"]
    if mergeable:
        return _merge_import(doc, mergeable[0], module, texts)
    return _add_import(doc, module, texts)


def _merge_import(doc: _Doc, node: ast.ImportFrom, module: str, texts: t.List[str]) -> _Splice:
    detail = f"added {', '.join(texts)} to 'from {module} import ...' (line {node.lineno})"
    end_row, end_col = doc.end(node)
    toks = [tok for tok in doc.tokens(node.lineno, end_row) if tok.start <= (end_row, end_col)]
    names = [tok for tok in toks if tok.type == tokenize.NAME and tok.string not in ("from", "import", "as")]
    last = names[-1]  # end of the last alias (its asname if it has one)
    paren = next((tok for tok in toks if tok.string == ")"), None)
    if paren is not None and paren.start[0] > last.end[0]:  # one name per line, ')' on its own line
        indent = _leading_ws(doc.line(last.end[0]))
        after = toks[toks.index(last) + 1:]
        comma = next((tok for tok in after if tok.type != tokenize.COMMENT), None)
        trailing = comma is not None and comma.string == ","
        new = [indent + text + "," for text in texts]
        if not trailing:
            new[-1] = new[-1][:-1]
        return _insert_text(doc, last.end[0], last.end[1], "" if trailing else ",", detail, new)
    merged = _insert_text(doc, last.end[0], last.end[1], ", " + ", ".join(texts), detail)
    too_long = len(merged.lines[0].rstrip("\r\n")) > MAX_LINE_LENGTH
    if paren is None and node.lineno == end_row and too_long:
        return _wrap_import(doc, node, module, texts, detail) or merged
    return merged


def _wrap_import(doc: _Doc, node: ast.ImportFrom, module: str, texts: t.List[str],
                 detail: str) -> _Splice | None:
    """A one-line import grown too long -> parenthesised, one name per line (black's style)."""
    line = doc.line(node.lineno)
    start, end = doc.char_col(node.lineno, node.col_offset), doc.char_col(node.lineno, node.end_col_offset)
    rest = line[end:].rstrip("\r\n").strip()
    if rest and not rest.startswith("#"):
        return None  # '; more code' after the import: keep it on one line
    names = [_alias_text({"name": a.name, "asname": a.asname}) for a in node.names] + texts
    head = line[:start] + f"from {module} import (" + (f"  {rest}" if rest else "")
    indent = _leading_ws(line)
    body = [indent + doc.indent_unit + name + "," for name in names]
    lines = [head] + body + [indent + ")"]
    return _Splice(node.lineno, node.lineno, tuple(text + doc.newline for text in lines), detail)


def _add_import(doc: _Doc, module: str, texts: t.List[str]) -> _Splice:
    imports = [node for node in doc.tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    if imports:
        after = imports[-1].end_lineno
    else:
        body = doc.tree.body
        has_docstring = bool(body) and isinstance(body[0], ast.Expr) and isinstance(
            getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str)
        if has_docstring:
            after = body[0].end_lineno
        elif body:
            after = _Run((body[0],)).first - 1  # before the first statement (and its decorators)
        else:
            after = len(doc.lines)
    line = f"from {module} import {', '.join(texts)}"
    new = [line]
    if len(line) > MAX_LINE_LENGTH:
        new = [f"from {module} import ("] + [doc.indent_unit + text + "," for text in texts] + [")"]
    detail = f"added 'from {module} import {', '.join(texts)}' after line {after}"
    return _insert_after(doc, after, new, detail)
