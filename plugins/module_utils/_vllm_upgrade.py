# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What vllm_server does about the env link on this run (canary, switch, rollback), and its report.

The role reads the link and the target on the node, hands them here, and acts on the plan; at
the end it hands the outcomes back and prints the one line `report` writes. Stdlib only, no
Ansible imports: the filter plugins run this on the controller.
"""

from __future__ import annotations

import os
import typing as t

STOP_SERVER_MODES = ("auto", "true", "false")


class UpgradeError(ValueError):
    """An input the plan cannot be made from; the message names the variable."""


def _bool(value: t.Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _norm(path: t.Any) -> str:
    return os.path.normpath(str(path)) if path else ""


def plan(current: t.Any, target: t.Any, *, canary: t.Any = True, start: t.Any = True,
         stop_server: t.Any = "auto", drained: t.Any = False, batch_size: int = 1,
         hosts_count: int = 1, canary_requested: t.Any = False,
         rollback: t.Any = False, server_active: t.Any = True) -> dict[str, t.Any]:
    """The run's decisions.

    current: real path the link names ("" when none; the link itself when it is a real
    directory). target: the env this run's pins describe ("" = no switch wanted).
    canary_requested: the `canary` tag (a canary even without a switch).
    """
    mode = str(stop_server).strip().lower()
    if mode not in STOP_SERVER_MODES:
        raise UpgradeError(f"vllm_server_canary_stop_server must be one of auto, true, false; found {stop_server!r}")
    current, target = _norm(current), _norm(target)
    decision: dict[str, t.Any] = {"current": current, "target": target, "action": "none",
                                  "canary": False, "canary_env": "", "canary_reason": "",
                                  "stop_server": False, "stop_reason": ""}
    if _bool(rollback):
        decision.update(action="rollback",
                        canary_reason="rollback: the previous env served before, no canary")
        return decision
    switch = bool(target) and target != current
    if switch:
        decision["action"] = "switch"
    if not switch and not _bool(canary_requested):
        decision["canary_reason"] = ("no switch: the link already names " + current if target
                                     else "no switch: vllm_server_env_target is empty")
        return decision
    decision["canary_env"] = target or current
    if not decision["canary_env"]:
        decision["canary_reason"] = "no env to run a canary of (no link, no target)"
    elif not _bool(start):
        decision["canary_reason"] = ("vllm_server_start is false (no GPU): no canary; nothing "
                                     "serves, so the switch is safe")
    elif switch and not _bool(canary) and not _bool(canary_requested):
        decision["canary_reason"] = "vllm_server_canary is false"
    else:
        decision["canary"] = True
    if decision["canary"]:
        shared = batch_size < hosts_count
        stop = {"true": True, "false": False}.get(mode, _bool(drained) or shared)
        decision["stop_server"] = stop and _bool(server_active)
        decision["stop_reason"] = (
            "the server is not running" if not _bool(server_active) else
            f"vllm_server_canary_stop_server is {mode}" if mode != "auto" else
            "the node is drained (vllm_server_drained)" if _bool(drained) else
            f"this batch holds {batch_size} of {hosts_count} nodes (gpuserve_serial)" if shared else
            "the node serves alone in its batch: the canary runs beside it")
    return decision


def _short(path: str) -> str:
    return os.path.basename(path.rstrip("/")) or path


def report(decision: t.Mapping[str, t.Any], canary: t.Mapping[str, t.Any] | None = None,
           switch: t.Mapping[str, t.Any] | None = None, start: t.Mapping[str, t.Any] | None = None,
           rollback: t.Mapping[str, t.Any] | None = None, prune: t.Mapping[str, t.Any] | None = None,
           check_mode: bool = False) -> dict[str, t.Any]:
    """The fact vllm_server_upgrade, with `line`: every decision of the run in one sentence."""
    canary, switch, start = dict(canary or {}), dict(switch or {}), dict(start or {})
    rollback, prune = dict(rollback or {}), dict(prune or {})
    would = "would " if check_mode else ""
    parts = []
    target, current = decision.get("target") or "", decision.get("current") or ""
    if target:
        parts.append(f"env {_short(target)}" + (" (already serving)" if target == current else " built"))
    if decision.get("canary"):
        if check_mode or "ok" not in canary:
            parts.append(f"canary of {_short(decision['canary_env'])} {would}run"
                         + (" after stopping the server (" + decision["stop_reason"] + ")"
                            if decision.get("stop_server") else " beside the server"))
        elif canary.get("ok"):
            parts.append(f"canary passed in {canary.get('seconds', '?')} s")
        else:
            parts.append(f"canary FAILED after {canary.get('seconds', '?')} s: {canary.get('msg', '')}")
    elif decision.get("canary_reason") and decision.get("action") == "switch":
        parts.append(f"no canary ({decision['canary_reason']})")
    if decision.get("action") == "switch":
        if check_mode:
            parts.append(f"would switch {current or '(nothing)'} -> {target}")
        elif switch.get("changed"):
            parts.append(f"switched {_short(switch.get('switched_from') or current) or '(nothing)'}"
                         f" -> {_short(switch.get('switched_to') or target)}")
        else:
            parts.append("no switch")
    if start:
        parts.append("healthy after the switch" if start.get("ok")
                     else f"start FAILED: {start.get('msg', '')}")
    if rollback:
        if rollback.get("ok"):
            parts.append(f"rolled back to {_short(rollback.get('to', ''))}, healthy")
        else:
            parts.append(f"rollback to {_short(rollback.get('to', '')) or '?'} FAILED: {rollback.get('msg', '')}")
    elif decision.get("action") == "rollback":
        parts.append(f"{would}roll back to the previous env")
    if prune.get("removed"):
        parts.append("pruned " + ", ".join(_short(p) for p in prune["removed"]))
    if not parts:
        parts.append(decision.get("canary_reason") or "nothing to do")
    fact = {k: decision.get(k) for k in ("current", "target", "action", "canary_env",
                                         "canary_reason", "stop_server", "stop_reason")}
    fact.update(canary_run=bool(decision.get("canary")) and "ok" in canary,
                canary_ok=canary.get("ok"), canary_seconds=canary.get("seconds"),
                switched=bool(switch.get("changed")), start_ok=start.get("ok"),
                rolled_back=bool(rollback.get("ok")), pruned=list(prune.get("removed") or []),
                check_mode=bool(check_mode))
    fact["line"] = "env upgrade: " + "; ".join(parts)
    return fact


def current_env(link_stat: t.Mapping[str, t.Any] | None, link: str) -> str:
    """The env the link names, from Ansible's stat of it (follow: false): the symlink's real
    target, the link itself when it is a real directory (an older release's env), else ""."""
    stat = dict(link_stat or {})
    if not stat.get("exists"):
        return ""
    if stat.get("islnk"):
        return _norm(stat.get("lnk_source") or "")
    return _norm(link) if stat.get("isdir") else ""
