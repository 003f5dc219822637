"""Tables for whether a router must restart and may restart now (_vllm/_router_restart.py).

The `systemctl show --timestamp=us+utc` and `find -printf '%T@ %p\\n'` texts are what systemd
252.39 (Debian 12, a podman node of tests/containers) and GNU find printed for a running, a
stopped and an unknown unit; the /readiness results are what ansible.builtin.uri returns for the
real vllm-router 0.1.17 (200 ready, 503 not ready), for a refused port and an unreachable host.
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _router_restart as vr

RUNNING = """MainPID=56
ExecMainStartTimestamp=Wed 2026-12-02 23:47:21.219560 UTC
LoadState=loaded
ActiveState=active
NeedDaemonReload=no
"""
STARTED = 1796255241.219560  # the ExecMainStartTimestamp above
STOPPED = """MainPID=0
ExecMainStartTimestamp=
LoadState=loaded
ActiveState=inactive
NeedDaemonReload=no
"""
NOT_FOUND = """MainPID=0
ExecMainStartTimestamp=
LoadState=not-found
ActiveState=inactive
NeedDaemonReload=no
"""
UNIT = "/etc/systemd/system/vllm-router.service"
ENV = "/etc/vllm-router/vllm-router.env"
DIST = "/opt/vllm-router/lib/python3.11/site-packages/vllm_router-0.1.17.dist-info"


def files(unit: float = STARTED - 60, env: float = STARTED - 60, dist: float = STARTED - 600) -> str:
    return f"{unit:.10f} {UNIT}\n{env:.10f} {ENV}\n{dist:.10f} {DIST}\n"


def ready(name: str) -> dict:
    return {"item": {"name": name}, "status": 200,
            "json": {"status": "ready", "healthy_workers": 2, "total_workers": 2}}


def not_ready(name: str) -> dict:
    return {"item": {"name": name}, "status": 503, "msg": "Status code was 503 and not [200]: HTTP Error 503"}


def refused(name: str) -> dict:
    return {"item": {"name": name}, "status": -1,
            "msg": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>"}


def unreachable(name: str) -> dict:
    return {"item": {"name": name}, "unreachable": True,
            "msg": "Failed to connect to the host via ssh: ssh: connect to host router02 port 22: Connection timed out"}


@pytest.mark.parametrize("show,text,pending,state,reasons", [
    (RUNNING, files(), [], "running", []),
    # Written in the same second as the start, but before it: no restart owed.
    (RUNNING, files(unit=STARTED - 0.2), [], "running", []),
    (RUNNING, files(unit=STARTED + 0.2), [], "running", [f"{UNIT} changed after it started"]),
    (RUNNING, files(env=STARTED + 30), [], "running", [f"{ENV} changed after it started"]),
    (RUNNING, files(dist=STARTED + 900), [], "running", [f"{DIST} changed after it started"]),
    (RUNNING.replace("NeedDaemonReload=no", "NeedDaemonReload=yes"), files(), [], "running",
     ["its unit changed on disk (systemd: NeedDaemonReload=yes)"]),
    # Check mode: what would be written is passed on.
    (RUNNING, files(), ["its unit"], "running", ["its unit would change"]),
    (STOPPED, "", [], "stopped", []),
    (NOT_FOUND, "", [], "stopped", []),
    (RUNNING.replace("ActiveState=active", "ActiveState=failed"), files(), [], "stopped", []),
    (RUNNING.replace("ActiveState=active", "ActiveState=deactivating"), files(), [], "unknown", []),
    ("", "", [], "unknown", []),
    (RUNNING.replace("Wed 2026-12-02 23:47:21.219560 UTC", ""), files(unit=STARTED + 1), [], "unknown", []),
])
def test_need(show, text, pending, state, reasons):
    got = vr.need(show, text, pending)
    assert (got["state"], got["reasons"]) == (state, reasons)
    assert bool(got["error"]) == (state == "unknown")


OWED = {"state": "running", "reasons": [f"{UNIT} changed after it started"], "error": ""}


@pytest.mark.parametrize("need,others,alone_ok,action,says", [
    ({"state": "stopped", "reasons": [], "error": ""}, [], False, "start", "not running"),
    ({"state": "running", "reasons": [], "error": ""}, [], False, "none", "runs what is on disk"),
    (OWED, [ready("router02")], False, "restart", "router02 take new requests"),
    (OWED, [not_ready("router02"), ready("router03")], False, "restart", "router03 take new requests"),
    (OWED, [], True, "restart", "restarts alone"),
    (OWED, [refused("router02")], True, "restart", "restarts alone"),
    # The only router: held, never restarted on a guess.
    (OWED, [], False, "held", "no other router is ready"),
    (OWED, [not_ready("router02")], False, "held", "router02 (Status code was 503"),
    (OWED, [refused("router02")], False, "held", "Connection refused"),
    (OWED, [unreachable("router02")], False, "held", "Connection timed out"),
    # Whether it owes one could not be read: held even when restarting alone is allowed.
    ({"state": "unknown", "reasons": [], "error": "systemd reports ActiveState=deactivating"}, [ready("router02")],
     True, "held", "could not be read (systemd reports ActiveState=deactivating)"),
])
def test_plan(need, others, alone_ok, action, says):
    got = vr.plan(need, others, alone_ok, "router01")
    assert got["action"] == action
    assert says in got["msg"] and got["msg"].startswith("router01")


def test_a_held_restart_names_what_changed_and_the_way_out():
    msg = vr.plan(OWED, [], False, "router01")["msg"]
    assert UNIT in msg and "vllm_router_restart_alone=true" in msg and "keeps serving" in msg
