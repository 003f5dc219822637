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

    def report(self, scratch_dir: str, untrusted: t.Mapping[str, str]) -> dict[str, t.Any]:
        """The module result's `boundary`; untrusted is remote_code_models()."""
        return {"scratch_dir": scratch_dir, "redirected": self.redirected, "left_out": self.left_out,
                "untrusted_checkpoints": [{"role": role, "reason": why}
                                          for role, why in sorted(untrusted.items())]}


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


# Flags naming a Python file vLLM imports (vllm.utils.import_utils.import_plugin, a module from
# that file's path): the serve subcommand's checks import them (0.17: api_server, 0.33:
# init_parser_plugin), and root's probe runs those. A chat template is not code (sandboxed Jinja).
CODE_FLAGS = ("--tool-parser-plugin", "--reasoning-parser-plugin")


def code_files(argv: t.Sequence[str], config: t.Any = None) -> dict[str, str]:
    """{flag: path} of the Python files argv (or its parsed `--config` file) has vLLM import;
    the command line wins over the file, as in vLLM."""
    found: dict[str, str] = {}
    for key, value in (config.items() if isinstance(config, dict) else ()):
        flag = "--" + str(key).replace("_", "-")
        if flag in CODE_FLAGS and isinstance(value, str):
            found[flag] = value
    args = [str(a) for a in argv]
    for at, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in CODE_FLAGS:
            found[flag] = value if eq else (args[at + 1] if at + 1 < len(args) else "")
    return {flag: path for flag, path in sorted(found.items()) if path}


def code_problems(files: t.Mapping[str, str], writable: t.Callable[[str], str],
                  variables: t.Mapping[str, str]) -> list[str]:
    """The refusals for code_files another user could change (writable, as for
    probe_environment); variables names the role variable of each flag (flag_variables)."""
    problems = []
    for flag, path in files.items():
        why = writable(path)
        if why:
            source = variables.get(flag, "the --config file")
            problems.append(
                f"{source} ({flag} {path}): {why}. vLLM imports this file as Python, and root's "
                "preflight runs vLLM's serve checks, which import it: give the file and the "
                "folders above it to root, with no group or other write (chown root:root, "
                "chmod go-w), or set vllm_server_preflight: false")
    return problems


def trusts_remote_code(argv: t.Sequence[str], config: t.Any = None) -> bool:
    """Whether vLLM would run with trust_remote_code (the flag, or the `--config` file's key;
    the last word of the command line wins)."""
    trusted = False
    if isinstance(config, dict):
        trusted = any(str(k).replace("_", "-") == "trust-remote-code" and v in (True, "true", "True", 1)
                      for k, v in config.items())
    for arg in (str(a) for a in argv):
        if arg == "--trust-remote-code":
            trusted = True
        elif arg == "--no-trust-remote-code":
            trusted = False
    return trusted


def remote_code_models(named: t.Mapping[str, str], folder_writable: t.Callable[[str], str],
                       is_dir: t.Callable[[str], bool]) -> dict[str, str]:
    """{role: "path (why)"} of the model and drafter directories whose files (config.json, the
    checkpoint's Python) another user could change: with trust_remote_code, vLLM would import
    that Python, so root's probe does not run the checks that read them.

    folder_writable(path) says why another user could change path, a folder above it or an
    entry directly in it ('' when none can).
    """
    found = {}
    for role, path in sorted(named.items()):
        why = folder_writable(path) if is_dir(path) else ""
        if why:
            found[role] = f"{path} ({why})"
    return found
