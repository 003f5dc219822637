# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Whether the serve play will restart a node's vLLM on this run (site.yml's rollout).

A node behind a router is taken out and drained only when it will restart, so the decision is
made before vllm_server runs, from what vllm_server itself would act on: a pending env switch,
a restart request (marker file or variable), a unit or env file that would change, a server
that is not running. Stdlib only, no Ansible imports: a filter plugin runs this on the controller.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils import _vllm_upgrade as vu


def _bool(value: t.Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def restart_plan(state: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """{'restart': bool, 'reasons': [...], 'line': str} from the node's state.

    state keys: start (vllm_server_start), link_stat + link (the env link, stat follow false),
    target (vllm_server_env_target), marker (restart request file exists), requested
    (vllm_server_restart_requested), unit_changed / env_changed (the unit / env file rendered in
    check mode would change), active (the service's ActiveState is active).
    """
    reasons: list[str] = []
    if not _bool(state.get("start", True)):
        return {"restart": False, "reasons": [],
                "line": "no restart: vllm_server_start is false (nothing serves)"}
    current = vu.current_env(state.get("link_stat"), str(state.get("link") or ""))
    target = vu._norm(state.get("target") or "")
    if target and target != current:
        reasons.append(f"env switch {current or 'none'} -> {target}")
    if _bool(state.get("marker")):
        reasons.append("restart request file present")
    if _bool(state.get("requested")):
        reasons.append("vllm_server_restart_requested")
    if _bool(state.get("unit_changed")):
        reasons.append("systemd unit changes")
    if _bool(state.get("env_changed")):
        reasons.append("env file changes")
    if not _bool(state.get("active", True)):
        reasons.append("service not active")
    line = ("restart: " + "; ".join(reasons)) if reasons else "no restart: nothing changes"
    return {"restart": bool(reasons), "reasons": reasons, "line": line}
