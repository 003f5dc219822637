# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Edit kind ``base: {class, names}``: base expressions appended to a class header."""

from __future__ import annotations

import ast
import tokenize
import typing as t

from ._common import MAX_LINE_LENGTH, EditSpecError, _dump, _dump_all, _require_dotted, _require_list, _require_str
from ._scopes import _find_class
from ._source import _Already, _Doc, _insert_text, _leading_ws, _Outcome, _Splice


KEYS = (("class", "names"), ())  # (required, optional)


def parse_spec(spec: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    names = []
    for item in _require_list("names", spec["names"]):
        text = _require_str("names", item)
        try:
            ast.parse(text, mode="eval")
        except SyntaxError:
            raise EditSpecError(f"base {text!r} is not a Python expression") from None
        names.append(text)
    return {"class": _require_dotted("class", spec["class"]), "names": names}


def plan(doc: _Doc, spec: t.Mapping[str, t.Any]) -> _Outcome:
    cls = _find_class(doc, spec["class"])
    have = set(_dump_all(cls.bases))
    missing = [name for name in spec["names"]
               if _dump(ast.parse(name, mode="eval").body) not in have]
    if not missing:
        return _Already(f"class {cls.name} (line {cls.lineno}) already has base(s) "
                        f"{', '.join(spec['names'])}")
    detail = f"added base(s) {', '.join(missing)} to class {cls.name} (line {cls.lineno})"
    if cls.bases:
        return _append_base(doc, cls, missing, detail)
    if cls.keywords:
        row, col = doc.start(cls.keywords[0])
        return _insert_text(doc, row, col, ", ".join(missing) + ", ", detail)
    return _first_base(doc, cls, missing, detail)


def _append_base(doc: _Doc, cls: ast.ClassDef, missing: t.List[str], detail: str) -> _Splice:
    last = cls.bases[-1]
    row, col = doc.end(last)
    header = _class_header_tokens(doc, cls)
    after = [tok for tok in header if tok.start >= (row, col) and tok.type != tokenize.COMMENT
             and tok.type not in (tokenize.NL, tokenize.NEWLINE)]
    trailing = bool(after) and after[0].string == ","
    close = next(tok for tok in after if tok.string == ")")
    previous_end = cls.bases[-2].end_lineno if len(cls.bases) > 1 else _open_paren_row(header, cls)
    inline = _insert_text(doc, row, col, ", " + ", ".join(missing), detail)
    own_lines = not cls.keywords and close.start[0] > row  # ')' below the last base
    too_long = len(inline.lines[0].rstrip("\r\n")) > MAX_LINE_LENGTH
    if own_lines and (previous_end < last.lineno or too_long):  # continue on new lines
        indent = _leading_ws(doc.line(last.lineno))
        if last.lineno == cls.lineno:  # 'class A(B, C' then ')' on a later line
            indent += doc.indent_unit
        new = [indent + name + "," for name in missing]
        if not trailing:
            new[-1] = new[-1][:-1]
        return _insert_text(doc, row, col, "" if trailing else ",", detail, new)
    return inline


def _class_header_tokens(doc: _Doc, cls: ast.ClassDef) -> t.List[tokenize.TokenInfo]:
    """Tokens from 'class' to the ':' that ends the header."""
    last = cls.body[0].lineno
    toks = doc.tokens(cls.lineno, last)
    start = next(i for i, tok in enumerate(toks) if tok.string == "class" and tok.start[0] == cls.lineno)
    depth = 0
    for index in range(start, len(toks)):
        text = toks[index].string
        depth += text in "([{" and toks[index].type == tokenize.OP
        depth -= text in ")]}" and toks[index].type == tokenize.OP
        if depth == 0 and text == ":" and toks[index].type == tokenize.OP:
            return toks[start:index + 1]
    return toks[start:]


def _open_paren_row(header: t.List[tokenize.TokenInfo], cls: ast.ClassDef) -> int:
    name = next(i for i, tok in enumerate(header) if tok.string == cls.name)
    return next(tok.start[0] for tok in header[name:] if tok.string == "(")


def _first_base(doc: _Doc, cls: ast.ClassDef, missing: t.List[str], detail: str) -> _Splice:
    """No bases and no keywords: 'class A:', 'class A():' or 'class A[T]:'."""
    header = _class_header_tokens(doc, cls)
    index = next(i for i, tok in enumerate(header) if tok.string == cls.name)
    index += 1
    if header[index].string == "[":  # type parameters (3.12): bases go after them
        depth = 0
        while True:
            depth += header[index].string == "["
            depth -= header[index].string == "]"
            if depth == 0:
                break
            index += 1
        index += 1
    tok = header[index]
    if tok.string == "(":
        return _insert_text(doc, tok.end[0], tok.end[1], ", ".join(missing), detail)
    anchor = header[index - 1]
    return _insert_text(doc, anchor.end[0], anchor.end[1], "(" + ", ".join(missing) + ")", detail)
