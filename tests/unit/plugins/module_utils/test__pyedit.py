"""Tables for the python_patch engine: (source, edits) -> expected source, status or error."""

from __future__ import annotations

import ast
import difflib
import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _pyedit as pe
from ansible_collections.gpuserve.vllm.plugins.module_utils._pyedit import _element, _member
from ansible_collections.gpuserve.vllm.plugins.module_utils._pyedit._apply import _apply_in_turn
from ansible_collections.gpuserve.vllm.plugins.module_utils._pyedit._source import _parse_doc

PATH = "pkg/mod.py"


def apply(source: str, raw_edits: t.Sequence[t.Mapping[str, t.Any]]) -> pe.PatchResult:
    return pe.apply_edits(source, pe.parse_edits(raw_edits, path=PATH), path=PATH)


def imp(module: str, *names: t.Any) -> t.Dict[str, t.Any]:
    return {"import": {"module": module, "names": list(names)}}


def base(cls: str, *names: str) -> t.Dict[str, t.Any]:
    return {"base": {"class": cls, "names": list(names)}}


def member(cls: str, source: str, on_conflict: str = "fail") -> t.Dict[str, t.Any]:
    return {"member": {"class": cls, "source": source, "on_conflict": on_conflict}}


def replace(scope: str, old: str, new: str) -> t.Dict[str, t.Any]:
    return {"replace": {"scope": scope, "old": old, "new": new}}


def element(scope: str, name: str, *values: t.Any) -> t.Dict[str, t.Any]:
    return {"element": {"scope": scope, "name": name, "values": list(values)}}


LONG_IMPORT = "from .interfaces import MixtureOfExperts, SupportsEagle, SupportsLoRA, SupportsPP\n"

