# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What the serve plan (_nodeplan) reads: vllm_node_state's result (`Node`) and the routers'
view of the node (`Routers`), with the questions the plan asks of them; and the readers of loose
values (`_bool`, `short`, ...) the plan and its reports (_nodereport) share.

Stdlib only, no Ansible imports: a filter plugin runs this on the controller.
"""

from __future__ import annotations

import os
import typing as t


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

def _switches(entries: t.Any) -> list[dict[str, t.Any]]:
    """The switch record's list as _rollout reads it: {from, to, at, rollback}, oldest first."""
    if not entries:
        return []
    if not isinstance(entries, list):
        raise PlanError(f"the node's switch record holds {entries!r}, not a list of switches")
    out = []
    for entry in entries:
        if not isinstance(entry, t.Mapping) or _float(entry.get("at")) is None:
            raise PlanError(f"the node's switch record holds {entry!r}, not a switch (from, to, at)")
        out.append({"from": str(entry.get("from") or ""), "to": str(entry.get("to") or ""),
                    "at": float(entry["at"]), "rollback": _bool(entry.get("rollback"))})
    return sorted(out, key=lambda s: s["at"])


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
        self.need_daemon_reload = _bool(unit.get("need_daemon_reload"))
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
        self.acceptance_pending = _bool((raw.get("acceptance") or {}).get("pending"))
        self.acceptance_reason = str((raw.get("acceptance") or {}).get("reason") or "")
        self.journal = self._record("journal")
        self.hold = self._record("hold")
        # Its switch record's entries, oldest first (_rollout: what a rollback undoes).
        self.switches = _switches(raw.get("switches"))
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
    def serving(self) -> bool:
        """Healthy, or a /health that did not answer: site.yml's idle play leaves it to the rolling play."""
        return self.healthy or self.health_unknown

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
    """The routers' view of this node: [{name, reachable, listed, healthy, stale, error}]
    (gpuserve.vllm.vllm_router_view; `listed` under any URL of the node's, `stale` its old ones)."""

    def __init__(self, routers: t.Sequence[t.Mapping[str, t.Any]] | None) -> None:
        self.all = [dict(r) for r in (routers or [])]
        self.reachable = [r for r in self.all if _bool(r.get("reachable"))]
        self.unknown = [r for r in self.all if _bool(r.get("unknown"))]

    @property
    def listed(self) -> list[dict[str, t.Any]]:
        return [r for r in self.reachable if _bool(r.get("listed"))]

    @property
    def all_listed_healthy(self) -> bool:
        """Every router that serves lists the node healthy under its URL, and under no old one."""
        return all(_bool(r.get("listed")) and _bool(r.get("healthy")) and not r.get("stale")
                   for r in self.reachable)

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
            elif r.get("stale"):
                parts.append(f"{r.get('name', '?')}: listed under {', '.join(map(str, r['stale']))} "
                             "(its old URL: it moves)")
            else:
                parts.append(f"{r.get('name', '?')}: listed, {'healthy' if _bool(r.get('healthy')) else 'unhealthy'}")
        return "routers " + ", ".join(parts)
