"""Tables for the serve plan of one node (plugins/module_utils/_vllm/_nodeplan.py).

Each row is a state a node can be found in -- after a clean run, a killed one, a crash, a
rollback -- and the steps the next run must take from it. The states are built the way
vllm_node_state reports them (tests/unit/plugins/modules/test_vllm_node_state.py checks that
shape against a real process).
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _nodeplan as vp
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _nodereport as vn
from ansible_collections.gpuserve.vllm.plugins.filter.vllm_fleet import FilterModule

A, B, C = "/opt/ml-env.d/vllm-0.17.0-aaaa", "/opt/ml-env.d/vllm-0.18.0-bbbb", "/opt/ml-env.d/vllm-0.19.0-cccc"
T0 = 1_700_000_000.0  # when the running server started


def node(*, running: str | None = A, healthy: bool = True, link: str = A, previous: str = "",
         target: str = "", journal: dict | None = None, hold: dict | None = None,
         files: dict | None = None, built: tuple = (A, B, C), gpus: list | None = None,
         metrics: bool | None = None, unit: str = "loaded", reboot: bool = False,
         sub: str | None = None, health_known: bool = True, metrics_known: bool = True,
         start_record: dict | None = None, need_daemon_reload: bool = False, acceptance: bool = False,
         switches: list | None = None) -> dict:
    """A vllm_node_state result: `running` is the env of the live process (None: not running);
    `health_known`/`metrics_known` False: the read timed out (tests/unit/plugins/modules/
    test_vllm_node_state.py makes one against a real socket that never answers);
    `need_daemon_reload`: systemd's NeedDaemonReload=yes (the unit file was written, not loaded);
    `acceptance`: gpu_node left node acceptance for the serve play (due while the server ran).
    `switches`: the switch record's entries (sw())."""
    alive = running is not None
    return {
        "unit": {"load_state": unit, "active_state": "active" if alive else "failed",
                 "sub_state": sub or ("running" if alive else "failed"), "main_pid": 4242 if alive else 0,
                 "started": T0 if alive else None, "need_daemon_reload": need_daemon_reload},
        "process": {"env": running or "", "started": T0 if alive else None},
        "link": {"path": "/opt/ml-env", "kind": "link" if link else "absent", "env": link},
        "previous": {"path": "/opt/ml-env.previous", "kind": "link" if previous else "absent", "env": previous},
        "target": {"path": target, "env": target},
        "envs": {e: {"exists": True, "built": True} for e in built},
        "files": files or {"unit": T0 - 100, "env_file": T0 - 100, "restart_marker": None},
        "start_record": start_record or {"present": False, "current": False, "changed": [], "error": ""},
        "journal": journal, "hold": hold, "switches": switches or [],
        "reboot": {"pending": reboot, "reason": "new kernel command line" if reboot else ""},
        "acceptance": {"pending": acceptance, "reason": "node acceptance: NCCL settings changed" if acceptance else ""},
        "health": ({"status": None, "error": "timed out", "known": False, "tries": 3} if not health_known else
                   {"status": 200 if alive and healthy else None, "error": "" if alive and healthy else "refused",
                    "known": True, "tries": 1}),
        "metrics": {"reachable": (alive if metrics is None else metrics) and metrics_known, "known": metrics_known},
        "gpus": gpus or [],
    }


def sw(frm: str, to: str, at: float = T0 - 50, rollback: bool = False) -> dict:
    """One entry of the switch record (steps/switch.yml writes it before the link moves)."""
    return {"from": frm, "to": to, "at": at, "rollback": rollback}


# The last rollout took nodes from A to B (T0 - 50); the one before it from C to A (T0 - 900).
TO_B = [sw(C, A, T0 - 900), sw(A, B)]


LISTED = [{"name": "router01", "reachable": True, "listed": True, "healthy": True}]
UNLISTED = [{"name": "router01", "reachable": True, "listed": False, "healthy": False}]
LISTED_UNHEALTHY = [{"name": "router01", "reachable": True, "listed": True, "healthy": False}]
DOWN = [{"name": "router01", "reachable": False, "error": "Connection refused"}]
UNKNOWN = [{"name": "router01", "state": "unknown", "reachable": False, "unknown": True, "listed": False,
            "healthy": False, "error": "host unreachable: ssh: connect to host router01 port 22: Connection timed out"}]
TWO_ONE_UNKNOWN = [dict(LISTED[0]), dict(UNKNOWN[0], name="router02")]
# Listed under the URL it had before its port or address changed (vllm_router_view: urls, stale).
MOVED_PORT = [{"name": "router01", "reachable": True, "listed": True, "healthy": False,
               "urls": ["http://gpu01:8000"], "stale": ["http://gpu01:8000"]}]


def plan(observed: dict, routers: list | None = None, **kw) -> dict:
    state = {"observed": observed, "routers": routers or [], "start": kw.pop("start", True),
             "rendered": kw.pop("rendered", {}), "requests": kw.pop("requests", {}),
             "canary": kw.pop("canary", {"enabled": True, "stop_server": "auto", "batch_size": 1,
                                         "hosts_count": 1, "gpu_memory_gib": 16}),
             "check_mode": kw.pop("check_mode", False), "now": T0 + 500}
    if "env_keep" in kw:
        state["env_keep"] = kw.pop("env_keep")
    assert not kw
    return vp.plan(state)