APPLY_CASES = [
    # ---- import
    pytest.param(
        "import os\nfrom .interfaces import A, B\n\nx = 1\n",
        [imp(".interfaces", "C")],
        "import os\nfrom .interfaces import A, B, C\n\nx = 1\n",
        id="import-merge-one-line-relative"),
    pytest.param(
        "from vllm.models.interfaces import (\n    A,\n    B,\n)\n",
        [imp("vllm.models.interfaces", "C")],
        "from vllm.models.interfaces import (\n    A,\n    B,\n    C,\n)\n",
        id="import-merge-multi-line-absolute"),
    pytest.param(
        "from m import (\n    A,  # first\n    # group two\n    B,  # second\n)  # end\n",
        [imp("m", "C", "D")],
        "from m import (\n    A,  # first\n    # group two\n    B,  # second\n    C,\n    D,\n)  # end\n",
        id="import-multi-line-keeps-comments"),
    pytest.param(
        "from m import (\n    A,\n    B  # no trailing comma\n)\n",
        [imp("m", "C")],
        "from m import (\n    A,\n    B,  # no trailing comma\n    C\n)\n",
        id="import-multi-line-no-trailing-comma"),
    pytest.param(
        "from m import (A,\n               B)\n",
        [imp("m", "C")],
        "from m import (A,\n               B, C)\n",
        id="import-paren-closing-on-name-line"),
    pytest.param(
        LONG_IMPORT + "\n\nclass A:\n    pass\n",
        [imp(".interfaces", "SupportsEagle3")],
        "from .interfaces import (\n    MixtureOfExperts,\n    SupportsEagle,\n    SupportsLoRA,\n"
        "    SupportsPP,\n    SupportsEagle3,\n)\n\n\nclass A:\n    pass\n",
        id="import-one-line-too-long-becomes-parenthesised"),
    pytest.param(
        LONG_IMPORT.rstrip("\n") + "  # noqa: F401\n",
        [imp(".interfaces", "SupportsEagle3")],
        "from .interfaces import (  # noqa: F401\n    MixtureOfExperts,\n    SupportsEagle,\n"
        "    SupportsLoRA,\n    SupportsPP,\n    SupportsEagle3,\n)\n",
        id="import-wrapped-keeps-trailing-comment"),
    pytest.param(
        '"""Doc."""\nimport os\nfrom a import b\n\nif TYPE_CHECKING:\n    from c import d\n\nx = 1\n',
        [imp("c", "e")],
        '"""Doc."""\nimport os\nfrom a import b\nfrom c import e\n\nif TYPE_CHECKING:\n'
        '    from c import d\n\nx = 1\n',
        id="import-new-statement-after-last-top-level-import"),
    pytest.param(
        "import os\nfrom a import (\n    b,\n)\nx = 1\n",
        [imp("..c", "d")],
        "import os\nfrom a import (\n    b,\n)\nfrom ..c import d\nx = 1\n",
        id="import-new-statement-after-multi-line-import"),
    pytest.param(
        '#!/usr/bin/env python\n"""Doc."""\n\nx = 1\n',
        [imp("m", "A")],
        '#!/usr/bin/env python\n"""Doc."""\nfrom m import A\n\nx = 1\n',
        id="import-new-statement-after-docstring"),
    pytest.param(
        "# -*- coding: utf-8 -*-\n# comment\nx = 1\n",
        [imp("m", "A")],
        "# -*- coding: utf-8 -*-\n# comment\nfrom m import A\nx = 1\n",
        id="import-new-statement-before-first-statement"),
    pytest.param(
        "from m import A\n",
        [imp("m", "A", {"name": "B", "asname": "C"}, "D as E")],
        "from m import A, B as C, D as E\n",
        id="import-aliases"),
    pytest.param(
        "from . import y\n",
        [imp(".", "x")],
        "from . import y, x\n",
        id="import-package-relative"),
    pytest.param(
        "from m import A\nfrom m import B\n",
        [imp("m", "B", "C")],
        "from m import A, C\nfrom m import B\n",
        id="import-names-found-in-any-statement-merge-into-first"),
    pytest.param(
        "from m import *\n",
        [imp("m", "A")],
        "from m import *\nfrom m import A\n",
        id="import-star-is-not-merged-into"),
    pytest.param(
        "from m import A",
        [imp("n", "B")],
        "from m import A\nfrom n import B\n",
        id="import-file-without-final-newline"),
    # ---- base
    pytest.param("class A(B):\n    pass\n", [base("A", "C")], "class A(B, C):\n    pass\n",
                 id="base-one-line"),
    pytest.param("class A:\n    pass\n", [base("A", "C", "nn.Module")],
                 "class A(C, nn.Module):\n    pass\n", id="base-no-parentheses"),
    pytest.param("class A():\n    pass\n", [base("A", "C")], "class A(C):\n    pass\n",
                 id="base-empty-parentheses"),
    pytest.param("class A(B, metaclass=M):\n    pass\n", [base("A", "C")],
                 "class A(B, C, metaclass=M):\n    pass\n", id="base-before-keywords"),
    pytest.param("class A(metaclass=M):\n    pass\n", [base("A", "C")],
                 "class A(C, metaclass=M):\n    pass\n", id="base-only-keywords"),
    pytest.param("class A(B,):\n    pass\n", [base("A", "C")], "class A(B, C,):\n    pass\n",
                 id="base-inline-trailing-comma"),
    pytest.param(
        "class DeepseekV2ForCausalLM(\n    nn.Module, SupportsPP, SupportsLoRA, SupportsEagle\n):\n    x = 1\n",
        [base("DeepseekV2ForCausalLM", "SupportsEagle3")],
        "class DeepseekV2ForCausalLM(\n    nn.Module, SupportsPP, SupportsLoRA, SupportsEagle, SupportsEagle3\n"
        "):\n    x = 1\n",
        id="base-spanning-lines"),
    pytest.param(
        "class DeepseekV2ForCausalLM(\n    nn.Module, SupportsPP, DeepseekV2MixtureOfExperts, "
        "SupportsLoRA, SupportsEagle\n):\n    x = 1\n",
        [base("DeepseekV2ForCausalLM", "SupportsEagle3")],
        "class DeepseekV2ForCausalLM(\n    nn.Module, SupportsPP, DeepseekV2MixtureOfExperts, "
        "SupportsLoRA, SupportsEagle,\n    SupportsEagle3\n):\n    x = 1\n",
        id="base-spanning-lines-too-long-continues-on-new-line"),
    pytest.param("class A(\n    B,\n    C,\n):\n    pass\n", [base("A", "D")],
                 "class A(\n    B,\n    C,\n    D,\n):\n    pass\n", id="base-one-per-line-trailing-comma"),
    pytest.param("class A(\n    B,\n    C  # c\n):\n    pass\n", [base("A", "D")],
                 "class A(\n    B,\n    C,  # c\n    D\n):\n    pass\n", id="base-one-per-line-no-trailing-comma"),
    pytest.param("@dataclass\nclass A(B):\n    x: int\n", [base("A", "C")],
                 "@dataclass\nclass A(B, C):\n    x: int\n", id="base-decorated-class"),
    pytest.param("class Outer:\n    class Inner(B):\n        pass\n", [base("Outer.Inner", "C")],
                 "class Outer:\n    class Inner(B, C):\n        pass\n", id="base-nested-class"),
    pytest.param("if True:\n    class A:\n        pass\n", [base("A", "C")],
                 "if True:\n    class A(C):\n        pass\n", id="base-class-in-if-block"),
    # ---- member
    pytest.param(
        "class A:\n    x = 1\n\n    def f(self):\n        return 1\n\n\ny = 2\n",
        [member("A", "def g(self):\n    return 2\n")],
        "class A:\n    x = 1\n\n    def f(self):\n        return 1\n\n    def g(self):\n        return 2\n\n\ny = 2\n",
        id="member-method-appended"),
    pytest.param("class A:\n    x = 1\n", [member("A", "y: int = 2")], "class A:\n    x = 1\n    y: int = 2\n",
                 id="member-attribute-after-attribute"),
    pytest.param(
        "class A:\n    x = 1\n",
        [member("A", "    @property\n    async def g(self):\n        if self.x:\n            return 2\n")],
        "class A:\n    x = 1\n\n    @property\n    async def g(self):\n        if self.x:\n            return 2\n",
        id="member-decorated-async-indented-source"),
    pytest.param(
        "class A:\n    @staticmethod\n    def f():\n        return 1\n\n    z = 3\n",
        [member("A", "def f(self):\n    return 2", on_conflict="replace")],
        "class A:\n    def f(self):\n        return 2\n\n    z = 3\n",
        id="member-replace-with-decorators"),
    pytest.param(
        "class A:\n    x = 1\n",
        [member("A", 'def f(self):\n    """Doc.\n\n    More.\n    """\n    return 1')],
        'class A:\n    x = 1\n\n    def f(self):\n        """Doc.\n\n    More.\n    """\n        return 1\n',
        id="member-multi-line-string-content-untouched"),
    pytest.param(
        "if True:\n    class A:\n        x = 1\n",
        [member("A", "def f(self):\n    return 1")],
        "if True:\n    class A:\n        x = 1\n\n        def f(self):\n            return 1\n",
        id="member-nested-indent"),
    # ---- replace
    pytest.param("a = 1\nb = 2\nc = 3\n", [replace("", "b = 2", "b = 20\nb += 1")],
                 "a = 1\nb = 20\nb += 1\nc = 3\n", id="replace-module-level"),
    pytest.param(
        "def f(x):\n    if x:\n        for i in x:\n            y = i  # note\n    return x\n",
        [replace("f", "y = i", "y = i * 2")],
        "def f(x):\n    if x:\n        for i in x:\n            y = i * 2\n    return x\n",
        id="replace-in-nested-blocks"),
    pytest.param(
        "def f():\n    try:\n        a = 1\n        # keep? no: inside the run\n        b = 2\n    except E:\n"
        "        pass\n    finally:\n        c = 3\n",
        [replace("f", "a = 1\nb = 2", "ab = 3")],
        "def f():\n    try:\n        ab = 3\n    except E:\n        pass\n    finally:\n        c = 3\n",
        id="replace-statement-run-in-try"),
    pytest.param(
        "def f():\n    def g():\n        return 1\n    return 1\n",
        [replace("f", "return 1", "return 2")],
        "def f():\n    def g():\n        return 1\n    return 2\n",
        id="replace-skips-nested-def"),
    pytest.param(
        "def f():\n    x = foo(\n        a,b\n    )  # formatted oddly\n    return x\n",
        [replace("f", "x = foo(a, b)", "x = bar(a, b)")],
        "def f():\n    x = bar(a, b)\n    return x\n",
        id="replace-ignores-formatting-of-old"),
    pytest.param(
        "def f(x):\n    return x\n",
        [replace("f", "return x", "log(x)\nreturn x")],
        "def f(x):\n    log(x)\n    return x\n",
        id="replace-new-contains-old"),
    pytest.param(
        "def f(x):\n    log(x)\n    return x\n",
        [replace("f", "log(x)\nreturn x", "return x")],
        "def f(x):\n    return x\n",
        id="replace-old-contains-new"),
    pytest.param(
        "class M:\n    def forward(self, h):\n        for layer in self.layers:\n            h = layer(h)\n"
        "        return h\n",
        [replace("M.forward",
                 "for layer in self.layers:\n    h = layer(h)\nreturn h",
                 "aux = []\nfor i, layer in enumerate(self.layers):\n    if i in self.aux_layers:\n"
                 "        aux.append(h)\n    h = layer(h)\nif aux:\n    return h, aux\nreturn h")],
        "class M:\n    def forward(self, h):\n        aux = []\n        for i, layer in enumerate(self.layers):\n"
        "            if i in self.aux_layers:\n                aux.append(h)\n            h = layer(h)\n"
        "        if aux:\n            return h, aux\n        return h\n",
        id="replace-method-body-dotted-scope"),
    pytest.param(
        "def f(x):\n    return x\n",
        [replace("f", "return x", 'msg = f"""value:\n  {x!r}\n"""\nreturn msg')],
        'def f(x):\n    msg = f"""value:\n  {x!r}\n"""\n    return msg\n',
        id="replace-multi-line-f-string-content-untouched"),
    # ---- element
    pytest.param('x = ["a", "b"]\n', [element("", "x", "c")], 'x = ["a", "b", "c"]\n', id="element-list-one-line"),
    pytest.param("x = ['a']\n", [element("", "x", "c", "d")], "x = ['a', 'c', 'd']\n",
                 id="element-single-quotes"),
    pytest.param('x = [\n    "a",\n    "b",\n]\n', [element("", "x", "c")], 'x = [\n    "a",\n    "b",\n    "c",\n]\n',
                 id="element-multi-line-trailing-comma"),
    pytest.param("x = [\n    'a',\n    'b'\n]\n", [element("", "x", "c")], "x = [\n    'a',\n    'b',\n    'c'\n]\n",
                 id="element-multi-line-no-trailing-comma"),
    pytest.param('x = ("a",)\n', [element("", "x", "b")], 'x = ("a", "b",)\n', id="element-tuple"),
    pytest.param('x = "a", "b"\n', [element("", "x", "c")], 'x = "a", "b", "c"\n', id="element-bare-tuple"),
    pytest.param('x = {"a"}\n', [element("", "x", "b")], 'x = {"a", "b"}\n', id="element-set"),
    pytest.param("x = []\n", [element("", "x", "a")], 'x = ["a"]\n', id="element-empty-list"),
    pytest.param("x = ()\n", [element("", "x", "a")], 'x = ("a",)\n', id="element-empty-tuple"),
    pytest.param("x = [1]\n", [element("", "x", True, None, 2.5, 1)], "x = [1, True, None, 2.5]\n",
                 id="element-scalars-true-is-not-1"),
    pytest.param('x: list[str] = ["a"]\n', [element("", "x", "b")], 'x: list[str] = ["a", "b"]\n',
                 id="element-annotated"),
    pytest.param(
        "class SpeculativeConfig:\n    def _verify_args(self):\n        if self.method:\n"
        "            supported = [\n                \"llama\",\n                \"qwen\",\n            ]\n"
        "            check(supported)\n",
        [element("SpeculativeConfig._verify_args", "supported", "kimi_k2", "deepseek_v3")],
        "class SpeculativeConfig:\n    def _verify_args(self):\n        if self.method:\n"
        "            supported = [\n                \"llama\",\n                \"qwen\",\n"
        "                \"kimi_k2\",\n                \"deepseek_v3\",\n            ]\n            check(supported)\n",
        id="element-in-method-nested-block"),
    pytest.param(
        "class A:\n    def __init__(self):\n        self.x = [1]\n",
        [element("A.__init__", "self.x", 2)],
        "class A:\n    def __init__(self):\n        self.x = [1, 2]\n",
        id="element-attribute-target"),
    # ---- non-ASCII before the touched column (ast columns are UTF-8 bytes)
    pytest.param('x = ["é", "ü"]  # ünïcode\n', [element("", "x", "a")], 'x = ["é", "ü", "a"]  # ünïcode\n',
                 id="non-ascii-element"),
    pytest.param("class Ä(Bé):\n    pass\n", [base("Ä", "C")], "class Ä(Bé, C):\n    pass\n", id="non-ascii-base"),
    pytest.param("from m import é\n", [imp("m", "ä")], "from m import é, ä\n", id="non-ascii-import"),
    pytest.param('s = "日本"; t = ["x"]\n', [element("", "t", "y")], 's = "日本"; t = ["x", "y"]\n',
                 id="non-ascii-same-line-statement"),
    # ---- edits that depend on each other (applied one by one, each to the previous result)
    pytest.param(
        "class A:\n    x = 1\n",
        [member("A", "def f(self):\n    return 1", "keep"), replace("A.f", "return 1", "return 2")],
        "class A:\n    x = 1\n\n    def f(self):\n        return 2\n",
        id="in-turn-replace-inside-added-member"),
    pytest.param("from m import A\n", [imp("m", "B"), imp("m", "C")], "from m import A, B, C\n",
                 id="in-turn-two-imports-into-one-statement"),
    pytest.param("x = [\n    1,\n]\n", [element("", "x", 2), element("", "x", 3)], "x = [\n    1,\n    2,\n    3,\n]\n",
                 id="in-turn-two-elements-into-one-list"),
    # ---- several kinds in one set, applied in order
    pytest.param(
        "from .interfaces import A\n\n\nclass C(A):\n    pass\n",
        [imp(".interfaces", "B"), base("C", "B"), member("C", "def f(self):\n    return 1")],
        "from .interfaces import A, B\n\n\nclass C(A, B):\n    pass\n\n    def f(self):\n        return 1\n",
        id="several-kinds"),
]


