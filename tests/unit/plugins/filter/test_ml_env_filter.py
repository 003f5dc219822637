"""ml_env_name: the env name the role and check mode use is the engine's, errors are filter errors."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.ml_env import FilterModule


NAME = FilterModule().filters()["ml_env_name"]


@pytest.mark.parametrize("content, expected", [
    # printf '{"content":{"vllm":{"version":"0.17.0"}},"python":"3.11.2"}' | sha256sum | cut -c1-12
    ({"python": "3.11.2", "content": {"vllm": {"version": "0.17.0"}}}, "vllm-0.17.0-09d70d034883"),
    # printf '{"content":{},"python":"3.11.2"}' | sha256sum | cut -c1-12
    ({"python": "3.11.2", "content": {}}, "env-efd6d01a92b9"),
])
def test_name(content: dict, expected: str) -> None:
    assert NAME(content) == expected


def test_refuses_a_list() -> None:
    with pytest.raises(AnsibleFilterError, match="ml_env_name: the env content must be a dict, got list"):
        NAME(["vllm"])
