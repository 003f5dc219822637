"""Unit tests of _patch._txn: the journal, its roll-back, and bounded commands."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._patch import _files as pf
from ansible_collections.gpuserve.vllm.plugins.module_utils._patch import _txn as px


def _txn(tmp_path: Path, names: list[str]) -> tuple[px.Transaction, list[Path]]:
    paths = []
    changes = []
    for name in names:
        path = tmp_path / name
        path.write_bytes(b"old " + name.encode())
        os.utime(path, ns=(1_000_000_000_000, 1_000_000_000_000))
        paths.append(path)
        changes.append(px.Change(str(path), path.read_bytes(), b"new " + name.encode(),
                                 os.stat(path), ("save", path.read_bytes(), [], False)))
    return px.Transaction(str(tmp_path / "state"), changes, pf.backup_stamp()), paths


def test_journal_is_written_before_anything_and_removed_at_commit(tmp_path: Path) -> None:
    txn, paths = _txn(tmp_path, ["a.py", "b.py"])
    txn.prepare(None, None, backup=False)
    assert [p.read_bytes() for p in paths] == [b"old a.py", b"old b.py"]
    assert px.journal_files(str(tmp_path / "state")) == {
        txn.journal: {str(p) for p in paths}}
    txn.apply()
    txn.commit()
    assert [p.read_bytes() for p in paths] == [b"new a.py", b"new b.py"]
    assert px.journals(str(tmp_path / "state")) == []
    assert pf.load_record(str(tmp_path / "state"), str(paths[0])) is not None


@pytest.mark.parametrize("replaced", [0, 1, 2])
def test_rollback_is_idempotent_whatever_was_replaced(tmp_path: Path, replaced: int) -> None:
    txn, paths = _txn(tmp_path, ["a.py", "b.py"])
    txn.prepare(None, None, backup=True)
    for change in txn.changes[:replaced]:  # a run killed after `replaced` replacements
        pf.replace(str(change.tmp), change.real)
    state = str(tmp_path / "state")
    data, problems = px.rollback_journal(state, txn.journal)
    assert problems == [] and len(data["files"]) == 2
    assert [p.read_bytes() for p in paths] == [b"old a.py", b"old b.py"]
    # and their times: a server that loaded them owes no restart (vllm_node_state reads times)
    assert [p.stat().st_mtime_ns for p in paths] == [1_000_000_000_000] * 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "b.py", "state"]
    assert px.journals(state) == [] and pf.load_record(state, str(paths[0])) is None


def test_rollback_leaves_a_file_changed_by_someone_else(tmp_path: Path) -> None:
    txn, paths = _txn(tmp_path, ["a.py"])
    txn.prepare(None, None, backup=False)
    paths[0].write_bytes(b"hand edit")
    _data, problems = px.rollback_journal(str(tmp_path / "state"), txn.journal)
    assert len(problems) == 1 and str(paths[0]) in problems[0] and "left alone" in problems[0]
    assert paths[0].read_bytes() == b"hand edit"
    assert os.path.exists(txn.journal)  # kept for the next run to report again


def test_superseded_record_copies_are_undone(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    target = tmp_path / "a.py"
    target.write_bytes(b"upgraded")
    pf.save_record(state, str(target), b"first original", b"first written", [])
    change = px.Change(str(target), b"upgraded", b"upgraded+edit", os.stat(target),
                       ("save", b"upgraded", [], True))
    txn = px.Transaction(state, [change], "STAMP")
    txn.prepare(None, None, backup=False)
    txn.apply()
    [copy] = pf.superseded_records(state, str(target))
    assert pf.read_record(copy).original() == b"first original"
    assert pf.load_record(state, str(target)).original() == b"upgraded"  # type: ignore[union-attr]
    assert px.rollback_journal(state, txn.journal)[1] == []
    assert pf.superseded_records(state, str(target)) == []
    assert pf.load_record(state, str(target)).original() == b"first original"  # type: ignore[union-attr]
    assert target.read_bytes() == b"upgraded"


def test_dead_journal_temps_only(tmp_path: Path) -> None:
    folder = tmp_path / px.JOURNAL_SUBDIR
    folder.mkdir()
    mine = folder / (".txn-2026-01-01T000000.000000Z.%d.json.abcdefgh.tmp" % os.getpid())
    dead = folder / ".txn-2026-01-01T000000.000000Z.999999999.json.abcdefgh.tmp"
    mine.write_text("")
    dead.write_text("")
    assert px.dead_journal_temps(str(tmp_path)) == [str(dead)]


@pytest.mark.parametrize(("code", "data", "rc", "out"), [
    ("import sys; sys.stdout.write(sys.stdin.read().upper())", b"abc", 0, "ABC"),
    ("raise SystemExit(3)", None, 3, ""),
    ("import time; time.sleep(30)", None, None, ""),
])
def test_run_bounded(code: str, data: bytes | None, rc: int | None, out: str) -> None:
    started = time.monotonic()
    got = px.run_bounded([sys.executable, "-c", code], 1.5, data=data)
    assert got[:2] == (rc, out)
    assert time.monotonic() - started < 15


def test_a_journal_that_vanishes_while_listed_is_skipped(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    txn, _paths = _txn(tmp_path, ["a.py"])
    txn.prepare(None, None, backup=False)
    gone = str(tmp_path / "state" / px.JOURNAL_SUBDIR / "txn-committed-meanwhile.json")
    real = px.journals
    monkeypatch.setattr(px, "journals", lambda state_dir: real(state_dir) + [gone])
    assert list(px.journal_files(str(tmp_path / "state"))) == [txn.journal]