@pytest.mark.parametrize("source, edits, expected", APPLY_CASES)
def test_apply(source: str, edits: t.List[t.Dict[str, t.Any]], expected: str) -> None:
    result = apply(source, edits)
    assert result.source == expected
    assert result.changed
    assert {r.status for r in result.results} == {pe.STATUS_APPLIED}
    assert [r.id for r in result.results] == [f"edits[{i}]" for i in range(len(edits))]


@pytest.mark.parametrize("source, edits, expected", APPLY_CASES)
def test_all_at_once_equals_one_by_one(source: str, edits: t.List[t.Dict[str, t.Any]], expected: str) -> None:
    """apply_edits splices independent edits in one go; the text must be what edit-by-edit gives."""
    doc, results = _apply_in_turn(_parse_doc(source), pe.parse_edits(edits), PATH)
    assert doc.text == expected
    assert tuple(results) == apply(source, edits).results


@pytest.mark.parametrize("source, edits, expected", APPLY_CASES)
def test_reapply_changes_nothing(source: str, edits: t.List[t.Dict[str, t.Any]], expected: str) -> None:
    again = apply(apply(source, edits).source, edits)
    assert again.source == expected
    assert not again.changed
    assert {r.status for r in again.results} == {pe.STATUS_ALREADY}


@pytest.mark.parametrize("source, edits", [
    pytest.param("from m import A, B\n", [imp("m", "B")], id="import"),
    pytest.param("class A(nn.Module, B):\n    pass\n", [base("A", "nn.Module")], id="base-dotted"),
    pytest.param("class A:\n    def f(self):\n        return 1  # c\n", [member("A", "def f(self): return 1")],
                 id="member-equal-ignoring-formatting"),
    pytest.param("class A:\n    def f(self):\n        return 1\n", [member("A", "def f(self): return 2", "keep")],
                 id="member-keep-differs"),
    pytest.param("def f():\n    y = 2\n", [replace("f", "y = 1", "y = 2")], id="replace-new-there"),
    pytest.param("x = ['a', 'b']\n", [element("", "x", "b")], id="element"),
])
def test_already(source: str, edits: t.List[t.Dict[str, t.Any]]) -> None:
    result = apply(source, edits)
    assert result.source == source
    assert [r.status for r in result.results] == [pe.STATUS_ALREADY]


