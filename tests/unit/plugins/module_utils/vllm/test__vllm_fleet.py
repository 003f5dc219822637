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
            "vllm_router_min_healthy_workers": 1, "vllm_router_service_name": "vllm-router"}


def worker(url: str, healthy: bool = True) -> dict:
    return {"url": url, "model_id": "unknown", "worker_type": "regular", "is_healthy": healthy,
            "load": 0, "connection_mode": "Http", "priority": 50, "cost": 1.0}


def answered(name: str, *workers: dict) -> dict:
    return {"item": {"name": name, "url": "http://127.0.0.1:30000"}, "status": 200,
            "json": {"workers": list(workers), "total": len(workers)}}


REFUSED = "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>"
TIMED_OUT = "Status code was -1 and not [200]: Request failed: <urlopen error timed out>"


def refused(name: str) -> dict:
    return {"item": {"name": name, "url": "http://127.0.0.1:30000", "service": "vllm-router.service"},
            "status": -1, "failed": False, "msg": REFUSED}


def unit(read: dict, load: str, active: str) -> dict:
    """systemctl show <service> -p LoadState -p ActiveState on the router host (systemctl(1): one
    Property=value line each), as ansible.builtin.command registers it in a loop over the reads."""
    return {"item": read, "rc": 0, "stdout": f"LoadState={load}\nActiveState={active}", "changed": False}


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


def seen(name: str, state: str, listed: bool = False, healthy: bool = False, error: str = "") -> dict:
    return {"name": name, "state": state, "reachable": state == "serving", "unknown": state == "unknown",
            "listed": listed, "healthy": healthy, "error": error}


@pytest.mark.parametrize("results, units, view", [
    ([answered("r1", worker(NODE), worker(OTHER))], [], [seen("r1", "serving", True, True)]),
    ([answered("r1", worker(NODE, healthy=False))], [], [seen("r1", "serving", True, False)]),
    ([answered("r1", worker(OTHER))], [], [seen("r1", "serving")]),
    # Known not to serve: the host answered, nothing listens and systemd says it does not run.
    ([refused("r1")], [unit(refused("r1"), "loaded", "inactive")],
     [seen("r1", "absent", error=REFUSED + "; vllm-router.service is inactive")]),
    ([refused("r1")], [unit(refused("r1"), "loaded", "failed")],
     [seen("r1", "absent", error=REFUSED + "; vllm-router.service is failed")]),
    ([refused("r1")], [unit(refused("r1"), "not-found", "inactive")],
     [seen("r1", "absent", error=REFUSED + "; vllm-router.service is not installed")]),
    # Everything else is unknown: refused while systemd says it runs (restarting), refused with
    # no word from systemd, a time-out, an HTTP error, a host that does not answer.
    ([refused("r1")], [unit(refused("r1"), "loaded", "active")],
     [seen("r1", "unknown", error=REFUSED + "; vllm-router.service is loaded/active")]),
    ([refused("r1")], [], [seen("r1", "unknown", error=REFUSED + "; vllm-router.service is not readable on its host")]),
    ([refused("r1")], [{"item": refused("r1"), "unreachable": True, "msg": "ssh: connect timed out"}],
     [seen("r1", "unknown", error=REFUSED + "; vllm-router.service is not readable on its host")]),
    ([dict(refused("r1"), msg=TIMED_OUT)], [], [seen("r1", "unknown", error=TIMED_OUT)]),
    ([{"item": {"name": "r1"}, "unreachable": True, "msg": "ssh: connect timed out"}], [],
     [seen("r1", "unknown", error="host unreachable: ssh: connect timed out")]),
    ([{"item": {"name": "r1"}, "status": 503, "json": {}}], [], [seen("r1", "unknown", error="HTTP 503 from /workers")]),
    # Two routers: each judged by its own reads.
    ([answered("r1", worker(NODE)), refused("r2")],
     [{"item": answered("r1"), "skipped": True}, unit(refused("r2"), "loaded", "inactive")],
     [seen("r1", "serving", True, True), seen("r2", "absent", error=REFUSED + "; vllm-router.service is inactive")]),
])
def test_router_view(results, units, view):
    got = vf.router_view(results, NODE + "/", units)
    assert [{k: v for k, v in g.items() if k != "url"} for g in got] == view


