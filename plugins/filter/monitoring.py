# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the monitoring role and fleet_status.yml: Prometheus' scrape targets and alert rules, the fleet's status table.

The logic is table-tested Python (module_utils/_monitor/_targets.py, _listen.py, _rules.py, _status.py, _loaded.py).
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.plugin_utils._lazy_engine import Engine

ml = Engine("_monitor._loaded")
mn = Engine("_monitor._listen")
mr = Engine("_monitor._rules")
ms = Engine("_monitor._status")
mt = Engine("_monitor._targets")


def monitoring_scrape_configs(nodes: t.Sequence[t.Mapping[str, t.Any]], routers: t.Sequence[t.Mapping[str, t.Any]] | None = None,
                              settings: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
    """nodes | monitoring_scrape_configs(routers, settings) -> {scrape_configs, problems}."""
    try:
        return mt.scrape_configs(list(nodes or []), list(routers or []), dict(settings or {}))
    except mt.TargetsError as exc:
        raise AnsibleFilterError(f"monitoring_scrape_configs: {exc}") from exc


def monitoring_router_workers(router: t.Any, nodes: t.Sequence[t.Mapping[str, t.Any]] | None = None) -> dict[str, t.Any]:
    """router | monitoring_router_workers(nodes) -> {router, workers}."""
    if not isinstance(router, t.Mapping):
        raise AnsibleFilterError(f"monitoring_router_workers: expected the router host's settings, found {router!r}")
    try:
        return mt.router_workers(router, list(nodes or []))
    except mt.TargetsError as exc:
        raise AnsibleFilterError(f"monitoring_router_workers: {exc}") from exc


def monitoring_fleet_addresses(hosts: t.Any) -> dict[str, t.Any]:
    """[{name, explicit, candidates, facts_ipv4}] | monitoring_fleet_addresses -> {addresses, problems, need_facts}."""
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, t.Mapping) for h in hosts):
        raise AnsibleFilterError(f"monitoring_fleet_addresses: expected a list of hosts, found {hosts!r}")
    try:
        return mn.fleet_addresses(list(hosts))
    except mn.ListenError as exc:
        raise AnsibleFilterError(f"monitoring_fleet_addresses: {exc}") from exc


def monitoring_listen(value: t.Any, variable: str) -> str:
    """'host:port' | monitoring_listen(variable name) -> the same, its host an IP (refused naming the variable)."""
    try:
        return mn.check_listen(value, str(variable))
    except mn.ListenError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def monitoring_rules(files: t.Any, alert_for: t.Any = None, disabled: t.Any = None) -> dict[str, t.Any]:
    """{file name: parsed rules} | monitoring_rules(monitoring_alert_for, monitoring_alerts_disabled) -> the same, tuned."""
    if not isinstance(files, t.Mapping):
        raise AnsibleFilterError(f"monitoring_rules: expected the rules files by name, found {files!r}")
    if not isinstance(alert_for or {}, t.Mapping) or not isinstance(disabled or [], (list, tuple)):
        raise AnsibleFilterError("monitoring_rules: monitoring_alert_for must be a mapping (alert name: duration) and "
                                 f"monitoring_alerts_disabled a list of alert names, found {alert_for!r} and {disabled!r}")
    try:
        return mr.tune(dict(files), dict(alert_for or {}), [str(name) for name in disabled or []])
    except mr.RulesError as exc:
        raise AnsibleFilterError(f"monitoring_rules (monitoring_alert_for, monitoring_alerts_disabled): {exc}") from exc


def monitoring_loaded_plans(services: t.Any, shows: t.Any = "", files: t.Any = "",
                            metrics: t.Any = None) -> list[dict[str, t.Any]]:
    """services | monitoring_loaded_plans(systemctl show, find -printf, /metrics reads) -> [{name, action, reasons, msg}]."""
    if not isinstance(services, (list, tuple)) or not all(isinstance(s, t.Mapping) and s.get("name") for s in services):
        raise AnsibleFilterError(f"monitoring_loaded_plans: expected a list of services, each with a name, found {services!r}")
    return ml.plans(list(services), str(shows or ""), str(files or ""), list(metrics or []))


def fleet_status_table(nodes: t.Sequence[t.Mapping[str, t.Any]], now: t.Any) -> dict[str, t.Any]:
    """[{name, state, routers, error}] | fleet_status_table(now) -> {rows, lines, summary}."""
    try:
        when = float(now)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"fleet_status_table: now must be epoch seconds, found {now!r}") from exc
    return ms.table(list(nodes or []), when)


class FilterModule:
    """gpuserve.vllm filters for monitoring."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "monitoring_scrape_configs": monitoring_scrape_configs,
            "monitoring_router_workers": monitoring_router_workers,
            "monitoring_rules": monitoring_rules,
            "monitoring_fleet_addresses": monitoring_fleet_addresses,
            "monitoring_listen": monitoring_listen,
            "monitoring_loaded_plans": monitoring_loaded_plans,
            "fleet_status_table": fleet_status_table,
        }
