"""The edit schema has one owner, the engine's parser: the module's argument spec checks only the
list shape, so its documentation of each edit kind must match the engine's keys and choices."""

from __future__ import annotations

import typing as t

import pytest
import yaml

from ansible_collections.gpuserve.vllm.plugins.module_utils._pyedit import _spec
from ansible_collections.gpuserve.vllm.plugins.module_utils._pyedit import (
    EDIT_KINDS,
    ON_CONFLICT_CHOICES,
    WHEN_MISSING_CHOICES,
    EditSpecError,
    parse_edits,
)
from ansible_collections.gpuserve.vllm.plugins.modules import python_patch

DOC = yaml.safe_load(python_patch.DOCUMENTATION)
EDIT_DOC = DOC["options"]["edits"]["suboptions"]


def test_documented_kinds_are_the_engines() -> None:
    assert sorted(set(EDIT_DOC) - {"id", "when_missing"}) == sorted(EDIT_KINDS)
    assert EDIT_DOC["when_missing"]["choices"] == list(WHEN_MISSING_CHOICES)
    assert DOC["options"]["files"]["suboptions"]["edits"]["suboptions"] == EDIT_DOC


@pytest.mark.parametrize("kind", EDIT_KINDS)
def test_documented_keys_are_the_engines(kind: str) -> None:
    required, optional = _spec.KINDS[kind].KEYS
    keys = EDIT_DOC[kind]["suboptions"]
    assert sorted(k for k, v in keys.items() if v.get("required")) == sorted(required)
    assert sorted(k for k, v in keys.items() if not v.get("required")) == sorted(optional)


def test_documented_on_conflict_choices_are_the_engines() -> None:
    assert EDIT_DOC["member"]["suboptions"]["on_conflict"]["choices"] == list(ON_CONFLICT_CHOICES)


def test_argument_spec_leaves_the_edit_schema_to_the_engine() -> None:
    spec = python_patch.argument_spec()
    assert spec["edits"] == {"type": "list", "elements": "dict"}
    assert spec["files"]["options"]["edits"] == {"type": "list", "elements": "dict", "default": []}


@pytest.mark.parametrize("edit, message", [
    ({"import": {"module": ".x"}}, "missing key(s): names"),
    ({"base": {"class": "A", "names": ["B"], "nmaes": ["C"]}}, "unknown key(s): nmaes"),
    ({"member": {"class": "A", "source": "def f(self): pass", "on_conflict": "merge"}},
     "on_conflict"),
    ({"id": "x", "when_missing": "ignore", "import": {"module": ".x", "names": ["A"]}},
     "when_missing"),
])
def test_engine_refuses_what_the_argument_spec_no_longer_checks(edit: t.Dict[str, t.Any],
                                                                message: str) -> None:
    with pytest.raises(EditSpecError) as err:
        parse_edits([edit], path="/x.py")
    assert message in str(err.value) and "/x.py" in str(err.value)
