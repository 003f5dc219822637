"""The canary/upgrade filters: registered names, argument order, errors as AnsibleFilterError."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.vllm_canary import FilterModule

FILTERS = FilterModule().filters()
ARGV = ["/opt/ml-env/bin/vllm", "serve", "/m", "--port", "8000"]
NESTED = {"text_config": {"num_hidden_layers": 61, "first_k_dense_replace": 1}}


def test_registered_names() -> None:
    assert set(FILTERS) == {"vllm_canary_plan", "vllm_canary_systemd_run", "vllm_upgrade_plan",
                            "vllm_upgrade_report"}


def test_canary_plan_argument_order() -> None:
    plan = FILTERS["vllm_canary_plan"](ARGV, "/opt/ml-env.d/e", 8001, 3, NESTED, {}, "")
    assert plan["argv"][0] == "/opt/ml-env.d/e/bin/vllm" and plan["layers"] == 3


def test_canary_plan_errors_name_the_filter() -> None:
    with pytest.raises(AnsibleFilterError, match="^vllm_canary_plan: vllm_server_canary_port 8000 is the server's own port"):
        FILTERS["vllm_canary_plan"](ARGV, "/opt/ml-env.d/e", 8000, 3, NESTED)


def test_upgrade_plan_from_the_links_stat_and_report() -> None:
    plan = FILTERS["vllm_upgrade_plan"]({
        "link_stat": {"exists": True, "islnk": True, "lnk_source": "/opt/ml-env.d/a"},
        "link": "/opt/ml-env", "target": "/opt/ml-env.d/b", "batch_size": 1, "hosts_count": 1})
    assert plan["current"] == "/opt/ml-env.d/a" and plan["action"] == "switch" and plan["canary"]
    fact = FILTERS["vllm_upgrade_report"](plan, {"ok": True, "seconds": 2.0}, {"changed": True}, None, {}, None, False)
    assert fact["line"].startswith("env upgrade: env b built; canary passed in 2.0 s; switched a -> b")


def test_upgrade_plan_errors() -> None:
    with pytest.raises(AnsibleFilterError, match="^vllm_upgrade_plan: vllm_server_canary_stop_server"):
        FILTERS["vllm_upgrade_plan"]({"current": "", "target": "/x", "stop_server": "sometimes"})
    with pytest.raises(AnsibleFilterError, match="^vllm_upgrade_plan: "):
        FILTERS["vllm_upgrade_plan"]({"current": "", "unknown_key": 1})