def test_keep_says_it_differs() -> None:
    source = "class A:\n    def f(self):\n        return 1\n"
    result = apply(source, [member("A", "def f(self): return 2", "keep")])
    assert "kept existing definition of f" in result.results[0].detail
    assert "differs" in result.results[0].detail


SKIP_CASES = [
    pytest.param("class A:\n    pass\n", base("B", "C"), "class 'B' not found", id="base-class"),
    pytest.param("class A:\n    pass\n", member("B", "x = 1"), "class 'B' not found", id="member-class"),
    pytest.param("def f():\n    pass\n", replace("g", "pass", "x = 1"), "'g' not found", id="replace-scope"),
    pytest.param("def f():\n    pass\n", replace("f", "y = 1", "y = 2"), "no statement run in f", id="replace-old"),
    pytest.param("class S:\n    def v(self):\n        pass\n", element("S.v", "allowed", "kimi_k2"),
                 "no assignment to allowed in S.v", id="element-name"),
    pytest.param("class S:\n    pass\n", element("S.v", "allowed", "kimi_k2"), "'v' not found in class 'S'",
                 id="element-scope"),
]


@pytest.mark.parametrize("source, edit, detail", SKIP_CASES)
def test_when_missing_skip(source: str, edit: t.Dict[str, t.Any], detail: str) -> None:
    result = apply(source, [dict(edit, when_missing="skip")])
    assert result.source == source
    assert not result.changed
    assert result.results[0].status == pe.STATUS_SKIPPED
    assert detail in result.results[0].detail


