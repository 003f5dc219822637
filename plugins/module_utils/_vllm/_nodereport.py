# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What the serve play prints and does after the plan: its one line (`line`), the fact of what
each step gave (`report`) and what brings a node back after a failed step (`recovery`).

Stdlib only, no Ansible imports: a filter plugin runs this on the controller.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._nodeview import _bool, short


_HEADS = {
    "none": "converged ({state})",
    "held": "HELD ({state})",
    "hold": "hold {to}",
    "upgrade": "upgrade {from_} -> {to}",
    "rollback": "rollback {from_} -> {to}",
    "switch": "switch to {to} (vllm_server_start is false: nothing serves)",
    "start": "start {to} ({state})",
    "restart": "restart {to}",
    "add": "put back into the routers ({state})",
    "wait": "wait for {to} ({state})",
    "canary": "canary of {to}",
    "acceptance": "node acceptance, then {to} again",
}


def line(p: t.Mapping[str, t.Any]) -> str:
    """`<action> <from> -> <to>: <steps>; <why>` -- what the serve play prints per node."""
    steps = list(p.get("steps") or [])
    head = _HEADS.get(str(p.get("action")), str(p.get("action"))).format(
        state=p.get("state"), to=short(p.get("to")), from_=short(p.get("from")))
    shown = []
    for step in steps:
        if step == "canary":
            shown.append("canary " + ("beside the server" if p.get("canary_beside") else
                                      "with the server stopped" if "stop" in steps else "(nothing runs)"))
        else:
            shown.append(step)
    why = ([str(p["held"])] if p.get("held") else []) + list(p.get("reasons") or []) + list(p.get("restart_reasons") or [])
    if p.get("action") in ("upgrade", "restart", "start") and not p.get("canary") and p.get("canary_reason"):
        why.append("no canary: " + str(p["canary_reason"]))
    if p.get("resumed"):
        why.append("resumed from the journal of a killed run")
    if p.get("rollback_to"):
        why.append(f"a failed start rolls back to {short(p['rollback_to'])}")
    if p.get("routers_note"):
        why.append(str(p["routers_note"]))
    return head + ": " + (", ".join(shown) if shown else "no step") + "".join("; " + w for w in why)


def report(p: t.Mapping[str, t.Any], outcomes: t.Mapping[str, t.Any] | None = None,
           check_mode: bool = False) -> dict[str, t.Any]:
    """The fact vllm_server_serve: the plan, what each step gave, and `line` saying it all.

    outcomes: canary {ok, seconds, msg}, switch (ml_env_switch's result), start {ok, msg,
    elapsed_text}, recovered {ok, kind (rollback | restart), to, msg}, drain {outcome, msg},
    prune {removed}, failed (a message when a step failed outside these).
    """
    out = {k: dict(v or {}) if isinstance(v, t.Mapping) else v for k, v in dict(outcomes or {}).items()}
    canary, switch, start = out.get("canary") or {}, out.get("switch") or {}, out.get("start") or {}
    drain, prune = out.get("drain") or {}, out.get("prune") or {}
    head = _HEADS.get(str(p.get("action")), str(p.get("action"))).format(
        state=p.get("state"), to=short(p.get("to")), from_=short(p.get("from")))
    parts: list[str] = []
    if check_mode:
        parts.append("would run: " + (", ".join(p.get("steps") or []) or "no step"))
    if drain.get("msg"):
        parts.append(str(drain["msg"]))
    if p.get("canary") and not check_mode:
        if "ok" not in canary:
            parts.append("canary not run")
        elif canary.get("ok"):
            parts.append(f"canary passed in {canary.get('seconds', '?')} s")
        else:
            parts.append(f"canary FAILED after {canary.get('seconds', '?')} s: {canary.get('msg', '')}")
    if switch.get("changed") and not check_mode:
        parts.append(f"switched {short(switch.get('switched_from')) if switch.get('switched_from') else '(nothing)'}"
                     f" -> {short(switch.get('switched_to') or p.get('to'))}")
    if start:
        parts.append(f"healthy after {start.get('elapsed_text') or start.get('elapsed', '?')}" if start.get("ok")
                     else f"start FAILED: {start.get('msg', '')}")
    recovered = out.get("recovered") or {}
    if recovered:
        what = "rolled back to" if recovered.get("kind") == "rollback" else "started again on"
        parts.append(f"{what} {short(recovered.get('to'))}, healthy" if recovered.get("ok")
                     else f"{what} {short(recovered.get('to'))}: FAILED too: {recovered.get('msg', '')}")
    if prune.get("removed"):
        parts.append("pruned " + ", ".join(short(x) for x in prune["removed"]))
    if out.get("failed"):
        parts.append(str(out["failed"]))
    ok = not any((canary and canary.get("ok") is False, start and not start.get("ok"), out.get("failed")))
    fact = {k: p.get(k) for k in ("action", "from", "to", "steps", "rollback_to", "canary", "resumed")}
    fact.update(ok=ok, check_mode=bool(check_mode), canary_ok=canary.get("ok"),
                canary_seconds=canary.get("seconds"), switched=bool(switch.get("changed")),
                start_ok=start.get("ok"),
                rolled_back=bool(recovered.get("ok")) and recovered.get("kind") == "rollback",
                pruned=list(prune.get("removed") or []), drain=drain.get("outcome"))
    done = ", ".join(p["steps"]) + " done" if p.get("steps") else "no step"
    fact["line"] = head + ": " + ("; ".join(parts) if parts else done)
    return fact


def recovery(p: t.Mapping[str, t.Any], outcomes: t.Mapping[str, t.Any] | None,
             stop_on_failure: t.Any = True, service: str = "vllm.service",
             restart_sec: t.Any = 30) -> dict[str, t.Any]:
    """After a failed step: what brings the node back to serving, so no run leaves it stopped.

    Steps: `restore` (both env links back as they were before the plan), `start` ((re)start
    and wait), `stop` (stop a server that cannot start, instead of systemd restarting it every
    RestartSec). A failed canary never switched anything: only a server stopped for it starts
    again. A failed start goes back to the env that served before when there is one; a server
    that became healthy but failed the completion check keeps running. `why` says what the
    report of the outcomes does not.
    """
    out = dict(outcomes or {})
    canary, start = dict(out.get("canary") or {}), dict(out.get("start") or {})
    steps = list(p.get("steps") or [])
    before = short(p.get("from"))
    if canary and canary.get("ok") is False:
        if "stop" in steps:
            return {"steps": ["start"], "why": ""}  # the report says "started again on <env>"
        return {"steps": [], "why": "the server kept serving beside the canary"}
    if start and not start.get("ok"):
        if p.get("rollback_to"):
            return {"steps": ["restore", "start"], "why": ""}  # the report says "rolled back to <env>"
        if start.get("stage") == "check":
            return {"steps": [], "why": "the server is healthy but failed the check; it keeps running"}
        if _bool(stop_on_failure):
            return {"steps": ["stop"], "why": f"{service} has been stopped, so that systemd does not "
                                              f"restart it every {restart_sec} s"}
        return {"steps": [], "why": f"{service} was left to systemd (vllm_server_stop_on_failure: "
                                    f"false): it restarts every {restart_sec} s"}
    return {"steps": [], "why": ""}
