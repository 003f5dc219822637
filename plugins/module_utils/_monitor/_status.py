# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""playbooks/fleet_status.yml's one table: what every GPU node runs and serves, from the reads
site.yml already makes (gpuserve.vllm.vllm_node_state on the node, the routers' /workers as
gpuserve.vllm.vllm_router_view sees them).

One row per node: node, health, vLLM version and env, weights revision, per router (routed and
healthy, or why not), running and waiting requests, KV-cache usage, mean acceptance length since
the server started, when it started, and what a restart is pending for. A read that did not
answer reads "?" -- never as zero or absent.
Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import os
import time
import typing as t

COLUMNS = ("node", "health", "vllm", "env", "weights", "routers", "run", "wait", "kv", "accept", "started", "restart pending")
UNKNOWN = "?"
NONE = "-"


def _revision(identity: str) -> str:
    """'/srv/models/kimi.d/3f2a9c1b manifest 9e8d...' -> '3f2a9c1b (manifest 9e8d7c6b5a4f)'."""
    if not identity or identity == "absent":
        return NONE
    path, _sep, rest = identity.partition(" ")
    name = os.path.basename(path.rstrip("/")) or path
    kind, _sep, value = rest.partition(" ")
    if kind == "manifest":
        return f"{name} (manifest {value[:12]})"
    if kind == "commits":
        return f"{name} ({','.join(c[:12] for c in value.split(','))})"
    return name


def _health(state: t.Mapping[str, t.Any]) -> str:
    unit = state.get("unit") or {}
    health = state.get("health") or {}
    if health.get("status") == 200:
        return "healthy"
    if not health.get("known", True):
        return UNKNOWN
    active = str(unit.get("active_state") or "")
    if active in ("active", "activating", "reloading") and int(unit.get("main_pid") or 0) > 0:
        return "loading" if not health.get("status") else f"HTTP {health.get('status')}"
    return active or "down"


def _router(view: t.Mapping[str, t.Any]) -> str:
    name = str(view.get("name") or "router")
    if view.get("unknown") or view.get("state") == "unknown":
        return f"{name}:{UNKNOWN}"
    if view.get("state") == "absent":
        return f"{name}:router down"
    if not view.get("listed"):
        return f"{name}:not routed"
    return f"{name}:{'healthy' if view.get('healthy') else 'unhealthy'}"


def _started(epoch: t.Any, now: float) -> str:
    if not epoch:
        return NONE
    seconds = max(0, int(now - float(epoch)))
    ago = f"{seconds // 86400}d{seconds % 86400 // 3600}h" if seconds >= 86400 else f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(float(epoch))) + f" ({ago} ago)"


def _pending(state: t.Mapping[str, t.Any]) -> str:
    record = state.get("start_record") or {}
    unit = state.get("unit") or {}
    reasons = []
    if int(unit.get("main_pid") or 0) > 0:
        if record.get("current"):
            reasons += [str(r) for r in record.get("changed") or []]
            reasons += [f"{r} unreadable" for r in record.get("unreadable") or []]
        else:
            reasons.append("unknown (no start record of this start)")
    if (state.get("reboot") or {}).get("pending"):
        reasons.append("reboot: " + str((state.get("reboot") or {}).get("reason") or "pending"))
    if (state.get("files") or {}).get("restart_marker"):
        reasons.append("restart requested")
    return ", ".join(reasons) or NONE


def row(node: t.Mapping[str, t.Any], now: float) -> dict[str, str]:
    """One node's cells. node: {name, state (vllm_node_state's result), routers (vllm_router_node_view), error}."""
    name = str(node.get("name") or "")
    state = node.get("state") or {}
    routers = " ".join(_router(v) for v in node.get("routers") or [])
    if node.get("error") or not state or state.get("failed"):
        cells = dict.fromkeys(COLUMNS, UNKNOWN)
        cells.update(node=name, routers=routers or UNKNOWN)
        return cells
    routers = routers or NONE
    record = state.get("start_record") or {}
    process = state.get("process") or {}
    metrics = state.get("metrics") or {}
    alive = int((state.get("unit") or {}).get("main_pid") or 0) > 0
    env = os.path.basename(str(process.get("env") or record.get("env") or "").rstrip("/")) or NONE
    cells = {"node": name, "health": _health(state), "vllm": str(record.get("vllm_version") or NONE) if alive else NONE,
             "env": env if alive else NONE, "weights": _revision(str(record.get("model") or "")) if alive else NONE,
             "routers": routers, "started": _started((state.get("unit") or {}).get("started"), now) if alive else NONE,
             "restart pending": _pending(state)}
    if metrics.get("reachable"):
        spec = metrics.get("spec_decode") or {}
        kv = metrics.get("kv_cache_usage")
        cells.update(run=f"{metrics.get('running', 0):g}", wait=f"{metrics.get('waiting', 0):g}",
                     kv=NONE if kv is None else f"{100 * float(kv):.0f}%",
                     accept=f"{1 + spec['accepted_tokens'] / spec['drafts']:.2f}" if spec.get("drafts") else NONE)
    else:
        mark = NONE if metrics.get("known") else UNKNOWN
        cells.update(run=mark, wait=mark, kv=mark, accept=mark)
    return cells


def note(node: t.Mapping[str, t.Any]) -> str:
    """Why a node has no reading ('' when it has one): the first line of the error."""
    state = node.get("state") or {}
    if not (node.get("error") or not state or state.get("failed")):
        return ""
    error = str(node.get("error") or state.get("msg") or "no reading").strip() or "no reading"
    return f"{node.get('name')}: {error.splitlines()[0]}"


def table(nodes: t.Sequence[t.Mapping[str, t.Any]], now: float) -> dict[str, t.Any]:
    """{'rows': [cells], 'lines': [header, rule, row..., summary, why each '?' node has no reading], 'summary': str}."""
    nodes = sorted(nodes, key=lambda n: str(n.get("name") or ""))
    rows = [row(node, now) for node in nodes]
    widths = {c: max([len(c)] + [len(r[c]) for r in rows]) for c in COLUMNS}

    def line(cells: t.Mapping[str, str]) -> str:
        return "  ".join(cells[c].ljust(widths[c]) for c in COLUMNS).rstrip()
    healthy = sum(1 for r in rows if r["health"] == "healthy")
    unknown = sum(1 for r in rows if r["health"] == UNKNOWN)
    pending = sum(1 for r in rows if r["restart pending"] not in (NONE, UNKNOWN))
    summary = (f"{len(rows)} node(s): {healthy} healthy, {len(rows) - healthy - unknown} not healthy, {unknown} unknown; "
               f"{pending} with a restart pending")
    lines = [line(dict(zip(COLUMNS, COLUMNS))), "  ".join("-" * widths[c] for c in COLUMNS)]
    lines += [line(r) for r in rows] + [summary] + [n for n in (note(node) for node in nodes) if n]
    return {"rows": rows, "lines": lines, "summary": summary}
