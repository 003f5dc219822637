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
            "listed": listed, "healthy": healthy, "urls": [NODE] if listed else [], "stale": [], "error": error}


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


# A node whose port changed (the inventory's vllm_server_port): the router lists it under the port
# it was added with until the node has moved.
MOVED = "http://gpu01.example.internal:8001"
GPU01 = ["gpu01.example.internal", "gpu01"]   # the node's worker address / ansible_host, inventory name
GPU02 = ["gpu02.example.internal", "gpu02"]


@pytest.mark.parametrize("workers, url, aliases, others, urls", [
    # Its own URL only; another node's never.
    ([worker(NODE), worker(OTHER)], NODE, GPU01, GPU02, [NODE]),
    # Its port changed: the router still lists the old one, which is the node's (same host).
    ([worker(NODE), worker(OTHER)], MOVED, GPU01, GPU02, [NODE]),
    # Both, mid-move (the new one added, the old one not yet removed).
    ([worker(NODE), worker(MOVED), worker(OTHER)], MOVED, GPU01, GPU02, [NODE, MOVED]),
    # Its address changed from its inventory name to an IP address: the name is one of its own.
    ([worker("http://gpu01:8000")], "http://10.0.0.1:8000", ["10.0.0.1", "gpu01"], GPU02, ["http://gpu01:8000"]),
    # Case and brackets as routers print them.
    ([worker("http://GPU01.example.internal:8000"), worker("http://[fd00::1]:8000")], "http://[fd00::1]:8001",
     ["fd00::1", "gpu01.example.internal"], GPU02, ["http://GPU01.example.internal:8000", "http://[fd00::1]:8000"]),
    # Two nodes on one host (loopback test fleets): only the exact URL can be told to be this node's.
    ([worker("http://127.0.0.1:8001"), worker("http://127.0.0.1:8002")], "http://127.0.0.1:8003",
     ["127.0.0.1", "n1"], ["127.0.0.1", "n2"], []),
    ([worker("http://127.0.0.1:8001"), worker("http://127.0.0.1:8002")], "http://127.0.0.1:8001",
     ["127.0.0.1", "n1"], ["127.0.0.1", "n2"], ["http://127.0.0.1:8001"]),
    # A worker that is no fleet node's, on another host: not this node's.
    ([worker("http://rogue.example:8000")], NODE, GPU01, GPU02, []),
])
def test_node_urls(workers, url, aliases, others, urls):
    assert vf.node_urls(workers, url, aliases, others) == urls


def test_router_view_of_a_node_whose_port_changed():
    """Listed (under the old port: taken out and drained before it stops), not healthy under the
    new one (put in there), the old URL stale (taken out once it is in under the new one)."""
    [view] = vf.router_view([answered("r1", worker(NODE), worker(OTHER))], MOVED, [], GPU01, GPU02)
    assert (view["listed"], view["healthy"], view["urls"], view["stale"]) == (True, False, [NODE], [NODE])
    [view] = vf.router_view([answered("r1", worker(NODE), worker(MOVED))], MOVED, [], GPU01, GPU02)
    assert (view["listed"], view["healthy"], view["urls"], view["stale"]) == (True, True, [NODE, MOVED], [NODE])


def test_stale_urls_from_fresh_reads():
    fresh = [answered("r1", worker(NODE), worker(MOVED), worker(OTHER)), answered("r2", worker(MOVED)),
             {"item": {"name": "r3", "url": "http://127.0.0.1:30000"}, "skipped": True}]
    assert vf.stale_urls(fresh, MOVED + "/", GPU01, GPU02) == [
        {"name": "r1", "router": "http://127.0.0.1:30000", "url": NODE}]


def test_reconcile():
    listed = [worker(NODE), worker("http://gone:8000")]
    assert vf.reconcile(listed, [NODE, OTHER]) == {"add": [OTHER], "remove": ["http://gone:8000"],
                                                   "refused": [], "moving": [], "floor": 1, "msg": ""}
    assert vf.reconcile(listed[:1], [NODE + "/"]) == {"add": [], "remove": [], "refused": [], "moving": [],
                                                      "floor": 1, "msg": ""}


NODES = [{"url": MOVED, "hosts": GPU01}, {"url": OTHER, "hosts": GPU02}]


@pytest.mark.parametrize("listed, remove, moving", [
    # gpu01's port changed and its new URL does not serve yet: the old one is the serve plays' to
    # move (drained), not a removal; nothing else changes.
    ([worker(NODE), worker(OTHER)], [], [NODE]),
    # Its new URL is in and healthy: the old one goes (the same server; requests finish).
    ([worker(NODE), worker(MOVED), worker(OTHER)], [NODE], []),
    # In but not healthy yet: still moving.
    ([worker(NODE), worker(MOVED, healthy=False), worker(OTHER)], [], [NODE]),
])
def test_reconcile_leaves_a_moving_node_to_the_serve_plays(listed, remove, moving):
    got = vf.reconcile(listed, [MOVED, OTHER], 1, 1, NODES)
    assert (got["remove"], got["moving"], got["refused"]) == (remove, moving, [])


