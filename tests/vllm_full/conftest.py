"""The vllm_full tier: the real vLLM with all its dependencies (torch included), on a CPU-only machine.

Envs are built once by tests/support/vllm_full_env.py into ~/.cache/gpuserve/vllm-full/<version>
(minutes and ~11 GB the first time, seconds afterwards). A test skips - loudly, with the reason -
only when its env cannot be built (no package index, no disk); anything else is a failure.
Needs tests/env.sh (ansible-playbook drives the role's rendering and python_patch).
Run: python -m pytest tests/vllm_full -rs
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))
import vllm_full_env  # noqa: E402  (tests/support is not a package on sys.path)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PATCHED, NATIVE, OLD, NEWEST = "0.17.0", "0.18.0", "0.16.0", "0.33.0"
TIMINGS: list[tuple[str, float]] = []


def env_python(version: str) -> Path:
    """The env's python, built on first use; a loud skip only when it cannot be built."""
    try:
        return vllm_full_env.build(version)
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"VLLM-FULL TIER NOT RUN for vllm=={version}: its env could not be built "
                    f"({exc}); see tests/support/vllm_full_env.py")


def run_python(python: Path, code: str, pythonpath: Path | None = None,
               timeout: int = 600) -> str:
    """Run code in an env; its stdout (fails the test with stderr when it exits non-zero)."""
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR")
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def overlay_python(python: Path, overlay: Path) -> Path:
    """A venv whose sys.path is overlay first, then python's env (its .pth files included): what
    PYTHONPATH gave before the modules ran interpreters isolated (-I, which ignores it)."""
    home = overlay.parent / (overlay.name + "-env")
    if not (home / "bin" / "python").exists():
        subprocess.run([str(python), "-I", "-m", "venv", "--without-pip", str(home)], check=True)
        site = next((python.parent.parent / "lib").glob("python3*/site-packages"))
        (next((home / "lib").glob("python3*/site-packages")) / "gpuserve-overlay.pth").write_text(
            "import sys; sys.path.insert(0, %r)\nimport site; site.addsitedir(%r)\n"
            % (str(overlay), str(site)))
    return home / "bin" / "python"


def timed(label: str, start: float) -> None:
    TIMINGS.append((label, time.monotonic() - start))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker (tests/run.sh runs this tier with -n 2) hands its timings to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["vllm_full_timings"] = TIMINGS


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: t.Any, error: t.Any) -> None:
    TIMINGS.extend(tuple(item) for item in getattr(node, "workeroutput", {}).get("vllm_full_timings", []))


def pytest_terminal_summary(terminalreporter: t.Any) -> None:
    if TIMINGS:
        terminalreporter.section("vllm_full timings")
        for label, seconds in TIMINGS:
            terminalreporter.write_line(f"{seconds:7.1f} s  {label}")


def playbook(play: list[dict], workdir: Path, extra_env: dict[str, str] | None = None,
             all_plays: bool = False) -> list:
    """Run plays on localhost with ansible-playbook; the json callback's task results."""
    if shutil.which("ansible-playbook") is None:
        pytest.fail("ansible-playbook not found: source tests/env.sh first")
    path = workdir / "play.json"
    path.write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1")
    env.update(extra_env or {})
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(path)],
                          capture_output=True, text=True, env=env, timeout=900, check=False)
    try:
        plays = json.loads(proc.stdout)["plays"]
    except (ValueError, KeyError, IndexError):
        raise AssertionError(proc.stdout[-4000:] + proc.stderr[-3000:]) from None
    found = [[task["hosts"]["localhost"] for task in p["tasks"]] for p in plays]
    return found if all_plays else found[0]


def patch_overlay(overlay: Path, model_types: list[str], label: str) -> tuple[Path, Path, dict]:
    """vllm 0.17.0 with the eagle3_patches patch set applied by the real python_patch module.

    The env's vllm package is copied as hardlinks into an overlay (python_patch writes through a
    temp file and a rename, so the cached env is never changed) and put first on sys.path
    (overlay_python); python_patch's import_check imports the patched modules with torch present. model_types is
    the allow-list entries the role would derive from the checkpoint's config.json.
    """
    python = env_python(PATCHED)
    site = next((python.parent.parent / "lib").glob("python3*/site-packages"))
    subprocess.run(["cp", "-al", str(site / "vllm"), str(overlay / "vllm")], check=True)
    role = REPO / "roles" / "eagle3_patches"
    files = ("{%- set ns = namespace(out=[]) -%}{%- for f in eagle3_patches_patchset -%}"
             "{%- set ns.out = ns.out + [{'path': '" + str(overlay / "vllm") + "/' ~ f.file, "
             "'edits': f.edits}] -%}{%- endfor -%}{{ ns.out }}")
    start = time.monotonic()
    results = playbook([{
        "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(role / "defaults" / "main.yml"), str(role / "vars" / "patchset.yml")],
        "vars": {"__eagle3_patches_model_types": model_types, "files": files},
        "tasks": [{
            "name": "Patch the overlay with the role's patch set, import-checking with torch",
            "gpuserve.vllm.python_patch": {
                "files": "{{ files }}", "state": "present",
                "python": str(overlay_python(python, overlay)),
                "import_check": "{{ eagle3_patches_import_modules }}", "backup": False,
                "state_dir": str(overlay / ".state")},
            "environment": {"VLLM_LOGGING_LEVEL": "ERROR"},
        }],
    }], overlay)
    timed(f"python_patch + import_check of the patched 0.17.0 files ({label})", start)
    return python, overlay, results[0]


@pytest.fixture(scope="session")
def patched_overlay(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """0.17.0 patched for the Kimi-K2.5 fixture's text_config.model_type."""
    text_type = json.loads((FIXTURES / "kimi-k2.5" / "config.json").read_text())[
        "text_config"]["model_type"]
    return patch_overlay(tmp_path_factory.mktemp("vllm-0.17.0-patched"), [text_type], text_type)
