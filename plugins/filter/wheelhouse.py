# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter the wheelhouse role copies by: only the files a host lacks or holds changed."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.plugin_utils._lazy_engine import Engine

wh = Engine("_env._wheelhouse")


def wheelhouse_push_plan(manifest: t.Mapping[str, t.Any], host_sums: t.Mapping[str, str],
                         control: t.Mapping[str, str]) -> list[str]:
    """manifest | wheelhouse_push_plan(the host's {file: sha256}, {SHA256SUMS: hex, manifest: hex})."""
    try:
        return wh.push_plan(manifest, control, host_sums)
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError(f"wheelhouse_push_plan: needs a format-1 manifest and the sha256 of "
                                 f"{wh.SUMS} and {wh.MANIFEST}, got {exc!r}") from exc


class FilterModule:
    """gpuserve.vllm filters for the wheelhouse role."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"wheelhouse_push_plan": wheelhouse_push_plan}
