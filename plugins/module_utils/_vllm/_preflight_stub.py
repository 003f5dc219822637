# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The probe's stand-in for a missing NVIDIA driver: re-running the probe with NVIDIA's CUDA stub
library on the loader path, so that vLLM's compiled ops load where no driver library does.

Part of the probe script (_preflight_probe): written beside it and run by the ml-env's
interpreter, so stdlib only, no package imports.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import typing as t

DRIVER_LIBRARY = "libcuda.so.1"
CUDA_ERROR_STUB_LIBRARY = 34  # what cuInit of NVIDIA's link-time stub libcuda answers
STUB_ENV = "GPUSERVE_PREFLIGHT_CUDA_STUB"  # set on the re-run: the stub's path


def cuda_stub_env(request: t.Mapping[str, t.Any], script: str) -> dict[str, str] | None:
    """The environment to re-run this script with NVIDIA's CUDA stub library, or None.

    Only where the driver library does not load (no NVIDIA driver: CI, a rehearsal with all
    dependencies) and the env ships the stub (a libcuda whose cuInit answers
    CUDA_ERROR_STUB_LIBRARY; vLLM 0.33's pynvvideocodec dependency carries one): vLLM's compiled
    ops then load and its CUDA platform's backend list can be read. Never on the re-run itself,
    never with cuda_stub false, never when run from stdin (nothing to re-run).
    """
    if not request.get("cuda_stub", True) or os.environ.get(STUB_ENV) is not None \
            or not os.path.isfile(script) or _loads(DRIVER_LIBRARY):
        return None
    stub = find_cuda_stub([p for p in sys.path if p.endswith(("site-packages", "dist-packages"))])
    if not stub:
        return None
    links = os.path.join(os.path.dirname(request["result_path"]), "cuda-stub")
    os.makedirs(links, mode=0o700, exist_ok=True)
    link = os.path.join(links, DRIVER_LIBRARY)
    if not os.path.islink(link):
        os.symlink(stub, link)
    loader_path = os.environ.get("LD_LIBRARY_PATH", "")
    loader_path = links + (os.pathsep + loader_path if loader_path else "")
    return dict(os.environ, LD_LIBRARY_PATH=loader_path, **{STUB_ENV: stub})


def find_cuda_stub(dirs: t.Sequence[str]) -> str:
    """The first libcuda under dirs (one level down) that is NVIDIA's stub, or ""."""
    for base in dirs:
        for path in sorted(glob.glob(os.path.join(glob.escape(base), "*", "libcuda*.so*"))):
            name = os.path.basename(path)
            if name.startswith(("libcuda.", "libcuda-")) and _is_stub(path):
                return path
    return ""


def _loads(library: str) -> bool:
    try:
        ctypes.CDLL(library)
    except OSError:
        return False
    return True


def _is_stub(path: str) -> bool:
    """True for NVIDIA's link-time stub libcuda (cuInit answers CUDA_ERROR_STUB_LIBRARY)."""
    try:
        init = getattr(ctypes.CDLL(path), "cuInit", None)
    except OSError:
        return False
    return init is not None and init(0) == CUDA_ERROR_STUB_LIBRARY
