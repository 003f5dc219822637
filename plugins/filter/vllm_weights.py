# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the vllm_weights role's fan-out: who copies from whom in the next round.

The plan is table-tested Python (module_utils/_weights/_plan.py), not Jinja.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.plugin_utils._lazy_engine import Engine

wf = Engine("_weights._plan")


def vllm_weights_checkpoints(items: t.Any) -> list[dict[str, t.Any]]:
    """vllm_weights_checkpoints | vllm_weights_checkpoints: defaults filled in, or every problem."""
    normalized, problems = wf.checkpoints(items)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    return normalized


def vllm_weights_round(hosts: t.Sequence[str], held: t.Sequence[t.Any], staging: str,
                       mode: str = "tree", per_source: int = 1) -> dict[str, str]:
    """hosts | vllm_weights_round(held flags aligned with hosts, staging, mode, per_source)."""
    hosts = list(hosts)
    held = list(held)
    if len(held) != len(hosts):
        raise AnsibleFilterError(f"vllm_weights_round: {len(hosts)} hosts but {len(held)} held flags")
    try:
        return wf.plan_round(hosts, [h for h, flag in zip(hosts, held) if flag], staging, mode,
                             int(per_source))
    except ValueError as exc:
        raise AnsibleFilterError(f"vllm_weights_round: {exc}") from None


def vllm_weights_round_count(hosts: int, per_source: int = 1, mode: str = "tree") -> int:
    """Rounds the fan-out needs from nothing, plus one for a staging host that lost its copy."""
    return wf.round_count(int(hosts), int(per_source), mode) + 1


class FilterModule:
    """gpuserve.vllm weights fan-out filters."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"vllm_weights_checkpoints": vllm_weights_checkpoints,
                "vllm_weights_round": vllm_weights_round,
                "vllm_weights_round_count": vllm_weights_round_count}