def test_removal_keeps_the_minimum_of_healthy_workers():
    results = [answered("r1", worker(NODE), worker(OTHER, healthy=False))]
    settings = vf.router_settings(["r1"], {"r1": {}}, FALLBACK)
    problems = vf.removal_problems(results, [NODE], settings)
    assert problems == [f"router r1 would keep 0 healthy worker(s) while {NODE} restart(s); its "
                        "vllm_router_min_healthy_workers is 1. Use a smaller gpuserve_serial, or bring "
                        "the unhealthy workers back first"]
    # An unhealthy node leaving takes nothing away; a router known not to serve is not asked.
    assert vf.removal_problems(results, [OTHER], settings) == []
    down = [refused("r1")]
    assert vf.removal_problems(down, [NODE], settings, [unit(down[0], "loaded", "inactive")]) == []


def test_removal_is_refused_while_a_router_is_unknown():
    settings = vf.router_settings(["r1"], {"r1": {}}, FALLBACK)
    unknown = [dict(refused("r1"), msg=TIMED_OUT)]
    assert vf.removal_problems(unknown, [NODE], settings) == [
        f"router r1 did not answer ({TIMED_OUT}): its healthy workers cannot be counted, so no node leaves it"]
    # Nothing leaving: nothing to refuse.
    assert vf.removal_problems(unknown, [], settings) == []


def test_reconcile():
    listed = [worker(NODE), worker("http://gone:8000")]
    assert vf.reconcile(listed, [NODE, OTHER]) == {"add": [OTHER], "remove": ["http://gone:8000"],
                                                   "refused": [], "msg": ""}
    assert vf.reconcile(listed[:1], [NODE + "/"]) == {"add": [], "remove": [], "refused": [], "msg": ""}


NEW = "http://gpu01-new.example.internal:8000"  # the same node at a changed address


@pytest.mark.parametrize("listed, desired, floor, remove, refused", [
    # Every address changed, the new ones added and healthy on the fresh read: the old ones go.
    ([worker(NODE), worker(OTHER), worker(NEW)], [NEW], 1, [NODE, OTHER], []),
    # Every address changed to one that does not serve (a typo: never added): the router keeps
    # its floor, one old worker stays.
    ([worker(NODE), worker(OTHER)], [NEW], 1, [NODE], [OTHER]),
    ([worker(NODE), worker(OTHER)], [NEW], 2, [], [NODE, OTHER]),
    # Unhealthy workers go first and cost nothing.
    ([worker(NODE), worker(OTHER, healthy=False)], [NEW], 1, [OTHER], [NODE]),
    # A floor of 0: an operator's explicit choice to allow an empty router.
    ([worker(NODE)], [], 0, [NODE], []),
    # The floor already broken by unhealthy kept workers: no healthy worker leaves.
    ([worker(NODE), worker(NEW, healthy=False)], [NEW], 1, [], [NODE]),
])
def test_reconcile_keeps_the_floor(listed, desired, floor, remove, refused):
    got = vf.reconcile(listed, desired, floor)
    assert (got["remove"], got["refused"]) == (remove, refused)
    if refused:
        healthy = sum(1 for w in listed if w["is_healthy"])
        assert got["msg"].startswith(f"not removed: {', '.join(refused)}: the router lists {len(listed)} "
                                     f"worker(s), {healthy} healthy")
        assert f"vllm_router_min_healthy_workers ({floor})" in got["msg"]


def test_reconcile_refuses_a_floor_that_is_not_a_number():
    with pytest.raises(vf.FleetError, match="vllm_router_min_healthy_workers must be an integer, found 'two'"):
        vf.reconcile([], [], "two")
