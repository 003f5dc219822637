"""The canary filters: registered names, argument order, errors as AnsibleFilterError."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.vllm_canary import FilterModule

FILTERS = FilterModule().filters()
ARGV = ["/opt/ml-env/bin/vllm", "serve", "/m", "--port", "8000"]
NESTED = {"text_config": {"num_hidden_layers": 61, "first_k_dense_replace": 1}}


def test_registered_names() -> None:
    assert set(FILTERS) == {"vllm_canary_plan", "vllm_canary_systemd_run"}


def test_canary_plan_argument_order() -> None:
    plan = FILTERS["vllm_canary_plan"](ARGV, "/opt/ml-env.d/e", 8001, 3, NESTED, {}, "")
    assert plan["argv"][0] == "/opt/ml-env.d/e/bin/vllm" and plan["layers"] == 3


def test_canary_plan_errors_name_the_filter() -> None:
    with pytest.raises(AnsibleFilterError, match="^vllm_canary_plan: vllm_server_canary_port 8000 is the server's own port"):
        FILTERS["vllm_canary_plan"](ARGV, "/opt/ml-env.d/e", 8000, 3, NESTED)


def test_canary_beside_a_live_server_asks_only_for_the_free_memory() -> None:
    argv = ARGV + ["--gpu-memory-utilization", "0.95"]
    plan = FILTERS["vllm_canary_plan"](argv, "/opt/ml-env.d/e", 8001, 3, NESTED, {}, "", 0.08)
    assert plan["argv"].count("--gpu-memory-utilization") == 1
    assert plan["argv"][plan["argv"].index("--gpu-memory-utilization") + 1] == "0.08"
    with pytest.raises(AnsibleFilterError, match=r"GPU memory utilization must be in \(0, 1\]"):
        FILTERS["vllm_canary_plan"](argv, "/opt/ml-env.d/e", 8001, 3, NESTED, {}, "", 1.5)
