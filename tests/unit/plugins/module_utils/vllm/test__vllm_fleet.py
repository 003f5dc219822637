"""Tables for the routers as the serve plays see them (plugins/module_utils/_vllm/_fleet.py).

The /workers bodies are the real vllm-router 0.1.17's (roles/vllm_router/README.md records
them); the registered results are what ansible.builtin.uri returns for them, and for a router
that is not up (status -1 with urllib's "Connection refused").
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _fleet as vf

NODE = "http://gpu01.example.internal:8000"
OTHER = "http://gpu02.example.internal:8000"
FALLBACK = {"vllm_router_host": "127.0.0.1", "vllm_router_port": 30000,
            "vllm_router_request_timeout_secs": 1800, "vllm_router_drain_timeout": 0,
            "vllm_router_drain_poll": 1, "vllm_router_drain_settle": 2,
            "vllm_router_drain_stale_after": 120, "vllm_router_add_timeout": 120,
            "vllm_router_min_healthy_workers": 1}


def worker(url: str, healthy: bool = True) -> dict:
    return {"url": url, "model_id": "unknown", "worker_type": "regular", "is_healthy": healthy,
            "load": 0, "connection_mode": "Http", "priority": 50, "cost": 1.0}


def answered(name: str, *workers: dict) -> dict:
    return {"item": {"name": name, "url": "http://127.0.0.1:30000"}, "status": 200,
            "json": {"workers": list(workers), "total": len(workers)}}


def refused(name: str) -> dict:
    return {"item": {"name": name, "url": "http://127.0.0.1:30000"}, "status": -1, "failed": False,
            "msg": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>"}


def test_settings_come_from_the_router_host_first():
    settings = vf.router_settings(["r1", "r2"], {"r1": {"vllm_router_drain_timeout": 2400},
                                                 "r2": {"vllm_router_port": 31000, "vllm_router_host": "0.0.0.0"}},
                                  FALLBACK)
    assert settings[0]["drain_timeout"] == 2400 and settings[0]["url"] == "http://127.0.0.1:30000"
    assert settings[1]["drain_timeout"] == 1830  # 0 = request timeout + 30 s
    assert settings[1]["url"] == "http://127.0.0.1:31000"


@pytest.mark.parametrize("own, match", [
    ({"vllm_router_drain_timeout": 600},
     r"vllm_router_drain_timeout of router r1 is 600 s, shorter than its vllm_router_request_timeout_secs \(1800 s\)"),
    ({"vllm_router_add_timeout": "soon"}, r"vllm_router_add_timeout of router r1 must be a int, found 'soon'"),
    ({"vllm_router_min_healthy_workers": -1}, r"vllm_router_min_healthy_workers of router r1 must be at least 0"),
])
def test_settings_refused(own, match):
    with pytest.raises(vf.FleetError, match=match):
        vf.router_settings(["r1"], {"r1": own}, FALLBACK)


def test_a_value_only_on_the_gpu_node_is_the_fallback_and_said_so():
    with pytest.raises(vf.FleetError, match=r"\(from the GPU node's value\)"):
        vf.router_settings(["r1"], {"r1": {}}, dict(FALLBACK, vllm_router_drain_timeout=60))


def test_drain_settings_take_the_longest_bounds():
    settings = vf.router_settings(["r1", "r2"], {"r1": {"vllm_router_drain_timeout": 2400},
                                                 "r2": {"vllm_router_drain_settle": 5}}, FALLBACK)
    assert vf.drain_settings(settings) == {"timeout": 2400, "poll": 1.0, "settle": 5.0,
                                           "stale_after": 120, "add_timeout": 120}


@pytest.mark.parametrize("results, view", [
    ([answered("r1", worker(NODE), worker(OTHER))],
     [{"name": "r1", "reachable": True, "listed": True, "healthy": True, "error": ""}]),
    ([answered("r1", worker(NODE, healthy=False))],
     [{"name": "r1", "reachable": True, "listed": True, "healthy": False, "error": ""}]),
    ([answered("r1", worker(OTHER))], [{"name": "r1", "reachable": True, "listed": False, "healthy": False, "error": ""}]),
    ([refused("r1")], [{"name": "r1", "reachable": False, "listed": False, "healthy": False,
                        "error": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>"}]),
    ([{"item": {"name": "r1"}, "unreachable": True, "msg": "ssh: connect timed out"}],
     [{"name": "r1", "reachable": False, "listed": False, "healthy": False,
       "error": "host unreachable: ssh: connect timed out"}]),
    ([{"item": {"name": "r1"}, "status": 503, "json": {}}],
     [{"name": "r1", "reachable": False, "listed": False, "healthy": False, "error": "HTTP 503 from /workers"}]),
])
def test_router_view(results, view):
    got = vf.router_view(results, NODE + "/")
    assert [{k: v for k, v in g.items() if k != "url"} for g in got] == view


def test_removal_keeps_the_minimum_of_healthy_workers():
    results = [answered("r1", worker(NODE), worker(OTHER, healthy=False))]
    settings = vf.router_settings(["r1"], {"r1": {}}, FALLBACK)
    problems = vf.removal_problems(results, [NODE], settings)
    assert problems == [f"router r1 would keep 0 healthy worker(s) while {NODE} restart(s); its "
                        "vllm_router_min_healthy_workers is 1. Use a smaller gpuserve_serial, or bring "
                        "the unhealthy workers back first"]
    # An unhealthy node leaving takes nothing away; a router that is down is not asked.
    assert vf.removal_problems(results, [OTHER], settings) == []
    assert vf.removal_problems([refused("r1")], [NODE], settings) == []


def test_reconcile():
    listed = [worker(NODE), worker("http://gone:8000")]
    assert vf.reconcile(listed, [NODE, OTHER]) == {"add": [OTHER], "remove": ["http://gone:8000"]}
    assert vf.reconcile(listed[:1], [NODE + "/"]) == {"add": [], "remove": []}
