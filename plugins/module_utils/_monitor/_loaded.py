# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Whether Prometheus, Alertmanager and Grafana run what the monitoring role wrote, from what the
monitoring host shows: what each must do now (nothing, reload, restart).

A restart is owed when a file the service reads only at its start (Prometheus' flags, Grafana's
provisioning) or its unit changed after the running process started (systemd's
ExecMainStartTimestamp, NeedDaemonReload). A reload is owed when its configuration or rules
changed after its last successful load, which Prometheus and Alertmanager give on their own
/metrics (<name>_config_last_reload_success_timestamp_seconds; a start is a load too), or when that
last load failed. Read on every run, so what an earlier run wrote and did not apply (a failure
after the write, a kill, a handler that never ran) is applied by the next one.
When /metrics does not answer, the process's start stands in for its last load: a file newer
than the start is reloaded again (harmless), one older is not. Whether it runs at all unknown:
the service is left as it is and the run fails saying so.
Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._router_restart import file_times, need


def _under(path: str, roots: t.Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def sample(metrics: str, name: str) -> float | None:
    """The value of an unlabelled sample in Prometheus' text exposition."""
    found = re.search(r"^%s(?:\{\})?\s+(\S+)" % re.escape(name), metrics or "", re.M)
    try:
        return float(found.group(1)) if found else None
    except ValueError:
        return None


def _lines(files: str, roots: t.Sequence[str]) -> str:
    """The `find -printf` lines of the files under roots, as `need()` reads them."""
    return "\n".join(line for line in files.splitlines() if _under(line.strip().partition(" ")[2], roots))


def plan(service: t.Mapping[str, t.Any], show: str, files: str, metrics: str | None = None,
         metrics_error: str = "") -> dict[str, t.Any]:
    """One service's {name, action, reasons, msg}.

    service: name (the unit), restart_paths and reload_paths (files or folders; a folder covers
    what is in it, its own time moves when a file is added or removed), metric_prefix (empty: no
    /metrics to read the last load from; reload_paths then need a restart), reload_as (reloaded or
    restarted), pending_restart / pending_reload (what check mode would have written).
    """
    name = str(service["name"])
    restart_paths = list(service.get("restart_paths") or [])
    reload_paths = list(service.get("reload_paths") or [])
    prefix = str(service.get("metric_prefix") or "")
    if not prefix:
        restart_paths, reload_paths = restart_paths + reload_paths, []
    started = need(show, _lines(files, restart_paths), list(service.get("pending_restart") or []), name)
    if started["state"] == "stopped":
        return {"name": name, "action": "none", "reasons": [],
                "msg": f"{name} is not running: its start loads what is on disk"}
    if started["state"] == "unknown":
        return {"name": name, "action": "unknown", "reasons": started["reasons"],
                "msg": f"{name}: left as it is, whether it runs what is on disk could not be read "
                       f"({started['error']})"}
    if started["reasons"]:
        return {"name": name, "action": "restart", "reasons": started["reasons"],
                "msg": f"{name} restarts: {'; '.join(started['reasons'])}"}
    reasons = [f"{what} would change" for what in service.get("pending_reload") or []]
    loaded = sample(metrics or "", f"{prefix}_config_last_reload_success_timestamp_seconds") if prefix else None
    if prefix and sample(metrics or "", f"{prefix}_config_last_reload_successful") == 0:
        reasons.append("its last load of its configuration failed")
    if loaded is not None:
        reasons += [f"{path} changed after its last load" for mtime, path in file_times(files)
                    if _under(path, reload_paths) and mtime > loaded]
    elif reload_paths:
        since_start = need(show, _lines(files, reload_paths), (), name)["reasons"]
        reasons += [f"{why} (when it last loaded could not be read: {metrics_error or 'no ' + prefix + ' metrics'})"
                    for why in since_start]
    if not reasons:
        return {"name": name, "action": "none", "reasons": [], "msg": f"{name} runs what is on disk"}
    action = "restart" if service.get("reload_as") == "restarted" else "reload"
    return {"name": name, "action": action, "reasons": reasons,
            "msg": f"{name} {'restarts' if action == 'restart' else 'reloads'}: {'; '.join(reasons)}"}


def plans(services: t.Sequence[t.Mapping[str, t.Any]], shows: str, files: str,
          metrics: t.Sequence[t.Mapping[str, t.Any]] = ()) -> list[dict[str, t.Any]]:
    """Every service's plan from one `systemctl show` of them all (blocks in the services' order),
    one `find -printf '%T@ %p\\n'` of all their paths, and their /metrics reads (uri results, in
    order; one without metric_prefix has none)."""
    blocks = (shows or "").strip("\n").split("\n\n")
    reads = iter(metrics)
    result = []
    for index, service in enumerate(services):
        read = next(reads, {}) if service.get("metric_prefix") else {}
        text = read.get("content") if read.get("status") == 200 else None
        error = "" if text is not None else (read.get("msg") or f"HTTP {read.get('status', '?')}")
        show = blocks[index] if index < len(blocks) else ""
        result.append(plan(service, show, files, text, error))
    return result
