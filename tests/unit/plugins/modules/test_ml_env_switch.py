"""ml_env_switch in-process on real directories: check mode, switch, re-run, rollback, legacy, refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.modules import ml_env_switch

from module_runner import run_module_main


def make_env(store: Path, name: str) -> Path:
    path = store / name
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").symlink_to("/usr/bin/python3")
    return path


def links(root: Path) -> tuple[str, str]:
    """What ml-env and ml-env.previous name, as the unit would see them."""
    def target(path: Path) -> str:
        return os.path.realpath(path) if path.is_symlink() else ("dir" if path.is_dir() else "")
    return target(root / "ml-env"), target(root / "ml-env.previous")


@pytest.fixture(name="node")
def fixture_node(tmp_path: Path) -> Path:
    for name in ("a", "b"):
        make_env(tmp_path / "ml-env.d", name)
    return tmp_path


def run(node: Path, monkeypatch: pytest.MonkeyPatch, check: bool = False, **args: object) -> dict:
    base = {"link": str(node / "ml-env"), "store_dir": str(node / "ml-env.d"),
            "_ansible_check_mode": check, "_ansible_diff": True}
    return run_module_main(ml_env_switch, dict(base, **args), monkeypatch)


def test_fresh_switch_rerun_rollback(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = str(node / "ml-env.d" / "a"), str(node / "ml-env.d" / "b")
    dry = run(node, monkeypatch, check=True, target=a)
    assert (dry["changed"], dry["current"], links(node)) == (True, a, ("", ""))
    assert dry["msg"].startswith("would switch")

    first = run(node, monkeypatch, target=a)
    assert (first["changed"], first["switched_from"], first["switched_to"], first["previous"]) == (True, "", a, "")
    assert links(node) == (a, "")
    again = run(node, monkeypatch, target=a)
    assert (again["changed"], again["switched_to"], again["msg"]) == (False, "", f"{node}/ml-env already names {a}")

    dry = run(node, monkeypatch, check=True, target=b)
    assert (dry["changed"], links(node)) == (True, (a, ""))
    assert dry["diff"]["before"] == f"{node}/ml-env -> {a}\n{node}/ml-env.previous -> (absent)\n"
    assert dry["diff"]["after"] == f"{node}/ml-env -> {b}\n{node}/ml-env.previous -> {a}\n"

    up = run(node, monkeypatch, target=b)
    assert (up["changed"], up["switched_from"], up["current"], up["previous"]) == (True, a, b, a)
    assert links(node) == (b, a)
    assert sorted(p.name for p in node.iterdir()) == ["ml-env", "ml-env.d", "ml-env.previous"]

    back = run(node, monkeypatch, rollback=True)
    assert (back["changed"], back["current"], back["previous"], links(node)) == (True, a, b, (a, b))


def test_legacy_dir_is_adopted(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    legacy = make_env(node, "ml-env")
    (legacy / "marker").write_text("old")
    b = str(node / "ml-env.d" / "b")
    dry = run(node, monkeypatch, check=True, target=b)
    assert dry["changed"] and dry["adopted_legacy"].startswith(f"{node}/ml-env.d/legacy-")
    assert links(node) == ("dir", "")

    done = run(node, monkeypatch, target=b)
    adopted = Path(done["adopted_legacy"])
    assert (adopted / "marker").read_text() == "old"
    assert links(node) == (b, str(adopted))
    assert done["msg"].endswith(f"; the legacy env moves to {adopted}")
    back = run(node, monkeypatch, rollback=True)
    assert links(node) == (str(adopted), b) and not back["adopted_legacy"]


@pytest.mark.parametrize("setup, args, match", [
    (None, {"target": "ml-env.d/none"}, "is not an env (no bin/python there)"),
    (None, {"target": "ml-env.d"}, "is not an env"),
    (None, {"rollback": True}, "ml-env.previous does not exist, so there is no env to roll back to"),
    ("dangling-previous", {"rollback": True}, "which is missing or has no bin/python"),
    ("file-link", {"target": "ml-env.d/a"}, "neither a symlink nor a directory"),
])
def test_refusals(node: Path, monkeypatch: pytest.MonkeyPatch, setup: str | None, args: dict, match: str) -> None:
    if setup == "dangling-previous":
        (node / "ml-env").symlink_to(node / "ml-env.d" / "a")
        (node / "ml-env.previous").symlink_to(node / "ml-env.d" / "gone")
    if setup == "file-link":
        (node / "ml-env").write_text("x")
    args = {k: (str(node / v) if k == "target" else v) for k, v in args.items()}
    before = sorted(str(p) for p in node.rglob("*"))
    result = run(node, monkeypatch, **args)
    assert result["failed"] and match in result["msg"], result["msg"]
    assert sorted(str(p) for p in node.rglob("*")) == before


def test_check_mode_accepts_an_unbuilt_target(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    future = str(node / "ml-env.d" / "vllm-0.18.0-0123456789ab")
    dry = run(node, monkeypatch, check=True, target=future)
    assert (dry["failed"], dry["changed"], dry["current"]) == (False, True, future)
    assert not os.path.exists(future)


def test_a_killed_runs_temp_link_is_removed(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = str(node / "ml-env.d" / "a")
    (node / "ml-env").symlink_to(a)
    (node / ".ml-env.previous.switching").symlink_to(node / "ml-env.d" / "b")
    dry = run(node, monkeypatch, check=True, target=a)
    assert dry["changed"] and (node / ".ml-env.previous.switching").is_symlink()
    done = run(node, monkeypatch, target=a)
    assert done["changed"] and "removed the temporary link(s)" in done["msg"]
    assert not (node / ".ml-env.previous.switching").is_symlink()
    assert run(node, monkeypatch, target=a)["changed"] is False


def test_previous_puts_both_links_back_after_a_failed_start(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """z served, then a; the upgrade to b failed to start: back to a with .previous on z again."""
    a, b, z = (str(node / "ml-env.d" / n) for n in ("a", "b", "z"))
    make_env(node / "ml-env.d", "z")
    run(node, monkeypatch, target=z)
    run(node, monkeypatch, target=a)
    run(node, monkeypatch, target=b)
    assert links(node) == (b, a)
    dry = run(node, monkeypatch, check=True, target=a, previous=z)
    assert (dry["changed"], links(node)) == (True, (b, a))
    back = run(node, monkeypatch, target=a, previous=z)
    assert (back["changed"], back["current"], back["previous"], links(node)) == (True, a, z, (a, z))
    again = run(node, monkeypatch, target=a, previous=z)
    assert again["changed"] is False
    # Only the previous link differs: said so.
    run(node, monkeypatch, target=a)  # no-op
    fix = run(node, monkeypatch, target=a, previous=b)
    assert fix["changed"] and fix["msg"] == f"pointed {node}/ml-env.previous at {b}; {node}/ml-env already names {a}"