@pytest.mark.parametrize("source, edit, detail", SKIP_CASES)
def test_when_missing_fail(source: str, edit: t.Dict[str, t.Any], detail: str) -> None:
    with pytest.raises(pe.TargetNotFoundError, match="edit 'edits\\[0\\]'") as info:
        apply(source, [edit])
    assert detail in str(info.value)
    assert str(info.value).startswith(f"{PATH}: ")


ERROR_CASES = [
    pytest.param("class A:\n    pass\nclass B:\n    pass\n", base("Nope", "C"), pe.TargetNotFoundError,
                 "class 'Nope' not found in module level; classes defined there: A, B", id="class-missing-lists-classes"),
    pytest.param("class A:\n    def __init__(self):\n        pass\n    def run(self):\n        pass\n",
                 replace("A.forward", "pass", "x = 1"), pe.TargetNotFoundError,
                 "'forward' not found in class 'A'; defined there: __init__, run", id="scope-missing-lists-functions"),
    pytest.param("def f():\n    x = 1\n", replace("f", "x = 2", "x = 3"), pe.TargetNotFoundError,
                 "no statement run in f (lines 1-2) matches 'old' (first line: 'x = 2')", id="replace-zero-matches"),
    pytest.param("def f(a):\n    x = 1\n    if a:\n        x = 1\n", replace("f", "x = 1", "x = 3"),
                 pe.AmbiguousTargetError, "'old' matches 2 statement runs in f, at lines 2, 4", id="replace-two-matches"),
    pytest.param("def f():\n    x = 1\n    x = 3\n", replace("f", "x = 1", "x = 3"), pe.AmbiguousTargetError,
                 "both 'old' (line 2) and 'new' (line 3) are in f", id="replace-old-and-new-present"),
    pytest.param("def f(): x = 1\n", replace("f", "x = 1", "x = 3"), pe.PyEditError,
                 "shares its line with other code before it", id="replace-shared-line-before"),
    pytest.param("x = 1; y = 2\n", replace("", "x = 1", "x = 3"), pe.PyEditError,
                 "shares its line with other code after it", id="replace-shared-line-after"),
    pytest.param("x = [1]\nx = [2]\n", element("", "x", 3), pe.AmbiguousTargetError,
                 "x is assigned 2 times in module level, at lines 1, 2", id="element-ambiguous"),
    pytest.param("x = list()\n", element("", "x", 3), pe.PyEditError,
                 "is assigned a Call, not a list, tuple or set literal", id="element-not-literal"),
    pytest.param("class A:\n    def f(self):\n        return 1\n", member("A", "def f(self):\n    return 2"),
                 pe.ConflictError, "class A already defines f differently at line 2: 'def f(self):'",
                 id="member-conflict"),
    pytest.param("class A:\n    @property\n    def f(self):\n        return 1\n    @f.setter\n"
                 "    def f(self, v):\n        pass\n",
                 member("A", "def f(self):\n    return 2", "replace"), pe.AmbiguousTargetError,
                 "defines f 2 times, at lines 3, 6", id="member-replace-ambiguous"),
    pytest.param("class A: pass\n", member("A", "x = 1"), pe.PyEditError, "has its body on the line of its header",
                 id="member-one-line-class"),
    pytest.param("class A(\n    B\n): ...\n", member("A", "x = 1"), pe.PyEditError,
                 "class A (line 1) has its body on the line of its header", id="member-body-after-long-header"),
    pytest.param("def f():\n    pass\ndef f():\n    pass\n", replace("f", "pass", "x = 1"), pe.AmbiguousTargetError,
                 "'f' is defined 2 times in module level, at lines 1, 3", id="scope-ambiguous"),
]


