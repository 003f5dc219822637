"""No file of plugins/module_utils or plugins/filter over 400 code lines (issue 37): a file that
grows past it is split by responsibility, not trimmed. Counted by tests/support/code_lines.py."""

from __future__ import annotations

import pytest

from tests.support.code_lines import code_lines
from tests.unit.conftest import REPO

LIMIT = 400
FILES = sorted(p for d in ("plugins/module_utils", "plugins/filter") for p in (REPO / d).rglob("*.py"))


@pytest.mark.parametrize("source, expected", [
    ("", 0),
    ('"""Module docstring,\n\nover three lines."""\n', 0),
    ("# a comment\n\nx = 1  # trailing\n", 1),
    ('def f():\n    """Why."""\n    return (1,\n            2)\n', 3),
    ('TEXT = """not a docstring,\na value"""\n', 2),
    ("class C:\n    'doc'\n\n    y = 2\n", 2),
])
def test_code_lines(source: str, expected: int) -> None:
    assert code_lines(source) == expected


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_file_over_the_limit(path) -> None:
    assert code_lines(path.read_text(encoding="utf-8")) <= LIMIT, f"{path}: split it by responsibility"
