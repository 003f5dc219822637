"""What the crash tests share: strace, whose fault injection kills a module at its K-th call.

Both tests run the real module as its own process (what Ansible runs on the node) with the
collection importable, and skip when strace or ptrace is not available.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

STRACE = shutil.which("strace")
REPO = Path(__file__).resolve().parents[2]


def can_trace() -> bool:
    """strace is installed and may ptrace here (containers often forbid it)."""
    if STRACE is None:
        return False
    proc = subprocess.run([STRACE, "-qq", "-o", os.devnull, "true"], check=False, capture_output=True)
    return proc.returncode == 0


requires_strace = pytest.mark.skipif(not can_trace(),
                                     reason="needs strace with ptrace allowed (apt-get install strace)")


def collection_pythonpath() -> str:
    """PYTHONPATH on which `ansible_collections.gpuserve.vllm` is this checkout, first."""
    roots = [p for p in sys.path if p and (Path(p) / "ansible_collections" / "gpuserve" / "vllm")
             .resolve() == REPO]
    return os.pathsep.join(roots[:1] + [p for p in sys.path if p])
