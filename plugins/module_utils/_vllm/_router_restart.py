# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Whether a router must restart, from what its host shows, and whether it may restart now.

A restart is owed when what the running router was started from changed on disk since it
started: its unit, its environment file (API key), its installed vllm-router. That is read from
systemd (the main process's start, NeedDaemonReload) and from the files' modification times,
so a restart that an earlier run owed and did not make (a failure, a kill, a hold) is still
seen on the next run; no handler or marker carries it.

A restart refuses new connections until the new router is ready (vllm-router's graceful stop
lets the requests in flight finish first). It is made only while another router of the fleet
is ready to take new requests, or when the inventory allows a router to restart alone
(vllm_router_restart_alone). Otherwise it is held, with a message, and the run says so.
Stdlib only, no Ansible imports: filter plugins run this.
"""

from __future__ import annotations

import datetime as dt
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._unit import parse_systemctl_show

# What `systemctl show` must report; ExecMainStartTimestamp read with --timestamp=us+utc.
SHOW_PROPERTIES = ("LoadState", "ActiveState", "MainPID", "NeedDaemonReload", "ExecMainStartTimestamp")
_RUNNING = ("active", "reloading", "activating")
_STOPPED = ("inactive", "failed")


def _started(value: str) -> float | None:
    """'Wed 2026-12-02 23:43:00.123456 UTC' (systemctl --timestamp=us+utc) as a Unix time."""
    parts = value.split()
    if len(parts) != 4 or parts[3] != "UTC":
        return None
    try:
        when = dt.datetime.strptime(f"{parts[1]} {parts[2]}", "%Y-%m-%d %H:%M:%S.%f")
    except ValueError:
        return None
    return when.replace(tzinfo=dt.timezone.utc).timestamp()


def file_times(text: str) -> list[tuple[float, str]]:
    """`find ... -printf '%T@ %p\\n'` lines as (mtime, path)."""
    found = []
    for line in text.splitlines():
        stamp, _sep, path = line.strip().partition(" ")
        try:
            found.append((float(stamp), path))
        except ValueError:
            continue
    return found


def need(show: str, files: str, pending: t.Sequence[str] = (), name: str = "the router") -> dict[str, t.Any]:
    """What the host shows -> {state: running|stopped|unknown, reasons, error}.

    `pending` names what check mode would have changed (the files were not written then); `name`
    the service in the error (the monitoring services use this too: _monitor/_loaded.py).
    """
    props = parse_systemctl_show(show or "")
    active = props.get("ActiveState", "")
    if props.get("LoadState") == "not-found" or active in _STOPPED:
        return {"state": "stopped", "reasons": [], "error": ""}
    if active not in _RUNNING:
        return {"state": "unknown", "reasons": [],
                "error": f"systemd reports ActiveState={active or '(nothing)'} for {name}"}
    reasons = [f"{what} would change" for what in pending]
    if props.get("NeedDaemonReload") == "yes":
        reasons.append("its unit changed on disk (systemd: NeedDaemonReload=yes)")
    started = _started(props.get("ExecMainStartTimestamp", ""))
    if started is None:
        return {"state": "unknown", "reasons": reasons,
                "error": f"systemd gives no start time for {name}, which runs "
                         f"(ExecMainStartTimestamp={props.get('ExecMainStartTimestamp', '')!r})"}
    for mtime, path in file_times(files or ""):
        if mtime > started:
            reasons.append(f"{path} changed after it started")
    return {"state": "running", "reasons": reasons, "error": ""}


def _ready(read: t.Mapping[str, t.Any]) -> bool:
    return not read.get("unreachable") and read.get("status") == 200


def plan(need_: t.Mapping[str, t.Any], others: t.Sequence[t.Mapping[str, t.Any]] = (),
         alone_ok: bool = False, name: str = "the router") -> dict[str, t.Any]:
    """need | plan(other routers' /readiness reads, vllm_router_restart_alone) -> {action, reasons, msg}.

    action: start (not running), none, restart, held (a restart is owed and would leave no
    router taking new requests, or whether one is owed could not be read).
    """
    state, reasons = need_.get("state"), list(need_.get("reasons") or [])
    if state == "stopped":
        return {"action": "start", "reasons": ["not running"], "msg": f"{name} is not running: start it"}
    if state == "unknown":
        return {"action": "held", "reasons": reasons,
                "msg": f"{name}: not restarted, whether it must be could not be read ({need_.get('error')}); "
                       "it keeps serving as it is"}
    if not reasons:
        return {"action": "none", "reasons": [], "msg": f"{name} runs what is on disk"}
    why = "; ".join(reasons)
    ready = [r.get("item", {}).get("name", "?") for r in others if _ready(r)]
    if ready:
        return {"action": "restart", "reasons": reasons,
                "msg": f"{name} restarts ({why}); {', '.join(ready)} take new requests meanwhile"}
    if alone_ok:
        return {"action": "restart", "reasons": reasons,
                "msg": f"{name} restarts alone ({why}): new connections are refused until it is ready "
                       "again (vllm_router_restart_alone)"}
    unread = [f"{r.get('item', {}).get('name', '?')} ({r.get('msg') or r.get('status')})" for r in others]
    return {"action": "held", "reasons": reasons,
            "msg": f"{name}: restart owed ({why}) but held: no other router is ready to take new requests"
                   f"{' (' + ', '.join(unread) + ')' if unread else ''}, and a router that restarts refuses "
                   "new connections until it is ready again, after the requests in flight end. It keeps "
                   "serving as it is. Restart it in a quiet moment with -e vllm_router_restart_alone=true, "
                   "or add a router (docs/operations.md, \"Router restarts\")"}
