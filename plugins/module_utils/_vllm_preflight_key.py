# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What a preflight verdict depends on, read without importing vLLM: the verdict cache's input.

The vllm_serve_preflight module runs this file's source with the ml-env's python (as it does the
probe), because only that interpreter knows which vLLM and which dependencies it would import
(its sys.path, PYTHONPATH included). Nothing is imported from vLLM or torch: stat calls and small
reads only, a fraction of a second. What it reads:

- the vLLM package found on sys.path: path, size, mtime and inode of every file under it
  (bytecode caches left out). python_patch, pip/uv and editors all replace or rewrite files,
  which changes these; a hash of every byte would cost seconds and catch only an edit that puts
  back size and mtime by hand;
- every installed distribution's RECORD on sys.path (torch, transformers, ...): an install,
  upgrade or reinstall of any of them rewrites it;
- the checkpoints the command line names (model, drafter, any other local directory): the bytes
  of their top-level *.json and *.py files (config.json, remote code), never the weights. A model
  or drafter that is not a local directory makes the verdict uncacheable;
- the interpreter, the VLLM_/HF_/TRANSFORMERS_/CUDA_ environment (secrets left out), and the
  node's GPUs and driver as /proc/driver/nvidia shows them.

Stdlib only, no Ansible imports.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import typing as t

ENV_PREFIXES = ("VLLM_", "HF_", "TRANSFORMERS_", "CUDA_", "PYTHONPATH", "NVIDIA_")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
CHECKPOINT_SUFFIXES = (".json", ".py")
NVIDIA_PROC = "/proc/driver/nvidia"


def checkpoints(argv: t.Sequence[str]) -> dict[str, str]:
    """The model and drafter a `vllm serve` argv names: {"model": path, "drafter": path}.

    The model is the positional after `serve` or `--model`; the drafter is the `model` of
    `--speculative-config` (JSON, or the dotted `--speculative-config.model`).
    """
    argv = [str(a) for a in argv]
    found: dict[str, str] = {}
    if len(argv) > 2 and argv[1] == "serve" and not argv[2].startswith("-"):
        found["model"] = argv[2]
    for at, arg in enumerate(argv):
        flag, eq, inline = arg.partition("=")
        value = inline if eq else (argv[at + 1] if at + 1 < len(argv) else "")
        if flag == "--model":
            found["model"] = value
        elif flag == "--speculative-config.model":
            found["drafter"] = value
        elif flag == "--speculative-config":
            try:
                spec = json.loads(value)
            except ValueError:
                continue
            if isinstance(spec, dict) and spec.get("model"):
                found["drafter"] = str(spec["model"])
    return found


def local_dirs(argv: t.Sequence[str]) -> list[str]:
    """Every argv word (and string inside a JSON object argument) that is a local directory."""
    words: list[str] = []
    for arg in (str(a) for a in argv[1:]):
        words.append(arg.partition("=")[2] if arg.startswith("--") and "=" in arg else arg)
        if arg.lstrip().startswith("{"):
            try:
                words.extend(str(v) for v in json.loads(arg).values() if isinstance(v, str))
            except (ValueError, AttributeError):
                pass
    return sorted({os.path.abspath(w) for w in words if w and os.path.isdir(w)})


def checkpoint_digest(path: str) -> dict[str, str]:
    """sha256 of each top-level *.json / *.py file of a checkpoint directory (no weights)."""
    digests = {}
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if name.endswith(CHECKPOINT_SUFFIXES) and os.path.isfile(full):
            with open(full, "rb") as handle:
                digests[name] = hashlib.sha256(handle.read()).hexdigest()
    return digests


def _stat_rows_digest(rows: list[str]) -> tuple[str, int]:
    """sha256 over the sorted path/size/mtime/inode rows, and how many there were."""
    rows.sort()
    return hashlib.sha256("\n".join(rows).encode("utf-8", "surrogateescape")).hexdigest(), len(rows)


def tree_digest(root: str) -> tuple[str, int]:
    """sha256 over (relative path, size, mtime_ns, inode) of every file under root; and the count."""
    rows = []
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(base, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            rows.append(f"{os.path.relpath(full, root)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}")
    return _stat_rows_digest(rows)


def distributions_digest(paths: t.Sequence[str]) -> tuple[str, int]:
    """sha256 over path, size, mtime_ns and inode of every *.dist-info/RECORD on the given paths."""
    rows = []
    for entry in paths:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if not name.endswith(".dist-info"):
                continue
            record = os.path.join(entry, name, "RECORD")
            try:
                st = os.stat(record)
            except OSError:
                continue
            rows.append(f"{record}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}")
    return _stat_rows_digest(rows)


def environment(environ: t.Mapping[str, str]) -> dict[str, str]:
    """The variables vLLM, transformers and CUDA read, without anything that looks secret."""
    return {k: v for k, v in sorted(environ.items())
            if k.startswith(ENV_PREFIXES) and not any(w in k for w in SECRET_WORDS)}


def gpus(proc: str = NVIDIA_PROC) -> str:
    """sha256 of the driver version and each GPU's information file ("" without the driver)."""
    texts = []
    for rel in ["version"] + sorted(os.path.join("gpus", d, "information")
                                    for d in _listdir(os.path.join(proc, "gpus"))):
        try:
            with open(os.path.join(proc, rel), "rb") as handle:
                texts.append(rel.encode() + b"\0" + handle.read())
        except OSError:
            continue
    return hashlib.sha256(b"\n".join(texts)).hexdigest() if texts else ""


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def fingerprint(argv: t.Sequence[str]) -> dict[str, t.Any]:
    """Everything the verdict on argv depends on beyond the request itself, for this interpreter."""
    result: dict[str, t.Any] = {
        "python": sys.executable, "python_version": sys.version, "sys_path": list(sys.path),
        "environment": environment(os.environ), "gpus": gpus(), "uncacheable": [],
    }
    result["distributions"], result["distribution_count"] = distributions_digest(sys.path)
    spec = importlib.util.find_spec("vllm")
    roots = list(spec.submodule_search_locations or []) if spec else []
    result["vllm"] = {root: tree_digest(root) for root in roots}
    if not roots:
        result["uncacheable"].append("vLLM is not importable by this interpreter")
    for role, path in sorted(checkpoints(argv).items()):
        if not os.path.isdir(path):
            result["uncacheable"].append(f"the {role} {path} is not a local directory (what "
                                         "vLLM would read from it cannot be fingerprinted)")
    result["checkpoints"] = {path: checkpoint_digest(path) for path in local_dirs(argv)}
    return result


def main() -> int:
    """`python - REQUEST.json`: write the fingerprint of the request's argv to its result_path."""
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    with open(request["result_path"], "w", encoding="utf-8") as handle:
        json.dump(fingerprint(request["argv"]), handle, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