CASES = [
    # (id, observed, routers, extra, steps, action)
    ("converged", node(target=A), LISTED, {}, [], "none"),
    ("converged without routers", node(), [], {}, [], "none"),
    ("stranded: healthy, not in the router", node(target=A), UNLISTED, {}, ["add"], "add"),
    ("router lists it unhealthy: wait until it sees it healthy", node(), LISTED_UNHEALTHY, {}, ["add"], "add"),
    ("upgrade behind a router", node(target=B), LISTED, {},
     ["remove", "drain", "stop", "canary", "switch", "restart", "health", "add"], "upgrade"),
    ("upgrade, unrouted, one node in the play: canary beside (GPU memory free)",
     node(target=B, gpus=[{"index": 0, "total_mib": 97887, "free_mib": 40000}]), [], {},
     ["canary", "switch", "restart", "health"], "upgrade"),
    ("upgrade, unrouted, batch smaller than the play: server stops for the canary",
     node(target=B), [], {"canary": {"stop_server": "auto", "batch_size": 1, "hosts_count": 3}},
     ["stop", "canary", "switch", "restart", "health"], "upgrade"),
    ("upgrade with the canary off", node(target=B), LISTED, {"canary": {"enabled": False}},
     ["remove", "drain", "switch", "restart", "health", "add"], "upgrade"),
    ("dead node behind a router: no drain", node(running=None, target=A), LISTED, {},
     ["remove", "restart", "health", "add"], "start"),
    ("dead node, router not listing it", node(running=None, target=A), UNLISTED, {},
     ["restart", "health", "add"], "start"),
    ("fresh node (no unit yet), routers not serving: unrouted start",
     node(running=None, unit="not-found", target=A), DOWN, {}, ["restart", "health"], "start"),
    ("dead node with an upgrade pending: canary with nothing running",
     node(running=None, target=B), LISTED, {}, ["remove", "canary", "switch", "restart", "health", "add"], "upgrade"),
    ("loading (alive, not healthy yet): wait, no restart", node(healthy=False), LISTED_UNHEALTHY, {},
     ["health", "add"], "wait"),
    ("killed between switch and restart: restart onto the new env, no new canary",
     node(running=A, link=B, previous=A, target=B,
          journal={"action": "upgrade", "from": A, "to": B, "canary_ok": True, "previous": ""}), UNLISTED, {},
     ["drain", "restart", "health", "add"], "upgrade"),
    ("killed after the restart: only the health wait and the add",
     node(running=B, healthy=False, link=B, previous=A, target=B,
          journal={"action": "upgrade", "from": A, "to": B, "canary_ok": True}), UNLISTED, {},
     ["health", "add"], "wait"),
    ("killed after the canary stopped the server: not running, canary again",
     node(running=None, link=A, target=B, journal={"action": "upgrade", "from": A, "to": B, "canary_ok": False}),
     UNLISTED, {}, ["canary", "switch", "restart", "health", "add"], "upgrade"),
    ("killed right after leaving the router: the rest of the upgrade",
     node(target=B, journal={"action": "upgrade", "from": A, "to": B, "canary_ok": False}), UNLISTED, {},
     ["drain", "stop", "canary", "switch", "restart", "health", "add"], "upgrade"),
    ("unit written after the server started (killed before the restart)",
     node(target=A, files={"unit": T0 + 10, "env_file": T0 - 100, "restart_marker": None}), LISTED, {},
     ["remove", "drain", "restart", "health", "add"], "restart"),
    ("unit written, not loaded (killed before daemon-reload; a crash restart since): a drained restart",
     node(target=A, need_daemon_reload=True), LISTED, {}, ["remove", "drain", "restart", "health", "add"], "restart"),
    ("unit written, not loaded, unrouted: a restart", node(target=A, need_daemon_reload=True), [], {},
     ["restart", "health"], "restart"),
    ("unit written, not loaded, server dead: the start (it reloads first)",
     node(running=None, target=A, need_daemon_reload=True), LISTED, {}, ["remove", "restart", "health", "add"], "start"),
    ("unit written, not loaded, no GPU (vllm_server_start false): nothing starts",
     node(running=None, target=A, need_daemon_reload=True), [], {"start": False}, [], "none"),
    ("NCCL configuration written after the server started: a drained restart",
     node(target=A, files={"unit": T0 - 100, "env_file": T0 - 100, "nccl_conf": T0 + 30, "restart_marker": None}),
     LISTED, {}, ["remove", "drain", "restart", "health", "add"], "restart"),
    ("NCCL configuration older than the running server: nothing to do",
     node(target=A, files={"unit": T0 - 100, "env_file": T0 - 100, "nccl_conf": T0 - 30, "restart_marker": None}),
     LISTED, {}, [], "none"),
    ("a patch or an install in the env that runs, after the server started: a drained restart",
     node(target=A, files={"unit": T0 - 100, "env_file": T0 - 100, "env_code": T0 + 60, "restart_marker": None}),
     LISTED, {}, ["remove", "drain", "restart", "health", "add"], "restart"),
    ("the env's code older than the running server (a pre-build elsewhere changes nothing)",
     node(target=A, files={"unit": T0 - 100, "env_file": T0 - 100, "env_code": T0 - 60, "restart_marker": None}),
     LISTED, {}, [], "none"),
    ("the weights link switched after the server started (a run failed after the switch): a drained restart",
     node(target=A, files={"unit": T0 - 100, "env_file": T0 - 100, "model": T0 + 600, "restart_marker": None}),
     LISTED, {}, ["remove", "drain", "restart", "health", "add"], "restart"),
    ("the drafter link switched after the server started: a drained restart",
     node(target=A, files={"unit": T0 - 100, "env_file": T0 - 100, "model": T0 - 600, "drafter": T0 + 5,
                           "restart_marker": None}),
     LISTED, {}, ["remove", "drain", "restart", "health", "add"], "restart"),
    ("weights switched before the server started: nothing to do",
     node(target=A, files={"unit": T0 - 100, "env_file": T0 - 100, "model": T0 - 1, "drafter": T0 - 1,
                           "restart_marker": None}),
     LISTED, {}, [], "none"),
    ("restart request older than the running server: already done",
     node(target=A, files={"unit": T0 - 100, "env_file": T0 - 100, "restart_marker": T0 - 5}), LISTED, {}, [], "none"),
    ("restart request written after the server started",
     node(target=A, files={"unit": T0 - 100, "env_file": T0 - 100, "restart_marker": T0 + 5}), LISTED, {},
     ["remove", "drain", "restart", "health", "add"], "restart"),
    # A changed vllm_server_port: the router lists the node under its old URL (vllm_router_view's
    # `stale`), the unit changes: out under the old URL, drained, restarted, in under the new one.
    ("port changed: a drained move", node(target=A), MOVED_PORT, {"rendered": {"unit_changed": True}},
     ["remove", "drain", "restart", "health", "add"], "restart"),
    # A changed worker address, the server unchanged (it listens on every address): in under the
    # new URL, then the old one goes (worker_add) -- no stop, nothing to drain.
    ("address changed, the server unchanged: add the new URL only", node(target=A), MOVED_PORT, {},
     ["add"], "add"),
    ("in under the new URL, the old one still listed (a killed run): add, which removes the old one",
     node(target=A), [dict(MOVED_PORT[0], healthy=True, urls=["http://gpu01:8000", "http://gpu01:8001"])], {},
     ["add"], "add"),
    ("unit would change (check-mode render)", node(target=A), LISTED, {"rendered": {"unit_changed": True}},
     ["remove", "drain", "restart", "health", "add"], "restart"),
    ("rollback on demand: drained switch back, no canary", node(link=B, running=B, previous=A, target=B, switches=TO_B),
     LISTED, {"requests": {"rollback": True}}, ["remove", "drain", "switch", "restart", "health", "add"], "rollback"),
    ("rollback asked again after it was done: one-shot, nothing",
     node(link=A, running=A, previous=B, target=B, hold={"from": B, "to": A, "at": "2026-12-01T10:00:00Z"}),
     LISTED, {"requests": {"rollback": True}}, [], "none"),
    ("after a rollback by hand a plain re-run holds the env",
     node(link=A, running=A, previous=B, target=B, hold={"from": B, "to": A, "at": "2026-12-01T10:00:00Z"}),
     LISTED, {}, [], "hold"),
    ("after a rollback, new pins (another env) upgrade as usual",
     node(link=A, running=A, previous=B, target=C, hold={"from": B, "to": A, "at": "x"}), LISTED, {},
     ["remove", "drain", "stop", "canary", "switch", "restart", "health", "add"], "upgrade"),
    ("rollforward lifts the hold", node(link=A, running=A, previous=B, target=B, hold={"from": B, "to": A}),
     LISTED, {"requests": {"rollforward": True}},
     ["remove", "drain", "stop", "canary", "switch", "restart", "health", "add"], "upgrade"),
    ("killed rollback, re-run without the flag: finished, not flipped forward",
     node(link=A, running=B, previous=B, target=B, journal={"action": "rollback", "from": B, "to": A}), UNLISTED, {},
     ["drain", "restart", "health", "add"], "rollback"),
    ("killed upgrade before its restart, then a rollback asked: only the link goes back",
     node(link=B, running=A, previous=A, target=B, journal={"action": "upgrade", "from": A, "to": B},
          switches=TO_B), LISTED, {"requests": {"rollback": True}}, ["switch", "health"], "rollback"),
    ("canary on demand behind a router: drained, stopped, started again",
     node(target=""), LISTED, {"requests": {"canary": True}},
     ["remove", "drain", "stop", "canary", "restart", "health", "add"], "canary"),
    ("canary on demand, unrouted, fits beside", node(gpus=[{"index": 0, "total_mib": 97887, "free_mib": 60000}]),
     [], {"requests": {"canary": True}}, ["canary"], "canary"),
    ("no GPU (vllm_server_start false): switch only, nothing starts",
     node(running=None, target=B), [], {"start": False}, ["switch"], "switch"),
    ("no GPU, converged", node(running=None, target=A), [], {"start": False}, [], "none"),
    ("reboot pending behind a router", node(target=A, reboot=True), LISTED, {},
     ["remove", "drain", "reboot", "restart", "health", "add"], "restart"),
    ("alive without /metrics: no drain (nothing to read)",
     node(target=A, metrics=False, files={"unit": T0 + 1, "env_file": 0}),
     LISTED, {}, ["remove", "restart", "health", "add"], "restart"),
    ("store on a symlinked path: all real paths, converged", node(target=A), LISTED, {}, [], "none"),
    # Unknown is not no: a read that did not answer holds every step that takes a live server out.
    ("upgrade while the router does not answer: held, nothing stopped", node(target=B), UNKNOWN, {}, [], "held"),
    ("upgrade while one of two routers does not answer: held", node(target=B), TWO_ONE_UNKNOWN, {}, [], "held"),
    ("restart asked while the router does not answer: held", node(target=A), UNKNOWN,
     {"requests": {"restart": True}}, [], "held"),
    ("rollback while the router does not answer: held", node(link=B, running=B, previous=A, target=B, switches=TO_B),
     UNKNOWN,
     {"requests": {"rollback": True}}, [], "held"),
    ("converged while the router does not answer: nothing to hold", node(target=A), UNKNOWN, {}, [], "none"),
    ("dead node while the router does not answer: started (nothing to disturb), unrouted",
     node(running=None, target=A), UNKNOWN, {}, ["restart", "health"], "start"),
    ("its own /health timed out: an upgrade is held", node(target=B, health_known=False), LISTED, {}, [], "held"),
    ("its own /health timed out, nothing to change: the health wait only",
     node(target=A, health_known=False), LISTED, {}, ["health"], "wait"),
    ("/metrics timed out at plan time: the drain stays (it reads again)",
     node(target=B, metrics_known=False), LISTED, {},
     ["remove", "drain", "stop", "canary", "switch", "restart", "health", "add"], "upgrade"),
    # Node acceptance gpu_node left for the serve play: never beside a live server.
    ("acceptance behind a router: out, drained, stopped, accepted, started, back in", node(target=A, acceptance=True),
     LISTED, {}, ["remove", "drain", "stop", "acceptance", "restart", "health", "add"], "acceptance"),
    ("acceptance without routers: stopped, accepted, started", node(target=A, acceptance=True), [], {},
     ["stop", "acceptance", "restart", "health"], "acceptance"),
    ("acceptance on a node that serves nothing: before its start", node(running=None, target=A, acceptance=True),
     UNLISTED, {}, ["acceptance", "restart", "health", "add"], "start"),
    ("acceptance with a reboot: the reboot stops the server, acceptance after it",
     node(target=A, acceptance=True, reboot=True), LISTED, {},
     ["remove", "drain", "reboot", "acceptance", "restart", "health", "add"], "acceptance"),
    ("acceptance with an upgrade: one stop for both, the canary first",
     node(target=B, acceptance=True), LISTED, {},
     ["remove", "drain", "stop", "canary", "switch", "acceptance", "restart", "health", "add"], "upgrade"),
    ("acceptance while the router does not answer: held, nothing stopped", node(target=A, acceptance=True),
     UNKNOWN, {}, [], "held"),
    ("acceptance without a GPU to serve (vllm_server_start false): nothing", node(running=None, target=A, acceptance=True),
     [], {"start": False}, [], "none"),
]


