"""The REAL vllm-router the role pins, installed once into a venv under $GPUSERVE_CACHE.

Shared by the tests that run the router itself (its parser, its graceful stop): the pinned
release is read from roles/vllm_router/defaults/main.yml, installed with its dependencies from
the package index the first time, under a lock so that parallel tests install it once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
VERSION = yaml.safe_load((REPO / "roles" / "vllm_router" / "defaults" / "main.yml").read_text())["vllm_router_version"]


def router_bin() -> Path:
    """The pinned router's executable (installed on first use)."""
    cache = Path(os.environ.get("GPUSERVE_CACHE", Path.home() / ".cache" / "gpuserve"))
    venv = cache / f"vllm-router-{VERSION}"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".vllm-router.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                            "--disable-pip-version-check", f"vllm-router=={VERSION}"], check=True)
            (venv / ".complete").write_text(VERSION)
    return venv / "bin" / "vllm-router"
