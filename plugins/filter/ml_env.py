# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter the ml_env role names its side-by-side envs with (so check mode can say the name)."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.plugin_utils._lazy_engine import Engine

_store = Engine("_env._store")


def ml_env_name(content: t.Mapping[str, t.Any]) -> str:
    """content | ml_env_name -> `<label>-<12 hex of sha256 over its canonical JSON>`."""
    try:
        return _store.env_name(content)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"ml_env_name: {exc}") from exc


class FilterModule:
    """gpuserve.vllm filters for the ml_env role."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"ml_env_name": ml_env_name}
