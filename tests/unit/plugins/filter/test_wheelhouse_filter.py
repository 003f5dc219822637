"""wheelhouse_push_plan: the engine's plan, and a filter error naming what it needs."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.wheelhouse import FilterModule

PLAN = FilterModule().filters()["wheelhouse_push_plan"]


def test_plan_of_a_first_push() -> None:
    manifest = {"files": {"a-1-py3-none-any.whl": {"sha256": "a" * 64}}}
    control = {"SHA256SUMS": "5" * 64, "gpuserve-wheelhouse.json": "7" * 64}
    assert PLAN(manifest, {}, control) == ["a-1-py3-none-any.whl", "SHA256SUMS", "gpuserve-wheelhouse.json"]


def test_refuses_control_hashes_it_lacks() -> None:
    with pytest.raises(AnsibleFilterError, match="wheelhouse_push_plan: needs a format-1 manifest and the sha256 of SHA256SUMS"):
        PLAN({"files": {}}, {}, {})
