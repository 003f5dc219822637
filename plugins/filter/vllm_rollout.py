# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter site.yml's serve play decides with whether a node leaves the routers on this run.

The decision is table-tested Python (module_utils/_vllm_rollout.py), not Jinja.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils import _vllm_rollout as vr


def vllm_restart_plan(state: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """{'start': .., 'link_stat': .., 'link': .., 'target': .., 'marker': .., ...} | vllm_restart_plan."""
    return vr.restart_plan(state)


class FilterModule:
    """gpuserve.vllm rollout filters."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"vllm_restart_plan": vllm_restart_plan}
