"""vllm_unit_boundary on real files: what root's ExecStartPre would load must be root's alone."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from module_runner import run_module_main  # noqa: E402

from ansible_collections.gpuserve.vllm.plugins.modules import vllm_unit_boundary  # noqa: E402

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


@pytest.fixture(name="lib")
def fixture_lib(tmp_path: Path) -> Path:
    """A library in a folder only its owner (this test's user) can write."""
    folder = tmp_path / "lib"
    folder.mkdir(mode=0o755)
    library = folder / "libpreload.so"
    library.write_bytes(b"\x7fELF")
    library.chmod(0o644)
    return library


def _run(monkeypatch: pytest.MonkeyPatch, lines: list[str], extra: dict | None = None) -> dict:
    return run_module_main(vllm_unit_boundary, {"environment": lines, "unit_extra": extra or {}},
                           monkeypatch)


def test_a_library_only_root_can_change_is_fine(monkeypatch: pytest.MonkeyPatch, lib: Path) -> None:
    result = _run(monkeypatch, [f'LD_PRELOAD="{lib}"', f'LD_LIBRARY_PATH="{lib.parent}"',
                                'PYTHONPYCACHEPREFIX="/var/cache/vllm/pycache"', 'VLLM_API_KEY="k"'])
    assert result["failed"] is False, result.get("msg")
    assert result["checked"] == ["LD_LIBRARY_PATH", "LD_PRELOAD"]
    assert result["changed"] is False


def test_a_world_writable_folder_is_refused(monkeypatch: pytest.MonkeyPatch, lib: Path) -> None:
    lib.parent.chmod(0o777)
    result = _run(monkeypatch, [f'LD_PRELOAD="{lib}"'])
    assert result["failed"] is True
    assert result["msg"].startswith(f"LD_PRELOAD={lib} (vllm_server_env): {lib.parent} is writable by every user (mode 0777)")


@needs_root
def test_a_library_the_service_user_owns_is_refused(monkeypatch: pytest.MonkeyPatch, lib: Path) -> None:
    os.chown(lib, 4321, 4321)
    result = _run(monkeypatch, [f'LD_PRELOAD="{lib}"'])
    assert result["failed"] is True
    assert f"{lib} is owned by uid 4321" in result["msg"]
    # a search folder: the entries in it count too
    result = _run(monkeypatch, [f'LD_LIBRARY_PATH="{lib.parent}"'])
    assert result["failed"] is True
    assert f"LD_LIBRARY_PATH={lib.parent} (vllm_server_env): {lib} is owned by uid 4321" in result["msg"]


def test_unit_extra_environment_and_files_are_judged(monkeypatch: pytest.MonkeyPatch, lib: Path,
                                                     tmp_path: Path) -> None:
    env_file = tmp_path / "extra.env"
    env_file.write_text(f'GCONV_PATH="{tmp_path / "open"}"\n')
    (tmp_path / "open").mkdir(mode=0o777)
    (tmp_path / "open").chmod(0o777)
    result = _run(monkeypatch, [], {"Environment": f"LD_AUDIT={lib}", "EnvironmentFile": [f"-{env_file}", "-/nonexistent.env"]})
    assert result["failed"] is True
    assert result["problems"] == [result["msg"]]
    assert result["msg"].startswith(f"GCONV_PATH={tmp_path / 'open'} (EnvironmentFile={env_file}): "
                                    f"{tmp_path / 'open'} is writable by every user")
    env_file.chmod(0o666)
    result = _run(monkeypatch, [], {"EnvironmentFile": str(env_file)})
    assert result["msg"].startswith(f"vllm_server_unit_extra's EnvironmentFile={env_file}: {env_file} is writable by every user")


def test_a_root_owned_link_to_what_another_user_could_change_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                        lib: Path, tmp_path: Path) -> None:
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    target = tmp_path / "open" / "libevil.so"
    target.write_bytes(b"\x7fELF")
    link = lib.parent / "libjemalloc.so.2"
    link.symlink_to(target)
    result = _run(monkeypatch, [f'LD_PRELOAD="{link}"'])
    assert result["failed"] is True
    assert result["msg"].startswith(f"LD_PRELOAD={link} (vllm_server_env): {tmp_path / 'open'} is writable by every user")
    # a search folder's entry that links out is judged by its target, as the loader follows it
    result = _run(monkeypatch, [f'LD_LIBRARY_PATH="{lib.parent}"'])
    assert result["failed"] is True
    assert result["msg"].startswith(f"LD_LIBRARY_PATH={lib.parent} (vllm_server_env): {tmp_path / 'open'} is writable by every user")
