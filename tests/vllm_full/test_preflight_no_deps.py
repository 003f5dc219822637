"""The rehearsal's case: vLLM installed without its dependencies (vllm_install_no_deps).

The preflight cannot run vLLM's parser there; it must say that it was skipped and why, through
the real module and ansible-playbook, and not fail the run.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import PATCHED, REPO, playbook, vllm_full_env

sys.path.insert(0, str(REPO / "tests" / "support"))
import vllm_wheels  # noqa: E402


def test_preflight_says_it_was_skipped_without_dependencies(tmp_path: pytest.TempPathFactory) -> None:
    try:
        uv = vllm_full_env.uv_binary()
        wheel = vllm_wheels.vllm_wheel(PATCHED)
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"VLLM-FULL TIER NOT RUN: no uv or no vllm=={PATCHED} wheel ({exc})")
    env = dict(os.environ, UV_CACHE_DIR=str(vllm_full_env.cache_root() / "uv"),
               UV_PYTHON_DOWNLOADS="never")
    venv = tmp_path / "no-deps"
    subprocess.run([str(uv), "venv", "-q", "--python", vllm_full_env.PYTHON_VERSION, str(venv)],
                   check=True, env=env)
    subprocess.run([str(uv), "pip", "install", "-q", "--no-deps", "--python",
                    str(venv / "bin" / "python"), str(wheel)], check=True, env=env)
    result = playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "gpuserve.vllm.vllm_serve_preflight": {
            "python": str(venv / "bin" / "python"),
            "argv": ["/opt/ml-env/bin/vllm", "serve", "/srv/models/Kimi-K2.5",
                     "--kv-cache-dtype", "fp8"],
            "compute_capability": "12.0"}}]}], tmp_path)[0]
    assert not result.get("failed"), result.get("msg")
    assert result["skipped"] is True
    assert result["vllm_version"] == PATCHED
    assert "installed without its dependencies" in result["skip_reason"]
    assert "torch" in result["skip_reason"]
