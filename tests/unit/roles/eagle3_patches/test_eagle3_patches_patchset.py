"""The patch set (roles/eagle3_patches/vars/patchset.yml) against the real vLLM sources.

Runs the python_patch engine directly on files read from the real wheels (no venv, no Ansible):
0.16.x/0.17.x get every edit, and on 0.18.0 - the release that shipped the change upstream -
every edit is already there, which shows the patch set is upstream's own change.
"""

from __future__ import annotations

import ast
import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _pyedit as pe

from tests.support import eagle3_checks as ec

OTHER_LIST = {  # the allow-list name each release does NOT have -> that edit is skipped
    "0.16.0": "allowlist-aux-hidden-states-supported",
    "0.17.0": "allowlist-eagle3-target-supported",
    "0.17.1": "allowlist-eagle3-target-supported",
}


def _apply(version: str, model_types: t.Sequence[str] = ec.DEFAULT_TYPES
           ) -> t.Tuple[t.Dict[str, bytes], t.Dict[str, str]]:
    out, statuses = {}, {}
    for entry in ec.patchset(model_types):
        path = "vllm/" + entry["file"]
        text, encoding = pe.decode_source(ec.wheel_source(version, entry["file"]), path=path)
        result = pe.apply_edits(text, pe.parse_edits(entry["edits"], path=path), path=path)
        out[entry["file"]] = pe.encode_source(result.source, encoding)
        statuses.update({r.id: r.status for r in result.results})
    return out, statuses


@pytest.mark.parametrize("version", ["0.16.0", "0.17.0", "0.17.1"])
def test_patchset_applies_to_016_017(version: str) -> None:
    patched, statuses = _apply(version)
    expected = {i: "applied" for i in statuses}
    expected[OTHER_LIST[version]] = "skipped"
    assert statuses == expected
    ec.assert_patched(patched)
    for rel in ec.PATCHED_FILES:  # the pristine release has none of it
        assert patched[rel] != ec.wheel_source(version, rel)


@pytest.mark.parametrize("version", ["0.16.0", "0.17.0"])
def test_patchset_second_pass_changes_nothing(version: str) -> None:
    patched = _apply(version)[0]
    for entry in ec.patchset():
        path = "vllm/" + entry["file"]
        text = pe.decode_source(patched[entry["file"]], path=path)[0]
        result = pe.apply_edits(text, pe.parse_edits(entry["edits"], path=path), path=path)
        assert result.source == text
        assert {r.status for r in result.results} <= {"already", "skipped"}


def test_patchset_is_what_upstream_018_shipped() -> None:
    """Every edit is AST-equal to vLLM 0.18.0's own code: nothing would be applied there."""
    statuses = _apply("0.18.0")[1]
    assert statuses.pop("allowlist-eagle3-target-supported") == "skipped"
    assert set(statuses.values()) == {"already"}, statuses


def test_patched_016_sources_match_the_reference_shape() -> None:
    """Assertions fail on pristine sources (the checks themselves can fail)."""
    pristine = {rel: ec.wheel_source("0.16.0", rel) for rel in ec.PATCHED_FILES}
    with pytest.raises(AssertionError):
        ec.assert_patched(pristine)


def test_allow_list_values_come_from_the_caller() -> None:
    patched = _apply("0.17.0", ["kimi_k2"])[0]
    name, values = ec.allow_list(ast.parse(patched[ec.SPECULATIVE]))
    assert name == "aux_hidden_states_supported"
    assert values[-1] == "kimi_k2" and "deepseek_v3" not in values
