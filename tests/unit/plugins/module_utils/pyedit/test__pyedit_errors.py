"""Tables for the python_patch engine's refusals: missing targets, bad specs, bad sources,
splices that fail verification."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _pyedit as pe
from ansible_collections.gpuserve.vllm.plugins.module_utils._pyedit import _element, _member

from pyedit_helpers import PATH, apply, base, element, imp, member, replace


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
