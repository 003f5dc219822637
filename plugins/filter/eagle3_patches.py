# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters the eagle3_patches role wires python_patch and its report with.

They replace Jinja namespace() loops and nested conditionals; the logic is table-tested in
module_utils/_eagle3/_report.py.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.plugin_utils._lazy_engine import Engine

er = Engine("_eagle3._report")


def eagle3_patch_files(patchset: t.Sequence[t.Mapping[str, t.Any]], facts: t.Mapping[str, t.Any],
                       present_only: bool = False) -> list[dict[str, t.Any]]:
    """patchset | eagle3_patch_files(facts, present_only) -> python_patch's files."""
    try:
        return er.patch_files(patchset, facts, present_only)
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError("eagle3_patch_files: %s" % exc) from exc


def eagle3_patches_report(facts: t.Mapping[str, t.Any], state: str, python: str,
                          patchset: t.Sequence[t.Mapping[str, t.Any]], check_mode: bool,
                          patched: t.Mapping[str, t.Any] | None = None,
                          restored: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
    """facts | eagle3_patches_report(state, python, patchset, check_mode, patched, restored)."""
    try:
        return er.report(facts, state=state, python=python, patchset=patchset,
                         check_mode=bool(check_mode), patched=patched, restored=restored)
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError("eagle3_patches_report: %s" % exc) from exc


class FilterModule:
    """gpuserve.vllm filters for the eagle3_patches role."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "eagle3_patch_files": eagle3_patch_files,
            "eagle3_patches_report": eagle3_patches_report,
        }
