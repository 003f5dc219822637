"""python_env_install in-process, against real pip and (when cached) the pinned uv, offline.

The package installed is a minimal wheel built here with zipfile (METADATA, WHEEL, RECORD: what
pip and uv read), served with --no-index --find-links, so no package index is needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _wheelhouse as wh
from ansible_collections.gpuserve.vllm.plugins.modules import python_env_install

from module_runner import run_module_main

UV = Path(os.environ.get("GPUSERVE_CACHE", Path.home() / ".cache" / "gpuserve")) / "uv-tool-0.13.9" / "bin" / "uv"


def _wheel(directory: Path, version: str) -> None:
    name = f"gpuserve_probe-{version}"
    files = {
        "gpuserve_probe.py": "VALUE = 1\n",
        f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: gpuserve-probe\nVersion: {version}\n",
        f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{name}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(directory / f"{name}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
        whl.writestr(f"{name}.dist-info/RECORD", record)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pyenv-install")
    wheels = root / "wheels"
    wheels.mkdir()
    _wheel(wheels, "1.0")
    _wheel(wheels, "2.0")
    subprocess.run([sys.executable, "-m", "venv", str(root / "env")], check=True)
    return root / "env" / "bin" / "python", wheels


def _installed(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import importlib.metadata as m\ntry: print(m.version('gpuserve-probe'))\n"
                            "except m.PackageNotFoundError: print('-')"],
        check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_check_install_rerun_upgrade(installer: str, env: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    if installer == "uv" and not UV.exists():
        pytest.skip(f"uv 0.13.9 not cached at {UV} (tests/env.sh users have it after a molecule run)")
    python, wheels = env
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "gpuserve-probe"], check=False)
    base = {"python": str(python), "installer": installer, "uv": str(UV), "find_links": [str(wheels)],
            "no_index": True, "uv_cache_dir": str(wheels.parent / "uv-cache")}

    def run(pin: str, check: bool = False) -> dict:
        args = dict(base, requirements=[f"gpuserve-probe=={pin}"], _ansible_check_mode=check)
        return run_module_main(python_env_install, args, monkeypatch)

    dry = run("1.0", check=True)
    assert (dry["failed"], dry["changed"], "--dry-run" in dry["cmd"]) == (False, True, True)
    assert dry["installed"] == [{"name": "gpuserve-probe", "version": "1.0"}]
    assert _installed(python) == "-"  # check mode wrote nothing

    first = run("1.0")
    assert (first["changed"], first["installed"], _installed(python)) == (
        True, [{"name": "gpuserve-probe", "version": "1.0"}], "1.0")
    again = run("1.0")
    assert (again["changed"], again["installed"], again["removed"]) == (False, [], [])
    upgrade = run("2.0")
    assert upgrade["changed"] is True
    assert upgrade["removed"] == [{"name": "gpuserve-probe", "version": "1.0"}]
    assert _installed(python) == "2.0"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"python": "/nonexistent/bin/python", "installer": "pip", "requirements": ["six"]},
         "python: no interpreter at /nonexistent/bin/python; create the environment first"),
        ({"python": sys.executable, "uv": "/nonexistent/uv", "requirements": ["six"]},
         "uv: no executable at /nonexistent/uv"),
        ({"python": sys.executable, "installer": "pip"}, "nothing to install"),
    ],
)
def test_refusals(args: dict, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_module_main(python_env_install, args, monkeypatch)
    assert result["failed"] and message in result["msg"]


def test_installer_failure_names_the_cause(env: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    python, wheels = env
    result = run_module_main(python_env_install, {
        "python": str(python), "installer": "pip", "requirements": ["gpuserve-probe==9.9"],
        "find_links": [str(wheels)], "no_index": True}, monkeypatch)
    assert result["failed"] and result["rc"] == 1
    assert "pip could not install into the environment of" in result["msg"]
    assert "gpuserve-probe==9.9" in result["msg"]


def _wheelhouse(root: Path, versions: tuple[str, ...]) -> Path:
    """A wheelhouse as python_wheelhouse writes it (manifest + SHA256SUMS) around probe wheels."""
    house = root / "house"
    house.mkdir()
    for version in versions:
        _wheel(house, version)
    names = sorted(path.name for path in house.glob("*.whl"))
    sets = [{"key": "probe-x", "name": "probe", "requirements": ["gpuserve-probe==1.0"], "no_deps": False,
             "files": names}]
    hashes = {name: wh.sha256_file(str(house / name)) for name in names}
    wh.write(str(house), wh.build_manifest(str(house), sets, hashes,
                                           {"python": "3.11", "glibc": "2.36", "machine": "x86_64"}))
    return house


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_hashes_from_installs_only_what_the_builder_hashed(installer: str, env: tuple[Path, Path], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if installer == "uv" and not UV.exists():
        pytest.skip(f"uv 0.13.9 not cached at {UV}")
    house = _wheelhouse(tmp_path, ("1.0", "2.0"))
    python = env[0]
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "gpuserve-probe"], check=False)

    def run(pin: str, find_links: list[str], check: bool = False) -> dict:
        return run_module_main(python_env_install, {
            "python": str(python), "installer": installer, "uv": str(UV), "requirements": [f"gpuserve-probe=={pin}"],
            "find_links": find_links, "no_index": True, "hashes_from": str(house),
            "uv_cache_dir": str(tmp_path / "uv-cache"), "_ansible_check_mode": check}, monkeypatch)

    dry = run("1.0", [str(house)], check=True)
    assert (dry["changed"], "--dry-run" in dry["cmd"], _installed(python)) == (True, True, "-")
    first = run("1.0", [str(house)])
    assert (first["changed"], _installed(python)) == (True, "1.0")
    assert {"--require-hashes", "--no-deps"} <= set(first["cmd"]) and "gpuserve-probe==1.0" not in first["cmd"]
    again = run("1.0", [str(house)])
    assert (again["changed"], "--require-hashes" in again["cmd"]) == (False, False)  # nothing left to install

    # Another folder on find_links offers a 3.0 the builder never saw: refused before installing.
    other = tmp_path / "other"
    other.mkdir()
    _wheel(other, "3.0")
    refused = run("3.0", [str(house), str(other)])
    assert refused["failed"] and "would take gpuserve-probe==3.0, which the manifest of the wheelhouse" in refused["msg"]
    assert _installed(python) == "1.0"

    # A wheel whose bytes changed after the manifest was written (still a valid wheel): the
    # installer itself refuses it, hash in hand.
    wheel = house / "gpuserve_probe-2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "a") as whl:
        whl.writestr("gpuserve_probe_extra.py", "TAMPERED = True\n")
    tampered = run("2.0", [str(house)])
    assert tampered["failed"] and "--require-hashes" in tampered["cmd"]
    assert "hash" in tampered["msg"].lower() and _installed(python) == "1.0"
