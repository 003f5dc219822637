# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What of the unit's environment root's preflight may use: the trust boundary, decided.

Why: the probe runs vLLM as root with the unit's environment, so that vLLM judges what the
service will see. That environment points Python's, vLLM's, Hugging Face's and triton's caches
into vllm_server_cache_dir, which the service user owns: a .pyc planted in its
PYTHONPYCACHEPREFIX would run as root in vLLM's model registry child, a `modelinfos` entry in
its VLLM_CACHE_ROOT would be a verdict input the cache key never saw. So root's probe gets its
own scratch caches (kept between runs, root's alone), and any other variable naming a place
another user could write is left out. The caller says which paths those are (a predicate), so
the decision is a pure function. Stdlib only, no Ansible imports.
"""

from __future__ import annotations

import os
import stat
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._env._pyenv import HARMLESS_PYTHON_ENV
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._preflight_key import is_secret

SCRATCH_DIR = "/var/cache/gpuserve/preflight"
# Where vLLM and the libraries it imports read and write caches (vLLM 0.16-0.33's envs.py,
# huggingface_hub's constants, triton, torch): every one is root's scratch in the probe, set
# whether or not the unit sets it, so nothing falls back to a directory root did not choose.
CACHE_VARIABLES: dict[str, str] = {
    "XDG_CACHE_HOME": "xdg",
    "VLLM_CACHE_ROOT": "vllm",
    "VLLM_CONFIG_ROOT": "vllm-config",
    "VLLM_ASSETS_CACHE": "vllm-assets",
    "HF_HOME": "huggingface",
    "HF_HUB_CACHE": "huggingface/hub",
    "HUGGINGFACE_HUB_CACHE": "huggingface/hub",
    "TRANSFORMERS_CACHE": "huggingface/hub",
    "HF_MODULES_CACHE": "huggingface/modules",
    "HF_DATASETS_CACHE": "huggingface/datasets",
    "HF_ASSETS_CACHE": "huggingface/assets",
    "HF_XET_CACHE": "huggingface/xet",
    "TRITON_CACHE_DIR": "triton",
    "TRITON_HOME": "triton-home",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "TORCH_HOME": "torch",
    "TORCH_EXTENSIONS_DIR": "torch-extensions",
    "CUDA_CACHE_PATH": "nv/ComputeCache",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "NUMBA_CACHE_DIR": "numba",
    "OUTLINES_CACHE_DIR": "outlines",
}
HIDDEN = "(secret: not shown)"


class ScratchError(ValueError):
    """The scratch directory is not root's alone; the message says what to fix."""


class Boundary(t.NamedTuple):
    """The probe's environment, the unit's caches it points elsewhere, and what it leaves out."""

    env: dict[str, str]
    redirected: list[dict[str, str]]
    left_out: list[dict[str, str]]

    def report(self, scratch_dir: str) -> dict[str, t.Any]:
        """The module result's `boundary`."""
        return {"scratch_dir": scratch_dir, "redirected": self.redirected, "left_out": self.left_out}


def _paths(value: str) -> list[str]:
    """The absolute paths a variable's value names: itself, or the parts of a PATH-like list."""
    return [part for part in value.split(os.pathsep) if part.startswith("/")]


def probe_environment(unit_env: t.Mapping[str, str], writable: t.Callable[[str], str],
                      scratch_dir: str = SCRATCH_DIR) -> Boundary:
    """The environment root's preflight runs with, decided from the unit's.

    writable(path) says why a user other than root could change what path holds ("" when none
    can). Cache variables always point into scratch_dir; a PYTHON* variable that names code is
    left out (isolated_call drops it too: the env's own root-owned bytecode is read); any other
    variable naming a path writable(path) complains about is left out, with the reason.
    """
    env: dict[str, str] = {}
    redirected: list[dict[str, str]] = []
    left_out: list[dict[str, str]] = []
    for name, value in sorted(unit_env.items()):
        shown = HIDDEN if is_secret(name) else value
        if name in CACHE_VARIABLES:
            redirected.append({"name": name, "service": shown,
                               "probe": os.path.join(scratch_dir, CACHE_VARIABLES[name])})
        elif name.startswith("PYTHON") and name not in HARMLESS_PYTHON_ENV:
            left_out.append({"name": name, "reason": f"{name}={shown} names code or bytecode a "
                             "child interpreter would load; root's interpreters never take it"})
        else:
            problems = [(path, why) for path in _paths(value) for why in [writable(path)] if why]
            if problems:
                path, why = problems[0]
                where = "a path" if shown == HIDDEN else f"{path}"
                why = "" if shown == HIDDEN else f" ({why})"
                left_out.append({"name": name, "reason": f"{name} names {where}, which another "
                                 f"user could change{why}; the probe runs without it"})
            else:
                env[name] = value
    env.update({name: os.path.join(scratch_dir, sub) for name, sub in CACHE_VARIABLES.items()})
    return Boundary(env, redirected, left_out)


def unread_models(named: t.Mapping[str, str], is_dir: t.Callable[[str], bool]) -> dict[str, str]:
    """The model and drafter (checkpoints() of the argv) that are not local directories.

    vLLM would read their config.json from the Hugging Face cache, which in the probe is root's
    empty scratch, not the service's: the checks that need them are reported as not run.
    """
    return {role: path for role, path in sorted(named.items()) if not is_dir(path)}


def prepare_scratch(path: str, writable: t.Callable[[str], str], euid: int | None = None) -> None:
    """Create the scratch directory 0700 (kept between runs) and make sure only its user can
    change it or a folder above it (writable, as for probe_environment); raises ScratchError
    naming what is wrong, OSError when it cannot be created."""
    euid = os.geteuid() if euid is None else euid
    os.makedirs(path, mode=0o700, exist_ok=True)
    why = writable(path)
    if why:
        raise ScratchError(f"the preflight's scratch directory {path} could be changed by another "
                           f"user ({why}); what is in it runs as root. Give it back to root or "
                           "choose another scratch_dir")
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise ScratchError(f"the preflight's scratch directory {path} is not a directory: "
                           "remove it and run again")
    if info.st_uid != euid or info.st_mode & 0o077:
        raise ScratchError(
            f"the preflight's scratch directory {path} belongs to uid {info.st_uid} with mode "
            f"{stat.S_IMODE(info.st_mode):04o}; it must be uid {euid}'s with mode 0700 (what is "
            "in it could run as root): remove it and run again")
