"""The monitoring filters: registered names, argument order, errors as AnsibleFilterError."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.monitoring import FilterModule

FILTERS = FilterModule().filters()


def test_registered_names() -> None:
    assert set(FILTERS) == {"monitoring_scrape_configs", "monitoring_router_workers", "monitoring_rules", "fleet_status_table",
                            "monitoring_loaded_plans", "monitoring_fleet_addresses", "monitoring_listen"}


def test_fleet_addresses_and_listen_from_what_the_role_passes() -> None:
    hosts = [{"name": "gpu01", "explicit": "", "candidates": [["monitoring_address", ""], ["ansible_host", "10.0.0.11"]],
              "facts_ipv4": ""}]
    assert FILTERS["monitoring_fleet_addresses"](hosts) == {"addresses": {"gpu01": "10.0.0.11"}, "problems": [], "need_facts": []}
    with pytest.raises(AnsibleFilterError, match="monitoring_fleet_addresses: expected a list of hosts"):
        FILTERS["monitoring_fleet_addresses"]("gpu01")
    assert FILTERS["monitoring_listen"]("localhost:9093", "monitoring_alertmanager_listen_address") == "127.0.0.1:9093"
    with pytest.raises(AnsibleFilterError, match="^monitoring_prometheus_listen_address: 'mon01:9090' is not an IP address"):
        FILTERS["monitoring_listen"]("mon01:9090", "monitoring_prometheus_listen_address")


def test_loaded_plans_from_what_the_role_passes() -> None:
    service = {"name": "prometheus", "restart_paths": ["/etc/default/prometheus"], "reload_paths": [], "metric_prefix": "prometheus",
               "metrics_url": "http://127.0.0.1:9090/metrics", "reload_as": "reloaded", "pending_restart": [], "pending_reload": []}
    show = "MainPID=0\nExecMainStartTimestamp=\nLoadState=loaded\nActiveState=inactive\nNeedDaemonReload=no\n"
    plans = FILTERS["monitoring_loaded_plans"]([service], show, "", [{"status": -1, "msg": "refused"}])
    assert [(p["name"], p["action"]) for p in plans] == [("prometheus", "none")]
    with pytest.raises(AnsibleFilterError, match="monitoring_loaded_plans: expected a list of services, each with a name"):
        FILTERS["monitoring_loaded_plans"]([{"restart_paths": []}], show, "", [])


def test_router_workers_from_what_the_role_passes() -> None:
    router = {"name": "r1", "api_host": "0.0.0.0", "api_port": "30000", "worker_urls": []}  # the port arrives as a string
    nodes = [{"name": "gpu01", "worker_url": "http://gpu01:8000"}]
    expected = {"router": "http://127.0.0.1:30000", "workers": {"http://gpu01:8000": "gpu01"}}
    assert FILTERS["monitoring_router_workers"](router, nodes) == expected
    with pytest.raises(AnsibleFilterError, match="monitoring_router_workers: r1: worker 'gpu01' is not an http"):
        FILTERS["monitoring_router_workers"](dict(router, worker_urls=["gpu01"]), nodes)
    with pytest.raises(AnsibleFilterError, match="monitoring_router_workers: expected the router host's settings"):
        FILTERS["monitoring_router_workers"]("r1", nodes)


def test_scrape_configs_from_what_the_role_passes() -> None:
    nodes = [{"name": "gpu01", "address": "gpu01", "vllm_host": "0.0.0.0", "vllm_port": "8000"}]  # ports arrive as strings
    result = FILTERS["monitoring_scrape_configs"](nodes, None, {"monitoring_host": "mon01"})
    assert result["scrape_configs"][0] == {"job_name": "vllm",
                                           "static_configs": [{"targets": ["gpu01:8000"], "labels": {"instance": "gpu01"}}]}


def test_errors_are_filter_errors() -> None:
    with pytest.raises(AnsibleFilterError, match="monitoring_scrape_configs: a GPU node without a name"):
        FILTERS["monitoring_scrape_configs"]([{}], [], {})


def test_fleet_status_table_takes_now_as_ansible_gives_it() -> None:
    result = FILTERS["fleet_status_table"]([{"name": "gpu01", "error": "unreachable"}], "1796300000.25")
    assert result["summary"] == "1 node(s): 0 healthy, 0 not healthy, 1 unknown; 0 with a restart pending"
    with pytest.raises(AnsibleFilterError, match="fleet_status_table: now must be epoch seconds, found 'soon'"):
        FILTERS["fleet_status_table"]([], "soon")


RULES = {"a.rules.yml": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up == 0", "for": "5m"}]}]}}


def test_monitoring_rules_takes_the_role_defaults_as_given() -> None:
    assert FILTERS["monitoring_rules"](RULES, {}, []) == RULES
    assert FILTERS["monitoring_rules"](RULES, None, None) == RULES
    assert FILTERS["monitoring_rules"](RULES, {"A": "1m"}, [])["a.rules.yml"]["groups"][0]["rules"][0]["for"] == "1m"


@pytest.mark.parametrize(("files", "alert_for", "disabled", "says"), [
    (RULES, {"B": "1m"}, [], r"monitoring_rules \(monitoring_alert_for, monitoring_alerts_disabled\): no alert named B"),
    (RULES, ["A"], [], "monitoring_alert_for must be a mapping"),
    (RULES, {}, "A", "monitoring_alerts_disabled a list of alert names"),
    ([RULES], {}, [], "expected the rules files by name"),
])
def test_monitoring_rules_refusals_are_filter_errors(files, alert_for, disabled, says) -> None:
    with pytest.raises(AnsibleFilterError, match=says):
        FILTERS["monitoring_rules"](files, alert_for, disabled)
