"""Real vLLM wheels for tests and benchmarks, downloaded once into a cache outside the repo.

Usage: python3 tests/support/vllm_wheels.py 0.17.0 [0.18.0 ...]   -> prints each wheel's path.
The cache is $GPUSERVE_WHEEL_CACHE (default ~/.cache/gpuserve/wheels). Wheels are ~400 MB, so
tests share them; nothing from a wheel is ever committed.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import zipfile
from pathlib import Path


def wheel_cache() -> Path:
    default = Path.home() / ".cache" / "gpuserve" / "wheels"
    return Path(os.environ.get("GPUSERVE_WHEEL_CACHE", default))


def _cached(version: str, cache: Path) -> Path | None:
    found = sorted(cache.glob(f"vllm-{version}-*.whl"))
    return found[0] if found else None


def vllm_wheel(version: str) -> Path:
    """Path of the vllm==version wheel, downloading it (no deps) on first use."""
    cache = wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:  # parallel test runs download each wheel once
        fcntl.flock(lock, fcntl.LOCK_EX)
        wheel = _cached(version, cache)
        if wheel is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                 "--platform", "manylinux_2_31_x86_64", "--platform", "manylinux_2_28_x86_64",
                 "--platform", "manylinux2014_x86_64", "--python-version", "3.12",
                 "--implementation", "cp", "-d", str(cache), f"vllm=={version}"],
                check=True,
            )
            wheel = _cached(version, cache)
        if wheel is None:
            raise FileNotFoundError(f"pip downloaded no wheel for vllm=={version} into {cache}")
        return wheel


def wheel_file(version: str, member: str) -> bytes:
    """Bytes of one file of the wheel, e.g. member='vllm/model_executor/models/deepseek_v2.py'."""
    with zipfile.ZipFile(vllm_wheel(version)) as zf:
        return zf.read(member)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(vllm_wheel(arg))
