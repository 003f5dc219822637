# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Structural, verified edits of Python source text (the engine behind python_patch).

Pure functions: source text in, source text out, typed errors. Stdlib only, Python 3.9+,
no Ansible imports: this file runs on the managed node under whatever interpreter is there.

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
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import io
import textwrap
import tokenize
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
_LISTED_NAMES_MAX = 40  # how many existing names an error message lists


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


# --------------------------------------------------------------------------- edit specs

_KIND_KEYS: t.Dict[str, t.Tuple[t.Tuple[str, ...], t.Tuple[str, ...]]] = {
    # kind: (required keys, optional keys)
    "import": (("module", "names"), ()),
    "base": (("class", "names"), ()),
    "member": (("class", "source"), ("on_conflict",)),
    "replace": (("old", "new"), ("scope",)),
    "element": (("name", "values"), ("scope",)),
}
_SCALARS = (str, int, float, bool, type(None))


def parse_edits(raw_edits: t.Sequence[t.Mapping[str, t.Any]], *, path: str | None = None) -> t.List[Edit]:
    """Validate user-supplied edit mappings ({id?, when_missing?, <kind>: {...}}) into Edits.

    Everything that can be checked without the file is checked here, so a typo in a playbook
    fails before any file is read.
    """
    if isinstance(raw_edits, (str, bytes)) or not isinstance(raw_edits, abc.Sequence):
        raise EditSpecError("edits must be a list of mappings", path=path)
    edits: t.List[Edit] = []
    seen: t.Dict[str, int] = {}
    for index, raw in enumerate(raw_edits):
        edit = _parse_edit(raw, index, path)
        if edit.id in seen:
            raise EditSpecError(f"duplicate edit id (also used by edit #{seen[edit.id]})",
                                path=path, edit_id=edit.id, kind=edit.kind)
        seen[edit.id] = index
        edits.append(edit)
    return edits


def _parse_edit(raw: t.Any, index: int, path: str | None) -> Edit:
    default_id = f"edits[{index}]"
    if not isinstance(raw, abc.Mapping):
        raise EditSpecError(f"an edit must be a mapping, got {type(raw).__name__}",
                            path=path, edit_id=default_id)
    edit_id = raw.get("id", default_id)
    if not isinstance(edit_id, str) or not edit_id:
        raise EditSpecError("'id' must be a non-empty string", path=path, edit_id=default_id)
    kinds = [key for key in raw if key in EDIT_KINDS]
    unknown = sorted(str(key) for key in raw if key not in EDIT_KINDS + ("id", "when_missing"))
    if unknown:
        raise EditSpecError(f"unknown key(s) {', '.join(unknown)}; an edit has an optional id, "
                            f"when_missing and exactly one of {', '.join(EDIT_KINDS)}",
                            path=path, edit_id=edit_id)
    if len(kinds) != 1:
        found = ", ".join(kinds) if kinds else "none"
        raise EditSpecError(f"an edit needs exactly one of {', '.join(EDIT_KINDS)} (found: {found})",
                            path=path, edit_id=edit_id)
    kind = kinds[0]
    when_missing = raw.get("when_missing", "fail")
    try:
        _require_choice("when_missing", when_missing, WHEN_MISSING_CHOICES)
        spec = _SPEC_PARSERS[kind](_check_keys(kind, raw[kind]))
    except EditSpecError as exc:
        raise EditSpecError(exc.message, path=path, edit_id=edit_id, kind=kind) from None
    return Edit(id=edit_id, kind=kind, spec=spec, when_missing=when_missing)


def _check_keys(kind: str, spec: t.Any) -> t.Dict[str, t.Any]:
    if not isinstance(spec, abc.Mapping):
        raise EditSpecError(f"'{kind}' must be a mapping, got {type(spec).__name__}")
    required, optional = _KIND_KEYS[kind]
    missing = [key for key in required if key not in spec]
    if missing:
        raise EditSpecError(f"missing key(s): {', '.join(missing)}")
    unknown = sorted(str(key) for key in spec if key not in required + optional)
    if unknown:
        raise EditSpecError(f"unknown key(s): {', '.join(unknown)} "
                            f"(allowed: {', '.join(required + optional)})")
    return dict(spec)


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


