# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""One serve plan per node, decided from what is observed on it (site.yml's serve plays).

The node is observed read-only (module vllm_node_state: the unit, the env its running process
uses and when that process started, the env link, `<link>.previous`, the target env, the
restart request, a journal left by a killed run, a rollback hold, /health and /metrics), the
routers are read (which of them list the node, healthy or not), and `plan()` turns that into
the ordered steps of this run:

    remove -> drain -> stop -> canary -> switch -> reboot -> acceptance -> restart -> health -> add

each only when needed. A converged node gets no step; a stranded healthy node gets only `add`;
a dead node is restarted without a drain; a rollback is a drained switch to the env it names;
node acceptance gpu_node left for the serve play runs on the stopped server, drained (never under
its load), or before the start of a node that serves nothing.
Every step that stops the server is followed by one that starts it.

A read that did not answer is its own answer, never "absent" or "idle": a router whose workers
could not be read, or the node's own /health that timed out, holds every step that would take a
live server out, drain it or stop it (`held` says what could not be read); a node that may still
serve is not started over as an idle one, and a /metrics that did not answer keeps the drain
(the drain reads it again and ends only on confirmed readings).

Whether a restart is due is read from the node, not remembered: the running process uses
another env than the one to serve, or something it loaded at its start changed since (its start
record against what is on disk; file times without one), or systemd has not loaded the unit file
on disk (NeedDaemonReload), or a restart was requested after it started, or nothing runs. The
journal the plan hands back (written to the node before the first step that changes anything,
removed after the last) only keeps what cannot be observed later: the env that served before
(the rollback target if the new one fails to start), the env it goes to, and whether that env's
canary passed. What the node and the routers say is read in _nodeview; the line, the report and
the recovery after a failed step are _nodereport's. Stdlib only, no Ansible imports: a filter
plugin runs this on the controller.
"""

from __future__ import annotations

import math
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _rollout as vr
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._nodereport import line
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._nodeview import (
    Node, PlanError, Routers, _bool, _float, _int, short)

STEPS = ("remove", "drain", "stop", "canary", "switch", "reboot", "acceptance", "restart", "health", "add")
STOP_SERVER_MODES = ("auto", "true", "false")
JOURNAL_VERSION = 1
# What a running server loaded at its start: any of these changed since it started is a restart
# reason, observed on the node rather than remembered by a handler: compared with the start record
# the unit writes (vllm_node_state's `start_record.changed`), or by time without one (`files`). The
# restart request is a time only.
FILES_A_SERVER_FOLLOWS = (
    ("unit", "the systemd unit"), ("env_file", "the env file"), ("nccl_conf", "the NCCL configuration"),
    ("env_code", "vLLM's code in the env it runs (an install or a patch)"),
    ("model", "the model path (another revision)"), ("drafter", "the drafter path (another revision)"),
    ("restart_marker", "the restart request"))
# A live server while systemd says NeedDaemonReload: it runs the unit systemd had in memory (a run
# wrote the file and stopped before its daemon-reload; a crash restart since starts that old unit
# too). The restart runs daemon-reload first (roles/vllm_server/tasks/start.yml).
UNIT_NOT_LOADED = ("the unit file on disk is not the one systemd loaded (daemon-reload pending): "
                   "the server runs the old unit")
# What a canary beside a live server leaves free for that server's own allocations.
CANARY_RESERVE_MIB = 1024


# --- the canary beside a live server -------------------------------------------------------

def canary_memory(gpus: t.Sequence[t.Mapping[str, t.Any]], need_gib: t.Any,
                  reserve_mib: int = CANARY_RESERVE_MIB) -> dict[str, t.Any]:
    """What a canary beside the live server may use: the smallest free memory of the GPUs.

    vLLM refuses to start when a GPU's free memory is below gpu_memory_utilization x total, so
    the canary asks for what is free (less `reserve_mib` for the live server), rounded down to
    a hundredth. `ok` is False when that is below `need_gib` (vllm_server_canary_gpu_memory_gib)
    or no GPU memory was read; `reason` says why, in figures.
    """
    need = _float(need_gib)
    if need is None or need <= 0:
        raise PlanError(f"vllm_server_canary_gpu_memory_gib must be a positive number, got {need_gib!r}")
    rows = [g for g in gpus if (_float(g.get("total_mib")) or 0) > 0 and _float(g.get("free_mib")) is not None]
    if not rows:
        return {"ok": False, "utilization": None,
                "reason": "no GPU's free memory could be read (nvidia-smi --query-gpu=memory.free)"}
    tightest = min(rows, key=lambda g: float(g["free_mib"]))
    free, total = float(tightest["free_mib"]), float(tightest["total_mib"])
    utilization = math.floor(max(0.0, free - reserve_mib) / total * 100) / 100
    figures = (f"GPU {tightest.get('index', '?')} has {free / 1024:.1f} GiB free of "
               f"{total / 1024:.1f} GiB")
    if utilization * total / 1024 < need:
        return {"ok": False, "utilization": utilization,
                "reason": f"{figures}; the canary needs {need:g} GiB (vllm_server_canary_gpu_memory_gib)"}
    return {"ok": True, "utilization": utilization,
            "reason": f"{figures}: the canary gets --gpu-memory-utilization {utilization:.2f}"}


# --- the plan ----------------------------------------------------------------------------

def _desired(node: Node, req: t.Mapping[str, t.Any]) -> tuple[str, str, list[str]]:
    """(the env to serve after this run, 'rollback' | 'hold' | '', why)."""
    journal, hold = node.journal, node.hold
    target, link = node.target, node.link
    j_action = str((journal or {}).get("action") or "")
    j_from, j_to = str((journal or {}).get("from") or ""), str((journal or {}).get("to") or "")
    if journal and j_action == "rollback" and target in ("", j_from, j_to):
        return j_to, "rollback", [f"finishing the rollback to {short(j_to)} that a killed run began"]
    if _bool(req.get("rollback")):
        if hold and link and hold.get("to") == link:
            return link, "", [f"already rolled back to {short(link)} (from {short(hold.get('from'))}, "
                              f"{hold.get('at', '?')}): a rollback is one-shot"]
        rollout = req.get("rollout") or vr.last_rollout({"this node": node.raw})
        back, why = vr.back_to(link, node.switches, rollout)
        if not back:
            return link, "", [why]
        if back == node.link_path and node.previous:  # a legacy directory the switch moved into the store
            back = node.previous
        if not node.built(back):
            raise PlanError(f"vllm_server_rollback: {short(back)}, the env this node served before its last "
                            f"switch, has no bin/vllm ({back}); nothing was changed")
        return back, "rollback", [why]
    if journal and j_to and j_action != "rollback":
        if target and target != j_to:
            return target, "", [f"a killed run was going to {short(j_to)}; the target is now {short(target)}"]
        return j_to, "", ([f"finishing what a killed run began ({short(j_from)} -> {short(j_to)})"]
                          if j_to != j_from else ["finishing the restart a killed run began"])
    if hold and target and target == hold.get("from") and not _bool(req.get("rollforward")):
        return link, "hold", [f"holding {short(link)}: {short(target)} was rolled back from by hand "
                              f"({hold.get('at', '?')}); pin another release, or set "
                              f"vllm_server_rollforward: true to serve it again"]
    return target or link, "", []


def plan(state: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The node's steps for this run, the journal to keep while they run, and one line.

    state keys: observed (vllm_node_state's result); routers ([{name, reachable, listed,
    healthy, error}] for this node); start (vllm_server_start); rendered ({unit_changed,
    env_changed}: the unit and env file on the node differ from what this run renders); requests ({restart,
    restart_since (a server started after this epoch already is the restart asked for),
    rollback, rollout (the fleet's last rollout: _rollout.last_rollout over every node's read;
    None: this node's read alone), rollforward, canary}); canary ({enabled, stop_server,
    batch_size, hosts_count, gpu_memory_gib}); env_keep (vllm_server_env_keep: how many envs a prune after a switch
    keeps, 0 = no prune); check_mode; now (epoch seconds, recorded in the journal).
    """
    node = Node(state.get("observed") or {})
    routers = Routers(state.get("routers"))
    req = dict(state.get("requests") or {})
    rendered = dict(state.get("rendered") or {})
    canary_cfg = dict(state.get("canary") or {})
    start = _bool(state.get("start", True))
    check_mode = _bool(state.get("check_mode"))
    mode = str(canary_cfg.get("stop_server", "auto")).strip().lower()
    if mode not in STOP_SERVER_MODES:
        raise PlanError(f"vllm_server_canary_stop_server must be one of auto, true, false; "
                        f"found {canary_cfg.get('stop_server')!r}")

    managed = bool(node.link_path)  # vllm_server_env_link "" = the role does not manage envs
    desired, kind, reasons = _desired(node, req) if managed else ("", "", [])
    if node.alive and node.record_error:
        reasons = reasons + [f"{node.record_error}: what changed since its start is read from file times"]
    if node.alive and node.record_unreadable:
        reasons = reasons + ["could not read " + ", ".join(node.record_unreadable)
                             + " now: not compared with the start record (no restart for what is not known)"]
    if node.canary_left:
        reasons = reasons + [f"a killed run's canary still runs (pid {node.canary_pid}): stopped first, "
                             "it holds GPU memory a start needs"]
    if managed and not desired and start:
        raise PlanError(f"nothing to serve: {node.link_path or 'the env link'} names no env "
                        f"({node.link_kind}) and no target env was handed over "
                        "(vllm_server_env_target); run site.yml's prepare play (ml_env, vllm_install)")
    switch = bool(desired) and desired != node.link
    if switch and not node.built(desired) and not check_mode:
        raise PlanError(f"the env to serve, {desired}, has no bin/vllm: it was not built (ml_env and "
                        "vllm_install build it in site.yml's prepare play). Nothing was changed.")

    journal = node.journal
    if journal:
        served_before = str(journal.get("from") or "")
        previous_before = str(journal.get("previous") or "")
    else:
        served_before = node.running_env or node.link
        previous_before = node.previous

    # A restart is due when the process would not be what a start now makes.
    restart_reasons: list[str] = []
    if start:
        if not node.alive:
            restart_reasons.append(node.state_text())
        elif managed and node.running_env != desired:
            restart_reasons.append(f"the server runs {short(node.running_env)}, {short(desired)} is to serve")
        for key, text in (("unit_changed", "the systemd unit changes"), ("env_changed", "the env file changes")):
            if _bool(rendered.get(key)):
                restart_reasons.append(text)
        if node.alive:
            for name, text in FILES_A_SERVER_FOLLOWS:
                if node.changed_since_start(name):
                    restart_reasons.append(f"{text} changed after the server started")
            if node.need_daemon_reload:
                restart_reasons.append(UNIT_NOT_LOADED)
        elif node.files.get("restart_marker") is not None:
            restart_reasons.append("a restart was requested")
        since = _float(req.get("restart_since"))
        served_since = node.alive and since and node.process_started and node.process_started >= since
        if _bool(req.get("restart")) and not served_since:
            restart_reasons.append("vllm_server_restart_requested")
    if node.reboot_pending:
        restart_reasons.append(f"reboot pending ({node.reboot_reason or 'gpu_node'})")
    # Acceptance needs the GPUs to itself: the server stops for it (a reboot stops it anyway).
    acceptance = start and node.acceptance_pending
    if acceptance:
        restart_reasons.append(f"node acceptance pending ({node.acceptance_reason or 'gpu_node'})")
    stop_for_acceptance = acceptance and node.alive and not node.reboot_pending
    restart = bool(restart_reasons) and start

    # The canary: before an env serves on this node for the first time, or on demand.
    canary_passed = bool(journal and journal.get("to") == desired and _bool(journal.get("canary_ok")))
    canary, canary_reason = False, ""
    if start and _bool(req.get("canary")):
        if not managed:
            raise PlanError("a canary needs the env the server runs from: vllm_server_env_link is empty")
        canary, canary_reason = True, "asked for (--tags canary or vllm_server_canary_requested)"
    elif kind == "rollback":
        canary_reason = f"rollback: {short(desired)} served here before"
    elif start and restart and managed and desired != served_before:
        if canary_passed:
            canary_reason = f"{short(desired)} passed its canary in the killed run"
        elif not _bool(canary_cfg.get("enabled", True)):
            canary_reason = "vllm_server_canary is false"
        else:
            canary, canary_reason = True, f"{short(desired)} has not served on this node"

    stop_for_canary, canary_beside, stop_reason = False, False, ""
    memory: dict[str, t.Any] = {}
    if canary and node.alive:
        batch, hosts = _int(canary_cfg.get("batch_size"), 1), _int(canary_cfg.get("hosts_count"), 1)
        if mode == "true":
            stop_for_canary, stop_reason = True, "vllm_server_canary_stop_server is true"
        elif mode == "auto" and (routers.reachable or routers.unknown):
            stop_for_canary, stop_reason = True, "the node leaves the routers and drains for it"
        elif mode == "auto" and batch < hosts:
            stop_for_canary, stop_reason = True, f"its batch holds {batch} of {hosts} nodes (gpuserve_serial)"
        if not stop_for_canary:
            canary_beside = True
            memory = canary_memory(node.gpus, canary_cfg.get("gpu_memory_gib", 16))
            if not memory["ok"]:
                raise PlanError(
                    "a canary beside the live server does not fit: " + memory["reason"]
                    + ". Nothing was stopped. Set vllm_server_canary_stop_server: true (the server "
                    "stops for the canary and starts again; behind vllm_routers it is drained "
                    "first), lower vllm_server_canary_gpu_memory_gib if the canary needs less, or "
                    "set vllm_server_canary: false to switch without one")
    if stop_for_canary and not restart:
        restart, restart_reasons = True, ["started again after the canary it is stopped for"]
    stops_server = node.alive and restart

    routed = start and bool(routers.reachable)
    steps: list[str] = []
    if routed and routers.listed and (stops_server or not node.alive):
        steps.append("remove")
    # Only a /metrics known to have nothing to read skips the drain; one that did not answer
    # leaves it to the drain, which reads again and ends on confirmed readings only.
    if routed and stops_server and (node.metrics_reachable or not node.metrics_known):
        steps.append("drain")
    if stop_for_canary or stop_for_acceptance:
        steps.append("stop")
    if canary:
        steps.append("canary")
    if switch:
        steps.append("switch")
    if node.reboot_pending:
        steps.append("reboot")
    if acceptance:
        steps.append("acceptance")
    if restart:
        steps.append("restart")
    if start and (restart or not node.healthy or journal):
        steps.append("health")
    if routed and ("remove" in steps or not routers.all_listed_healthy):
        steps.append("add")

    held = _held(node, routers, steps)
    if held:
        steps = []
    changes = any(step in steps for step in ("stop", "canary", "switch", "reboot", "acceptance", "restart"))
    rollback_to = served_before if (restart and served_before and served_before != desired
                                    and node.built(served_before)) else ""
    if held:
        action = "held"
    elif kind in ("rollback", "hold"):
        action = kind
    elif not start:
        action = "switch" if switch else "none"
    elif restart and desired != served_before:
        action = "upgrade"
    elif canary and not switch:
        action = "canary"
    elif acceptance and node.alive:
        action = "acceptance"
    elif restart:
        action = "restart" if node.alive else "start"
    elif steps == ["add"]:
        action = "add"
    elif steps:
        action = "wait"
    else:
        action = "none"

    record = None
    if changes or journal:
        record = {"version": JOURNAL_VERSION, "action": action, "from": served_before, "to": desired,
                  "previous": previous_before, "rollback_to": rollback_to, "canary_ok": canary_passed,
                  "steps": steps, "created": _float(state.get("now")) or 0.0,
                  "why": reasons + restart_reasons}
    clear_marker = "restart" in steps or (not start and node.files.get("restart_marker") is not None)
    # Nothing for the role to do at all: no step, nothing to render, no request to clear.
    converged = (not held and not steps and not node.canary_left and not _bool(rendered.get("unit_changed")) and not _bool(rendered.get("env_changed"))
                 and not clear_marker and not journal)
    result = {
        "action": action, "from": served_before, "to": desired, "steps": steps, "changes": changes,
        "converged": converged,
        "switch_to": desired if switch else "", "rollback_to": rollback_to,
        "rollback_previous": previous_before if rollback_to else "",
        "canary": canary, "canary_env": desired if canary else "", "canary_reason": canary_reason,
        "canary_beside": canary_beside, "canary_memory": memory, "stop_reason": stop_reason,
        "restart_reasons": restart_reasons if restart else [], "reasons": reasons,
        "held": held,
        "routed": routed, "routers_note": routers.note(), "serving": node.serving,
        "alive": node.alive, "state": node.state_text(), "journal": record, "resumed": bool(journal),
        "stop_canary": node.canary_left,
        "record_hold": action == "rollback", "clear_hold": bool(node.hold) and switch and kind != "rollback",
        # Written before the link moves (steps/switch.yml): the fleet's next rollback reads it.
        "switch_record": (vr.record(node.switches, node.link, desired, _float(state.get("now")) or 0.0,
                                    kind == "rollback") if switch else None),
        # What recover.yml writes after it puts the links back to rollback_to.
        "switch_record_undone": vr.undone(node.switches, rollback_to, desired) if rollback_to else None,
    }
    prune = switch and _int(state.get("env_keep"), 2) > 0
    fence = node.alive and bool(routers.all) and not check_mode
    result["server_steps"] = [] if held else server_steps(result, check_mode, clear_marker, prune, fence)
    result["protect"] = _protected(node)
    result["line"] = line(result)
    return result


