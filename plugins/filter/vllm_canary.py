# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters the vllm_server role starts its canary with.

The canary's command line is made in table-tested Python (module_utils/_vllm/_canary.py), not
in Jinja.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.plugin_utils._lazy_engine import Engine

vc = Engine("_vllm._canary")


def vllm_canary_plan(argv: t.Sequence[str], target: str, port: t.Any, layers: t.Any,
                     model_config: t.Mapping[str, t.Any],
                     drafter_config: t.Mapping[str, t.Any] | None = None,
                     method: str | None = None, gpu_memory_utilization: t.Any = None) -> dict[str, t.Any]:
    """argv | vllm_canary_plan(target, port, layers, model_config, drafter_config, method, gpu_memory_utilization)."""
    try:
        return vc.canary_plan(argv, target, port, layers, model_config, drafter_config or None, method,
                              gpu_memory_utilization)
    except vc.CanaryError as exc:
        raise AnsibleFilterError(f"vllm_canary_plan: {exc}") from exc


def vllm_canary_systemd_run(argv: t.Sequence[str], unit: str,
                            properties: t.Mapping[str, t.Any]) -> list[str]:
    """argv | vllm_canary_systemd_run(unit, properties) -> systemd-run argv."""
    return vc.systemd_run_argv(unit, argv, properties)


class FilterModule:
    """gpuserve.vllm filters for vllm_server's canary."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "vllm_canary_plan": vllm_canary_plan,
            "vllm_canary_systemd_run": vllm_canary_systemd_run,
        }
