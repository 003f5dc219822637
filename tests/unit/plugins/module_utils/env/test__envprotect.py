"""python_env_protect's walk: what another user could change is given to root, nothing else."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _protect

ME = (os.geteuid(), os.getegid())
OTHER = (4321, 4321)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (stat.S_IFREG | 0o644, 0o644),
        (stat.S_IFREG | 0o666, 0o644),
        (stat.S_IFREG | 0o775, 0o755),
        (stat.S_IFREG | 0o4755, 0o755),   # set-user-ID
        (stat.S_IFREG | 0o2755, 0o755),   # set-group-ID
        (stat.S_IFREG | 0o600, 0o600),    # narrower than wanted stays narrow
        (stat.S_IFDIR | 0o777, 0o755),
        (stat.S_IFDIR | 0o2775, 0o2755),  # a folder's set-group-ID only sets new files' group
        (stat.S_IFDIR | 0o1777, 0o1755),
    ],
)
def test_wanted_mode(mode: int, expected: int) -> None:
    assert _protect.wanted_mode(mode) == expected


def _tree(root: Path) -> dict[str, Path]:
    """An env-like tree: a folder, a file, a .pth, a link out of the tree, an executable."""
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("")
    (site / "x.pth").write_text("")
    (root / "bin").mkdir()
    (root / "bin" / "tool").write_text("#!/bin/sh\n")
    (root / "bin" / "tool").chmod(0o755)
    outside = root.parent / "outside.txt"
    outside.write_text("not ours to touch\n")
    outside.chmod(0o666)
    (root / "bin" / "python").symlink_to(outside)
    return {"site": site, "pkg": site / "pkg", "pth": site / "x.pth",
            "tool": root / "bin" / "tool", "link": root / "bin" / "python", "outside": outside}


def test_a_tree_already_ours_is_only_read(tmp_path: Path) -> None:
    _tree(tmp_path / "env")
    report = _protect.protect([str(tmp_path / "env")], *ME)
    assert (report.fixed, report.examples) == (0, [])
    assert report.checked == 10


@pytest.mark.parametrize("check", [False, True])
def test_modes_are_narrowed_and_links_never_followed(tmp_path: Path, check: bool) -> None:
    paths = _tree(tmp_path / "env")
    paths["pth"].chmod(0o666)
    paths["pkg"].chmod(0o777)
    paths["tool"].chmod(0o4775)
    report = _protect.protect([str(tmp_path / "env")], *ME, check=check)
    assert report.fixed == 3
    assert sorted(report.examples) == sorted([
        "%s: mode 0666 -> 0644" % paths["pth"], "%s: mode 0777 -> 0755" % paths["pkg"],
        "%s: mode 4775 -> 0755" % paths["tool"]])
    modes = {name: stat.S_IMODE(paths[name].stat().st_mode) for name in ("pth", "pkg", "tool")}
    assert modes == ({"pth": 0o666, "pkg": 0o777, "tool": 0o4775} if check
                     else {"pth": 0o644, "pkg": 0o755, "tool": 0o755})
    assert stat.S_IMODE(paths["outside"].stat().st_mode) == 0o666  # the link's target untouched
    again = _protect.protect([str(tmp_path / "env")], *ME)
    assert again.fixed == (3 if check else 0)


@needs_root
def test_another_users_tree_is_given_back_once(tmp_path: Path) -> None:
    paths = _tree(tmp_path / "env")
    for path in [tmp_path / "env", *(p for p in (tmp_path / "env").rglob("*"))]:
        os.lchown(path, *OTHER)
    os.chown(paths["outside"], *OTHER)
    report = _protect.protect([str(tmp_path / "env")], 0, 0)
    assert report.fixed == report.checked == 10
    assert all((p.lstat().st_uid, p.lstat().st_gid) == (0, 0)
               for p in [tmp_path / "env", *(tmp_path / "env").rglob("*")])
    assert (paths["outside"].stat().st_uid, paths["outside"].stat().st_gid) == OTHER
    assert _protect.protect([str(tmp_path / "env")], 0, 0).fixed == 0


def test_missing_roots_are_skipped_and_a_linked_root_is_followed(tmp_path: Path) -> None:
    paths = _tree(tmp_path / "store" / "env-1")
    paths["pth"].chmod(0o666)
    (tmp_path / "stable").symlink_to(tmp_path / "store" / "env-1")
    report = _protect.protect([str(tmp_path / "nope"), str(tmp_path / "stable")], *ME)
    assert report.examples == ["%s: mode 0666 -> 0644" % paths["pth"]]


def test_examples_are_limited(tmp_path: Path) -> None:
    for index in range(15):
        (tmp_path / ("f%d" % index)).write_text("")
        (tmp_path / ("f%d" % index)).chmod(0o666)
    report = _protect.protect([str(tmp_path)], *ME, limit=10)
    assert report.fixed == 15 and len(report.examples) == 10
