"""Whole-file writes (plugins/module_utils/_atomic.py): the old bytes or the new ones, never half,
and no temp file left behind by a write that failed."""

from __future__ import annotations

import errno
import os
import subprocess
import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _atomic
from ansible_collections.gpuserve.vllm.plugins.module_utils._patch import _files
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _preflight_cache

ROOT = os.geteuid() == 0


def temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.skipif(not ROOT, reason="giving a file another owner needs root (CI runs as root)")
def test_write_gives_the_bytes_mode_and_owner(tmp_path: Path) -> None:
    target = tmp_path / "unit"
    target.write_bytes(b"old")
    target.chmod(0o600)
    _atomic.write(str(target), b"new", mode=0o4755, owner=(1234, 1235))
    info = target.stat()
    assert target.read_bytes() == b"new"
    assert (info.st_uid, info.st_gid) == (1234, 1235)
    assert info.st_mode & 0o7777 == 0o4755  # set after the owner: a chown clears set-id bits
    assert temps(tmp_path) == []


def test_without_a_mode_the_file_is_private(tmp_path: Path) -> None:
    target = tmp_path / "entry.json"
    _atomic.write(str(target), b"{}")
    assert target.stat().st_mode & 0o777 == 0o600


def test_a_link_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    target = tmp_path / "target"
    target.symlink_to(victim)
    _atomic.write(str(target), b"new", mode=0o644)
    assert not target.is_symlink() and target.read_bytes() == b"new"
    assert victim.read_bytes() == b"keep"


@pytest.mark.skipif(not ROOT, reason="mounting a small tmpfs needs root (CI runs as root)")
def test_a_full_disk_keeps_the_old_file_whole_and_leaves_no_temp(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        target = disk / "manifest.json"
        target.write_bytes(b"old manifest\n")
        with pytest.raises(OSError) as failed:
            _atomic.write(str(target), b"x" * 256 * 1024, mode=0o644)
        assert failed.value.errno == errno.ENOSPC
        assert target.read_bytes() == b"old manifest\n"
        assert temps(disk) == []
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_a_failed_step_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             step: str) -> None:
    target = tmp_path / "record"
    target.write_bytes(b"old")

    def fail(*_args: t.Any) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, step, fail)
    with pytest.raises(OSError):
        _atomic.write(str(target), b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old" and temps(tmp_path) == []


def test_publish_by_link_refuses_a_target_that_appeared(tmp_path: Path) -> None:
    target = tmp_path / "lock"
    first = _atomic.write_temp(str(target), b"first")
    _atomic.publish(first, str(target), replace=False)
    second = _atomic.write_temp(str(target), b"second")
    with pytest.raises(FileExistsError):
        _atomic.publish(second, str(target), replace=False)
    assert target.read_bytes() == b"first" and temps(tmp_path) == []


def test_an_owner_this_process_may_not_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []

    def fchown(_fd: int, uid: int, gid: int) -> None:
        calls.append((uid, gid))
        if uid != -1:
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "fchown", fchown)
    tmp = _atomic.write_temp(str(tmp_path / "f.py"), b"x", owner=(4321, 4322), owner_required=False)
    assert calls == [(4321, 4322), (-1, 4322)]  # the group alone, when the owner is refused
    os.unlink(tmp)
    with pytest.raises(PermissionError):
        _atomic.write_temp(str(tmp_path / "f.py"), b"x", owner=(4321, 4322))
    assert temps(tmp_path) == []


def test_a_killed_writers_temp_is_one_its_owner_recognises(tmp_path: Path) -> None:
    """What a SIGKILL between the write and the rename leaves, python_patch and the verdict cache
    find by its name and remove."""
    source = tmp_path / "model.py"
    left = _atomic.write_temp(str(source), b"half")
    assert _files.stray_temps(str(source)) == [left]
    cache = tmp_path / "cache"
    cache.mkdir()
    stale = _atomic.write_temp(str(cache / "entry"), b"{", prefix=".entry-")
    os.utime(stale, (0, 0))
    assert stale in _preflight_cache.prune(str(cache), now=10 ** 9)
    assert temps(cache) == []
