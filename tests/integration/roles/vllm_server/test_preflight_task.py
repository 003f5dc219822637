"""The role's preflight task hands the probe the unit's environment, and no log holds a secret.

roles/vllm_server/tasks/preflight_vllm.yml runs through ansible-playbook on localhost with the
role's defaults and vars; the ml-env python is a TEST DOUBLE (a shell wrapper around this
interpreter, which has no vLLM, so the preflight says it was skipped) that records the
environment and the argv the module started it with. The probe judging with that environment
under the real vLLM: tests/vllm_full/test_preflight.py (long context allowed by the unit's env).
Needs tests/env.sh.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")

API_KEY = "preflight-api-key-0123456789"


def test_the_probe_gets_the_env_file_and_the_key_stays_out_of_logs(tmp_path: Path, role_tasks) -> None:
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nenv -0 >> "{tmp_path}/env"\nprintf "%s\\n" "$@" >> '
                      f'"{tmp_path}/argv"\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    proc, tasks = role_tasks("preflight_vllm.yml", {
        "vllm_server_preflight_python": str(python), "vllm_server_preflight_cache": False,
        "vllm_server_preflight_scratch_dir": str(tmp_path / "scratch"), "vllm_server_api_key": API_KEY,
        "vllm_server_env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", "NCCL_DEBUG": 'say "hi"'}})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    judged = next(t["hosts"]["localhost"] for t in tasks
                  if t["task"]["name"] == "Let the installed vLLM judge the serve command line")
    assert judged["skipped"] is True and "vLLM is not installed" in judged["skip_reason"]
    seen = dict(line.split("=", 1) for line in
                (tmp_path / "env").read_text().split("\0") if "=" in line)
    assert seen["VLLM_API_KEY"] == API_KEY and seen["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"
    assert seen["NCCL_DEBUG"] == 'say "hi"' and seen["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert API_KEY not in (tmp_path / "argv").read_text()
    # the service's caches (vllm_server_cache_dir) are never root's: its scratch stands in
    assert seen["VLLM_CACHE_ROOT"] == str(tmp_path / "scratch" / "vllm")
    assert seen["HF_HOME"] == str(tmp_path / "scratch" / "huggingface")
    assert not [name for name, value in seen.items() if "/var/cache/vllm" in value]
    assert seen.get("PYTHONPYCACHEPREFIX", "") == "" and seen["PYTHONSAFEPATH"] == "1"
    assert [r["name"] for r in judged["boundary"]["left_out"]] == ["PYTHONPYCACHEPREFIX"]
    assert API_KEY not in proc.stdout + proc.stderr
