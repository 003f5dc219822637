# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters site.yml's serve plays decide with: the node's plan, the routers' view of it.

The decisions are table-tested Python (module_utils/_vllm/_nodeplan.py, _rollout.py, _nodereport.py, _fleet.py); the
plays only execute the steps the plan lists.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpuserve.vllm.plugins.plugin_utils._lazy_engine import Engine

vf = Engine("_vllm._fleet")
vp = Engine("_vllm._nodeplan")
vv = Engine("_vllm._nodeview")
vn = Engine("_vllm._nodereport")
vr = Engine("_vllm._router_restart")
vo = Engine("_vllm._rollout")


def vllm_node_plan(state: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """{'observed': .., 'routers': .., 'start': .., ...} | vllm_node_plan."""
    try:
        return vp.plan(state)
    except vp.PlanError as exc:
        raise AnsibleFilterError(f"vllm_node_plan: {exc}") from exc


def vllm_last_rollout(hosts: t.Sequence[str], hostvars: t.Mapping[str, t.Any],
                      read: str = "vllm_server_node_state") -> dict[str, t.Any]:
    """ansible_play_hosts_all | vllm_last_rollout(hostvars) -> {env, at, since, read, unknown}:
    from each host's `read` (its registered vllm_node_state result; absent: not read)."""
    try:
        reads = {str(h): (hostvars[h][read] if read in hostvars[h] else None) for h in hosts or []}
        return vo.last_rollout(reads)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"vllm_last_rollout: the hosts' reads could not be looked up ({exc})") from exc
    except vp.PlanError as exc:
        raise AnsibleFilterError(f"vllm_last_rollout: {exc}") from exc


def vllm_node_serving(observed: t.Mapping[str, t.Any]) -> bool:
    """vllm_node_state's result | vllm_node_serving: the plan's `serving`, without a plan."""
    try:
        return vv.Node(observed if isinstance(observed, t.Mapping) else {}).serving
    except vp.PlanError as exc:
        raise AnsibleFilterError(f"vllm_node_serving: {exc}") from exc


def vllm_node_report(plan: t.Mapping[str, t.Any], outcomes: t.Mapping[str, t.Any] | None = None,
                     check_mode: bool = False) -> dict[str, t.Any]:
    """plan | vllm_node_report(outcomes, check_mode)."""
    return vn.report(plan, outcomes if isinstance(outcomes, t.Mapping) else None, bool(check_mode))


def vllm_node_recovery(plan: t.Mapping[str, t.Any], outcomes: t.Mapping[str, t.Any] | None = None,
                       stop_on_failure: t.Any = True, service: str = "vllm.service",
                       restart_sec: t.Any = 30) -> dict[str, t.Any]:
    """plan | vllm_node_recovery(outcomes, stop_on_failure, service, restart_sec) -> {steps, why}."""
    return vn.recovery(plan, outcomes if isinstance(outcomes, t.Mapping) else None, stop_on_failure,
                       service, restart_sec)


def vllm_router_settings(routers: t.Sequence[str], hostvars: t.Mapping[str, t.Any],
                         fallback: t.Mapping[str, t.Any]) -> list[dict[str, t.Any]]:
    """groups['vllm_routers'] | vllm_router_settings(hostvars, node_values)."""
    try:
        return vf.router_settings(list(routers or []), {r: hostvars[r] for r in routers or []}, fallback)
    except vf.FleetError as exc:
        raise AnsibleFilterError(f"vllm_router_settings: {exc}") from exc


def vllm_router_view(results: t.Sequence[t.Mapping[str, t.Any]], url: str,
                     units: t.Sequence[t.Mapping[str, t.Any]] | None = None,
                     aliases: t.Sequence[str] | None = None,
                     others: t.Sequence[str] | None = None) -> list[dict[str, t.Any]]:
    """registered_workers.results | vllm_router_view(node_url, registered_units.results, own_hosts, other_hosts)."""
    return vf.router_view(list(results or []), url, list(units or []), list(aliases or []), list(others or []))


def vllm_router_stale_urls(results: t.Sequence[t.Mapping[str, t.Any]], url: str,
                           aliases: t.Sequence[str] | None = None,
                           others: t.Sequence[str] | None = None) -> list[dict[str, str]]:
    """registered_workers.results | vllm_router_stale_urls(node_url, own_hosts, other_hosts) -> [{name, router, url}]."""
    return vf.stale_urls(list(results or []), url, list(aliases or []), list(others or []))


