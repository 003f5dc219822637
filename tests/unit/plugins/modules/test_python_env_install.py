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
