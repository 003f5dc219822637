# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Source text handling: lines and their endings, the parsed document, splices, and the
bytes/diff helpers the module uses around the engine."""

from __future__ import annotations

import ast
import dataclasses
import difflib
import io
import textwrap
import tokenize
import typing as t

from ._common import DEFAULT_INDENT, PyEditError, SourceSyntaxError


def _split_lines(text: str) -> t.List[str]:
    """Lines with their own endings (\\n, \\r\\n or \\r), split as the Python tokenizer does."""
    return io.StringIO(text, newline="").readlines()


def _leading_ws(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t\f"))]


def _line_ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")):]


class _Doc:
    """Parsed source: text, lines, tree, and the file's newline and indent conventions."""

    def __init__(self, text: str, tree: ast.Module) -> None:
        self.text = text
        self.tree = tree
        self.lines = _split_lines(text)
        self.newline = next((_line_ending(line) for line in self.lines if _line_ending(line)), "\n")
        self.indent_unit = _indent_unit(tree, self.lines) or DEFAULT_INDENT

    def line(self, lineno: int) -> str:
        return self.lines[lineno - 1]

    def char_col(self, lineno: int, byte_col: int) -> int:
        """ast columns are UTF-8 byte offsets; slicing str needs character offsets."""
        line = self.lines[lineno - 1]
        if line.isascii():
            return byte_col
        return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    def start(self, node: ast.AST) -> t.Tuple[int, int]:
        return node.lineno, self.char_col(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> t.Tuple[int, int]:
        return node.end_lineno, self.char_col(node.end_lineno, node.end_col_offset)

    def tokens(self, first: int, last: int) -> t.List[tokenize.TokenInfo]:
        """Tokens of lines first..last with absolute row numbers (columns in characters)."""
        text = "".join(self.lines[first - 1:last])
        result = []
        try:
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                row, col = tok.start
                erow, ecol = tok.end
                result.append(tok._replace(start=(row + first - 1, col), end=(erow + first - 1, ecol)))
        except (tokenize.TokenError, IndentationError):
            pass  # a fragment may stop inside a bracket; the tokens seen so far are enough
        return result


def _indent_unit(tree: ast.AST, lines: t.Sequence[str]) -> str | None:
    """The indentation a file uses for one block level (first nested block found)."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.stmt) and isinstance(body, list) and body and body[0].lineno > node.lineno:
            outer = _leading_ws(lines[node.lineno - 1])
            inner = _leading_ws(lines[body[0].lineno - 1])
            if inner.startswith(outer) and len(inner) > len(outer):
                return inner[len(outer):]
    return None


def _parse_doc(text: str) -> _Doc:
    return _Doc(text, ast.parse(text))


def _syntax_error_text(exc: SyntaxError, text: str) -> t.Tuple[str, str]:
    lines = _split_lines(text)
    line = exc.text
    if exc.lineno and 0 < exc.lineno <= len(lines):
        line = lines[exc.lineno - 1]
    line = (line or "").rstrip("\r\n")
    return f"{exc.msg} at line {exc.lineno}: {line.strip()!r}", line


# --------------------------------------------------------------------------- splices

@dataclasses.dataclass(frozen=True)
class _Splice:
    """Replace lines first..last (1-based, inclusive; last = first - 1 inserts) by ``lines``."""

    first: int
    last: int
    lines: t.Tuple[str, ...]
    detail: str

    def apply(self, lines: t.Sequence[str]) -> str:
        return "".join(list(lines[:self.first - 1]) + list(self.lines) + list(lines[self.last:]))


@dataclasses.dataclass(frozen=True)
class _Already:
    detail: str


_Outcome = t.Union[_Splice, _Already]


class _Missing(Exception):
    """The edit's target does not exist (when_missing decides: fail or skip)."""


def _insert_after(doc: _Doc, lineno: int, new_lines: t.Sequence[str], detail: str) -> _Splice:
    """Insert whole lines (without endings) after line ``lineno`` (0 = at the top)."""
    body = tuple(line + doc.newline for line in new_lines)
    if lineno and not _line_ending(doc.line(lineno)):  # last line of a file without final newline
        return _Splice(lineno, lineno, (doc.line(lineno) + doc.newline,) + body, detail)
    return _Splice(lineno + 1, lineno, body, detail)


def _insert_text(doc: _Doc, row: int, col: int, text: str, detail: str,
                 after_lines: t.Sequence[str] = ()) -> _Splice:
    """Insert ``text`` at a character column of one line, optionally adding lines after it."""
    line = doc.line(row)
    new = line[:col] + text + line[col:]
    if after_lines and not _line_ending(new):
        new += doc.newline
    return _Splice(row, row, (new,) + tuple(extra + doc.newline for extra in after_lines), detail)


def _check_own_lines(doc: _Doc, first: ast.AST, last: ast.AST, what: str) -> t.Tuple[int, int]:
    """Lines of statements first..last, refusing ones that share a line with other code."""
    start_row = min([first.lineno] + [d.lineno for d in getattr(first, "decorator_list", [])])
    row, col = doc.start(first) if start_row == first.lineno else (start_row, None)
    if col is not None and doc.line(row)[:col].strip():
        raise PyEditError(f"{what} at line {row} shares its line with other code before it; "
                          "only statements on lines of their own can be replaced")
    end_row, end_col = doc.end(last)
    rest = doc.line(end_row)[end_col:].strip()
    if rest and not rest.startswith("#"):
        raise PyEditError(f"{what} ending at line {end_row} shares its line with other code "
                          f"after it ({rest!r}); only statements on lines of their own can be replaced")
    return start_row, end_row


def _reindent(source: str, indent: str, unit: str) -> t.List[str]:
    """User code -> lines at ``indent``, nested levels converted to the file's indent unit.

    Lines inside multi-line strings are left alone: changing them would change the string.
    """
    text = textwrap.dedent(source).strip("\r\n")
    lines = [line.rstrip("\r\n") for line in _split_lines(text)]
    tree = ast.parse(text)
    source_unit = _indent_unit(tree, [line + "\n" for line in lines]) or DEFAULT_INDENT
    inside = _string_interior_lines(tree)
    result = []
    for number, line in enumerate(lines, start=1):
        if number in inside:
            result.append(line)
        elif not line.strip():
            result.append("")
        else:
            ws = _leading_ws(line)
            levels = 0
            while ws.startswith(source_unit, levels * len(source_unit)):
                levels += 1
            result.append(indent + unit * levels + ws[levels * len(source_unit):] + line[len(ws):])
    return result


def _string_interior_lines(tree: ast.AST) -> t.Set[int]:
    lines: t.Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and node.end_lineno > node.lineno:
            if isinstance(node, ast.JoinedStr) or isinstance(node.value, (str, bytes)):
                lines.update(range(node.lineno + 1, node.end_lineno + 1))
    return lines


def decode_source(data: bytes, *, path: str = "<string>") -> t.Tuple[str, str]:
    """Bytes -> (text, encoding) honouring PEP 263 cookies and BOMs; newlines kept as they are."""
    try:
        encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
        return data.decode(encoding), encoding
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        raise SourceSyntaxError(f"cannot decode the file: {exc}", path=path) from None


def encode_source(text: str, encoding: str) -> bytes:
    """Inverse of decode_source (a BOM that was there is written back)."""
    return text.encode(encoding)


def unified_diff(before: str, after: str, path: str) -> str:
    """A unified diff of two texts for diff mode ('' when equal)."""
    if before == after:
        return ""
    old = [line if _line_ending(line) else line + "\n" for line in _split_lines(before)]
    new = [line if _line_ending(line) else line + "\n" for line in _split_lines(after)]
    name = path.lstrip("/")  # git style: "a/usr/lib/..." rather than "a//usr/lib/..."
    return "".join(difflib.unified_diff(old, new, fromfile=f"a/{name}", tofile=f"b/{name}"))
