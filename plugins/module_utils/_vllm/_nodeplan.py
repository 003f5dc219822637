# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""One serve plan per node, decided from what is observed on it (site.yml's serve plays).

The node is observed read-only (module vllm_node_state: the unit, the env its running process
uses and when that process started, the env link, `<link>.previous`, the target env, the
restart request, a journal left by a killed run, a rollback hold, /health and /metrics), the
routers are read (which of them list the node, healthy or not), and `plan()` turns that into
the ordered steps of this run:

    remove -> drain -> stop -> canary -> switch -> reboot -> restart -> health -> add

each only when needed. A converged node gets no step; a stranded healthy node gets only `add`;
a dead node is restarted without a drain; a rollback is a drained switch to the env it names.
Every step that stops the server is followed by one that starts it.

A read that did not answer is its own answer, never "absent" or "idle": a router whose workers
could not be read, or the node's own /health that timed out, holds every step that would take a
live server out, drain it or stop it (`held` says what could not be read); a node that may still
serve is not started over as an idle one, and a /metrics that did not answer keeps the drain
(the drain reads it again and ends only on confirmed readings).

Whether a restart is due is read from the node, not remembered: the running process uses
another env than the one to serve, or something it loaded at its start changed since (its start
record against what is on disk; file times without one), or a restart was requested after it
started, or nothing runs. The journal the plan hands back (written
to the node before the first step that changes anything, removed after the last) only keeps
what cannot be observed later: the env that served before (the rollback target if the new one
fails to start), the env it goes to, and whether that env's canary passed. Stdlib only, no
Ansible imports: a filter plugin runs this on the controller.
"""

from __future__ import annotations

import math
import os
import typing as t

STEPS = ("remove", "drain", "stop", "canary", "switch", "reboot", "restart", "health", "add")
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
# What a canary beside a live server leaves free for that server's own allocations.
CANARY_RESERVE_MIB = 1024


class PlanError(ValueError):
    """A state or input the plan cannot be made from; the message names the variable or file."""


def _bool(value: t.Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _int(value: t.Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _float(value: t.Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def short(path: t.Any) -> str:
    """The env's name (the store directory's basename) for one-line reports."""
    text = str(path or "")
    return os.path.basename(text.rstrip("/")) or text or "(none)"


# --- what the observation says ------------------------------------------------------------

class Node:
    """vllm_node_state's result, with the questions the plan asks of it."""

    def __init__(self, observed: t.Mapping[str, t.Any]) -> None:
        raw = dict(observed or {})
        self.raw = raw
        unit = dict(raw.get("unit") or {})
        self.unit_exists = str(unit.get("load_state") or "not-found") != "not-found"
        self.active_state = str(unit.get("active_state") or "")
        self.sub_state = str(unit.get("sub_state") or "")
        self.main_pid = _int(unit.get("main_pid"))
        process = dict(raw.get("process") or {})
        self.process_env = str(process.get("env") or "")
        self.process_started = _float(process.get("started"))
        self.link = str((raw.get("link") or {}).get("env") or "")
        self.link_path = str((raw.get("link") or {}).get("path") or "")
        self.link_kind = str((raw.get("link") or {}).get("kind") or "absent")
        self.previous = str((raw.get("previous") or {}).get("env") or "")
        self.previous_path = str((raw.get("previous") or {}).get("path") or "")
        self.target = str((raw.get("target") or {}).get("env") or "")
        self.envs = {str(k): dict(v or {}) for k, v in dict(raw.get("envs") or {}).items()}
        self.files = {str(k): _float(v) for k, v in dict(raw.get("files") or {}).items()}
        record = dict(raw.get("start_record") or {})
        self.record_current = _bool(record.get("current"))
        self.record_changed = {str(name) for name in (record.get("changed") or [])}
        self.record_error = str(record.get("error") or "")
        self.record_unreadable = [str(name) for name in (record.get("unreadable") or [])]
        self.record_env = str(record.get("env") or "")
        self.reboot_pending = _bool((raw.get("reboot") or {}).get("pending"))
        self.reboot_reason = str((raw.get("reboot") or {}).get("reason") or "")
        self.journal = self._record("journal")
        self.hold = self._record("hold")
        health = dict(raw.get("health") or {})
        self.health_status = _int(health.get("status"))
        self.health_error = str(health.get("error") or "")
        self.health_known = _bool(health.get("known", True))
        self.health_tries = _int(health.get("tries"), 1)
        metrics = dict(raw.get("metrics") or {})
        self.metrics_reachable = _bool(metrics.get("reachable"))
        self.metrics_known = _bool(metrics.get("known", True))
        self.gpus = [dict(g) for g in (raw.get("gpus") or [])]
        canary = dict(raw.get("canary") or {})
        # A canary still running when a run starts was left by a killed one (every run stops its
        # own): it holds GPU memory the server's start needs.
        self.canary_left = str(canary.get("active_state") or "") in ("active", "activating", "reloading")
        self.canary_pid = _int(canary.get("main_pid"))

    def _record(self, key: str) -> dict[str, t.Any] | None:
        record = self.raw.get(key)
        if not record:
            return None
        if not isinstance(record, t.Mapping):
            raise PlanError(f"the node's {key} record is not a JSON object: {record!r}")
        return dict(record)

    @property
    def alive(self) -> bool:
        """A process runs (it may still be loading); auto-restart and failed are not alive."""
        return self.active_state in ("active", "reloading") and self.main_pid > 0

    @property
    def healthy(self) -> bool:
        return self.alive and self.health_status == 200

    @property
    def health_unknown(self) -> bool:
        """A process runs and its /health said nothing (a time-out): it may be serving."""
        return self.alive and not self.health_known

    @property
    def running_env(self) -> str:
        """The env the running process uses; the link's when it cannot be told."""
        if not self.alive:
            return ""
        return self.process_env or self.link

    def built(self, env: str) -> bool:
        return bool(env) and bool(self.envs.get(env, {}).get("built"))

    def changed_since_start(self, name: str) -> bool:
        """Whether `name` (one of FILES_A_SERVER_FOLLOWS) changed since the process started: by
        its start record when that is this start's, else by time (the restart request always)."""
        if self.record_current and name != "restart_marker":
            return name in self.record_changed
        mtime = self.files.get(name)
        if mtime is None or self.process_started is None:
            return False
        return mtime > self.process_started

    def state_text(self) -> str:
        if not self.unit_exists:
            return "no unit yet"
        if self.healthy:
            return f"serving {short(self.running_env)}"
        if self.health_unknown:
            return (f"running {short(self.running_env)}, /health did not answer "
                    f"({self.health_error or 'no answer'}, {self.health_tries} tries)")
        if self.alive:
            return (f"running {short(self.running_env)}, not healthy yet "
                    f"({self.health_error or ('HTTP %d' % self.health_status if self.health_status else 'no answer')})")
        return f"not running ({self.active_state or 'unknown'}/{self.sub_state or '?'})"