def server_steps(p: t.Mapping[str, t.Any], check_mode: bool, clear_marker: bool, prune: bool,
                 fence: bool) -> list[str]:
    """What roles/vllm_server runs on the node, in this order, one task file per kind
    (tasks/steps/<kind>.yml): the plan's own steps and the records around them, so that the
    order of an upgrade lives here alone. The router steps (remove, drain, add) are site.yml's.

    The journal is written before the first step that changes anything and removed after the
    last; a canary or a start that fails runs the recovery and ends the list there. A check
    run neither reboots, runs acceptance nor waits for a start. With `fence` (a live server, routers configured)
    the routers are read again right before the first step that stops it -- after a canary
    beside it too, which may take minutes -- and none may list it or fail to answer.
    """
    steps = p["steps"]
    kinds = ["stop_canary"] if p["stop_canary"] else []
    kinds += ["journal"] if p["changes"] else []
    kinds += [step for step in ("stop", "canary", "switch") if step in steps]
    if not check_mode:
        kinds += ["reboot"] if "reboot" in steps else []
        kinds += ["acceptance"] if "acceptance" in steps else []
        kinds += ["start"] if "health" in steps else []
    kinds += ["clear_restart"] if clear_marker else []
    kinds += ["hold"] if p["record_hold"] else []
    kinds += ["unhold"] if p["clear_hold"] else []
    kinds += ["prune"] if prune else []
    kinds += ["journal_done"] if p["journal"] is not None else []
    stops = [i for i, kind in enumerate(kinds)
             if kind in ("stop", "reboot") or (kind == "start" and "restart" in steps)]
    if fence and stops:
        kinds.insert(stops[0], "fence")
    return kinds