def _parse_import_spec(spec: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
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


def _parse_base_spec(spec: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    names = []
    for item in _require_list("names", spec["names"]):
        text = _require_str("names", item)
        try:
            ast.parse(text, mode="eval")
        except SyntaxError:
            raise EditSpecError(f"base {text!r} is not a Python expression") from None
        names.append(text)
    return {"class": _require_dotted("class", spec["class"]), "names": names}


def _parse_member_spec(spec: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    on_conflict = spec.get("on_conflict", "fail")
    _require_choice("on_conflict", on_conflict, ON_CONFLICT_CHOICES)
    source = _require_code("source", spec["source"])
    body = _parse_snippet("source", source)
    if len(body) != 1 or _member_name(body[0]) is None:
        raise EditSpecError("'source' must be exactly one def, async def or assignment to one name")
    return {"class": _require_dotted("class", spec["class"]), "source": source,
            "on_conflict": on_conflict}


def _parse_replace_spec(spec: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    old = _require_code("old", spec["old"])
    new = _require_code("new", spec["new"])
    if _dump_all(_parse_snippet("old", old)) == _dump_all(_parse_snippet("new", new)):
        raise EditSpecError("'old' and 'new' are the same code")
    return {"scope": _require_dotted("scope", spec.get("scope"), empty_ok=True), "old": old, "new": new}


def _parse_element_spec(spec: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
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


def _parse_snippet(key: str, source: str) -> t.List[ast.stmt]:
    """Parse user code given in YAML (indented or not); a syntax error is a spec error."""
    try:
        body = ast.parse(textwrap.dedent(source)).body
    except SyntaxError as exc:
        raise EditSpecError(f"'{key}' does not parse: {exc.msg} at line {exc.lineno} of {key}") from None
    if not body:
        raise EditSpecError(f"'{key}' holds no statement")
    return body


_SPEC_PARSERS: t.Dict[str, t.Callable[[t.Dict[str, t.Any]], t.Dict[str, t.Any]]] = {
    "import": _parse_import_spec,
    "base": _parse_base_spec,
    "member": _parse_member_spec,
    "replace": _parse_replace_spec,
    "element": _parse_element_spec,
}


# --------------------------------------------------------------------------- source text

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


# --------------------------------------------------------------------------- scopes

def _dump(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=False)


def _dump_all(nodes: t.Sequence[ast.AST]) -> t.List[str]:
    return [_dump(node) for node in nodes]


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
        defs = _defs_in(node.body)
        found = [d for d in defs if d.name == part]
        if not found:
            raise _Missing(f"'{part}' not found in {_describe(node)}; defined there: "
                           f"{_name_list([d.name for d in defs])}")
        if len(found) > 1:
            raise AmbiguousTargetError(f"'{part}' is defined {len(found)} times in {_describe(node)}, "
                                       f"at lines {_line_list(found)}")
        node = found[0]
    return node


def _find_class(doc: _Doc, dotted: str) -> ast.ClassDef:
    outer, name = dotted.rpartition(".")[::2]
    scope = _find_scope(doc, outer)
    defs = _defs_in(scope.body)
    classes = [d for d in defs if isinstance(d, ast.ClassDef)]
    found = [c for c in classes if c.name == name]
    if not found:
        raise _Missing(f"class '{name}' not found in {_describe(scope)}; classes defined there: "
                       f"{_name_list([c.name for c in classes])}")
    if len(found) > 1:
        raise AmbiguousTargetError(f"class '{name}' is defined {len(found)} times in "
                                   f"{_describe(scope)}, at lines {_line_list(found)}")
    return found[0]


def _line_list(nodes: t.Sequence[ast.AST]) -> str:
    return ", ".join(str(node.lineno) for node in nodes)


def _scope_label(dotted: str) -> str:
    return dotted or "module level"


def _first_line(source: str) -> str:
    return textwrap.dedent(source).strip().splitlines()[0]


# --------------------------------------------------------------------------- import

def _alias_text(alias: t.Mapping[str, t.Any]) -> str:
    return alias["name"] if alias["asname"] is None else f"{alias['name']} as {alias['asname']}"


def _plan_import(doc: _Doc, spec: t.Mapping[str, t.Any]) -> _Outcome:
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


# --------------------------------------------------------------------------- base

def _plan_base(doc: _Doc, spec: t.Mapping[str, t.Any]) -> _Outcome:
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


# --------------------------------------------------------------------------- member

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


def _plan_member(doc: _Doc, spec: t.Mapping[str, t.Any]) -> _Outcome:
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


# --------------------------------------------------------------------------- replace

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


def _plan_replace(doc: _Doc, spec: t.Mapping[str, t.Any]) -> _Outcome:
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


def _span(scope: ast.AST) -> str:
    if isinstance(scope, ast.Module):
        return ""
    return f" (lines {scope.lineno}-{scope.end_lineno})"


# --------------------------------------------------------------------------- element

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


def _plan_element(doc: _Doc, spec: t.Mapping[str, t.Any]) -> _Outcome:
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


# --------------------------------------------------------------------------- applying

_PLANNERS: t.Dict[str, t.Callable[[_Doc, t.Mapping[str, t.Any]], _Outcome]] = {
    "import": _plan_import,
    "base": _plan_base,
    "member": _plan_member,
    "replace": _plan_replace,
    "element": _plan_element,
}


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
            outcomes.append(_PLANNERS[edit.kind](doc, edit.spec))
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
        again = _PLANNERS[edit.kind](doc, edit.spec)
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
        outcome = _PLANNERS[edit.kind](doc, edit.spec)
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
        outcome = _PLANNERS[edit.kind](new_doc, edit.spec)
    except (PyEditError, _Missing) as exc:
        reason = getattr(exc, "message", str(exc))
        raise VerificationError(f"after editing, the change cannot be found again ({reason}); "
                                "nothing was changed", **context) from None
    if not isinstance(outcome, _Already):
        raise VerificationError("after editing, re-parsing does not show the intended change "
                                f"({outcome.detail!r} would still be needed); nothing was changed",
                                **context)
    return new_doc


# --------------------------------------------------------------------------- bytes and diffs

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
