"""The vllm_weights filters: registered names, the role's inputs as Ansible passes them."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.vllm_weights import FilterModule

FILTERS = FilterModule().filters()
HOSTS = ["stage", "n1", "n2", "n3"]


def test_round_from_per_host_flags() -> None:
    plan = FILTERS["vllm_weights_round"]
    assert plan(HOSTS, [False, False, False, False], "stage") == {"stage": ""}
    assert plan(HOSTS, [True, True, False, False], "stage") == {"n2": "stage", "n3": "n1"}
    assert plan(HOSTS, [True, False, False, False], "stage", "star", "1") == {"n1": "stage", "n2": "stage", "n3": "stage"}
    with pytest.raises(AnsibleFilterError, match="4 hosts but 3 held flags"):
        plan(HOSTS, [True, False, False], "stage")
    with pytest.raises(AnsibleFilterError, match="fan-out mode 'ring' is not tree or star"):
        plan(HOSTS, [True] * 4, "stage", "ring")


def test_round_count_has_a_spare_round() -> None:
    assert FILTERS["vllm_weights_round_count"](17) == 7
    assert FILTERS["vllm_weights_round_count"]("4", "1", "tree") == 4


def test_checkpoints_fail_with_every_problem() -> None:
    normalize = FILTERS["vllm_weights_checkpoints"]
    assert normalize([{"name": "K", "repo": "o/K", "revision": "main"}])[0]["source"] == "hub"
    with pytest.raises(AnsibleFilterError) as err:
        normalize([{"name": "K", "repo": "K"}, {"name": "K", "repo": "o/K", "revision": "x", "source": "mirror"}])
    text = str(err.value)
    assert "repo 'K' must be the Hub repository" in text and "revision is empty" in text
    assert "needs mirror_dir" in text and "the name 'K' is used twice" in text
