"""Shared helpers of the _pyedit tables: edit mappings and one call through the public API."""

from __future__ import annotations

import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils import _pyedit as pe

PATH = "pkg/mod.py"


def apply(source: str, raw_edits: t.Sequence[t.Mapping[str, t.Any]]) -> pe.PatchResult:
    return pe.apply_edits(source, pe.parse_edits(raw_edits, path=PATH), path=PATH)


def imp(module: str, *names: t.Any) -> t.Dict[str, t.Any]:
    return {"import": {"module": module, "names": list(names)}}


def base(cls: str, *names: str) -> t.Dict[str, t.Any]:
    return {"base": {"class": cls, "names": list(names)}}


def member(cls: str, source: str, on_conflict: str = "fail") -> t.Dict[str, t.Any]:
    return {"member": {"class": cls, "source": source, "on_conflict": on_conflict}}


def replace(scope: str, old: str, new: str) -> t.Dict[str, t.Any]:
    return {"replace": {"scope": scope, "old": old, "new": new}}


def element(scope: str, name: str, *values: t.Any) -> t.Dict[str, t.Any]:
    return {"element": {"scope": scope, "name": name, "values": list(values)}}


LONG_IMPORT = "from .interfaces import MixtureOfExperts, SupportsEagle, SupportsLoRA, SupportsPP\n"