@pytest.mark.parametrize("observed, routers, extra, steps, action", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_steps(observed, routers, extra, steps, action):
    result = plan(observed, routers, **extra)
    assert result["steps"] == steps, result["line"]
    assert result["action"] == action, result["line"]


SERVER_STEPS = [
    # (id, observed, routers, extra, server_steps): what roles/vllm_server runs, in this order
    ("converged: nothing", node(target=A), LISTED, {}, []),
    ("stranded: the router's add only, nothing on the node", node(target=A), UNLISTED, {}, []),
    ("upgrade behind a router: journal first, records after the start",
     node(target=B), LISTED, {},
     ["journal", "fence", "stop", "canary", "switch", "start", "clear_restart", "prune", "journal_done"]),
    ("upgrade in check mode: no reboot, no start", node(target=B, reboot=True), LISTED, {"check_mode": True},
     ["journal", "stop", "canary", "switch", "clear_restart", "prune", "journal_done"]),
    ("upgrade with vllm_server_env_keep 0: every env kept, no prune", node(target=B), LISTED, {"env_keep": 0},
     ["journal", "fence", "stop", "canary", "switch", "start", "clear_restart", "journal_done"]),
    ("reboot pending: reboot before the start", node(target=A, reboot=True), LISTED, {},
     ["journal", "fence", "reboot", "start", "clear_restart", "journal_done"]),
    ("acceptance: the routers read again before the stop, acceptance on the stopped server",
     node(target=A, acceptance=True), LISTED, {},
     ["journal", "fence", "stop", "acceptance", "start", "clear_restart", "journal_done"]),
    ("acceptance in check mode: neither run nor waited for", node(target=A, acceptance=True), LISTED,
     {"check_mode": True}, ["journal", "stop", "clear_restart", "journal_done"]),
    ("dead node: started, no canary, nothing live to fence", node(running=None, target=A), LISTED, {},
     ["journal", "start", "clear_restart", "journal_done"]),
    ("canary beside the live server behind a router: the routers read again after it, before the restart",
     node(target=B, gpus=[{"index": 0, "total_mib": 97887, "free_mib": 40000}]), LISTED,
     {"canary": {"stop_server": "false", "batch_size": 1, "hosts_count": 1, "gpu_memory_gib": 16}},
     ["journal", "canary", "switch", "fence", "start", "clear_restart", "prune", "journal_done"]),
    ("upgrade without routers: nothing to fence", node(target=B), [],
     {"canary": {"stop_server": "true", "batch_size": 1, "hosts_count": 1, "gpu_memory_gib": 16}},
     ["journal", "stop", "canary", "switch", "start", "clear_restart", "prune", "journal_done"]),
    ("loading node: the health wait only, nothing written", node(healthy=False), LISTED_UNHEALTHY, {}, ["start"]),
    ("killed after the restart: the wait, then the journal goes",
     node(running=B, healthy=False, link=B, previous=A, target=B,
          journal={"action": "upgrade", "from": A, "to": B, "canary_ok": True}), UNLISTED, {},
     ["start", "journal_done"]),
    ("rollback: the hold is kept after the start", node(link=B, running=B, previous=A, target=B, switches=TO_B), LISTED,
     {"requests": {"rollback": True}},
     ["journal", "switch", "fence", "start", "clear_restart", "hold", "prune", "journal_done"]),
    ("new pins after a rollback: the hold is lifted", node(link=A, running=A, previous=B, target=C, hold={"from": B, "to": A}),
     LISTED, {}, ["journal", "fence", "stop", "canary", "switch", "start", "clear_restart", "unhold", "prune", "journal_done"]),
    ("a killed run's canary still runs on a converged node: stopped, nothing else",
     dict(node(target=A), canary={"active_state": "active", "main_pid": 777}), LISTED, {}, ["stop_canary"]),
    ("a rollback with a canary left: stopped before anything else",
     dict(node(link=B, running=B, previous=A, target=B, switches=TO_B), canary={"active_state": "active", "main_pid": 9}),
     LISTED,
     {"requests": {"rollback": True}},
     ["stop_canary", "journal", "switch", "fence", "start", "clear_restart", "hold", "prune", "journal_done"]),
    ("no GPU, restart request left: cleared, nothing starts",
     node(running=None, target=A, files={"unit": T0 - 100, "env_file": T0 - 100, "restart_marker": T0}), [],
     {"start": False}, ["clear_restart"]),
    ("held: nothing at all, the journal of the killed run stays",
     node(target=B, journal={"action": "upgrade", "from": A, "to": B}), UNKNOWN, {}, []),
]


@pytest.mark.parametrize("observed, routers, extra, kinds", [c[1:] for c in SERVER_STEPS],
                         ids=[c[0] for c in SERVER_STEPS])
def test_server_steps(observed, routers, extra, kinds):
    result = plan(observed, routers, **extra)
    assert result["server_steps"] == kinds, result["line"]
    if kinds:
        assert not result["converged"], "a node with steps to run is not converged"


def test_every_stop_is_followed_by_a_start():
    for _id, observed, routers, extra, _steps, _action in CASES:
        steps = plan(observed, routers, **extra)["steps"]
        for stopper in ("stop", "reboot"):
            if stopper in steps:
                assert "restart" in steps[steps.index(stopper):], _id
        if "acceptance" in steps:  # the GPUs to itself: nothing serves while it runs
            before = steps[:steps.index("acceptance")]
            assert "stop" in before or "reboot" in before or not observed["unit"]["main_pid"], _id
        if "remove" in steps:
            assert steps[-1] == "add", _id


def test_failed_start_rolls_back_to_the_env_that_served_and_restores_previous():
    result = plan(node(target=B, previous="/opt/ml-env.d/vllm-0.16.0-zzzz",
                       built=(A, B, "/opt/ml-env.d/vllm-0.16.0-zzzz")), LISTED)
    assert result["rollback_to"] == A
    assert result["rollback_previous"] == "/opt/ml-env.d/vllm-0.16.0-zzzz"
    journal = result["journal"]
    assert journal["from"] == A and journal["to"] == B and journal["previous"].endswith("0.16.0-zzzz")


def test_resumed_plan_keeps_the_previous_of_before_the_switch():
    result = plan(node(running=A, link=B, previous=A, target=B,
                       journal={"action": "upgrade", "from": A, "to": B, "canary_ok": True,
                                "previous": "/opt/ml-env.d/old"}), UNLISTED)
    assert result["rollback_to"] == A
    assert result["rollback_previous"] == "/opt/ml-env.d/old"
    assert result["journal"]["canary_ok"] is True
    assert "resumed" in result["line"]


def test_plain_restart_has_no_rollback_target():
    assert plan(node(target=A), LISTED, rendered={"unit_changed": True})["rollback_to"] == ""


def test_converged_node_writes_no_journal():
    result = plan(node(target=A), LISTED)
    assert result["journal"] is None and not result["changes"]


@pytest.mark.parametrize("observed, extra, match", [
    (node(target=B, built=(A,)), {}, "has no bin/vllm: it was not built"),
    (node(link="", running=None), {}, "nothing to serve"),
    (node(link=B, running=B, switches=TO_B, built=(B,)), {"requests": {"rollback": True}},
     "vllm-0.17.0-aaaa, the env this node served before its last switch, has no bin/vllm"),
    (node(link=B, running=B, switches=TO_B), {"requests": {"rollback": True, "rollout": {
        "env": B, "at": T0 - 50, "since": T0 - 900, "read": ["gpu01"], "unknown": ["gpu02"]}}},
     "gpu02 could not be read .* Nothing was changed"),
    (node(target=B, gpus=[{"index": 0, "total_mib": 97887, "free_mib": 9000}]), {},
     r"canary beside the live server does not fit: GPU 0 has 8.8 GiB free of 95.6 GiB; the canary "
     r"needs 16 GiB .*Nothing was stopped. Set vllm_server_canary_stop_server: true"),
    (node(target=B), {}, r"does not fit: no GPU's free memory could be read"),
    (node(target=B), {"canary": {"stop_server": "maybe"}}, "vllm_server_canary_stop_server must be one of"),
])
def test_refusals_before_anything_changes(observed, extra, match):
    with pytest.raises(vp.PlanError, match=match):
        plan(observed, [], **extra)


def test_check_mode_plans_a_switch_to_an_env_not_built_yet():
    result = plan(node(target=B, built=(A,)), LISTED, check_mode=True)
    assert "switch" in result["steps"]


@pytest.mark.parametrize("gpus, need, ok, util", [
    ([{"index": 0, "total_mib": 97887, "free_mib": 40000}, {"index": 1, "total_mib": 97887, "free_mib": 30000}], 16, True, 0.29),
    ([{"index": 0, "total_mib": 97887, "free_mib": 17000}], 16, False, 0.16),
    ([{"index": 0, "total_mib": 97887, "free_mib": 1000}], 1, False, 0.0),
    ([], 16, False, None),
    ([{"index": 0, "total_mib": 0, "free_mib": 10}], 16, False, None),
])
def test_canary_memory(gpus, need, ok, util):
    result = vp.canary_memory(gpus, need)
    assert result["ok"] is ok
    assert result["utilization"] == util


def test_canary_memory_refuses_a_bad_need():
    with pytest.raises(vp.PlanError, match="vllm_server_canary_gpu_memory_gib must be a positive number"):
        vp.canary_memory([], "lots")


def test_line_names_the_steps_and_why():
    line = plan(node(target=B), LISTED)["line"]
    assert line.startswith("upgrade vllm-0.17.0-aaaa -> vllm-0.18.0-bbbb: remove, drain, stop, canary with the "
                           "server stopped, switch, restart, health, add")
    assert "a failed start rolls back to vllm-0.17.0-aaaa" in line
    assert "routers router01: listed, healthy" in line
    unrouted = plan(node(running=None, unit="not-found", target=A), DOWN)["line"]
    assert "unrouted: no router serves yet (router01: Connection refused)" in unrouted


@pytest.mark.parametrize("outcomes, steps", [
    ({"canary": {"ok": False}}, []),
    ({"start": {"ok": False, "stage": "start"}}, ["restore", "start"]),
    ({"start": {"ok": False, "stage": "check"}}, ["restore", "start"]),
])
def test_recovery_of_an_upgrade(outcomes, steps):
    p = plan(node(target=B, gpus=[{"index": 0, "total_mib": 97887, "free_mib": 50000}]), [])
    assert vn.recovery(p, outcomes)["steps"] == steps


@pytest.mark.parametrize("outcomes, stop_on_failure, steps", [
    ({"start": {"ok": False, "stage": "start"}}, True, ["stop"]),
    ({"start": {"ok": False, "stage": "start"}}, False, []),
    ({"start": {"ok": False, "stage": "check"}}, True, []),
    ({"start": {"ok": True}}, True, []),
])
def test_recovery_of_a_restart(outcomes, stop_on_failure, steps):
    p = plan(node(target=A, files={"unit": T0 + 1, "env_file": 0}), [])
    assert vn.recovery(p, outcomes, stop_on_failure)["steps"] == steps


def test_recovery_after_a_canary_that_stopped_the_server():
    p = plan(node(target=B), LISTED)
    assert vn.recovery(p, {"canary": {"ok": False}}) == {"steps": ["start"], "why": ""}
    assert vn.report(p, {"canary": {"ok": False, "seconds": 3, "msg": "died"},
                         "recovered": {"ok": True, "kind": "restart", "to": A}})["line"].endswith(
        "canary FAILED after 3 s: died; started again on vllm-0.17.0-aaaa, healthy")


def test_report_lines():
    p = plan(node(target=B), LISTED)
    ok = vn.report(p, {"canary": {"ok": True, "seconds": 41.2}, "switch": {"changed": True, "switched_from": A,
                                                                           "switched_to": B},
                       "start": {"ok": True, "elapsed_text": "31m05s"}, "prune": {"removed": [C]}})
    assert ok["ok"] and ok["line"] == ("upgrade vllm-0.17.0-aaaa -> vllm-0.18.0-bbbb: canary passed in 41.2 s; "
                                       "switched vllm-0.17.0-aaaa -> vllm-0.18.0-bbbb; healthy after 31m05s; "
                                       "pruned vllm-0.19.0-cccc")
    failed = vn.report(p, {"canary": {"ok": True, "seconds": 2}, "start": {"ok": False, "msg": "died"},
                           "recovered": {"ok": True, "kind": "rollback", "to": A}})
    assert not failed["ok"] and failed["rolled_back"]
    assert failed["line"].endswith("start FAILED: died; rolled back to vllm-0.17.0-aaaa, healthy")
    assert vn.report(p, check_mode=True)["line"].startswith("upgrade vllm-0.17.0-aaaa -> vllm-0.18.0-bbbb: would run: remove")


def test_a_requested_restart_is_done_once_per_run():
    asked = {"restart": True, "restart_since": T0 - 10}
    assert plan(node(target=A), LISTED, requests=asked)["steps"] == []  # started after the run began
    again = {"restart": True, "restart_since": T0 + 10}
    assert plan(node(target=A), LISTED, requests=again)["steps"] == ["remove", "drain", "restart", "health", "add"]
    assert "restart" in plan(node(target=A), LISTED, requests={"restart": True})["steps"]


@pytest.mark.parametrize("observed, routers, extra, converged", [
    (node(target=A), LISTED, {}, True),
    (node(target=A), UNLISTED, {}, False),
    (node(target=A), LISTED, {"rendered": {"env_changed": True}}, False),
    (node(running=None, target=A), [], {"start": False}, True),
    (node(running=None, target=A, files={"unit": 1, "env_file": 1, "restart_marker": 5}), [], {"start": False}, False),
    (node(running=None, target=A), [], {"start": False, "rendered": {"unit_changed": True}}, False),
])
def test_converged_means_the_role_has_nothing_to_do(observed, routers, extra, converged):
    assert plan(observed, routers, **extra)["converged"] is converged


def test_a_held_plan_says_what_did_not_answer_and_changes_nothing():
    result = plan(node(target=B), TWO_ONE_UNKNOWN)
    assert result["held"] == (
        "held: router router02 did not answer (host unreachable: ssh: connect to host router01 port 22: "
        "Connection timed out). It may be serving, so its steps (remove, drain, stop, restart) wait: "
        "nothing was changed on it. Re-run when every read answers (or take a router that is gone for "
        "good out of vllm_routers)")
    assert result["journal"] is None and not result["changes"] and not result["converged"]
    assert result["line"].startswith("HELD (serving vllm-0.17.0-aaaa): no step; held: router router02")
    assert "router02: UNKNOWN (host unreachable" in result["line"]
    own = plan(node(target=B, health_known=False), LISTED)
    assert "its /health did not answer (timed out, 3 tries)" in own["held"]


def test_a_node_whose_health_did_not_answer_is_not_idle():
    """site.yml's idle play starts at once what serves nothing: a time-out is not "nothing"."""
    assert plan(node(target=A, health_known=False), [])["serving"] is True
    assert plan(node(target=A, healthy=False), [])["serving"] is False  # refused: loading, known


OLD = "/opt/ml-env.d/vllm-0.16.0-oooo"


@pytest.mark.parametrize("observed, protected", [
    ("converged", [A]),
    ("killed after the switch: the journal's previous is where a failed start goes back to", [OLD, A, B]),
    ("rolled back by hand: the hold names both", [A, B]),
    ("nothing runs, no record", []),
    ("nothing runs, the last start record names the env it ran", [OLD]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_the_prune_after_a_switch_keeps_every_env_a_record_names(observed, protected):
    states = {
        "converged": node(target=A),
        "killed after the switch: the journal's previous is where a failed start goes back to":
            node(running=A, link=B, previous=A, target=B, built=(A, B, OLD),
                 journal={"action": "upgrade", "from": A, "to": B, "canary_ok": True, "previous": OLD}),
        "rolled back by hand: the hold names both":
            node(link=A, running=A, previous=B, target=B, hold={"from": B, "to": A, "at": "2026-12-01T10:00:00Z"}),
        "nothing runs, no record": node(running=None, target=A),
        "nothing runs, the last start record names the env it ran":
            node(running=None, target=A, start_record={"present": True, "current": False, "env": OLD, "changed": []}),
    }
    result = plan(states[observed], UNLISTED)
    assert result["protect"] == sorted(protected)


def test_with_keep_1_the_resumed_upgrade_still_keeps_the_journals_previous():
    """The real prune plan (_env._store.plan_prune) fed what site.yml feeds it after the switch."""
    from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _store as es

    journal = {"action": "upgrade", "from": A, "to": B, "canary_ok": True, "previous": OLD}
    result = plan(node(running=A, link=B, previous=A, target=B, built=(A, B, OLD), journal=journal), UNLISTED)
    envs = [es.StoredEnv(name=p.rsplit("/", 1)[1], path=p, created=n) for n, p in enumerate((OLD, A, B))]
    remove, _kept = es.plan_prune(envs, 1, [B, A] + result["protect"])  # the link, .previous, the plan
    assert remove == []


@pytest.mark.parametrize("canary_state, stop", [("active", True), ("activating", True), ("failed", False),
                                                ("inactive", False), ("", False)])
def test_a_canary_a_killed_run_left_is_stopped_first(canary_state, stop):
    """On a converged node too: it holds GPU memory the next start needs (a failed transient
    unit holds none: the canary's own task resets it)."""
    observed = dict(node(target=A), canary={"active_state": canary_state, "main_pid": 777 if stop else 0})
    result = plan(observed, LISTED)
    assert result["stop_canary"] is stop
    assert result["converged"] is not stop
    assert result["steps"] == []
    assert ("a killed run's canary still runs (pid 777)" in result["line"]) is stop


def test_a_rollback_with_a_canary_left_stops_it_before_the_start():
    observed = dict(node(link=B, running=B, previous=A, target=B, switches=TO_B),
                    canary={"active_state": "active", "main_pid": 9})
    result = plan(observed, LISTED, requests={"rollback": True})
    assert result["stop_canary"] and result["steps"] == ["remove", "drain", "switch", "restart", "health", "add"]


FLEET_NODES = {
    # The rollout to B reached gpu01 and gpu02; gpu03's canary failed (no switch, no record of it);
    # gpu04 was added on B (ml_env made its link: no record); gpu05 came to B in the rollout
    # before, then went on to A by hand-run pins... (see the rows).
    "took the rollout": node(link=B, running=B, previous=A, target=B, switches=TO_B),
    "its canary failed, the rollout stopped there": node(link=A, running=A, previous=C, target=B,
                                                         switches=[sw(C, A, T0 - 900)]),
    "added on B, no switch on record": node(link=B, running=B, previous="", target=B),
    "killed between switch and restart": node(link=B, running=A, previous=A, target=B, switches=TO_B,
                                              journal={"action": "upgrade", "from": A, "to": B, "previous": C}),
    "killed after the record, before the link moved": node(link=A, running=A, previous=C, target=B,
                                                           switches=TO_B, journal={"action": "upgrade",
                                                                                   "from": A, "to": B}),
    "its start failed, the links were put back": node(link=A, running=A, previous=C, target=B, switches=TO_B),
    "rolled back already (the hold)": node(link=A, running=A, previous=B, target=B,
                                           switches=TO_B + [sw(B, A, T0 - 10, rollback=True)],
                                           hold={"from": B, "to": A, "at": "2026-12-01T10:00:00Z"}),
    "its rollback failed to start, the links were put back": node(link=B, running=B, previous=A, target=B,
                                                                  switches=TO_B + [sw(B, A, T0 - 10, rollback=True)]),
}


def fleet_rollout(nodes: dict) -> dict:
    """What plan.yml hands every node: vllm_last_rollout over every node's read."""
    hostvars = {host: {"vllm_server_node_state": observed} if observed is not None else {}
                for host, observed in nodes.items()}
    return FilterModule().filters()["vllm_last_rollout"](list(nodes), hostvars)


@pytest.mark.parametrize("name, goes_to", [
    ("took the rollout", A),
    ("its canary failed, the rollout stopped there", ""),
    ("added on B, no switch on record", ""),
    ("killed between switch and restart", A),
    ("killed after the record, before the link moved", ""),
    ("its start failed, the links were put back", ""),
    ("rolled back already (the hold)", ""),
    ("its rollback failed to start, the links were put back", A),
])
def test_rollback_undoes_the_fleets_last_rollout_on_the_nodes_it_switched(name, goes_to):
    """The pins name B here, and A: whatever they say, only a node the last rollout switched goes back."""
    rollout = fleet_rollout(FLEET_NODES)
    assert (rollout["env"], rollout["since"], rollout["unknown"]) == (B, T0 - 900, [])
    for pins in (A, B):
        observed = dict(FLEET_NODES[name], target={"path": pins, "env": pins})
        result = plan(observed, LISTED, requests={"rollback": True, "rollout": rollout})
        if goes_to:
            assert (result["action"], result["to"]) == ("rollback", goes_to), result["line"]
            assert result["switch_to"] == goes_to or observed["link"]["env"] == goes_to
        else:
            assert result["to"] == observed["link"]["env"] and "switch" not in result["steps"], result["line"]
            assert result["action"] != "rollback" and result["record_hold"] is False


def test_pins_put_back_to_a_then_rollback_leaves_the_nodes_on_a_where_they_are():
    """The issue's case: nodes on A whose .previous is an older Z (C here) never go two steps back."""
    nodes = {"gpu01": node(link=B, running=B, previous=A, target=A, switches=TO_B),
             "gpu02": node(link=A, running=A, previous=C, target=A, switches=[sw(C, A, T0 - 900)]),
             "gpu03": node(link=A, running=A, previous=C, target=A, switches=[])}
    rollout = fleet_rollout(nodes)
    plans = {host: plan(observed, LISTED, requests={"rollback": True, "rollout": rollout})
             for host, observed in nodes.items()}
    assert {host: p["to"] for host, p in plans.items()} == {"gpu01": A, "gpu02": A, "gpu03": A}
    assert [host for host, p in plans.items() if p["action"] == "rollback"] == ["gpu01"]
    assert "the rollout never switched it (or it went back since): it stays" in plans["gpu02"]["line"]


def test_pins_put_back_to_a_by_a_plain_run_then_rollback_undoes_that_run_only():
    """The plain run switched gpu01 B -> A (a rollout of A); gpu02 came to A in the rollout before
    B, so it stays on A rather than going back to C."""
    nodes = {"gpu01": node(link=A, running=A, previous=B, target=A, switches=TO_B + [sw(B, A, T0 - 20)]),
             "gpu02": node(link=A, running=A, previous=C, target=A, switches=[sw(C, A, T0 - 900)])}
    rollout = fleet_rollout(nodes)
    assert (rollout["env"], rollout["since"]) == (A, T0 - 50)
    first = plan(nodes["gpu01"], LISTED, requests={"rollback": True, "rollout": rollout})
    second = plan(nodes["gpu02"], LISTED, requests={"rollback": True, "rollout": rollout})
    assert (first["action"], first["to"]) == ("rollback", B)
    assert (second["action"], second["to"]) == ("none", A) and "earlier rollout" in second["line"]


def test_a_second_rollback_is_a_no_op():
    """After the first: each switched node holds (its plan's hold step), so nothing moves again,
    and the nodes it never switched still stay."""
    before = {"gpu01": node(link=B, running=B, previous=A, target=B, switches=TO_B),
              "gpu02": node(link=A, running=A, previous=C, target=B, switches=[sw(C, A, T0 - 900)])}
    first = plan(before["gpu01"], LISTED, requests={"rollback": True, "rollout": fleet_rollout(before)})
    record = first["switch_record"]
    assert record["switches"][-1] == sw(B, A, T0 + 500, rollback=True)
    after = dict(before, gpu01=node(link=A, running=A, previous=B, target=B, switches=record["switches"],
                                    hold={"from": first["from"], "to": first["to"], "at": "now"}))
    rollout = fleet_rollout(after)
    assert rollout["env"] == B  # a rollback is no rollout
    for host, observed in after.items():
        result = plan(observed, LISTED, requests={"rollback": True, "rollout": rollout})
        assert result["steps"] == [] and result["to"] == A, (host, result["line"])


def test_without_the_fleet_the_node_is_judged_from_its_own_record():
    """The role on its own, no rollout handed over: this node's read alone."""
    assert plan(node(link=B, running=B, previous=A, target=B, switches=TO_B), LISTED,
                requests={"rollback": True})["to"] == A
    stays = plan(node(link=A, running=A, previous=C, target=B), LISTED, requests={"rollback": True})
    assert stays["to"] == A and stays["steps"] == [] and "no node read has a switch" in stays["line"]


@pytest.mark.parametrize("history, frm, to, rollback, expected", [
    ([], "", B, False, [sw("", B, T0 + 500)]),
    (TO_B, B, C, False, TO_B + [sw(B, C, T0 + 500)]),
    # a killed run's entry for the same switch (the link never moved): replaced, not repeated
    (TO_B, A, B, False, [TO_B[0], sw(A, B, T0 + 500)]),
    (TO_B, B, A, True, TO_B + [sw(B, A, T0 + 500, rollback=True)]),
    ([sw(A, B, float(i)) if i % 2 else sw(B, A, float(i)) for i in range(20)], B, C, False,
     [sw(A, B, float(i)) if i % 2 else sw(B, A, float(i)) for i in range(5, 20)] + [sw(B, C, T0 + 500)]),
], ids=["first", "next", "killed run's entry replaced", "a rollback is marked", "the last 16 only"])
def test_the_switch_record_a_switch_writes_first(history, frm, to, rollback, expected):
    observed = node(link=frm, running=frm or None, target=to, switches=history, built=(A, B, C, ""))
    if rollback:
        observed["hold"] = None
        result = plan(observed, LISTED, requests={"rollback": True})
    else:
        result = plan(observed, [], canary={"enabled": False})
    assert result["switch_record"] == {"version": 1, "switches": expected}
    assert plan(node(target=A, switches=history), LISTED)["switch_record"] is None


@pytest.mark.parametrize("observed, undone", [
    ("this run's switch", [sw(C, A, T0 - 900)]),
    ("a killed run's switch, on record before its link moved", [sw(C, A, T0 - 900)]),
    ("a plain restart: nothing switched", None),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_failed_start_put_back_takes_its_switch_off_the_record(observed, undone):
    """recover.yml writes switch_record_undone after it puts the links back: the switch did not
    happen, so the next rollback must not take it for the fleet's last rollout."""
    states = {
        "this run's switch": node(link=A, running=A, previous=C, target=B, switches=[sw(C, A, T0 - 900)]),
        "a killed run's switch, on record before its link moved":
            node(link=B, running=A, previous=A, target=B, switches=TO_B,
                 journal={"action": "upgrade", "from": A, "to": B, "canary_ok": True, "previous": C}),
        "a plain restart: nothing switched": node(link=A, running=A, target=A, switches=TO_B[:1]),
    }
    result = plan(states[observed], UNLISTED, rendered={"unit_changed": True})
    assert (result["switch_record_undone"] or {}).get("switches") == undone


def test_a_rollback_past_a_legacy_directory_goes_where_the_switch_moved_it():
    """The switch from a real directory at the link (an older release's env) recorded the link's
    own path; ml_env_switch moved that directory into the store, where .previous names it."""
    legacy = "/opt/ml-env.d/legacy-20261130183000"
    observed = node(link=B, running=B, previous=legacy, target=B, built=(B, legacy, "/opt/ml-env"),
                    switches=[sw("/opt/ml-env", B)])
    result = plan(observed, LISTED, requests={"rollback": True})
    assert (result["action"], result["to"]) == ("rollback", legacy)


def test_the_fleet_read_names_the_nodes_it_could_not_read():
    rollout = fleet_rollout({"gpu01": node(link=B, switches=TO_B), "gpu02": None, "gpu03": {"skipped": True}})
    assert (rollout["env"], rollout["read"], rollout["unknown"]) == (B, ["gpu01"], ["gpu02", "gpu03"])
    assert fleet_rollout({"gpu01": node(link=A)})["env"] == ""


def test_the_prune_keeps_the_env_a_rollback_would_go_back_to():
    result = plan(node(link=B, running=B, previous=C, target=B, switches=TO_B), LISTED)
    assert A in result["protect"]


# Every name a server follows, found changed by its start record or by time, each way round: with
# the running start's own record, the record decides (a file put back with its old time is a
# change, a file rewritten with the same bytes is not); with none, another start's or an
# unreadable one, the file's time does. The restart request is always a time.
RECORDS = {
    "current, nothing changed": {"present": True, "current": True, "changed": [], "error": ""},
    "another start's (not written at this one)": {"present": True, "current": False, "changed": [], "error": ""},
    "none": {"present": False, "current": False, "changed": [], "error": ""},
    "unreadable": {"present": True, "current": False, "changed": [], "error": "/var/lib/gpuserve/vllm_server.start.json: "
                   "not a gpuserve.vllm start record of format 1"},
}


@pytest.mark.parametrize("name", [name for name, _text in vp.FILES_A_SERVER_FOLLOWS])
@pytest.mark.parametrize("record_key", list(RECORDS))
@pytest.mark.parametrize("in_record", [False, True])
@pytest.mark.parametrize("written_after", [False, True])
def test_what_changed_since_the_start_decides_the_restart(name, record_key, in_record, written_after):
    record = dict(RECORDS[record_key])
    if in_record and record["current"]:
        record["changed"] = [name]
    files = {"unit": T0 - 100, "env_file": T0 - 100, "restart_marker": None, name: T0 + 5 if written_after else T0 - 5}
    result = plan(node(target=A, files=files, start_record=record), LISTED)
    by_record = record["current"] and name != "restart_marker"
    due = (name in record["changed"]) if by_record else written_after
    assert result["steps"] == (["remove", "drain", "restart", "health", "add"] if due else []), result["line"]
    if due:
        text = dict(vp.FILES_A_SERVER_FOLLOWS)[name]
        assert f"{text} changed after the server started" in result["restart_reasons"]
    if record["error"]:
        assert record["error"] + ": what changed since its start is read from file times" in result["line"]


def test_a_unit_systemd_has_not_loaded_restarts_a_live_server_and_says_why():
    """A run rendered the unit and stopped before its daemon-reload; vLLM crashed and systemd
    started the old unit from memory, after the file's time: only systemd's NeedDaemonReload
    says that the new flags do not run (the times say nothing, the record may be another start's)."""
    files = {"unit": T0 - 5, "env_file": T0 - 100, "restart_marker": None}
    live = plan(node(target=A, files=files, need_daemon_reload=True), LISTED)
    assert live["restart_reasons"] == [
        "the unit file on disk is not the one systemd loaded (daemon-reload pending): the server runs the old unit"]
    assert "daemon-reload pending" in live["line"] and live["journal"]["why"] == live["restart_reasons"]
    assert live["server_steps"] == ["journal", "fence", "start", "clear_restart", "journal_done"]
    assert not live["converged"]
    # Its start record names the unit too (written at that start: _startrecord marks the digest).
    record = {"present": True, "current": True, "changed": ["unit"], "error": ""}
    both = plan(node(target=A, files=files, need_daemon_reload=True, start_record=record), LISTED)
    assert both["restart_reasons"] == ["the systemd unit changed after the server started", vp.UNIT_NOT_LOADED]
    # A dead server is started, with one reason: what a start does reloads the unit anyway.
    dead = plan(node(running=None, target=A, need_daemon_reload=True), LISTED)
    assert dead["restart_reasons"] == ["not running (failed/failed)"]
    # Held like every restart of a live server while a read does not answer.
    assert plan(node(target=A, need_daemon_reload=True), UNKNOWN)["action"] == "held"


def test_every_restart_the_plan_lists_loads_the_unit_first():
    """roles/vllm_server: a plan's `restart` (and a recovery's start) runs start.yml's restart
    block, whose first step is a daemon-reload: the unit the server then runs is the file on disk."""
    import yaml
    from pathlib import Path

    tasks = Path(__file__).resolve().parents[5] / "roles" / "vllm_server" / "tasks"
    step = yaml.safe_load((tasks / "steps" / "start.yml").read_text())[0]
    assert step["vars"]["__vllm_server_start_restart"] == "{{ 'restart' in vllm_server_node_plan.steps }}"
    run = next(t for t in yaml.safe_load((tasks / "start.yml").read_text()) if "block" in t)
    restart = next(t for t in run["block"] if t.get("when") == "__vllm_server_start_restart | bool")["block"]
    systemd = [t["ansible.builtin.systemd_service"] for t in restart if "ansible.builtin.systemd_service" in t]
    assert systemd[0]["daemon_reload"] is True and systemd[-1]["state"] == "restarted"
    recover = yaml.safe_load((tasks / "recover.yml").read_text())
    assert any(t.get("vars", {}).get("__vllm_server_start_restart") is True
               for block in recover for t in block.get("block", []))


def test_a_fingerprint_not_read_now_restarts_nothing_and_is_said():
    record = {"present": True, "current": True, "changed": [], "error": "",
              "unreadable": ["nccl_conf (unreadable: Permission denied)"]}
    result = plan(node(target=A, start_record=record), LISTED)
    assert result["steps"] == [], result["line"]
    assert "could not read nccl_conf (unreadable: Permission denied) now: not compared" in result["line"]


@pytest.mark.parametrize(("observed", "serving"), [
    (node(), True),
    (node(health_known=False), True),  # /health timed out: it may be serving (unknown is not no)
    (node(healthy=False), False),  # runs, /health refused: still loading
    (node(running=None), False),
    (node(running=None, health_known=False), False),  # no process: a time-out cannot mean it serves
    (node(unit="not-found", running=None), False),
    ({}, False),
], ids=["healthy", "health timed out", "loading", "failed", "failed, health timed out", "no unit", "nothing read"])
def test_the_idle_play_leaves_what_the_plan_calls_serving(observed, serving):
    """site.yml's idle play leaves a node to the rolling play by vllm_node_serving, before any plan:
    the same judgement as the plan's `serving` (a node it keeps is planned there, one it leaves is not)."""
    assert FilterModule().filters()["vllm_node_serving"](observed) is serving
    if observed:
        assert plan(observed, LISTED)["serving"] is serving
