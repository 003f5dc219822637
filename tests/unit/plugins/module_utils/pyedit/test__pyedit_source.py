"""The python_patch engine keeps every byte it does not edit: endings, indentation,
encodings; plus diffs and error text."""

from __future__ import annotations

import ast
import difflib
import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _pyedit as pe

from pyedit_helpers import LONG_IMPORT, PATH, apply, base, element, imp, member, replace


def test_untouched_lines_are_byte_identical() -> None:
    source = (
        "# header comment   with  odd spacing\n"
        "import os  ;  import sys\n"
        "from m import (A ,\n      B)   # trailing\n"
        "\n\n\n"
        "x  =  [ 'a' ,'b' ]   # odd\n"
        "class  K ( object ) :\n"
        "    '''doc'''\n"
        "    def  f ( self ) :   # odd\n"
        "        return  [ 1 ,\n"
        "                  2 ]\n"
        "\n"
        "    # comment at the end of the class\n"
        "y = { 'k' : 1 }  # more\n"
    )
    edits = [imp("m", "C"), base("K", "Mixin"), member("K", "def g(self):\n    return 2"),
             replace("K.f", "return [1, 2]", "return [1, 2, 3]"), element("", "x", "c")]
    result = apply(source, edits).source
    old_lines, new_lines = source.splitlines(True), result.splitlines(True)
    touched = set()
    for tag, i1, i2, *_rest in difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False).get_opcodes():
        if tag != "equal":
            touched.update(range(i1 + 1, i2 + 1))
    # lines of the touched statements only: the import, x, the class header, return (2 lines)
    assert touched <= {4, 8, 9, 12, 13}
    assert "    # comment at the end of the class\n" in new_lines
    ast.parse(result)


def test_crlf_line_endings_survive() -> None:
    source = ("from m import A\n\n\nclass K(A):\n    def f(self):\n        x = ['a']\n"
              "        return x\n").replace("\n", "\r\n")
    edits = [imp("m", "B"), base("K", "B"), member("K", "def g(self):\n    return 2"),
             replace("K.f", "return x", "return list(x)"), element("K.f", "x", "b"), imp("n", "C")]
    result = apply(source, edits).source
    expected = ("from m import A, B\nfrom n import C\n\n\nclass K(A, B):\n    def f(self):\n        x = ['a', 'b']\n"
                "        return list(x)\n\n    def g(self):\n        return 2\n").replace("\n", "\r\n")
    assert result == expected
    assert "\n" not in result.replace("\r\n", "")
    assert not apply(result, edits).changed


def test_tab_indentation_survives() -> None:
    source = "class K:\n\tdef f(self, xs):\n\t\tfor x in xs:\n\t\t\tpass\n\t\treturn xs\n"
    edits = [member("K", "def g(self):\n    if self:\n        return 2"),
             replace("K.f", "return xs", "if xs:\n    return xs\nreturn []")]
    result = apply(source, edits).source
    assert result == ("class K:\n\tdef f(self, xs):\n\t\tfor x in xs:\n\t\t\tpass\n\t\tif xs:\n\t\t\treturn xs\n"
                      "\t\treturn []\n\n\tdef g(self):\n\t\tif self:\n\t\t\treturn 2\n")
    assert not apply(result, edits).changed


def test_tab_indentation_for_wrapped_import() -> None:
    source = LONG_IMPORT + "if x:\n\tpass\n"
    result = apply(source, [imp(".interfaces", "SupportsEagle3")]).source
    assert result.startswith("from .interfaces import (\n\tMixtureOfExperts,\n")


def test_latin1_coding_cookie_round_trip() -> None:
    data = "# -*- coding: latin-1 -*-\nNAME = 'été'\nx = ['é']  # café\n".encode("latin-1")
    text, encoding = pe.decode_source(data, path=PATH)
    assert encoding == "iso-8859-1"
    result = apply(text, [element("", "x", "ü")])
    out = pe.encode_source(result.source, encoding)
    assert out == "# -*- coding: latin-1 -*-\nNAME = 'été'\nx = ['é', 'ü']  # café\n".encode("latin-1")


@pytest.mark.parametrize("data, encoding", [
    pytest.param(b"\xef\xbb\xbfx = 1\r\n", "utf-8-sig", id="bom"),
    pytest.param(b"x = '\xc3\xa9'\n", "utf-8", id="utf-8-default"),
    pytest.param(b"#!/bin/python\n# vim: set fileencoding=cp1252 :\nx = '\x80'\n", "cp1252", id="cookie-line-2"),
])
def test_decode_encode_round_trip(data: bytes, encoding: str) -> None:
    text, found = pe.decode_source(data)
    assert found == encoding
    assert not text.startswith("\ufeff")
    assert pe.encode_source(text, found) == data


def test_decode_refuses_unknown_cookie() -> None:
    with pytest.raises(pe.SourceSyntaxError, match="cannot decode"):
        pe.decode_source(b"# coding: no-such-codec\nx = 1\n", path=PATH)


def test_unified_diff() -> None:
    assert pe.unified_diff("a\n", "a\n", PATH) == ""
    diff = pe.unified_diff("a\nb\n", "a\nc", PATH)
    assert diff.startswith(f"--- a/{PATH}\n+++ b/{PATH}\n")
    assert "-b\n" in diff and "+c\n" in diff
    absolute = pe.unified_diff("a\n", "b\n", "/usr/lib/x.py")
    assert absolute.startswith("--- a/usr/lib/x.py\n+++ b/usr/lib/x.py\n")


@pytest.mark.parametrize("kwargs, text", [
    pytest.param({"path": "f.py", "edit_id": "x", "kind": "base"}, "f.py: edit 'x' (base): boom", id="all"),
    pytest.param({"path": "f.py"}, "f.py: boom", id="path-only"),
    pytest.param({}, "boom", id="message-only"),
    pytest.param({"edit_id": "x"}, "edit 'x': boom", id="id-only"),
])
def test_error_text(kwargs: t.Dict[str, str], text: str) -> None:
    assert str(pe.PyEditError("boom", **kwargs)) == text
