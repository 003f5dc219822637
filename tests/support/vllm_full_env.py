"""Virtual environments holding the real vLLM with ALL its dependencies (torch included).

Usage: python3 tests/support/vllm_full_env.py 0.17.0 [0.18.0 ...]  -> prints each env's python.

The `tests/vllm_full` tier runs vLLM's own argument parser and config classes in these envs, so
what the collection renders is judged by vLLM itself, not by a test double. One env is ~10 GB
(658 packages for 0.17.0: torch, triton, the nvidia-* CUDA libraries), so it is built once with
uv into $GPUSERVE_CACHE/vllm-full/<version> (default ~/.cache/gpuserve), uv's own download cache
under $GPUSERVE_CACHE/uv (hardlinked into the envs, so a second release costs only what differs),
and never inside the repo. An env is built in a temporary directory and moved into place only
after `import vllm` works in it: an interrupted build leaves nothing that looks finished.
A release installed with companions (COMPANIONS, the same lines the example inventory gives
vllm_install_companions) gets them in the same resolution, as vllm_install does on a node; an
env built with other requirements is rebuilt. This machine has no GPU: the CUDA wheels are
installed, and only NVIDIA's stub libcuda (see the preflight's cuda_stub) is ever loaded.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

UV_VERSION = "0.13.9"
PYTHON_VERSION = "3.11"
# The releases the tier tests: patched by the collection (0.16, 0.17), native Kimi EAGLE-3 (0.18),
# and the newest, which the example inventory pins.
DEFAULT_VERSIONS = ("0.16.0", "0.17.0", "0.18.0", "0.33.0")
# Requirement lines installed beside vllm==<version>; inventories/example pins the same
# (vllm_install_companions), tests/vllm_full checks that they agree. 0.33.0 alone resolves (uv
# 0.13.9; pip picks 13.4.4) cuda-python 12.6.2.post1, whose files overwrite cuda-bindings 13.x: Kimi-K2.5 then fails
# vLLM's model inspection (flashinfer's cutlass DSL misses cuda.bindings.runtime.cudaLibrary_t).
COMPANIONS = {"0.33.0": ("cuda-python==13.4.4",)}


def cache_root() -> Path:
    default = Path.home() / ".cache" / "gpuserve"
    return Path(os.environ.get("GPUSERVE_CACHE", default))


def env_dir(version: str) -> Path:
    return cache_root() / "vllm-full" / version


def env_python(version: str) -> Path:
    return env_dir(version) / "bin" / "python"


def requirements(version: str) -> list[str]:
    return [f"vllm=={version}", *COMPANIONS.get(version, ())]


# Written into .complete after the requirements: an env built before its files were compiled is
# built again. The modules run every env interpreter with -B (they never write into an env), so
# without bytecode each probe compiled torch, transformers and vLLM from source: 76 s instead of
# 36 s for one 0.18.0 preflight on 2 cores.
BYTECODE = "# bytecode compiled"


def is_built(version: str) -> bool:
    """Built, compiled, and with the requirements asked for now (a companion added: a rebuild)."""
    complete = env_dir(version) / ".complete"
    return complete.is_file() and env_python(version).exists() and \
        complete.read_text().splitlines() == [*requirements(version), BYTECODE]


def _log(msg: str) -> None:
    print(f"[vllm-full] {msg}", file=sys.stderr, flush=True)


def uv_binary() -> Path:
    """uv, pinned, installed with pip into a small venv of its own under the cache."""
    tool = cache_root() / f"uv-tool-{UV_VERSION}"
    uv = tool / "bin" / "uv"
    if not uv.exists():
        subprocess.run([sys.executable, "-m", "venv", str(tool)], check=True)
        subprocess.run([str(tool / "bin" / "python"), "-m", "pip", "install", "-q",
                        f"uv=={UV_VERSION}"], check=True)
    return uv


def build(version: str) -> Path:
    """Python of the env for vllm==version, building it on first use (minutes, several GB)."""
    root = cache_root() / "vllm-full"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{version}.lock", "w") as lock:  # two test runs build each env once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built(version):
            return env_python(version)
        uv = uv_binary()
        tmp = root / f".{version}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        env = dict(os.environ, UV_CACHE_DIR=str(cache_root() / "uv"), UV_LINK_MODE="hardlink",
                   UV_PYTHON_DOWNLOADS="never")
        started = time.monotonic()
        _log(f"building {' '.join(requirements(version))} with all dependencies in {tmp} "
             "(several GB)")
        subprocess.run([str(uv), "venv", "-q", "--relocatable", "--python", PYTHON_VERSION,
                        str(tmp)], check=True, env=env)
        subprocess.run([str(uv), "pip", "install", "-q", "--compile-bytecode",
                        "--python", str(tmp / "bin" / "python"), *requirements(version)],
                       check=True, env=env)
        subprocess.run([str(tmp / "bin" / "python"), "-c", "import vllm"], check=True,
                       env=dict(env, VLLM_LOGGING_LEVEL="ERROR"))
        (tmp / ".complete").write_text("\n".join([*requirements(version), BYTECODE]) + "\n")
        final = env_dir(version)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        _log(f"vllm=={version} ready in {time.monotonic() - started:.0f} s: {final}")
        return env_python(version)


if __name__ == "__main__":
    for arg in sys.argv[1:] or DEFAULT_VERSIONS:
        print(build(arg))