def _protected(node: Node) -> list[str]:
    """Envs the prune after a switch keeps whatever its `keep` says (it keeps the link's and
    `.previous`'s itself): the env the process runs, the env the last start record names (a
    server that died may be started again on it), every env a killed run's journal names (its
    `previous` is where a failed start puts `.previous` back), a rollback hold's, and the env a
    rollback would take the node back to (its last forward switch's `from`)."""
    last = vr.last_forward(node.switches)
    named = [node.process_env, node.record_env, last["from"] if last and last["to"] == node.link else ""]
    for record, keys in ((node.journal, ("from", "to", "previous", "rollback_to")), (node.hold, ("from", "to"))):
        named += [str((record or {}).get(key) or "") for key in keys]
    return sorted({env for env in named if env})


# Steps that take a live server out of service; held when a read they depend on is unknown.
DISRUPTIVE = ("remove", "drain", "stop", "reboot", "restart")


def _held(node: Node, routers: Routers, steps: t.Sequence[str]) -> str:
    """Why this node's steps wait for another run: a read they depend on did not answer.

    Only a live server is held (starting a dead one disturbs nothing); only for steps that would
    take it out of service. "" when nothing is held.
    """
    if not node.alive or not any(step in steps for step in DISRUPTIVE):
        return ""
    unknown = [f"router {r.get('name', '?')} did not answer ({r.get('error') or 'no answer'})"
               for r in routers.unknown]
    if node.health_unknown:
        unknown.append(f"its /health did not answer ({node.health_error or 'no answer'}, "
                       f"{node.health_tries} tries)")
    if not unknown:
        return ""
    would = [step for step in steps if step in DISRUPTIVE]
    return ("held: " + "; ".join(unknown) + f". It may be serving, so its steps ({', '.join(would)}) "
            "wait: nothing was changed on it. Re-run when every read answers (or take a router that "
            "is gone for good out of vllm_routers)")
