"""ml_env_prune in-process on a real store: check mode, keep, protection, leftovers, refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.modules import ml_env_prune

from module_runner import run_module_main


def make_env(store: Path, name: str, created: str | None) -> Path:
    path = store / name
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").symlink_to("/usr/bin/python3")
    if created:
        (path / "gpuserve-env.json").write_text(json.dumps({"name": name, "created": created}))
    return path


@pytest.fixture(name="node")
def fixture_node(tmp_path: Path) -> Path:
    store = tmp_path / "ml-env.d"
    legacy = make_env(store, "legacy-20261001000000", None)
    os.utime(legacy, (1.0, 1.0))  # oldest: from its mtime
    for day, name in enumerate(["vllm-0.16.0-aaaaaaaaaaaa", "vllm-0.17.0-bbbbbbbbbbbb", "vllm-0.18.0-cccccccccccc"], 1):
        make_env(store, name, f"2026-11-{day:02d}T12:00:00Z")
    return tmp_path


def names(node: Path) -> list[str]:
    return sorted(p.name for p in (node / "ml-env.d").iterdir())


def run(node: Path, monkeypatch: pytest.MonkeyPatch, check: bool = False, **args: object) -> dict:
    base = {"store_dir": str(node / "ml-env.d"), "link": str(node / "ml-env"), "_ansible_check_mode": check}
    return run_module_main(ml_env_prune, dict(base, **args), monkeypatch)


def test_check_then_prune_then_rerun(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = node / "ml-env.d"
    (node / "ml-env").symlink_to(store / "vllm-0.16.0-aaaaaaaaaaaa")  # serving the old one
    (node / "ml-env.previous").symlink_to(store / "legacy-20261001000000")
    before = names(node)
    dry = run(node, monkeypatch, check=True, keep=2)
    assert (dry["changed"], dry["removed"]) == (True, [str(store / "vllm-0.18.0-cccccccccccc"),
                                                       str(store / "vllm-0.17.0-bbbbbbbbbbbb")])
    assert dry["msg"].startswith("would remove") and names(node) == before

    done = run(node, monkeypatch, keep=2, protect=[str(store / "vllm-0.18.0-cccccccccccc")])
    assert done["removed"] == [str(store / "vllm-0.17.0-bbbbbbbbbbbb")]
    assert done["kept"] == [str(store / n) for n in
                            ("vllm-0.18.0-cccccccccccc", "vllm-0.16.0-aaaaaaaaaaaa", "legacy-20261001000000")]
    assert names(node) == ["legacy-20261001000000", "vllm-0.16.0-aaaaaaaaaaaa", "vllm-0.18.0-cccccccccccc"]
    again = run(node, monkeypatch, keep=2, protect=[str(store / "vllm-0.18.0-cccccccccccc")])
    assert (again["changed"], again["removed"]) == (False, [])


def test_keep_1_without_links_keeps_newest_and_clears_leftovers(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    leftover = node / "ml-env.d" / ".vllm-0.15.0-dddddddddddd.removing"
    (leftover / "lib").mkdir(parents=True)
    done = run(node, monkeypatch, keep=1)
    assert done["removed"][-1] == str(leftover)
    assert names(node) == ["vllm-0.18.0-cccccccccccc"]


def test_missing_store_and_bad_keep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = run(tmp_path, monkeypatch, keep=2)
    assert (empty["failed"], empty["changed"], empty["msg"]) == (False, False, f"nothing to prune in {tmp_path}/ml-env.d (keep 2)")
    bad = run(tmp_path, monkeypatch, keep=0)
    assert bad["failed"] and bad["msg"] == "keep: must be at least 1 (the serving env always stays), got 0"


def record(node: Path, name: str, value: object, mode: int = 0o600) -> str:
    path = node / name
    path.write_text(json.dumps(value))
    os.chmod(path, mode)
    return str(path)


def test_a_killed_runs_journal_keeps_the_env_it_names_as_previous(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A switch killed before its restart: the link names 0.18, .previous 0.17, and the journal
    names 0.16 as the previous to put back if the start fails. The prepare play's prune keeps it."""
    store = node / "ml-env.d"
    (node / "ml-env").symlink_to(store / "vllm-0.18.0-cccccccccccc")
    (node / "ml-env.previous").symlink_to(store / "vllm-0.17.0-bbbbbbbbbbbb")
    journal = record(node, "vllm_server.plan.json", {
        "action": "upgrade", "from": str(store / "vllm-0.17.0-bbbbbbbbbbbb"),
        "to": str(store / "vllm-0.18.0-cccccccccccc"), "previous": str(store / "vllm-0.16.0-aaaaaaaaaaaa")})
    without = run(node, monkeypatch, check=True, keep=2)
    assert str(store / "vllm-0.16.0-aaaaaaaaaaaa") in without["removed"]
    done = run(node, monkeypatch, keep=2, protect_records=[journal, str(node / "vllm_server.rollback.json")])
    assert done["removed"] == [str(store / "legacy-20261001000000")] and done["unreadable"] == []
    assert names(node) == ["vllm-0.16.0-aaaaaaaaaaaa", "vllm-0.17.0-bbbbbbbbbbbb", "vllm-0.18.0-cccccccccccc"]


def test_a_record_that_cannot_be_read_safely_prunes_nothing(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    leftover = node / "ml-env.d" / ".vllm-0.15.0-dddddddddddd.removing"
    leftover.mkdir()
    before = names(node)
    bad = record(node, "vllm_server.plan.json", {"to": "/elsewhere"}, mode=0o666)
    done = run(node, monkeypatch, keep=1, protect_records=[bad])
    assert (done["changed"], done["removed"], names(node)) == (False, [], before)
    assert done["unreadable"] == [f"{bad}: owned by uid 0, mode 0666 (root's, written by root alone, is expected)"]
    assert done["msg"].startswith("pruned nothing in") and "every env stays" in done["msg"]
