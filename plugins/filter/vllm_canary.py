# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters the vllm_server role plans its env switch and canary with.

The canary's command line and the run's decisions are made in table-tested Python
(module_utils/_vllm_canary.py, _vllm_upgrade.py), not in Jinja.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.module_utils import _vllm_canary as vc
from ansible_collections.gpuserve.vllm.plugins.module_utils import _vllm_upgrade as vu


def vllm_canary_plan(argv: t.Sequence[str], target: str, port: t.Any, layers: t.Any,
                     model_config: t.Mapping[str, t.Any],
                     drafter_config: t.Mapping[str, t.Any] | None = None,
                     method: str | None = None) -> dict[str, t.Any]:
    """argv | vllm_canary_plan(target, port, layers, model_config, drafter_config, method)."""
    try:
        return vc.canary_plan(argv, target, port, layers, model_config, drafter_config or None, method)
    except vc.CanaryError as exc:
        raise AnsibleFilterError(f"vllm_canary_plan: {exc}") from exc


def vllm_canary_systemd_run(argv: t.Sequence[str], unit: str,
                            properties: t.Mapping[str, t.Any]) -> list[str]:
    """argv | vllm_canary_systemd_run(unit, properties) -> systemd-run argv."""
    return vc.systemd_run_argv(unit, argv, properties)


def vllm_upgrade_plan(state: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """{'current': .., 'target': .., 'canary': .., ...} | vllm_upgrade_plan.

    `link_stat` (the stat of the link, follow false) and `link` may stand in for `current`.
    """
    args = dict(state)
    if "link_stat" in args:
        args["current"] = vu.current_env(args.pop("link_stat"), args.pop("link", ""))
    try:
        return vu.plan(args.pop("current", ""), args.pop("target", ""), **args)
    except (vu.UpgradeError, TypeError) as exc:
        raise AnsibleFilterError(f"vllm_upgrade_plan: {exc}") from exc


def vllm_upgrade_report(decision: t.Mapping[str, t.Any], canary: t.Any = None, switch: t.Any = None,
                        start: t.Any = None, rollback: t.Any = None, prune: t.Any = None,
                        check_mode: bool = False) -> dict[str, t.Any]:
    """decision | vllm_upgrade_report(canary, switch, start, rollback, prune, check_mode)."""
    def mapping(value: t.Any) -> t.Mapping[str, t.Any] | None:
        return value if isinstance(value, t.Mapping) else None

    return vu.report(decision, mapping(canary), mapping(switch), mapping(start), mapping(rollback),
                     mapping(prune), bool(check_mode))


class FilterModule:
    """gpuserve.vllm filters for vllm_server's env switch and canary."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "vllm_canary_plan": vllm_canary_plan,
            "vllm_canary_systemd_run": vllm_canary_systemd_run,
            "vllm_upgrade_plan": vllm_upgrade_plan,
            "vllm_upgrade_report": vllm_upgrade_report,
        }
