# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Validating user-supplied edit mappings into Edits, and the table of edit kinds."""

from __future__ import annotations

import typing as t
from collections import abc

from . import _base, _element, _import, _member, _replace
from ._common import EDIT_KINDS, WHEN_MISSING_CHOICES, Edit, EditSpecError, _require_choice


# One module per kind, each with KEYS, parse_spec(spec) and plan(doc, spec).
KINDS = dict(zip(EDIT_KINDS, (_import, _base, _member, _replace, _element)))


def parse_edits(raw_edits: t.Sequence[t.Mapping[str, t.Any]], *, path: str | None = None) -> t.List[Edit]:
    """Validate user-supplied edit mappings ({id?, when_missing?, <kind>: {...}}) into Edits.

    Everything that can be checked without the file is checked here, so a typo in a playbook
    fails before any file is read.
    """
    if isinstance(raw_edits, (str, bytes)) or not isinstance(raw_edits, abc.Sequence):
        raise EditSpecError("edits must be a list of mappings", path=path)
    edits: t.List[Edit] = []
    seen: t.Dict[str, int] = {}
    for index, raw in enumerate(raw_edits):
        edit = _parse_edit(raw, index, path)
        if edit.id in seen:
            raise EditSpecError(f"duplicate edit id (also used by edit #{seen[edit.id]})",
                                path=path, edit_id=edit.id, kind=edit.kind)
        seen[edit.id] = index
        edits.append(edit)
    return edits


def _parse_edit(raw: t.Any, index: int, path: str | None) -> Edit:
    default_id = f"edits[{index}]"
    if not isinstance(raw, abc.Mapping):
        raise EditSpecError(f"an edit must be a mapping, got {type(raw).__name__}",
                            path=path, edit_id=default_id)
    edit_id = raw.get("id", default_id)
    if not isinstance(edit_id, str) or not edit_id:
        raise EditSpecError("'id' must be a non-empty string", path=path, edit_id=default_id)
    kinds = [key for key in raw if key in EDIT_KINDS]
    unknown = sorted(str(key) for key in raw if key not in EDIT_KINDS + ("id", "when_missing"))
    if unknown:
        raise EditSpecError(f"unknown key(s) {', '.join(unknown)}; an edit has an optional id, "
                            f"when_missing and exactly one of {', '.join(EDIT_KINDS)}",
                            path=path, edit_id=edit_id)
    if len(kinds) != 1:
        found = ", ".join(kinds) if kinds else "none"
        raise EditSpecError(f"an edit needs exactly one of {', '.join(EDIT_KINDS)} (found: {found})",
                            path=path, edit_id=edit_id)
    kind = kinds[0]
    when_missing = raw.get("when_missing", "fail")
    try:
        _require_choice("when_missing", when_missing, WHEN_MISSING_CHOICES)
        spec = KINDS[kind].parse_spec(_check_keys(kind, raw[kind]))
    except EditSpecError as exc:
        raise EditSpecError(exc.message, path=path, edit_id=edit_id, kind=kind) from None
    return Edit(id=edit_id, kind=kind, spec=spec, when_missing=when_missing)


def _check_keys(kind: str, spec: t.Any) -> t.Dict[str, t.Any]:
    if not isinstance(spec, abc.Mapping):
        raise EditSpecError(f"'{kind}' must be a mapping, got {type(spec).__name__}")
    required, optional = KINDS[kind].KEYS
    missing = [key for key in required if key not in spec]
    if missing:
        raise EditSpecError(f"missing key(s): {', '.join(missing)}")
    unknown = sorted(str(key) for key in spec if key not in required + optional)
    if unknown:
        raise EditSpecError(f"unknown key(s): {', '.join(unknown)} "
                            f"(allowed: {', '.join(required + optional)})")
    return dict(spec)