@pytest.mark.parametrize("source, edit, error, message", ERROR_CASES)
def test_errors(source: str, edit: t.Dict[str, t.Any], error: t.Type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        apply(source, [dict(edit, id="the-edit")])
    text = str(info.value)
    assert message in text
    assert text.startswith(f"{PATH}: edit 'the-edit' ({next(iter(edit))}): ")


SPEC_ERRORS = [
    pytest.param([{"frobnicate": {}}], "unknown key(s) frobnicate", id="unknown-kind"),
    pytest.param([{**imp("m", "A"), **base("A", "B")}], "exactly one of", id="two-kinds"),
    pytest.param([{"id": "x"}], "found: none", id="no-kind"),
    pytest.param([{"import": {"module": "m"}}], "missing key(s): names", id="missing-key"),
    pytest.param([{"import": {"module": "m", "names": "A"}}], "'names' must be a non-empty list", id="names-not-list"),
    pytest.param([{"import": {"module": "m", "names": ["A"], "extra": 1}}], "unknown key(s): extra", id="extra-key"),
    pytest.param([{"import": {"module": "a..b", "names": ["A"]}}], "'module' must be", id="bad-module"),
    pytest.param([imp("m", "not valid")], "invalid imported name", id="bad-name"),
    pytest.param([base("A", "B(")], "is not a Python expression", id="bad-base"),
    pytest.param([member("A", "x = 1", "merge")], "'on_conflict' must be one of fail, keep, replace", id="on-conflict"),
    pytest.param([dict(imp("m", "A"), when_missing="ignore")], "'when_missing' must be one of fail, skip",
                 id="when-missing"),
    pytest.param([member("A", "x = 1\ny = 2")], "exactly one def", id="member-two-statements"),
    pytest.param([member("A.", "x = 1")], "dotted name", id="bad-class"),
    pytest.param([replace("f", "x = (", "x = 1")], "'old' does not parse", id="old-syntax"),
    pytest.param([replace("f", "x = 1", "  ")], "'new' must be a non-empty string", id="new-empty"),
    pytest.param([replace("f", "x = 1", "x=1  # same")], "'old' and 'new' are the same code", id="old-is-new"),
    pytest.param([element("", "x", {"a": 1})], "may hold strings, numbers", id="element-value-type"),
    pytest.param([element("", "f()", 1)], "'name' must be a variable or attribute", id="element-name"),
    pytest.param([imp("m", "A"), imp("m", "B"), dict(imp("m", "C"), id="edits[1]")], "duplicate edit id",
                 id="duplicate-id"),
    pytest.param(["import m"], "an edit must be a mapping", id="edit-not-mapping"),
    pytest.param([dict(imp("m", "A"), id=3)], "'id' must be a non-empty string", id="id-type"),
]


@pytest.mark.parametrize("raw, message", SPEC_ERRORS)
def test_spec_errors(raw: t.List[t.Any], message: str) -> None:
    with pytest.raises(pe.EditSpecError) as info:
        pe.parse_edits(raw, path=PATH)
    assert message in str(info.value)
    assert str(info.value).startswith(f"{PATH}: edit '")


def test_spec_error_names_the_edit_and_kind() -> None:
    with pytest.raises(pe.EditSpecError) as info:
        pe.parse_edits([imp("m", "A"), {"id": "bases", "base": {"class": "A"}}], path=PATH)
    assert str(info.value) == f"{PATH}: edit 'bases' (base): missing key(s): names"


def test_spec_defaults_filled_in() -> None:
    edit, = pe.parse_edits([{"member": {"class": "A", "source": "x = 1"}}, ][:1])
    assert (edit.id, edit.kind, edit.when_missing, edit.spec["on_conflict"]) == ("edits[0]", "member", "fail", "fail")
    edit, = pe.parse_edits([{"replace": {"old": "a", "new": "b"}}])
    assert edit.spec["scope"] == ""


SED_MANGLED = (
    "import torch\n"
    "from .interfaces import MixtureOfExperts, SupportsEagle,\n"
    "    SupportsEagle3, SupportsLoRA, SupportsPP\n"
    "\n\nclass A:\n    pass\n"
)


def test_syntax_error_before_editing_names_line_and_text() -> None:
    with pytest.raises(pe.SourceSyntaxError) as info:
        apply(SED_MANGLED, [imp(".interfaces", "SupportsEagle3")])
    error = info.value
    assert error.lineno == 2
    assert error.line == "from .interfaces import MixtureOfExperts, SupportsEagle,"
    assert "does not parse before editing" in str(error)
    assert "at line 2: 'from .interfaces import MixtureOfExperts, SupportsEagle,'" in str(error)
    assert "restore the pristine file" in str(error)
    assert str(error).startswith(f"{PATH}: does not parse")


def test_verification_catches_a_splice_that_does_not_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_member, "_reindent", lambda source, indent, unit: [indent + "def broken(:"])
    with pytest.raises(pe.VerificationError, match="the edited source does not parse"):
        apply("class A:\n    x = 1\n", [member("A", "y = 2")])


def test_verification_catches_a_splice_without_the_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_element, "_render_value", lambda value, quote: '"something else"')
    with pytest.raises(pe.VerificationError, match="does not show the intended change") as info:
        apply('x = ["a"]\n', [element("", "x", "b")])
    assert str(info.value).startswith(f"{PATH}: edit 'edits[0]' (element): ")


def test_verification_catches_new_that_does_not_compile_in_place() -> None:
    source = "import os\n\nx = 1\ny = 2\n"
    future = dict(replace("", "y = 2", "from __future__ import annotations"), id="future")
    with pytest.raises(pe.VerificationError, match="does not compile") as info:
        apply(source, [imp("m", "A"), future])
    assert str(info.value).startswith(f"{PATH}: edit 'future' (replace): the edited source does not compile")


def test_source_that_does_not_compile_is_refused_when_changing() -> None:
    source = "x = 1\nfrom __future__ import annotations\n"
    with pytest.raises(pe.SourceSyntaxError, match="does not compile before editing"):
        apply(source, [imp("m", "A")])


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


def test_results_are_deterministic() -> None:
    source, edits = APPLY_CASES[-1].values[:2]
    assert apply(source, edits) == apply(source, edits)