def vllm_router_back_url(results: t.Sequence[t.Mapping[str, t.Any]], url: str, health_url: str,
                         port: t.Any = None) -> str:
    """registered_health.results | vllm_router_back_url(node_url, configured_health_url, listen_port)."""
    return vf.back_url(list(results or []), str(url), str(health_url), port)


def vllm_run_outcome(host: t.Mapping[str, t.Any]) -> str:
    """{'failed': .., 'held': .., 'untouched': ..} | vllm_run_outcome -> the host's line."""
    return vf.run_outcome(host if isinstance(host, t.Mapping) else {})


def vllm_router_removal_problems(results: t.Sequence[t.Mapping[str, t.Any]], leaving: t.Sequence[str],
                                 settings: t.Sequence[t.Mapping[str, t.Any]],
                                 units: t.Sequence[t.Mapping[str, t.Any]] | None = None) -> list[str]:
    """registered_workers.results | vllm_router_removal_problems(leaving_urls, settings, units)."""
    return vf.removal_problems(list(results or []), list(leaving or []), list(settings or []), list(units or []))


def vllm_router_reconcile(workers: t.Sequence[t.Mapping[str, t.Any]], desired: t.Sequence[str],
                          min_healthy: t.Any = 1, max_unavailable: t.Any = None,
                          nodes: t.Sequence[t.Mapping[str, t.Any]] | None = None) -> dict[str, t.Any]:
    """router_workers | vllm_router_reconcile(desired_urls, floor, max_unavailable, nodes)
    -> {add, remove, moving, refused, floor, msg}."""
    try:
        unavailable = None if max_unavailable is None else int(max_unavailable)
        if unavailable is not None and unavailable < 0:
            raise ValueError
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"vllm_router_reconcile: vllm_router_max_unavailable_workers must be a whole "
                                 f"number of at least 0, found {max_unavailable!r}") from None
    try:
        return vf.reconcile(list(workers or []), list(desired or []), min_healthy, unavailable, list(nodes or []))
    except vf.FleetError as exc:
        raise AnsibleFilterError(f"vllm_router_reconcile: {exc}") from exc


def vllm_batch_size(serial: t.Any, hosts: t.Any) -> int:
    """gpuserve_serial | vllm_batch_size(node_count): the most nodes one batch of the rolling play takes."""
    try:
        return vf.batch_size(serial, hosts)
    except vf.FleetError as exc:
        raise AnsibleFilterError(f"vllm_batch_size: {exc}") from exc


def vllm_drain_settings(settings: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, t.Any]:
    """router_settings | vllm_drain_settings -> {timeout, poll, settle, stale_after, add_timeout}."""
    return vf.drain_settings(list(settings or []))


def vllm_router_restart_need(show: str, files: str, pending: t.Sequence[str] | None = None) -> dict[str, t.Any]:
    """show.stdout | vllm_router_restart_need(files.stdout, pending) -> {state, reasons, error}."""
    return vr.need(str(show or ""), str(files or ""), [str(p) for p in pending or []])


def vllm_router_restart_plan(need: t.Mapping[str, t.Any], others: t.Sequence[t.Mapping[str, t.Any]] | None = None,
                             alone_ok: t.Any = False, name: str = "the router") -> dict[str, t.Any]:
    """need | vllm_router_restart_plan(readiness.results, vllm_router_restart_alone, name) -> {action, reasons, msg}."""
    try:
        alone = boolean(alone_ok, strict=True)
    except TypeError as exc:
        raise AnsibleFilterError(f"vllm_router_restart_plan: vllm_router_restart_alone must be a boolean, found {alone_ok!r}") from exc
    return vr.plan(need, list(others or []), alone, name)


class FilterModule:
    """gpuserve.vllm filters for the serve plays."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "vllm_node_plan": vllm_node_plan,
            "vllm_node_serving": vllm_node_serving,
            "vllm_last_rollout": vllm_last_rollout,
            "vllm_node_report": vllm_node_report,
            "vllm_node_recovery": vllm_node_recovery,
            "vllm_router_settings": vllm_router_settings,
            "vllm_router_view": vllm_router_view,
            "vllm_router_stale_urls": vllm_router_stale_urls,
            "vllm_router_back_url": vllm_router_back_url,
            "vllm_run_outcome": vllm_run_outcome,
            "vllm_batch_size": vllm_batch_size,
            "vllm_router_removal_problems": vllm_router_removal_problems,
            "vllm_router_reconcile": vllm_router_reconcile,
            "vllm_drain_settings": vllm_drain_settings,
            "vllm_router_restart_need": vllm_router_restart_need,
            "vllm_router_restart_plan": vllm_router_restart_plan,
        }
