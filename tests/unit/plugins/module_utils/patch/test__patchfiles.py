"""Unit tests of _patch._files: the disk side of python_patch (records, atomic writes, locks)."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import time
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._patch import _files as pf


@pytest.mark.parametrize(
    ("real_path", "prefix"),
    [
        ("/opt/ml-env/lib/python3.12/site-packages/vllm/model_executor/models/deepseek_v2.py",
         "deepseek_v2.py-"),
        ("/srv/a/__init__.py", "__init__.py-"),
        ("/srv/b/__init__.py", "__init__.py-"),
    ],
)
def test_record_stem_is_readable_and_stable(real_path: str, prefix: str) -> None:
    stem = pf.record_stem(real_path)
    assert stem.startswith(prefix)
    assert len(stem) == len(prefix) + 16
    assert stem == pf.record_stem(real_path)


def test_same_basename_in_two_packages_gets_two_records() -> None:
    assert pf.record_stem("/srv/a/__init__.py") != pf.record_stem("/srv/b/__init__.py")


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (["m.cpython-311.pyc", "m.cpython-312.opt-1.pyc"],
         ["m.cpython-311.pyc", "m.cpython-312.opt-1.pyc"]),
        (["mm.cpython-311.pyc", "m_x.cpython-311.pyc", "other.cpython-311.pyc"], []),
        (["m.cpython-311.pyc", "m.py.cpython-311.pyc"], ["m.cpython-311.pyc"]),
        ([], []),
    ],
)
def test_stale_bytecode_matches_only_this_module(tmp_path: Path, files: list[str],
                                                 expected: list[str]) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    for name in files:
        (cache / name).write_bytes(b"pyc")
    assert [Path(p).name for p in pf.stale_bytecode(str(tmp_path / "m.py"))] == expected
    removed = pf.remove_stale_bytecode(str(tmp_path / "m.py"))
    assert [Path(p).name for p in removed] == expected
    assert sorted(p.name for p in cache.iterdir()) == sorted(set(files) - set(expected))


def test_atomic_write_keeps_mode_and_owner(tmp_path: Path) -> None:
    target = tmp_path / "f.py"
    target.write_bytes(b"old\n")
    os.chmod(target, 0o640)
    if os.geteuid() == 0:
        os.chown(target, 1234, 4321)
    before = os.stat(target)
    pf.atomic_write(str(target), b"new\r\n", like=before)
    after = os.stat(target)
    assert target.read_bytes() == b"new\r\n"
    assert stat.S_IMODE(after.st_mode) == 0o640
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert after.st_ino != before.st_ino  # replaced by rename, not rewritten in place
    assert [p.name for p in tmp_path.iterdir()] == ["f.py"]  # no temp file left


def test_write_temp_failure_leaves_no_temp(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        pf.write_temp(str(tmp_path / "f.py"), "not bytes")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_record_roundtrip_and_format(tmp_path: Path) -> None:
    state = tmp_path / "state"
    real = "/srv/app/models.py"
    rec = pf.save_record(str(state), real, b"orig\n", b"new\n",
                         [{"id": "e1", "kind": "import"}, {"id": "e2", "kind": "base"}])
    data = json.loads(Path(rec.json_path).read_text())
    assert data["format"] == pf.RECORD_FORMAT
    assert data["path"] == real
    assert data["sha256_original"] == pf.sha256_bytes(b"orig\n")
    assert data["sha256_written"] == pf.sha256_bytes(b"new\n")
    assert data["edits"] == [{"id": "e1", "kind": "import"}, {"id": "e2", "kind": "base"}]
    assert Path(rec.orig_path).read_bytes() == b"orig\n"
    assert stat.S_IMODE(os.stat(rec.json_path).st_mode) == 0o600
    loaded = pf.load_record(str(state), real)
    assert loaded is not None and loaded.original() == b"orig\n"
    assert loaded.sha256_written == rec.sha256_written
    pf.delete_record(str(state), real)
    assert pf.load_record(str(state), real) is None
    assert list((state / "records").iterdir()) == []


def test_damaged_original_is_detected(tmp_path: Path) -> None:
    rec = pf.save_record(str(tmp_path), "/x.py", b"orig\n", b"new\n", [])
    Path(rec.orig_path).write_bytes(b"tampered\n")
    with pytest.raises(ValueError, match="does not match"):
        pf.load_record(str(tmp_path), "/x.py").original()  # type: ignore[union-attr]


def test_record_of_another_path_is_refused(tmp_path: Path) -> None:
    rec = pf.save_record(str(tmp_path), "/x.py", b"o", b"n", [])
    data = json.loads(Path(rec.json_path).read_text())
    data["path"] = "/elsewhere.py"
    Path(rec.json_path).write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not a python_patch record"):
        pf.load_record(str(tmp_path), "/x.py")


def test_adding_edits_keeps_the_orig_file(tmp_path: Path) -> None:
    first = pf.save_record(str(tmp_path), "/x.py", b"orig", b"one", [{"id": "a", "kind": "base"}])
    inode = os.stat(first.orig_path).st_ino
    pf.save_record(str(tmp_path), "/x.py", b"orig", b"two", [{"id": "b", "kind": "base"}])
    assert os.stat(first.orig_path).st_ino == inode  # not rewritten


@pytest.mark.parametrize(
    ("backup_dir", "relative"),
    [(False, None), (True, "srv/pkg/m.py.STAMP~")],
)
def test_backup_names(tmp_path: Path, backup_dir: bool, relative: str | None) -> None:
    src_dir = tmp_path / "srv" / "pkg"
    src_dir.mkdir(parents=True)
    src = src_dir / "m.py"
    src.write_bytes(b"data")
    bdir = tmp_path / "backups"
    dest = pf.backup(str(src), str(bdir) if backup_dir else None, "STAMP")
    if backup_dir:
        assert dest == str(bdir) + str(src_dir / "m.py.STAMP~")
        assert dest.endswith(relative)  # type: ignore[arg-type]
    else:
        assert dest == str(src) + ".STAMP~"
    assert Path(dest).read_bytes() == b"data"


def _hold_lock(state_dir: str, path: str, marker: str, seconds: float) -> None:
    with pf.locked(state_dir, [path]):
        with open(marker, "a", encoding="utf-8") as handle:
            handle.write("start %f\n" % time.monotonic())
        time.sleep(seconds)
        with open(marker, "a", encoding="utf-8") as handle:
            handle.write("end %f\n" % time.monotonic())


def test_lock_serialises_two_processes(tmp_path: Path) -> None:
    marker = str(tmp_path / "marker")
    procs = [multiprocessing.Process(target=_hold_lock,
                                     args=(str(tmp_path), "/x.py", marker, 0.3))
             for _run in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(10)
    lines = Path(marker).read_text().split()
    events = [lines[i] for i in range(0, len(lines), 2)]
    assert events == ["start", "end", "start", "end"]  # never start, start


def test_one_lock_file_per_distinct_path(tmp_path: Path) -> None:
    with pf.locked(str(tmp_path), ["/b.py", "/a.py", "/a.py"]):
        names = sorted(p.name for p in (tmp_path / "locks").iterdir())
    assert names == sorted([pf.record_stem("/a.py") + ".lock", pf.record_stem("/b.py") + ".lock"])