class Routers:
    """The routers' view of this node: [{name, reachable, listed, healthy, error}]."""

    def __init__(self, routers: t.Sequence[t.Mapping[str, t.Any]] | None) -> None:
        self.all = [dict(r) for r in (routers or [])]
        self.reachable = [r for r in self.all if _bool(r.get("reachable"))]
        self.unknown = [r for r in self.all if _bool(r.get("unknown"))]

    @property
    def listed(self) -> list[dict[str, t.Any]]:
        return [r for r in self.reachable if _bool(r.get("listed"))]

    @property
    def all_listed_healthy(self) -> bool:
        return all(_bool(r.get("listed")) and _bool(r.get("healthy")) for r in self.reachable)

    def note(self) -> str:
        if not self.all:
            return ""
        if not self.reachable:
            return "unrouted: no router serves yet (" + ", ".join(
                f"{r.get('name', '?')}: {r.get('error') or 'no answer'}" for r in self.all) + ")"
        parts = []
        for r in self.all:
            if _bool(r.get("unknown")):
                parts.append(f"{r.get('name', '?')}: UNKNOWN ({r.get('error') or 'no answer'})")
            elif not _bool(r.get("reachable")):
                parts.append(f"{r.get('name', '?')}: not serving ({r.get('error') or 'no answer'})")
            elif not _bool(r.get("listed")):
                parts.append(f"{r.get('name', '?')}: not listed")
            else:
                parts.append(f"{r.get('name', '?')}: listed, {'healthy' if _bool(r.get('healthy')) else 'unhealthy'}")
        return "routers " + ", ".join(parts)


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
    target, link, previous = node.target, node.link, node.previous
    j_action = str((journal or {}).get("action") or "")
    j_from, j_to = str((journal or {}).get("from") or ""), str((journal or {}).get("to") or "")
    if journal and j_action == "rollback" and target in ("", j_from, j_to):
        return j_to, "rollback", [f"finishing the rollback to {short(j_to)} that a killed run began"]
    if _bool(req.get("rollback")):
        if hold and link and hold.get("to") == link:
            return link, "", [f"already rolled back to {short(link)} (from {short(hold.get('from'))}, "
                              f"{hold.get('at', '?')}): a rollback is one-shot"]
        scope = [str(name) for name in (req.get("rollback_from") or []) if name]
        if scope and os.path.basename(link.rstrip("/")) not in scope:
            return link, "", [f"not rolled back: this node serves {short(link)} and never took "
                              f"{', '.join(scope)} (the release rolled back), so it stays"]
        if not previous:
            raise PlanError("vllm_server_rollback: there is no env to roll back to: "
                            f"{node.previous_path or '<link>.previous'} names none")
        if not node.built(previous):
            raise PlanError(f"vllm_server_rollback: the previous env {previous} "
                            f"({node.previous_path}) has no bin/vllm; nothing was changed")
        return previous, "rollback", []
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
    env_changed}: the unit and env file rendered in check mode); requests ({restart,
    restart_since (a server started after this epoch already is the restart asked for),
    rollback, rollback_from (env names: only a node serving one of them rolls back; empty: any),
    rollforward, canary}); canary ({enabled, stop_server, batch_size, hosts_count,
    gpu_memory_gib}); check_mode; now (epoch seconds, recorded in the journal).
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
        elif node.files.get("restart_marker") is not None:
            restart_reasons.append("a restart was requested")
        since = _float(req.get("restart_since"))
        served_since = node.alive and since and node.process_started and node.process_started >= since
        if _bool(req.get("restart")) and not served_since:
            restart_reasons.append("vllm_server_restart_requested")
    if node.reboot_pending:
        restart_reasons.append(f"reboot pending ({node.reboot_reason or 'gpu_node'})")
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
    if stop_for_canary:
        steps.append("stop")
    if canary:
        steps.append("canary")
    if switch:
        steps.append("switch")
    if node.reboot_pending:
        steps.append("reboot")
    if restart:
        steps.append("restart")
    if start and (restart or not node.healthy or journal):
        steps.append("health")
    if routed and ("remove" in steps or not routers.all_listed_healthy):
        steps.append("add")

    held = _held(node, routers, steps)
    if held:
        steps = []
    changes = any(step in steps for step in ("stop", "canary", "switch", "reboot", "restart"))
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
    # Nothing for the role to do at all: no step, nothing to render, no request to clear.
    converged = (not held and not steps and not node.canary_left and not _bool(rendered.get("unit_changed")) and not _bool(rendered.get("env_changed"))
                 and not (not start and node.files.get("restart_marker") is not None) and not journal)
    result = {
        "action": action, "from": served_before, "to": desired, "steps": steps, "changes": changes,
        "converged": converged,
        "switch_to": desired if switch else "", "rollback_to": rollback_to,
        "rollback_previous": previous_before if rollback_to else "",
        "canary": canary, "canary_env": desired if canary else "", "canary_reason": canary_reason,
        "canary_beside": canary_beside, "canary_memory": memory, "stop_reason": stop_reason,
        "restart_reasons": restart_reasons if restart else [], "reasons": reasons,
        "held": held,
        "routed": routed, "routers_note": routers.note(), "serving": node.healthy or node.health_unknown,
        "alive": node.alive, "state": node.state_text(), "journal": record, "resumed": bool(journal),
        "stop_canary": node.canary_left,
        "record_hold": action == "rollback", "clear_hold": bool(node.hold) and switch and kind != "rollback",
    }
    result["protect"] = _protected(node)
    result["line"] = line(result)
    return result


def _protected(node: Node) -> list[str]:
    """Envs the prune after a switch keeps whatever its `keep` says (it keeps the link's and
    `.previous`'s itself): the env the process runs, the env the last start record names (a
    server that died may be started again on it), every env a killed run's journal names (its
    `previous` is where a failed start puts `.previous` back) and a rollback hold's."""
    named = [node.process_env, node.record_env]
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
