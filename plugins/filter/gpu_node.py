# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the gpu_node role: whether node acceptance runs again.

The decision is table-tested Python (module_utils/_gpu/_acceptance_key.py), not Jinja.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _acceptance_key as acckey


def gpu_node_acceptance_plan(observed: t.Any, force: t.Any = False) -> dict[str, t.Any]:
    """gpu_node_acceptance's observe result | gpu_node_acceptance_plan(force) -> run, reason, summary."""
    if not isinstance(observed, dict) or not isinstance(observed.get("key"), dict):
        raise AnsibleFilterError("gpu_node_acceptance_plan: expected the result of gpuserve.vllm.gpu_node_acceptance "
                                 "with observe: true (a dict with 'key'), got %r" % (observed,))
    return acckey.plan(previous=observed.get("previous"), record_error=observed.get("record_error"),
                       key=observed["key"], force=boolean(force, strict=False),
                       record=observed.get("record") or "the acceptance record")


class FilterModule:
    """gpuserve.vllm gpu_node filters."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"gpu_node_acceptance_plan": gpu_node_acceptance_plan}
