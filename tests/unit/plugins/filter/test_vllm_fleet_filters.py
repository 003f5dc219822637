"""The serve plays' filters: registered names, argument order, errors as AnsibleFilterError."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.vllm_fleet import FilterModule

FILTERS = FilterModule().filters()


def test_registered_names() -> None:
    assert set(FILTERS) == {"vllm_node_plan", "vllm_node_serving", "vllm_last_rollout", "vllm_node_report", "vllm_node_recovery", "vllm_router_settings",
                            "vllm_router_view", "vllm_router_removal_problems", "vllm_router_reconcile",
                            "vllm_drain_settings", "vllm_router_restart_need", "vllm_router_restart_plan",
                            "vllm_router_stale_urls", "vllm_batch_size", "vllm_router_back_url", "vllm_run_outcome"}


def test_router_restart_filters_chain_from_what_ansible_registers() -> None:
    """show.stdout | need(files.stdout) | plan(loop results, alone_ok from a string, name)."""
    show = "ActiveState=active\nLoadState=loaded\nNeedDaemonReload=no\nExecMainStartTimestamp=Wed 2026-12-02 23:47:21.219560 UTC\n"
    need = FILTERS["vllm_router_restart_need"](show, "1796255300.5 /etc/systemd/system/vllm-router.service\n", None)
    assert FILTERS["vllm_router_restart_plan"](need, None, False, "vllm-router")["action"] == "held"
    assert FILTERS["vllm_router_restart_plan"](need, [], True, "vllm-router")["action"] == "restart"
    # -e vllm_router_restart_alone=false arrives as a string.
    assert FILTERS["vllm_router_restart_plan"](need, [], "false", "vllm-router")["action"] == "held"
    with pytest.raises(AnsibleFilterError, match="vllm_router_restart_alone must be a boolean, found 'maybe'"):
        FILTERS["vllm_router_restart_plan"](need, [], "maybe", "vllm-router")


def test_plan_errors_name_the_filter() -> None:
    with pytest.raises(AnsibleFilterError, match="^vllm_node_plan: nothing to serve"):
        FILTERS["vllm_node_plan"]({"observed": {"link": {"path": "/opt/ml-env", "kind": "absent"}}, "start": True})


def test_router_settings_take_hostvars_by_name() -> None:
    hostvars = {"r1": {"vllm_router_request_timeout_secs": 60, "vllm_router_port": 30001}, "gpu01": {}}
    fallback = {"vllm_router_host": "127.0.0.1", "vllm_router_port": 30000, "vllm_router_request_timeout_secs": 1800,
                "vllm_router_drain_timeout": 0, "vllm_router_drain_poll": 1, "vllm_router_drain_settle": 2,
                "vllm_router_drain_stale_after": 120, "vllm_router_add_timeout": 120,
                "vllm_router_min_healthy_workers": 1, "vllm_router_service_name": "vllm-router"}
    (settings,) = FILTERS["vllm_router_settings"](["r1"], hostvars, fallback)
    assert settings["drain_timeout"] == 90 and settings["url"] == "http://127.0.0.1:30001"
    with pytest.raises(AnsibleFilterError, match="^vllm_router_settings: vllm_router_drain_timeout of router r1"):
        FILTERS["vllm_router_settings"](["r1"], {"r1": {"vllm_router_drain_timeout": 5}}, fallback)


def test_reconcile_takes_the_floor_slack_as_templated() -> None:
    """vllm_router_max_unavailable_workers arrives as a string from its templated default."""
    listed = [{"url": f"http://old{i}:8000", "is_healthy": True} for i in range(4)]
    got = FILTERS["vllm_router_reconcile"](listed, ["http://new:8000"], "1", "2", [])
    assert len(got["remove"]) == 2 and got["floor"] == 2
    with pytest.raises(AnsibleFilterError, match="vllm_router_max_unavailable_workers must be a whole number of at least 0, found '-1'"):
        FILTERS["vllm_router_reconcile"](listed, [], 1, "-1", [])


def test_batch_size_errors_name_the_filter() -> None:
    assert FILTERS["vllm_batch_size"]("50%", "4") == 2
    with pytest.raises(AnsibleFilterError, match="^vllm_batch_size: gpuserve_serial must be"):
        FILTERS["vllm_batch_size"]("half", 4)


def test_outcome_and_back_url_filters_take_what_the_plays_hand_them() -> None:
    """site.yml's last play and serve_node.yml's rescue, as they call them (a none `failed`,
    uri's loop results)."""
    assert FILTERS["vllm_run_outcome"]({"failed": None, "held": "", "untouched": ""}) == "done"
    assert FILTERS["vllm_run_outcome"](None) == "done"
    results = [{"item": "http://127.0.0.1:8010/health", "status": -1}, {"item": "http://127.0.0.1:8000/health", "status": 200}]
    assert FILTERS["vllm_router_back_url"](results, "http://gpu01:8010", "http://127.0.0.1:8010/health", "8000") == "http://gpu01:8000"
    assert FILTERS["vllm_router_back_url"](None, "http://gpu01:8010", "http://127.0.0.1:8010/health") == ""


def test_last_rollout_reads_each_hosts_registered_state_from_hostvars() -> None:
    """A host with no read (it left the run before) is unknown, never taken for one without history."""
    switched = {"link": {"env": "/e/b"}, "switches": [{"from": "/e/a", "to": "/e/b", "at": 5.0, "rollback": False}]}
    hostvars = {"gpu01": {"vllm_server_node_state": switched}, "gpu02": {"other": 1}}
    rollout = FILTERS["vllm_last_rollout"](["gpu01", "gpu02"], hostvars)
    assert (rollout["env"], rollout["read"], rollout["unknown"]) == ("/e/b", ["gpu01"], ["gpu02"])
