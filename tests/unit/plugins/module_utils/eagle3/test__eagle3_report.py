"""Tables for _eagle3._report: python_patch's files, per-edit rows, the report and its summary line.

The python_patch results below are hand-made in the shape python_patch's RETURN documents
(files -> edits with id, kind, status, detail); the role's integration test
(tests/integration/roles/eagle3_patches/) checks the same report against real python_patch runs.
"""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._eagle3 import _report as er
from ansible_collections.gpuserve.vllm.plugins.filter.eagle3_patches import (
    eagle3_patch_files,
    eagle3_patches_report,
)
from ansible.errors import AnsibleFilterError

PKG = "/opt/ml-env/lib/python3.11/site-packages/vllm"
PATCHSET = [
    {"file": "model_executor/models/kimi_k25.py", "edits": [
        {"id": "kimi-import", "import": {"module": "m", "names": ["A"]}},
        {"id": "kimi-base", "base": {"class": "K", "names": ["A"]}}]},
    {"file": "config/speculative.py", "edits": [
        {"id": "allow", "when_missing": "skip", "element": {"name": "x", "values": ["kimi_k2"]}}]},
]


def facts(action: str = "patch", **extra: t.Any) -> t.Dict[str, t.Any]:
    base = {"version": "0.17.0", "package_dir": PKG, "installed": True, "action": action,
            "message": "vLLM 0.17.0 needs the EAGLE-3 patches for Kimi-K2.5 (x).",
            "reasons": ["source lacks: kimi_eagle3"], "model_types": ["kimi_k2", "deepseek_v3"],
            "markers": {"kimi_eagle3": False}, "shape": {"kimi_wrapper": "registered",
                                                         "allow_list": None},
            "files": {"model_executor/models/kimi_k25.py": {"state": "pristine"},
                      "config/speculative.py": {"state": "missing"}}}
    base.update(extra)
    return base


def result(changed: bool, *statuses: str) -> t.Dict[str, t.Any]:
    ids = ["kimi-import", "kimi-base", "allow"]
    return {"changed": changed, "files": [
        {"path": PKG + "/model_executor/models/kimi_k25.py", "edits": [
            {"id": i, "kind": k, "status": s, "detail": "d"}
            for i, k, s in zip(ids[:2], ("import", "base"), statuses[:2])]},
        {"path": PKG + "/config/speculative.py", "edits": [
            {"id": ids[2], "kind": "element", "status": statuses[2], "detail": "d"}]}]}


def test_patch_files_prefix_the_package_dir() -> None:
    files = er.patch_files(PATCHSET, facts())
    assert [f["path"] for f in files] == [PKG + "/model_executor/models/kimi_k25.py",
                                          PKG + "/config/speculative.py"]
    assert files[1]["edits"] is PATCHSET[1]["edits"]


def test_patch_files_present_only_leaves_missing_files_out() -> None:
    files = er.patch_files(PATCHSET, facts(), present_only=True)
    assert [f["path"] for f in files] == [PKG + "/model_executor/models/kimi_k25.py"]


def test_patch_files_without_vllm_is_an_error_through_the_filter() -> None:
    with pytest.raises(AnsibleFilterError, match="eagle3_patch_files: .*package_dir"):
        eagle3_patch_files(PATCHSET, facts(package_dir=None))


@pytest.mark.parametrize("edit, kind", [
    ({"id": "a", "when_missing": "skip", "element": {}}, "element"),
    ({"member": {}}, "member"),
])
def test_edit_kind(edit: t.Dict[str, t.Any], kind: str) -> None:
    assert er.edit_kind(edit) == kind


def test_edit_kind_needs_exactly_one() -> None:
    with pytest.raises(ValueError, match="expected one kind key"):
        er.edit_kind({"id": "a", "import": {}, "base": {}})


def test_edit_rows_from_python_patch_use_relative_paths() -> None:
    rows = er.edit_rows("patch", result(True, "applied", "applied", "skipped"), PATCHSET, PKG)
    assert rows[0] == {"file": "model_executor/models/kimi_k25.py", "id": "kimi-import",
                       "kind": "import", "status": "applied", "detail": "d"}
    assert [r["status"] for r in rows] == ["applied", "applied", "skipped"]


def test_edit_rows_native_lists_the_patch_set() -> None:
    rows = er.edit_rows("native", {"skipped": True, "changed": False}, PATCHSET, PKG)
    assert [(r["file"], r["id"], r["kind"], r["status"]) for r in rows] == [
        ("model_executor/models/kimi_k25.py", "kimi-import", "import", "native"),
        ("model_executor/models/kimi_k25.py", "kimi-base", "base", "native"),
        ("config/speculative.py", "allow", "element", "native")]


def test_edit_rows_refused_is_empty() -> None:
    assert er.edit_rows("refuse", {}, PATCHSET, PKG) == []


@pytest.mark.parametrize("state, action, patched, restored, check, changed, line", [
    ("present", "patch", result(True, "applied", "applied", "skipped"), None, False, True,
     "PATCH: 2 edits applied, 0 already there, 1 skipped (the other release's allow-list name); "
     "files changed; allow-list entries kimi_k2, deepseek_v3."),
    ("present", "patch", result(True, "applied", "already", "skipped"), None, True, True,
     "PATCH: 1 edits to apply, 1 already there, 1 skipped (the other release's allow-list name); "
     "files would change;"),
    ("present", "patch", result(False, "already", "already", "skipped"), None, False, False,
     "files unchanged;"),
    ("absent", "patch", {"skipped": True, "changed": False},
     result(True, "reverted", "reverted", "reverted"), False, True, "RESTORE: 3 edits reverted; files changed."),
    ("present", "native", {"skipped": True, "changed": False}, None, False, False,
     "NATIVE: vLLM 0.17.0 needs the EAGLE-3 patches for Kimi-K2.5 (x). source lacks: kimi_eagle3"),
    ("present", "refuse", None, None, False, False,
     "REFUSE: vLLM 0.17.0 needs the EAGLE-3 patches for Kimi-K2.5 (x)."),
])
def test_report_and_summary(state: str, action: str, patched: t.Any, restored: t.Any, check: bool,
                            changed: bool, line: str) -> None:
    got = eagle3_patches_report(facts(action), state, "/opt/ml-env/bin/python", PATCHSET, check,
                                patched=patched, restored=restored)
    assert got["action"] == ("restore" if state == "absent" else action)
    assert got["changed"] is changed and got["check_mode"] is check
    assert got["summary"].startswith("eagle3_patches: vLLM 0.17.0 (%s): " % PKG)
    assert line in got["summary"]
    assert got["python"] == "/opt/ml-env/bin/python"
    assert got["vllm_version"] == "0.17.0" and got["kimi_wrapper"] == "registered"
    assert got["model_types"] == ["kimi_k2", "deepseek_v3"]


def test_report_of_an_uninstalled_vllm() -> None:
    bare = {"installed": False, "version": None, "package_dir": None, "files": {}, "markers": {},
            "shape": {}, "action": "refuse", "reasons": ["no vllm distribution"],
            "message": "vLLM is not installed for /x/python; install ...", "model_types": ["kimi_k2"]}
    got = er.report(bare, state="present", python="/x/python", patchset=PATCHSET, check_mode=False)
    assert got["edits"] == [] and got["kimi_wrapper"] is None and got["allow_list"] is None
    assert got["summary"] == ("eagle3_patches: vLLM None (None): REFUSE: vLLM is not installed "
                              "for /x/python; install ...")