def test_reconcile_a_host_two_nodes_share_is_no_move():
    nodes = [{"url": "http://127.0.0.1:8003", "hosts": ["127.0.0.1", "n1"]},
             {"url": "http://127.0.0.1:8002", "hosts": ["127.0.0.1", "n2"]}]
    got = vf.reconcile([worker("http://127.0.0.1:8001"), worker("http://127.0.0.1:8002")],
                       ["http://127.0.0.1:8003", "http://127.0.0.1:8002"], 0, 1, nodes)
    assert (got["remove"], got["moving"]) == (["http://127.0.0.1:8001"], [])


@pytest.mark.parametrize("healthy, max_unavailable, removed", [
    # 16 healthy workers replaced by 16 URLs that do not answer (a typo in every address): with the
    # rolling batch as the floor's slack only that many go, not 15.
    (16, 1, 1),
    (16, 4, 4),
    # No slack: nothing healthy leaves; without it (None) only vllm_router_min_healthy_workers.
    (16, 0, 0),
    (16, None, 15),
    (2, 1, 1),
])
def test_reconcile_floor_is_the_healthy_workers_less_the_batch(healthy, max_unavailable, removed):
    listed = [worker(f"http://old{i}.example:8000") for i in range(healthy)]
    nodes = [{"url": f"http://typo{i}.example:8000", "hosts": [f"typo{i}.example", f"gpu{i}"]} for i in range(healthy)]
    got = vf.reconcile(listed, [n["url"] for n in nodes], 1, max_unavailable, nodes)
    assert len(got["remove"]) == removed and len(got["refused"]) == healthy - removed
    assert got["floor"] == (max(1, healthy - max_unavailable) if max_unavailable is not None else 1)
    if got["refused"]:
        assert got["msg"].startswith(f"not removed: {got['refused'][0]}")
        assert f"fewer than {got['floor']} healthy" in got["msg"]


@pytest.mark.parametrize("serial, hosts, size", [
    (1, 16, 1), ("2", 16, 2), ("25%", 16, 4), ("10%", 4, 1), ("100%", 3, 3), ([1, "50%"], 8, 4),
])
def test_batch_size(serial, hosts, size):
    assert vf.batch_size(serial, hosts) == size


@pytest.mark.parametrize("serial", ["all", 0, [], "x%"])
def test_batch_size_refused(serial):
    with pytest.raises(vf.FleetError, match="gpuserve_serial"):
        vf.batch_size(serial, 4)


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
        assert f"fewer than {floor} healthy (vllm_router_min_healthy_workers {floor})" in got["msg"]


def test_reconcile_refuses_a_floor_that_is_not_a_number():
    with pytest.raises(vf.FleetError, match="vllm_router_min_healthy_workers must be an integer, found 'two'"):
        vf.reconcile([], [], "two")


def _health(*answers: tuple[str, int | None]) -> list[dict]:
    """uri loop results: (URL asked, status; None: refused, as uri gives it, status -1)."""
    return [{"item": url, "status": -1 if status is None else status,
             **({"msg": "Status code was -1: Connection refused"} if status is None else {})}
            for url, status in answers]


CONF, OLD = "http://127.0.0.1:8010/health", "http://127.0.0.1:8000/health"


@pytest.mark.parametrize("answers, url, port, back", [
    # where this run configures it answered: back under the configured URL
    ([(CONF, 200), (OLD, None)], "http://gpu01:8010", 8000, "http://gpu01:8010"),
    ([(CONF, 200)], "http://gpu01:8010", None, "http://gpu01:8010"),
    # only its old port answered (it failed before the restart): its old URL
    ([(CONF, None), (OLD, 200)], "http://gpu01:8010", 8000, "http://gpu01:8000"),
    ([(CONF, 503), (OLD, 200)], "http://[fd00::1]:8010", 8000, "http://[fd00::1]:8000"),
    # nothing answered, or an answer that is not 200: not put back
    ([(CONF, None), (OLD, None)], "http://gpu01:8010", 8000, ""),
    ([(CONF, 503), (OLD, 503)], "http://gpu01:8010", 8000, ""),
    ([], "http://gpu01:8010", 8000, ""),
    # the old address answered but its port is not known: not guessed
    ([(CONF, None), (OLD, 200)], "http://gpu01:8010", None, ""),
])
def test_back_url_is_where_the_node_still_serves(answers, url, port, back):
    assert vf.back_url(_health(*answers), url, CONF, port) == back


@pytest.mark.parametrize("host, line", [
    ({"failed": {"stage": "roll", "msg": "canary: refused"}, "held": "x", "untouched": "y"},
     "FAILED (roll): canary: refused"),
    ({"failed": None, "held": "router01 did not answer", "untouched": "y"}, "HELD: router01 did not answer"),
    ({"failed": None, "held": "", "untouched": "the rollout stopped at gpu01 (failed)"},
     "untouched: the rollout stopped at gpu01 (failed)"),
    ({"failed": None, "held": "", "untouched": ""}, "done"),
    ({}, "done"),
])
def test_run_outcome_says_the_worst_first(host, line):
    assert vf.run_outcome(host) == line
