"""python_patch on a bad day: hung checks, a held lock, a full disk, an unencodable edit.

main() runs in-process (module_runner); failures are injected by monkeypatching the standard
library (os.replace, tempfile.mkstemp), never through a hook in the product.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import typing as t
import venv
from pathlib import Path

import pytest

from ansible.module_utils import basic

from ansible_collections.gpuserve.vllm.plugins.module_utils._patch import _files as pf
from ansible_collections.gpuserve.vllm.plugins.modules import python_patch

from module_runner import run_module_main

EDITS = [{"id": "x2", "replace": {"old": "X = 1", "new": "X = 2"}}]


class Node:
    """A package of files in a venv's site-packages (import_check runs its python with -I, so
    nothing on PYTHONPATH would be found) and a state_dir; run() calls main() with files=..."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch, count: int = 2) -> None:
        self.root = root
        self.monkeypatch = monkeypatch
        venv.create(root / "env", symlinks=True)
        self.python = str(root / "env" / "bin" / "python")
        self.pkg = Path(glob.glob(str(root / "env" / "lib" / "python*" / "site-packages"))[0]) / "pkg"
        self.pkg.mkdir()
        (self.pkg / "__init__.py").write_text("")
        self.paths = []
        for index in range(count):
            path = self.pkg / ("m%d.py" % index)
            path.write_text("X = 1\n")
            self.paths.append(path)
        self.state = root / "state"

    def run(self, edits: t.List[t.Dict[str, t.Any]] | None = None, **args: t.Any) -> t.Dict[str, t.Any]:
        args.setdefault("files", [{"path": str(p), "edits": edits or EDITS} for p in self.paths])
        args.setdefault("state_dir", str(self.state))
        args.setdefault("python", self.python)
        # Collected at AnsibleModule.warn: Ansible's global warning list is not reliable here, as
        # other in-process tests (filters, display) can route warnings to stderr instead.
        warnings: t.List[str] = []
        self.monkeypatch.setattr(basic.AnsibleModule, "warn", lambda _self, msg: warnings.append(msg))
        result = run_module_main(python_patch, args, self.monkeypatch)
        result["warnings"] = warnings
        return result

    def contents(self) -> t.List[str]:
        return [p.read_text() for p in self.paths]

    def strays(self) -> t.List[str]:
        return sorted(p.name for p in self.pkg.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture(name="node")
def fixture_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    return Node(tmp_path, monkeypatch)


def _alive(pid: int) -> bool:
    try:
        with open("/proc/%d/status" % pid, encoding="utf-8") as handle:
            return "\nState:\tZ" not in handle.read()
    except FileNotFoundError:
        return False


def test_hung_import_check_is_killed_whole_and_rolled_back(node: Node) -> None:
    # The import starts a child that would outlive it, then hangs: both must go.
    pidfile = node.root / "child.pid"
    (node.pkg / "hang.py").write_text(
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open(%r, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n" % str(pidfile))
    started = time.monotonic()
    res = node.run(import_check=["pkg.hang"], check_timeout=2)
    assert time.monotonic() - started < 30
    assert res["failed"] is True and res["timed_out"] is True
    for word in ("import_check", "2 s", "check_timeout", "process group was killed",
                 "pkg.hang", "every file and record was put back"):
        assert word in res["msg"], (word, res["msg"])
    assert "putting back failed" not in res["msg"]
    assert node.contents() == ["X = 1\n"] * 2
    assert not list((node.state / "records").glob("*"))
    assert not list((node.state / "journal").glob("*"))
    deadline = time.monotonic() + 5
    while _alive(int(pidfile.read_text())) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(int(pidfile.read_text()))


def test_hung_validate_is_bounded(node: Node) -> None:
    res = node.run(validate="%s -c 'import time; time.sleep(60)' %%s" % sys.executable,
                   check_timeout=1)
    assert res["failed"] is True and "validate command" in res["msg"]
    assert "1 s (check_timeout)" in res["msg"] and "time.sleep(60)" in res["msg"]
    assert node.contents() == ["X = 1\n"] * 2 and node.strays() == []


def test_lock_wait_is_bounded_and_names_the_holder(node: Node) -> None:
    with pf.locked(str(node.state), [os.path.realpath(node.paths[1])]):
        started = time.monotonic()
        res = node.run(lock_timeout=1)
        assert time.monotonic() - started < 10
    assert res["failed"] is True and "lock_timeout" in res["msg"]
    assert "pid %d, started 20" % os.getpid() in res["msg"], res["msg"]
    assert str(node.paths[1]) in res["msg"] and "nothing was written" in res["msg"]
    assert node.contents() == ["X = 1\n"] * 2
    assert node.run()["changed"] is True  # the lock is free again


@pytest.mark.parametrize(("fail_on", "phase"), [
    ("/pkg/m1.py", "replace"), (".orig", "record"), (".json", "journal")])
def test_disk_full_names_the_path_and_the_phase(node: Node, fail_on: str, phase: str) -> None:
    real_replace = os.replace

    def full(src: str, dst: str) -> None:
        if dst.endswith(fail_on):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(src, dst)

    node.monkeypatch.setattr(os, "replace", full)
    res = node.run()
    assert res["failed"] is True, res
    assert "%s " % phase in res["msg"] and "No space left on device" in res["msg"], res["msg"]
    if phase == "replace":
        assert str(node.paths[1]) in res["msg"]
    assert "every file and record was put back" in res["msg"]
    assert node.contents() == ["X = 1\n"] * 2 and node.strays() == []
    assert not list((node.state / "records").glob("*"))


def test_temp_file_failure_names_the_directory(node: Node) -> None:
    def full(*_args: t.Any, **_kw: t.Any) -> t.Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    node.monkeypatch.setattr(tempfile, "mkstemp", full)
    res = node.run()
    assert res["failed"] is True
    assert "temp file %s: No space left on device" % node.pkg in res["msg"], res["msg"]


def test_failed_restore_is_reported_once_and_finished_by_the_next_run(node: Node) -> None:
    real_replace = os.replace
    calls = {"m1": 0}

    def flaky(src: str, dst: str) -> None:
        # m1.py cannot be replaced at all: the write fails; m0.py was written before it, and
        # putting m0.py back fails too (the disk filled up meanwhile).
        if dst.endswith("m1.py") or (dst.endswith("m0.py") and calls["m1"]):
            calls["m1"] += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(src, dst)

    node.monkeypatch.setattr(os, "replace", flaky)
    res = node.run()
    node.monkeypatch.setattr(os, "replace", real_replace)
    assert res["failed"] is True
    assert "putting back failed for: restore %s" % node.paths[0] in res["msg"], res["msg"]
    assert "every file" not in res["msg"] and "journal" in res["msg"]
    assert node.contents() == ["X = 2\n", "X = 1\n"]  # m0 still new: the journal has it
    again = node.run(state="absent")
    assert again["recovered"] and any("rolled back" in w for w in again["warnings"])
    assert node.contents() == ["X = 1\n"] * 2 and node.strays() == []


def test_unencodable_edit_names_file_encoding_and_edit(node: Node) -> None:
    latin = node.paths[0]
    latin.write_bytes(b"# -*- coding: latin-1 -*-\nX = 1\nNAME = '\xe9'\n")
    edit = [{"id": "arrow", "replace": {"old": "X = 1", "new": "X = '\u2192'"}}]
    res = node.run(files=[{"path": str(latin), "edits": edit}])
    assert res["failed"] is True and "Traceback" not in res["msg"]
    for word in (str(latin), "'arrow'", "iso-8859-1", "\u2192", "\\u2192", "nothing was written"):
        assert word in res["msg"], (word, res["msg"])
    assert latin.read_bytes() == b"# -*- coding: latin-1 -*-\nX = 1\nNAME = '\xe9'\n"


def test_stray_temp_files_of_a_killed_run_are_swept(node: Node) -> None:
    stray = node.pkg / ".m0.py.k3j_x9a2.tmp"
    stray.write_text("half")
    unrelated = node.pkg / ".other.py.k3j_x9a2.tmp"
    unrelated.write_text("not ours")
    assert node.run()["changed"] is True
    assert not stray.exists() and unrelated.exists()


def test_state_dir_is_private(node: Node, tmp_path: Path) -> None:
    state = tmp_path / "var" / "lib" / "pp"
    old = os.umask(0o022)
    try:
        node.run(state_dir=str(state))
    finally:
        os.umask(old)
    for folder in (state, state / "records", state / "locks", state / "journal"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder


def _newer_python() -> str | None:
    """A Python >= 3.12 that really runs (pyenv shims exist but may refuse to)."""
    for candidate in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3"))
                            ) + ["python3.13", "python3.12"]:
        found = shutil.which(candidate)
        if found and subprocess.run([found, "-c", "import sys; assert sys.version_info >= (3, 12)"],
                                    capture_output=True, check=False).returncode == 0:
            return found
    return None


@pytest.mark.skipif(sys.version_info >= (3, 12) or _newer_python() is None,
                    reason="needs this Python < 3.12 and a python3.12+ to compare with")
def test_newer_syntax_names_both_versions_and_the_python_option(node: Node) -> None:
    newer = t.cast(str, _newer_python())
    node.paths[0].write_text("type Alias = int\nX = 1\n")  # PEP 695: Python 3.12
    res = node.run(files=[{"path": str(node.paths[0]), "edits": EDITS}], python=newer)
    assert res["failed"] is True
    mine = "Python %d.%d." % sys.version_info[:2]
    for word in (mine, "`python` option", newer, "ansible_python_interpreter", "3.1"):
        assert word in res["msg"], (word, res["msg"])
    assert "restore the pristine" not in res["msg"]


def test_owner_that_cannot_be_kept_is_a_warning(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.py"
    target.write_text("x")
    like = os.stat_result((0o100644, 0, 0, 1, os.geteuid() + 1, os.getegid() + 1, 1, 0, 0, 0))

    def refuse(*_args: t.Any) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "fchown", refuse)
    warnings: t.List[str] = []
    tmp = pf.write_temp(str(target), b"y", like=like, warnings=warnings)
    os.unlink(tmp)
    assert len(warnings) == 1 and str(target) in warnings[0]
    assert "could not be kept" in warnings[0] and "%d:%d" % (like.st_uid, like.st_gid) in warnings[0]


def test_lock_holder_is_written_for_waiters(tmp_path: Path) -> None:
    with pf.locked(str(tmp_path), ["/x.py"]):
        text = Path(pf.lock_path(str(tmp_path), "/x.py")).read_text()
        with open(pf.lock_path(str(tmp_path), "/x.py"), "a", encoding="utf-8") as other:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert text.startswith("pid %d, started " % os.getpid())
    with pytest.raises(pf.LockTimeout):
        with pf.locked(str(tmp_path), ["/x.py"]):
            with pf.locked(str(tmp_path), ["/x.py"], timeout=0.2):
                pass  # pragma: no cover


@pytest.mark.parametrize("check", [False, True])
def test_a_readable_state_dir_is_narrowed_once(node: Node, check: bool) -> None:
    """An older release (or an operator) left the records readable: the next run makes them
    root's alone and says so; the run after that changes nothing."""
    assert node.run()["changed"] is True
    records = sorted((node.state / "records").iterdir())
    for path in [node.state, node.state / "records", *records]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    res = node.run(_ansible_check_mode=check)
    assert res["failed"] is False and res["changed"] is True, res
    assert sorted(res["state_dir_narrowed"]) == sorted(
        str(p) for p in [node.state, node.state / "records", *records])
    assert any("only root could read" in w for w in res["warnings"]), res["warnings"]
    modes = {stat.S_IMODE(p.stat().st_mode) for p in records}
    assert modes == ({0o644} if check else {0o600})
    if not check:
        again = node.run()
        assert (again["changed"], again["state_dir_narrowed"]) == (False, [])


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the state_dir to another user needs root")
@pytest.mark.parametrize("what", ["state", "record", "link"])
def test_a_state_dir_another_user_could_change_is_refused(node: Node, what: str) -> None:
    assert node.run()["changed"] is True
    record = sorted((node.state / "records").glob("*.json"))[0]
    before = node.contents()
    if what == "state":
        os.chown(node.state, 4321, 4321)
    elif what == "record":
        os.chown(record, 4321, 4321)
    else:
        record.unlink()
        record.symlink_to("/etc/hostname")
    res = node.run(state="absent")
    assert res["failed"] is True
    assert "cannot be trusted" in res["msg"] and "Nothing was written" in res["msg"], res["msg"]
    assert node.contents() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_state_dir_below_a_folder_another_user_owns_is_refused(node: Node, tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    os.chown(tmp_path / "shared", 4321, 4321)
    res = node.run(state_dir=str(tmp_path / "shared" / "pp"))
    assert res["failed"] is True and "shared is owned by uid 4321" in res["msg"], res["msg"]
    assert not (tmp_path / "shared" / "pp").exists()
    assert node.contents() == ["X = 1\n"] * 2
