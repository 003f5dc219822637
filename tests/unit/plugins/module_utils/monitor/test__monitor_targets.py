"""Prometheus' scrape targets from the inventory (module_utils/_monitor/_targets.py), as tables."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._monitor import _targets as mt

NODE = {"name": "gpu01", "address": "10.0.0.11", "vllm_host": "0.0.0.0", "vllm_port": 8000}
ROUTER = {"name": "router01", "address": "10.0.0.2", "prometheus_host": "0.0.0.0", "prometheus_port": 29000}
SETTINGS = {"monitoring_host": "mon01", "gpu_exporter": "textfile"}


def _jobs(result: dict) -> dict[str, list[tuple[str, str]]]:
    """job -> [(instance, target)]."""
    return {c["job_name"]: [(s["labels"]["instance"], s["targets"][0]) for s in c["static_configs"]]
            for c in result["scrape_configs"]}


@pytest.mark.parametrize(("nodes", "routers", "settings", "expected"), [
    # The example fleet: every service on all interfaces, scraped at the inventory's addresses.
    ([NODE, dict(NODE, name="gpu02", address="10.0.0.12")], [ROUTER], SETTINGS,
     {"vllm": [("gpu01", "10.0.0.11:8000"), ("gpu02", "10.0.0.12:8000")],
      "vllm-router": [("router01", "10.0.0.2:29000")],
      "node": [("gpu01", "10.0.0.11:9100"), ("gpu02", "10.0.0.12:9100"), ("router01", "10.0.0.2:9100")],
      "prometheus": [("mon01", "127.0.0.1:9090")]}),
    # dcgm-exporter where NVIDIA's repository is configured: its own job on every GPU node.
    ([NODE], [], dict(SETTINGS, gpu_exporter="dcgm", dcgm_port=9401),
     {"vllm": [("gpu01", "10.0.0.11:8000")], "node": [("gpu01", "10.0.0.11:9100")],
      "dcgm": [("gpu01", "10.0.0.11:9401")], "prometheus": [("mon01", "127.0.0.1:9090")]}),
    # Bound to one address: scraped there, not at the inventory's address; another vLLM port.
    ([dict(NODE, vllm_host="192.168.5.11", vllm_port=8001)], [dict(ROUTER, prometheus_host="192.168.5.2")], SETTINGS,
     {"vllm": [("gpu01", "192.168.5.11:8001")], "vllm-router": [("router01", "192.168.5.2:29000")],
      "node": [("gpu01", "10.0.0.11:9100"), ("router01", "10.0.0.2:9100")], "prometheus": [("mon01", "127.0.0.1:9090")]}),
    # Loopback on the monitoring host itself: scraped on loopback. A router that is also a GPU node: one node target.
    ([dict(NODE, name="mon01", vllm_host="127.0.0.1")], [dict(ROUTER, name="mon01", prometheus_host="localhost")], SETTINGS,
     {"vllm": [("mon01", "127.0.0.1:8000")], "vllm-router": [("mon01", "127.0.0.1:29000")],
      "node": [("mon01", "10.0.0.11:9100")], "prometheus": [("mon01", "127.0.0.1:9090")]}),
    # IPv6 addresses are bracketed; a node without an address is scraped at its name.
    ([{"name": "gpu03", "address": "fd00::13", "vllm_host": "::", "vllm_port": 8000},
      {"name": "gpu04.example.internal", "vllm_host": "0.0.0.0"}], [], SETTINGS,
     {"vllm": [("gpu03", "[fd00::13]:8000"), ("gpu04.example.internal", "gpu04.example.internal:8000")],
      "node": [("gpu03", "[fd00::13]:9100"), ("gpu04.example.internal", "gpu04.example.internal:9100")],
      "prometheus": [("mon01", "127.0.0.1:9090")]}),
    # No fleet at all: Prometheus scrapes itself.
    ([], [], SETTINGS, {"prometheus": [("mon01", "127.0.0.1:9090")]}),
])
def test_targets(nodes: list, routers: list, settings: dict, expected: dict) -> None:
    result = mt.scrape_configs(nodes, routers, settings)
    assert result["problems"] == []
    assert _jobs(result) == expected


@pytest.mark.parametrize(("node", "router", "settings", "expected"), [
    # Exporters on the fleet address: node_exporter and dcgm-exporter scraped there, not at the inventory's name.
    (dict(NODE, address="gpu01.example", exporter_host="10.0.0.11"), dict(ROUTER, exporter_host="10.0.0.2"),
     dict(SETTINGS, gpu_exporter="dcgm"),
     {"node": [("gpu01", "10.0.0.11:9100"), ("router01", "10.0.0.2:9100")], "dcgm": [("gpu01", "10.0.0.11:9400")]}),
    # Every address, written on purpose: scraped at the inventory's address.
    (dict(NODE, exporter_host="0.0.0.0"), dict(ROUTER, exporter_host="::"), SETTINGS,
     {"node": [("gpu01", "10.0.0.11:9100"), ("router01", "10.0.0.2:9100")]}),
    # Loopback on the monitoring host itself.
    (dict(NODE, name="mon01", exporter_host="127.0.0.1"), dict(ROUTER, exporter_host="10.0.0.2"), SETTINGS,
     {"node": [("mon01", "127.0.0.1:9100"), ("router01", "10.0.0.2:9100")]}),
])
def test_exporters_scraped_where_they_listen(node: dict, router: dict, settings: dict, expected: dict) -> None:
    result = mt.scrape_configs([node], [router], settings)
    assert result["problems"] == []
    jobs = _jobs(result)
    assert {job: jobs[job] for job in expected} == expected
    assert "dcgm" in jobs or "dcgm" not in expected


def test_exporters_on_loopback_of_another_host_are_a_problem() -> None:
    result = mt.scrape_configs([dict(NODE, exporter_host="127.0.0.1")], [], SETTINGS)
    assert result["problems"] == ["gpu01: its exporters listen on 127.0.0.1 (monitoring_listen_address), which Prometheus on mon01 "
                                  "cannot reach; set monitoring_listen_address to an address of the node (the routers need that too)"]
    assert "node" not in _jobs(result)


@pytest.mark.parametrize(("prometheus_host", "target"), [
    ("", "127.0.0.1:9090"), ("0.0.0.0", "127.0.0.1:9090"), ("127.0.0.1", "127.0.0.1:9090"), ("10.0.0.5", "10.0.0.5:9090"),
])
def test_prometheus_scrapes_itself_where_it_listens(prometheus_host: str, target: str) -> None:
    result = mt.scrape_configs([], [], dict(SETTINGS, prometheus_host=prometheus_host))
    assert _jobs(result) == {"prometheus": [("mon01", target)]}


def test_job_names_are_the_rules_matchers() -> None:
    """The rules match job="vllm" and job="vllm-router" (roles/monitoring/files/rules)."""
    jobs = [c["job_name"] for c in mt.scrape_configs([NODE], [ROUTER], SETTINGS)["scrape_configs"]]
    assert jobs[:2] == ["vllm", "vllm-router"]


@pytest.mark.parametrize(("nodes", "routers", "problem"), [
    ([dict(NODE, vllm_host="127.0.0.1")], [],
     "gpu01: vLLM listens on 127.0.0.1 (vllm_server_host), which Prometheus on mon01 cannot reach; set vllm_server_host to 0.0.0.0"),
    ([], [dict(ROUTER, prometheus_host="127.0.0.1")],
     "router01: vllm-router's metrics listen on 127.0.0.1 (vllm_router_prometheus_host), which Prometheus on mon01 cannot reach"),
    ([dict(NODE, vllm_host="[::1]")], [], "gpu01: vLLM listens on [::1] (vllm_server_host)"),
])
def test_unreachable_targets_are_problems_not_targets(nodes: list, routers: list, problem: str) -> None:
    result = mt.scrape_configs(nodes, routers, SETTINGS)
    assert len(result["problems"]) == 1 and result["problems"][0].startswith(problem), result["problems"]
    assert {c["job_name"] for c in result["scrape_configs"]} & {"vllm", "vllm-router"} == set()


def test_per_job_scrape_interval() -> None:
    result = mt.scrape_configs([NODE], [], dict(SETTINGS, scrape_interval={"vllm": "5s"}))
    intervals = {c["job_name"]: c.get("scrape_interval") for c in result["scrape_configs"]}
    assert intervals == {"vllm": "5s", "node": None, "prometheus": None}


@pytest.mark.parametrize(("nodes", "settings", "message"), [
    ([dict(NODE, vllm_port="eighty")], SETTINGS, "gpu01: vllm_server_port: 'eighty' is not a port number"),
    ([dict(NODE, vllm_port=70000)], SETTINGS, "gpu01: vllm_server_port: 70000 is not a port number (1-65535)"),
    ([{"address": "10.0.0.1"}], SETTINGS, "a GPU node without a name"),
    ([NODE], dict(SETTINGS, gpu_exporter="nvml"), "gpu_exporter: 'nvml' is neither of dcgm, textfile"),
])
def test_input_errors(nodes: list, settings: dict, message: str) -> None:
    with pytest.raises(mt.TargetsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mt.scrape_configs(nodes, [], settings)


WORKERS = [{"name": "gpu01", "worker_url": "http://10.0.0.11:8000"}, {"name": "gpu02", "worker_url": "http://10.0.0.12:8000/"}]


@pytest.mark.parametrize(("router", "expected"), [
    # The router's own group: every node under its name; a router on all interfaces is read on loopback.
    ({"name": "r1", "api_host": "0.0.0.0", "api_port": 30000},
     {"router": "http://127.0.0.1:30000", "workers": {"http://10.0.0.11:8000": "gpu01", "http://10.0.0.12:8000": "gpu02"}}),
    # Bound to one address: read there. An explicit list: only those; one that is no node's goes by its host.
    ({"name": "r1", "api_host": "10.0.0.2", "api_port": "30001", "worker_urls": ["http://10.0.0.12:8000", "http://[fd00::9]:8000/"]},
     {"router": "http://10.0.0.2:30001", "workers": {"http://10.0.0.12:8000": "gpu02", "http://[fd00::9]:8000": "fd00::9"}}),
    ({"name": "r1", "api_host": "::1", "api_port": 30000, "worker_urls": []},
     {"router": "http://[::1]:30000", "workers": {"http://10.0.0.11:8000": "gpu01", "http://10.0.0.12:8000": "gpu02"}}),
])
def test_router_workers(router: dict, expected: dict) -> None:
    assert mt.router_workers(router, WORKERS) == expected


@pytest.mark.parametrize(("router", "message"), [
    ({"api_port": 30000}, "a router without a name"),
    ({"name": "r1", "api_port": 0}, "r1: vllm_router_port: 0 is not a port number"),
    ({"name": "r1", "worker_urls": "http://a:1"}, "r1: vllm_router_worker_urls must be a list"),
    ({"name": "r1", "worker_urls": ["gpu01:8000"]}, "r1: worker 'gpu01:8000' is not an http(s) URL"),
])
def test_router_workers_refuses(router: dict, message: str) -> None:
    with pytest.raises(mt.TargetsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mt.router_workers(router, WORKERS)
