"""_env._store: names, link states, switch plans, prune plans (tables), and the link writes on disk."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _store as es

NOW = datetime.datetime(2026, 11, 30, 18, 30, 5, tzinfo=datetime.timezone.utc)
BASE = {"python": "3.11.2", "installer": "uv", "requirements": "pip==26.3\n"}


@pytest.mark.parametrize("content, label", [
    (dict(BASE, content={}), "env"),
    (dict(BASE, content={"vllm": {"version": "0.17.0"}}), "vllm-0.17.0"),
    (dict(BASE, content={"vllm": {"version": "0.18.0rc1 dev/x"}}), "vllm-0.18.0rc1_dev_x"),
    ({"vllm": {"version": "0.16.0"}}, "vllm-0.16.0"),
    (dict(BASE, content={"vllm": "0.17.0"}), "env"),
])
def test_label(content: dict, label: str) -> None:
    name = es.env_name(content)
    assert name.rsplit("-", 1)[0] == label
    assert len(name.rsplit("-", 1)[1]) == 12


@pytest.mark.parametrize("a, b, same", [
    ({"x": 1, "y": [1, 2]}, {"y": [1, 2], "x": 1}, True),  # key order does not matter
    ({"x": 1, "y": [1, 2]}, {"x": 1, "y": [2, 1]}, False),  # list order does
    (dict(BASE, content={}), dict(BASE, python="3.12.3", content={}), False),
    (dict(BASE, content={"eagle3": {"digest": "ab", "state": "present"}}),
     dict(BASE, content={"eagle3": {"digest": "ab", "state": "absent"}}), False),
    (dict(BASE, content={"vllm": {"no_deps": True}}), dict(BASE, content={"vllm": {"no_deps": False}}), False),
])
def test_content_id(a: dict, b: dict, same: bool) -> None:
    assert (es.content_id(a) == es.content_id(b)) is same


def test_content_id_is_the_canonical_json_hash() -> None:
    # printf '{"a":1,"b":"x"}' | sha256sum
    assert es.content_id({"b": "x", "a": 1}) == "ecf9e98ec064"


def test_name_refuses_non_dict() -> None:
    with pytest.raises(ValueError, match="must be a dict, got list"):
        es.env_name([1])  # type: ignore[arg-type]


L = "/opt/ml-env"
P = "/opt/ml-env.previous"
S = "/opt/ml-env.d"
A, B, C = S + "/a", S + "/b", S + "/c"


def st(path: str, kind: str, target: str = "") -> es.LinkState:
    return es.LinkState(path, kind, target)


@pytest.mark.parametrize("link, prev, target, rollback, steps, current, previous, adopted", [
    # fresh node: only the link
    (st(L, "absent"), st(P, "absent"), A, False, [("link", L, A)], A, "", ""),
    # already there: nothing
    (st(L, "link", A), st(P, "link", B), A, False, [], A, B, ""),
    # forward: previous first, then the link
    (st(L, "link", A), st(P, "absent"), B, False, [("link", P, A), ("link", L, B)], B, A, ""),
    (st(L, "link", A), st(P, "link", C), B, False, [("link", P, A), ("link", L, B)], B, A, ""),
    # rollback: the link first (a crash leaves it on the env asked for)
    (st(L, "link", B), st(P, "link", A), A, True, [("link", L, A), ("link", P, B)], A, B, ""),
    # crash after the first forward step: both name A; the re-run redoes both
    (st(L, "link", A), st(P, "link", A), B, False, [("link", P, A), ("link", L, B)], B, A, ""),
    # dangling link (its env deleted by hand): point it at the target, previous untouched
    (st(L, "dangling"), st(P, "link", A), B, False, [("link", L, B)], B, A, ""),
    # legacy real dir: previous to its new home, move it, then the link
    (st(L, "dir", L), st(P, "absent"), B, False,
     [("link", P, S + "/legacy-20261130183005"), ("adopt", L, S + "/legacy-20261130183005"), ("link", L, B)],
     B, S + "/legacy-20261130183005", S + "/legacy-20261130183005"),
    # crash after the adoption's rename: link absent, previous names the legacy env: just link
    (st(L, "absent"), st(P, "link", S + "/legacy-1"), B, False, [("link", L, B)], B, S + "/legacy-1", ""),
])
def test_plan_switch(link, prev, target, rollback, steps, current, previous, adopted) -> None:  # noqa: ANN001
    plan = es.plan_switch(link, prev, target, S, NOW, rollback)
    assert [(s.action, s.path, s.target) for s in plan.steps] == steps
    assert (plan.current_after, plan.previous_after, plan.adopted_legacy) == (current, previous, adopted)
    assert plan.changed is bool(steps)


@pytest.mark.parametrize("link, store, match", [
    (st(L, "other"), S, "neither a symlink nor a directory"),
    (st(L, "dir", L), "", "store_dir is needed"),
])
def test_plan_switch_refuses(link: es.LinkState, store: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        es.plan_switch(link, st(P, "absent"), A, store, NOW)


def env(name: str, created: float) -> es.StoredEnv:
    return es.StoredEnv(name, f"{S}/{name}", created)


@pytest.mark.parametrize("created, keep, protect, removed, kept", [
    ({"a": 1, "b": 2, "c": 3}, 2, [], ["a"], ["c", "b"]),
    ({"a": 1, "b": 2, "c": 3}, 1, [], ["b", "a"], ["c"]),
    # protected envs count towards keep and are never removed, even when older
    ({"a": 1, "b": 2, "c": 3}, 2, [f"{S}/a"], ["b"], ["c", "a"]),
    ({"a": 1, "b": 2, "c": 3, "d": 4}, 2, [f"{S}/a", f"{S}/b", f"{S}/d"], ["c"], ["d", "b", "a"]),
    ({"a": 1, "b": 2}, 5, [], [], ["b", "a"]),
    ({}, 2, [f"{S}/a"], [], []),
    # same time: the name breaks the tie, so the plan is stable
    ({"a": 1, "b": 1, "c": 1}, 2, [], ["a"], ["c", "b"]),
])
def test_plan_prune(created: dict, keep: int, protect: list, removed: list, kept: list) -> None:
    remove, keep_list = es.plan_prune([env(n, c) for n, c in created.items()], keep, protect)
    assert [e.name for e in remove] == removed
    assert [e.name for e in keep_list] == kept


def test_plan_prune_refuses_keep_0() -> None:
    with pytest.raises(ValueError, match="keep must be at least 1, got 0"):
        es.plan_prune([], 0, [])


# --- on disk -------------------------------------------------------------------------------------

def make_env(store: Path, name: str, created: str | None = None) -> Path:
    path = store / name
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").symlink_to("/usr/bin/python3")
    if created is not None:
        (path / es.RECORD).write_text(json.dumps({"name": name, "created": created}))
    return path


def test_read_link_kinds(tmp_path: Path) -> None:
    a = make_env(tmp_path / "store", "a")
    (tmp_path / "l").symlink_to(a)
    (tmp_path / "d").symlink_to(tmp_path / "gone")
    (tmp_path / "f").write_text("x")
    assert es.read_link(str(tmp_path / "l")) == es.LinkState(str(tmp_path / "l"), "link", str(a))
    assert es.read_link(str(tmp_path / "d")).kind == "dangling"
    assert es.read_link(str(tmp_path / "f")).kind == "other"
    assert es.read_link(str(tmp_path / "store")).kind == "dir"
    assert es.read_link(str(tmp_path / "none")).kind == "absent"
    assert es.is_env(str(a)) and not es.is_env(str(tmp_path / "store"))


def test_replace_symlink_leaves_no_temp(tmp_path: Path) -> None:
    a, b = make_env(tmp_path, "a"), make_env(tmp_path, "b")
    link = tmp_path / "cur"
    es.replace_symlink(str(link), str(a))
    (tmp_path / ".cur.switching").symlink_to(tmp_path / "stale")  # a killed run's temp link
    es.replace_symlink(str(link), str(b))
    assert os.readlink(link) == str(b)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "cur"]


def test_list_store_and_created(tmp_path: Path) -> None:
    store = tmp_path / "store"
    make_env(store, "vllm-0.17.0-aaa", "2026-11-30T10:00:00Z")
    make_env(store, "vllm-0.16.0-bbb", "2026-11-29T10:00:00Z")
    legacy = make_env(store, "legacy-20261101000000")
    os.utime(legacy, (1000.0, 1000.0))
    (store / ".vllm-0.15.0-ccc.removing").mkdir()
    (store / "note.txt").write_text("not an env")
    (store / "alias").symlink_to(legacy)
    envs, leftovers = es.list_store(str(store))
    assert [(e.name, e.created) for e in envs] == [
        ("legacy-20261101000000", 1000.0),
        ("vllm-0.16.0-bbb", datetime.datetime(2026, 11, 29, 10, tzinfo=datetime.timezone.utc).timestamp()),
        ("vllm-0.17.0-aaa", datetime.datetime(2026, 11, 30, 10, tzinfo=datetime.timezone.utc).timestamp()),
    ]
    assert leftovers == [str(store / ".vllm-0.15.0-ccc.removing")]
    assert es.list_store(str(tmp_path / "missing")) == ([], [])


def test_remove_env_renames_then_deletes(tmp_path: Path) -> None:
    a = make_env(tmp_path, "a")
    es.remove_env(str(a))
    left = tmp_path / ".b.removing"
    left.mkdir()
    es.remove_env(str(left))
    assert list(tmp_path.iterdir()) == []


def test_same_filesystem(tmp_path: Path) -> None:
    assert es.same_filesystem(str(tmp_path), str(tmp_path / "not" / "yet"))
    if os.stat("/proc").st_dev != os.stat(tmp_path).st_dev:
        assert not es.same_filesystem(str(tmp_path), "/proc/sys")
