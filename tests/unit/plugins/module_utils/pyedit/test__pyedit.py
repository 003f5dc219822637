"""Tables for the python_patch engine: (source, edits) -> expected source and status."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _pyedit as pe
from ansible_collections.gpuserve.vllm.plugins.module_utils._pyedit._apply import _apply_in_turn
from ansible_collections.gpuserve.vllm.plugins.module_utils._pyedit._source import _parse_doc

from pyedit_helpers import LONG_IMPORT, PATH, apply, base, element, imp, member, replace

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


def test_results_are_deterministic() -> None:
    source, edits = APPLY_CASES[-1].values[:2]
    assert apply(source, edits) == apply(source, edits)
