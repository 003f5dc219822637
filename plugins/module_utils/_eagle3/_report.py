# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The eagle3_patches role's inputs to python_patch and its report, from the facts and results.

Why here: these were Jinja ``namespace()`` loops and nested conditionals in the role; as pure
functions they are table-tested. Used by the gpuserve.vllm eagle3_patches filters on the
controller. Stdlib only, no Ansible imports.
"""

from __future__ import annotations

import typing as t

EDIT_KEYS = ("id", "when_missing")  # every other key of an edit mapping is its kind


def patch_files(patchset: t.Sequence[t.Mapping[str, t.Any]], facts: t.Mapping[str, t.Any],
                present_only: bool = False) -> t.List[t.Dict[str, t.Any]]:
    """python_patch's ``files``: each patch-set file under the installed package directory.

    present_only: leave out files the facts found missing (a restore touches only what exists).
    """
    if not facts.get("package_dir"):
        raise ValueError("the facts have no package_dir (vLLM not installed): nothing to patch")
    states = facts.get("files") or {}
    out = []
    for entry in patchset:
        if present_only and states.get(entry["file"], {}).get("state", "missing") == "missing":
            continue
        out.append({"path": "%s/%s" % (facts["package_dir"], entry["file"]), "edits": entry["edits"]})
    return out


def edit_kind(edit: t.Mapping[str, t.Any]) -> str:
    """The kind of a patch-set edit mapping: its one key besides id and when_missing."""
    kinds = [key for key in edit if key not in EDIT_KEYS]
    if len(kinds) != 1:
        raise ValueError("edit %r: expected one kind key, found %s" % (edit.get("id"), kinds or "none"))
    return kinds[0]


def edit_rows(action: str, result: t.Mapping[str, t.Any], patchset: t.Sequence[t.Mapping[str, t.Any]],
              package_dir: str | None) -> t.List[t.Dict[str, t.Any]]:
    """Per edit: python_patch's status when it ran, ``native`` when the release has the change
    built in, nothing when the role refused (file paths relative to the package directory)."""
    if "files" in result:
        prefix = (package_dir or "") + "/"
        return [{"file": f["path"][len(prefix):] if f["path"].startswith(prefix) else f["path"],
                 "id": e["id"], "kind": e["kind"], "status": e["status"], "detail": e["detail"]}
                for f in result["files"] for e in f["edits"]]
    if action == "native":
        return [{"file": f["file"], "id": e["id"], "kind": edit_kind(e), "status": "native",
                 "detail": "built into this release"} for f in patchset for e in f["edits"]]
    return []


def summary(action: str, facts: t.Mapping[str, t.Any], statuses: t.Sequence[str], changed: bool,
            check_mode: bool) -> str:
    """The role's one line of output."""
    words = ("would change" if check_mode else "changed") if changed else "unchanged"
    if action == "patch":
        detail = ("%d edits %s, %d already there, %d skipped (the other release's allow-list "
                  "name); files %s; allow-list entries %s." % (
                      statuses.count("applied"), "to apply" if check_mode else "applied",
                      statuses.count("already"), statuses.count("skipped"), words,
                      ", ".join(facts.get("model_types") or [])))
    elif action == "restore":
        detail = "%d edits reverted; files %s." % (statuses.count("reverted"), words)
    elif action == "native":
        detail = "%s %s" % (facts["message"], "; ".join(facts["reasons"]))
    else:
        detail = facts["message"]
    where = "vLLM %s (%s)" % (facts["version"], facts["package_dir"])
    return "eagle3_patches: %s: %s: %s" % (where, action.upper(), detail)


def report(facts: t.Mapping[str, t.Any], *, state: str, python: str,
           patchset: t.Sequence[t.Mapping[str, t.Any]], check_mode: bool,
           patched: t.Mapping[str, t.Any] | None = None,
           restored: t.Mapping[str, t.Any] | None = None) -> t.Dict[str, t.Any]:
    """The fact eagle3_patches_report: decision, file states, per-edit statuses, summary line.

    patched/restored: python_patch's results of this run (None or skipped when it did not run).
    """
    action = "restore" if state == "absent" else facts["action"]
    result = (patched if state == "present" else restored) or {}
    edits = edit_rows(action, result, patchset, facts.get("package_dir"))
    changed = bool(result.get("changed", False))
    shape = facts.get("shape") or {}
    return {
        "vllm_version": facts.get("version"),
        "package_dir": facts.get("package_dir"),
        "python": python,
        "state": state,
        "action": action,
        "message": facts["message"],
        "reasons": facts["reasons"],
        "changed": changed,
        "check_mode": check_mode,
        "model_types": facts.get("model_types"),
        "markers": facts.get("markers"),
        "kimi_wrapper": shape.get("kimi_wrapper"),
        "allow_list": shape.get("allow_list"),
        "files": facts.get("files"),
        "edits": edits,
        "summary": summary(action, facts, [e["status"] for e in edits], changed, check_mode),
    }
