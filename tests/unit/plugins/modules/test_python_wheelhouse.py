"""python_wheelhouse in-process with the real pip: build from a local mirror folder (no index),
rebuild, upgrade a pin, and verify on a "node" (the same folder) what a bad day leaves there.

The wheels are minimal ones built here with zipfile (METADATA with Requires-Dist, WHEEL, RECORD:
what pip reads); gpuserve-probe depends on gpuserve-dep, so a set's files come from pip's own
resolution, not from the test.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _wheelhouse as wh
from ansible_collections.gpuserve.vllm.plugins.modules import python_wheelhouse

from module_runner import run_module_main


def _wheel(directory: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> str:
    dist = f"{name.replace('-', '_')}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {line}\n" for line in requires)
    files = {
        f"{name.replace('-', '_')}.py": "VALUE = 1\n",
        f"{dist}.dist-info/METADATA": metadata,
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    filename = f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(directory / filename, "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
        whl.writestr(f"{dist}.dist-info/RECORD", "".join(f"{p},,\n" for p in files) + f"{dist}.dist-info/RECORD,,\n")
    return filename


@pytest.fixture()
def mirror(tmp_path: Path) -> Path:
    src = tmp_path / "mirror"
    src.mkdir()
    _wheel(src, "gpuserve-dep", "1.0")
    _wheel(src, "gpuserve-probe", "1.0", ("gpuserve-dep>=1.0",))
    _wheel(src, "gpuserve-probe", "2.0", ("gpuserve-dep>=1.0",))
    _wheel(src, "gpuserve-tool", "0.1")
    return src


def _build(monkeypatch, house: Path, mirror: Path, probe: str = "1.0", **extra):
    args = {"path": str(house), "state": "built", "find_links": [str(mirror)], "no_index": True,
            "python_version": "%d.%d" % sys.version_info[:2], "python": sys.executable,
            "glibc": platform.libc_ver()[1], "machine": platform.machine(),
            "sets": [{"name": "tool", "requirements": ["gpuserve-tool==0.1"]},
                     {"name": "probe", "requirements": [f"gpuserve-probe=={probe}"]}]}
    args.update(extra)
    return run_module_main(python_wheelhouse, args, monkeypatch)


def _verify(monkeypatch, house: Path, probe: str = "1.0"):
    return run_module_main(python_wheelhouse, {"path": str(house), "host_python": sys.executable, "sets": [
        {"name": "probe", "requirements": [f"gpuserve-probe=={probe}"]}]}, monkeypatch)


def test_build_fetches_each_set_with_its_dependencies_and_writes_sums(monkeypatch, tmp_path, mirror):
    house = tmp_path / "wh"
    result = _build(monkeypatch, house, mirror)
    assert not result["failed"], result["msg"]
    assert result["changed"]
    probe = next(s for s in result["sets"] if s["name"] == "probe")
    assert sorted(probe["files"]) == ["gpuserve_dep-1.0-py3-none-any.whl", "gpuserve_probe-1.0-py3-none-any.whl"]
    assert result["files"] == 3 and sorted(result["fetched"]) == sorted(os.listdir(mirror))[:1] + [
        "gpuserve_probe-1.0-py3-none-any.whl", "gpuserve_tool-0.1-py3-none-any.whl"]
    # sha256sum itself agrees with what the module wrote
    subprocess.run(["sha256sum", "--quiet", "-c", wh.SUMS], cwd=house, check=True)


def test_rebuild_fetches_nothing_and_changes_nothing(monkeypatch, tmp_path, mirror):
    house = tmp_path / "wh"
    _build(monkeypatch, house, mirror)
    manifest = (house / wh.MANIFEST).read_bytes()
    again = _build(monkeypatch, house, mirror)
    assert (again["changed"], again["fetched"], again["removed"]) == (False, [], [])
    assert (house / wh.MANIFEST).read_bytes() == manifest


def test_a_new_pin_fetches_only_what_differs_and_prunes_the_old(monkeypatch, tmp_path, mirror):
    house = tmp_path / "wh"
    _build(monkeypatch, house, mirror)
    dep = (house / "gpuserve_dep-1.0-py3-none-any.whl").stat()
    upgrade = _build(monkeypatch, house, mirror, probe="2.0")
    assert upgrade["changed"]
    assert upgrade["fetched"] == ["gpuserve_probe-2.0-py3-none-any.whl"]
    assert upgrade["removed"] == ["gpuserve_probe-1.0-py3-none-any.whl"]
    assert (house / "gpuserve_dep-1.0-py3-none-any.whl").stat().st_mtime_ns == dep.st_mtime_ns


def test_check_mode_says_a_build_is_due_without_running_pip(monkeypatch, tmp_path, mirror):
    house = tmp_path / "wh"
    assert _build(monkeypatch, house, mirror, _ansible_check_mode=True)["changed"]
    assert not house.exists()
    _build(monkeypatch, house, mirror)
    assert not _build(monkeypatch, house, mirror, _ansible_check_mode=True)["changed"]
    assert _build(monkeypatch, house, mirror, probe="2.0", _ansible_check_mode=True)["changed"]


def test_a_pin_pip_cannot_find_fails_naming_the_set(monkeypatch, tmp_path, mirror):
    result = _build(monkeypatch, tmp_path / "wh", mirror, probe="9.9")
    assert result["failed"] and "gpuserve-probe==9.9" in result["msg"] and "pip download" in result["msg"]


def test_verify_passes_the_built_wheelhouse_and_changes_nothing(monkeypatch, tmp_path, mirror):
    house = tmp_path / "wh"
    _build(monkeypatch, house, mirror)
    result = _verify(monkeypatch, house)
    assert not result["failed"], result["msg"]
    assert (result["changed"], result["files"]) == (False, 2)


def test_verify_names_the_pin_a_node_needs_that_the_wheelhouse_lacks(monkeypatch, tmp_path, mirror):
    house = tmp_path / "wh"
    _build(monkeypatch, house, mirror)
    result = _verify(monkeypatch, house, probe="2.0")
    assert result["failed"]
    assert "no wheel of gpuserve-probe==2.0" in result["msg"] and str(house) in result["msg"]
    assert "Nothing was changed on this host" in result["msg"]


def test_a_reverify_reads_no_byte_the_record_vouches_for(monkeypatch, tmp_path, mirror):
    house = tmp_path / "wh"
    _build(monkeypatch, house, mirror)
    first = _verify(monkeypatch, house)
    assert sorted(first["hashed"]) == ["gpuserve_dep-1.0-py3-none-any.whl", "gpuserve_probe-1.0-py3-none-any.whl"]
    again = _verify(monkeypatch, house)
    assert not again["failed"] and again["hashed"] == []


def test_a_byte_flipped_under_the_record_is_found_though_size_and_mtime_were_put_back(monkeypatch, tmp_path, mirror):
    """What a careful tamperer does: same size, the old modification time set back with utime.
    The status-change time moved (only root can set it back), so the record vouches for nothing."""
    house = tmp_path / "wh"
    _build(monkeypatch, house, mirror)
    assert not _verify(monkeypatch, house)["failed"]
    probe = house / "gpuserve_probe-1.0-py3-none-any.whl"
    before = probe.stat()
    data = bytearray(probe.read_bytes())
    data[10] ^= 1
    probe.write_bytes(bytes(data))
    os.utime(probe, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (probe.stat().st_size, probe.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    result = _verify(monkeypatch, house)
    assert result["failed"] and "gpuserve_probe-1.0-py3-none-any.whl: sha256 differs" in result["msg"]


@pytest.mark.parametrize("harm", ["flip", "extra", "world_writable", "no_manifest"])
def test_verify_refuses_what_a_bad_day_leaves(monkeypatch, tmp_path, mirror, harm):
    house = tmp_path / "wh"
    _build(monkeypatch, house, mirror)
    probe = house / "gpuserve_probe-1.0-py3-none-any.whl"
    if harm == "flip":
        data = bytearray(probe.read_bytes())
        data[10] ^= 1
        probe.write_bytes(bytes(data))
        says = "gpuserve_probe-1.0-py3-none-any.whl: sha256 differs"
    elif harm == "extra":
        _wheel(house, "gpuserve-dep", "1.1")
        says = "gpuserve_dep-1.1-py3-none-any.whl: a wheel the manifest does not list"
    elif harm == "world_writable":
        probe.chmod(0o666)
        says = "is writable by every user"
    else:
        (house / wh.MANIFEST).unlink()
        says = "gpuserve-wheelhouse.json does not exist"
    result = _verify(monkeypatch, house)
    assert result["failed"] and says in result["msg"]


def test_verify_refuses_a_wheelhouse_built_for_another_python(monkeypatch, tmp_path, mirror):
    house = tmp_path / "wh"
    assert not _build(monkeypatch, house, mirror, python_version="3.10")["failed"]
    result = _verify(monkeypatch, house)
    assert result["failed"] and "the wheelhouse is for python 3.10" in result["msg"]


def test_a_wheel_cut_short_is_not_whole():
    assert not python_wheelhouse._is_whole_wheel(os.devnull)


def test_hashed_gives_the_sums_of_the_files_the_host_holds_reading_each_once(monkeypatch, tmp_path, mirror):
    house = tmp_path / "wh"
    _build(monkeypatch, house, mirror)
    names = ["gpuserve_probe-1.0-py3-none-any.whl", "gpuserve_tool-0.1-py3-none-any.whl", wh.SUMS]
    (house / names[1]).unlink()  # a push killed before this wheel arrived
    args = {"path": str(house), "state": "hashed", "files": names}
    first = run_module_main(python_wheelhouse, args, monkeypatch)
    expected = {n: wh.sha256_file(str(house / n)) for n in (names[0], names[2])}
    assert (first["failed"], first["changed"], first["sums"]) == (False, False, expected)
    again = run_module_main(python_wheelhouse, args, monkeypatch)
    assert (again["sums"], again["hashed"]) == (expected, [])


def test_hashed_refuses_a_name_that_is_not_a_file_of_the_folder(monkeypatch, tmp_path, mirror):
    house = tmp_path / "wh"
    _build(monkeypatch, house, mirror)
    result = run_module_main(python_wheelhouse, {"path": str(house), "state": "hashed", "files": ["../etc/shadow"]}, monkeypatch)
    assert result["failed"] and "'../etc/shadow' is not a file name in" in result["msg"]
