"""Code lines of Python files: what is left without blank lines, comments and docstrings.

The size limit of plugins/module_utils and plugins/filter (tests/unit/test_code_lines.py) counts
these, so that explaining a decision in a docstring never pushes a file over it. Usage:
    code_lines.py FILE...    one line per file: its code lines, its path
"""

import ast
import io
import sys
import tokenize

_LAYOUT = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
           tokenize.ENDMARKER)


def _docstring_lines(tree):
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_lines(source):
    """How many lines hold a token of code (not a comment, not part of a docstring)."""
    docstrings = _docstring_lines(ast.parse(source))
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _LAYOUT:
            lines.update(n for n in range(token.start[0], token.end[0] + 1) if n not in docstrings)
    return len(lines)


def main(paths):
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            sys.stdout.write(f"{code_lines(handle.read()):5d} {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
