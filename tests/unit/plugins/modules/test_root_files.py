"""root_files in-process on real files: made and written once, then nothing; what makes a file
differ; check and diff mode; bad input and folders others could change refused before anything
is written; a link replaced, never followed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.modules import root_files

from module_runner import run_module_main

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the files are root's: run as root (CI does)")


@pytest.fixture(name="root")
def fixture_root(tmp_path: Path) -> Path:
    os.chmod(tmp_path, 0o755)
    (tmp_path / "etc").mkdir(mode=0o755)
    return tmp_path


def wanted(root: Path) -> dict:
    return {"directories": [{"path": str(root / "lib")}, {"path": str(root / "lib" / "sub"), "mode": "0700"}],
            "files": [{"path": str(root / "lib" / "script.py"), "content": "print('hi')\n"},
                      {"path": str(root / "lib" / "sub" / "secret.json"), "content": "{}\n", "mode": "0600"},
                      {"path": str(root / "etc" / "unit.timer"), "content": "[Timer]\nOnActiveSec=1s\n"}]}


def run(args: dict, monkeypatch: pytest.MonkeyPatch, check: bool = False, diff: bool = False) -> dict:
    return run_module_main(root_files, {**args, "_ansible_check_mode": check, "_ansible_diff": diff}, monkeypatch)


def snapshot(root: Path) -> dict:
    return {str(p): (p.lstat().st_mode, p.lstat().st_uid, p.lstat().st_mtime_ns,
                     p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(root.rglob("*"))}


def test_made_and_written_once_then_nothing_changes(root, monkeypatch):
    first = run(wanted(root), monkeypatch)
    assert first["changed"] and not first["failed"]
    assert first["changed_paths"] == [str(root / "lib"), str(root / "lib" / "sub"), str(root / "lib" / "script.py"),
                                      str(root / "lib" / "sub" / "secret.json"), str(root / "etc" / "unit.timer")]
    assert (root / "lib" / "script.py").read_text() == "print('hi')\n"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}
    assert modes == {"etc": 0o755, "lib": 0o755, "sub": 0o700, "script.py": 0o644, "secret.json": 0o600,
                     "unit.timer": 0o644}
    assert {p.stat().st_uid for p in root.rglob("*")} == {0}
    before = snapshot(root)
    second = run(wanted(root), monkeypatch)
    assert not second["changed"] and second["changed_paths"] == [] and "5 folders and files as wanted" in second["msg"]
    assert snapshot(root) == before
    assert not list(root.rglob("*.tmp"))


@pytest.mark.parametrize("spoil, expected", [
    (lambda p: p.write_text("print('other')\n"), "content"),
    (lambda p: p.write_text("print('hi')\n\n"), "content"),
    (lambda p: p.chmod(0o755), "mode 0755, not 0644"),
    (lambda p: os.chown(p, 1234, 0), "owner 1234:0, not 0:0"),
    (lambda p: p.unlink(), "absent"),
])
def test_each_difference_is_named_and_put_right(root, monkeypatch, spoil, expected):
    run(wanted(root), monkeypatch)
    script = root / "lib" / "script.py"
    spoil(script)
    fixed = run(wanted(root), monkeypatch)
    assert fixed["changes"] == ["%s: %s" % (script, expected)]
    assert script.read_text() == "print('hi')\n" and stat.S_IMODE(script.stat().st_mode) == 0o644
    assert script.stat().st_uid == 0
    assert not run(wanted(root), monkeypatch)["changed"]


def test_a_folder_given_back_to_root_with_its_mode(root, monkeypatch):
    run(wanted(root), monkeypatch)
    os.chown(root / "lib", 1234, 1234)
    os.chmod(root / "lib", 0o700)
    fixed = run(wanted(root), monkeypatch)
    assert fixed["changes"] == ["%s: mode 0700, not 0755, owner 1234:1234, not 0:0" % (root / "lib")]
    assert stat.S_IMODE((root / "lib").stat().st_mode) == 0o755 and (root / "lib").stat().st_uid == 0


def test_check_mode_says_what_would_change_and_writes_nothing(root, monkeypatch):
    before = snapshot(root)
    checked = run(wanted(root), monkeypatch, check=True, diff=True)
    assert checked["changed"] and len(checked["changed_paths"]) == 5 and "would change" in checked["msg"]
    assert [d["after"] for d in checked["diff"]] == ["print('hi')\n", "{}\n", "[Timer]\nOnActiveSec=1s\n"]
    assert snapshot(root) == before


def test_diff_shows_before_and_after(root, monkeypatch):
    run(wanted(root), monkeypatch)
    args = wanted(root)
    args["files"][2]["content"] = "[Timer]\nOnActiveSec=2s\n"
    changed = run(args, monkeypatch, diff=True)
    assert changed["diff"] == [{"before_header": str(root / "etc" / "unit.timer"),
                                "after_header": str(root / "etc" / "unit.timer"),
                                "before": "[Timer]\nOnActiveSec=1s\n", "after": "[Timer]\nOnActiveSec=2s\n"}]
    assert "diff" not in run(args, monkeypatch)


def test_a_link_is_replaced_not_followed(root, monkeypatch):
    target = root / "etc" / "elsewhere"
    target.write_text("keep me\n")
    (root / "lib").mkdir(mode=0o755)
    (root / "lib" / "script.py").symlink_to(target)
    done = run(wanted(root), monkeypatch)
    assert "%s: not a regular file" % (root / "lib" / "script.py") in done["changes"]
    assert not (root / "lib" / "script.py").is_symlink()
    assert (root / "lib" / "script.py").read_text() == "print('hi')\n" and target.read_text() == "keep me\n"


@pytest.mark.parametrize("change, message", [
    (lambda a, r: a["files"][0].update(mode="0664"), "files[0]: mode 0664 lets users other than root write it"),
    (lambda a, r: a["files"][0].update(mode="rw"), "files[0]: mode 'rw' is not an octal number"),
    (lambda a, r: a["directories"][0].update(mode="0777"), "directories[0]: mode 0777 lets users other than root"),
    (lambda a, r: a["files"][0].update(path="lib/script.py"), "files[0]: 'lib/script.py' is not a normalized absolute path"),
    (lambda a, r: a["files"][0].update(path=str(r / "lib" / ".." / "x")), "is not a normalized absolute path"),
    (lambda a, r: a["files"].append(dict(a["files"][0])), "files[3]: %s/lib/script.py is also files[0]"),
    (lambda a, r: a["files"].append({"path": str(r / "nowhere" / "x"), "content": ""}),
     "nowhere/x: its folder %s/nowhere does not exist"),
    (lambda a, r: a["directories"].reverse(), "sub: its folder %s/lib does not exist"),
    (lambda a, r: a["files"].append({"path": str(r / "etc"), "content": ""}), "etc exists and is a folder"),
])
def test_bad_input_is_refused_naming_it_and_nothing_is_written(root, monkeypatch, change, message):
    args = wanted(root)
    change(args, root)
    before = snapshot(root)
    refused = run(args, monkeypatch)
    assert refused["failed"] and "nothing was written" in refused["msg"]
    assert (message % root if "%s" in message else message) in refused["msg"]
    assert snapshot(root) == before


@pytest.mark.parametrize("spoil, problem", [
    (lambda d: os.chmod(d, 0o777), "is writable by every user (mode 0777)"),
    (lambda d: (os.chown(d, 0, 1234), os.chmod(d, 0o775)), "is writable by group 1234"),
    (lambda d: os.chown(d, 1234, 0), "is owned by"),
])
def test_a_folder_another_user_could_change_is_refused(root, monkeypatch, spoil, problem):
    spoil(root / "etc")
    before = snapshot(root)
    refused = run(wanted(root), monkeypatch)
    assert refused["failed"] and "unit.timer: not written, %s" % (root / "etc") in refused["msg"]
    assert problem in refused["msg"]
    assert snapshot(root) == before


def test_a_listed_folder_others_could_write_is_given_back_to_root(root, monkeypatch):
    (root / "lib").mkdir()
    os.chmod(root / "lib", 0o777)
    done = run(wanted(root), monkeypatch)
    assert not done["failed"] and "%s: mode 0777, not 0755" % (root / "lib") in done["changes"]
    assert stat.S_IMODE((root / "lib").stat().st_mode) == 0o755
