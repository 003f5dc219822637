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
  of their top-level *.json, *.py and *.jinja files (config.json, remote code, chat template),
  never the weights. A model or drafter that is not a local directory makes the verdict
  uncacheable. Directories are found in every word of the argv, in `--flag=value` values and in
  every string of a JSON argument (`--speculative-config={"model": ...}`), at any depth;
- every local file the command line names the same way (`--chat-template`, `--config`,
  `--tool-parser-plugin`, ...): its bytes (up to READ_LIMIT; a larger file, a GGUF model say,
  by path, size, mtime and inode), and the files and directories a `--config` file (or any
  YAML/JSON file named) names at any depth, read as YAML/JSON: without PyYAML a YAML file's
  values are unknown and the verdict is uncacheable;
- the interpreter, the VLLM_/HF_/TRANSFORMERS_/CUDA_ environment (secrets left out), and the
  node's GPUs and driver as /proc/driver/nvidia shows them.

No cache content is read or needed: the probe's caches (vLLM's `modelinfos`, Hugging Face's)
are root's own scratch directories (_preflight_boundary), never the service's, so nothing the
service user writes is a verdict input outside this key.

Stdlib only, no Ansible imports.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import typing as t

if __package__:  # a module of the collection (the module's sources, the unit tests)
    from ansible_collections.gpuserve.vllm.plugins.module_utils import _saferead as safe
else:  # the script: _saferead.py lies beside it (a stage), a directory isolated mode (-I) leaves off sys.path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _saferead as safe

ENV_PREFIXES = ("VLLM_", "HF_", "TRANSFORMERS_", "CUDA_", "PYTHONPATH", "NVIDIA_")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
CHECKPOINT_SUFFIXES = (".json", ".py", ".jinja")
READ_LIMIT = 4 << 20  # bytes of a named file hashed; a larger one is keyed by its stat
CONFIG_FLAG = "--config"
STRUCTURED_SUFFIXES = (".yaml", ".yml", ".json")  # a named file read for what it names in turn
NAMED_DEPTH = 3  # files named by files named by the argv, at most
NVIDIA_PROC = "/proc/driver/nvidia"


def _config_checkpoints(config: t.Any) -> dict[str, str]:
    """The model and drafter a parsed `--config` file names (`model`, `speculative-config`'s
    `model`, as a mapping or a JSON string; `_` spellings too)."""
    found: dict[str, str] = {}
    if not isinstance(config, dict):
        return found
    items = {str(k).replace("_", "-"): v for k, v in config.items()}
    if isinstance(items.get("model"), str) and items["model"]:
        found["model"] = items["model"]
    spec = items.get("speculative-config")
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError:
            spec = None
    if isinstance(spec, dict) and spec.get("model"):
        found["drafter"] = str(spec["model"])
    return found


def checkpoints(argv: t.Sequence[str], config: t.Any = None) -> dict[str, str]:
    """The model and drafter a `vllm serve` argv names: {"model": path, "drafter": path}.

    The model is the positional after `serve` or `--model`; the drafter is the `model` of
    `--speculative-config` (JSON, or the dotted `--speculative-config.model`). config, the
    parsed `--config` file, names them too; the command line wins, as in vLLM.
    """
    argv = [str(a) for a in argv]
    found: dict[str, str] = _config_checkpoints(config)
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


def _strings(value: t.Any) -> t.Iterator[str]:
    """Every string inside a parsed JSON value, at any depth."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def load_structured(path: str) -> tuple[t.Any, str]:
    """A YAML or JSON file's content (YAML through PyYAML, which vLLM needs for `--config` and
    so its env has); (None, why) when PyYAML is missing: what the file names is then unknown.
    A file that does not parse gives (None, ""): its bytes are keyed, it names nothing vLLM
    could follow."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(READ_LIMIT)
    except OSError:
        return None, ""
    if path.endswith(".json"):
        try:
            return json.loads(data), ""
        except ValueError:
            return None, ""
    try:
        import yaml
    except ImportError:
        return None, (f"PyYAML is not importable by {sys.executable}, so the values of {path} "
                      "(a YAML file the command line names) and what they name cannot be keyed")
    try:
        return yaml.safe_load(data), ""
    except yaml.YAMLError:
        return None, ""


def named_words(argv: t.Sequence[str]) -> tuple[list[str], list[str]]:
    """What a `vllm serve` argv can name, and why that list may be incomplete.

    The words: each word after the program, each `--flag=value` value, each `name=path` path,
    each string of a JSON argument, and every string at any depth of a `--config` file or of a
    YAML/JSON file named (read as YAML/JSON, never by lines), down to NAMED_DEPTH files deep.
    The reasons: a YAML file that could not be read as YAML (no PyYAML).
    """
    args = [str(a) for a in argv[1:]]
    configs = set()
    queue: list[tuple[str, int]] = []
    for at, arg in enumerate(args):
        flag, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        queue.append((value if eq else arg, 0))
        if flag == CONFIG_FLAG:
            configs.add(value if eq else (args[at + 1] if at + 1 < len(args) else ""))
    words: list[str] = []
    reasons: list[str] = []
    seen: set[tuple[str, int]] = set()
    while queue:
        word, depth = queue.pop(0)
        if not word or (word, depth) in seen:
            continue
        seen.add((word, depth))
        words.append(word)
        if word.lstrip().startswith(("{", "[")):
            try:
                queue.extend((w, depth) for w in _strings(json.loads(word)))
            except ValueError:
                pass
        elif "=" in word:
            queue.append((word.partition("=")[2], depth))  # --lora-modules name=/srv/lora
        if depth < NAMED_DEPTH and (word in configs or word.endswith(STRUCTURED_SUFFIXES)) \
                and os.path.isfile(word):
            content, why = load_structured(word)
            if why:
                reasons.append(why)
            queue.extend((w, depth + 1) for w in _strings(content))
    return words, reasons


def config_file(argv: t.Sequence[str]) -> t.Any:
    """The parsed `--config` file of argv (None without one, or when it cannot be read)."""
    args = [str(a) for a in argv]
    for at, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag == CONFIG_FLAG:
            path = value if eq else (args[at + 1] if at + 1 < len(args) else "")
            return load_structured(path)[0] if os.path.isfile(path) else None
    return None


def argv_words(argv: t.Sequence[str]) -> list[str]:
    """The words of named_words."""
    return named_words(argv)[0]


def local_dirs(argv: t.Sequence[str]) -> list[str]:
    """Every local directory the argv names (see argv_words)."""
    return sorted({os.path.abspath(w) for w in argv_words(argv) if os.path.isdir(w)})


def local_files(argv: t.Sequence[str]) -> list[str]:
    """Every local file the argv names (see argv_words): templates, configs, plugins."""
    return sorted({os.path.abspath(w) for w in argv_words(argv) if os.path.isfile(w)})


def file_digest(path: str) -> str:
    """sha256 of a named file's bytes; past READ_LIMIT its path, size, mtime_ns and inode."""
    try:
        st = os.stat(path)
        if st.st_size > READ_LIMIT:
            return f"stat:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    found = safe.digest(os.path.abspath(path), READ_LIMIT)
    return found[len("sha256:"):] if found.startswith("sha256:") else found


def checkpoint_digest(path: str) -> dict[str, str]:
    """sha256 of each top-level *.json / *.py file of a checkpoint directory (no weights)."""
    digests = {}
    for name in sorted(os.listdir(path)):
        full = os.path.join(os.path.abspath(path), name)
        if name.endswith(CHECKPOINT_SUFFIXES) and os.path.lexists(full) and not os.path.isdir(full):
            # The service user's directory: read through _saferead (a FIFO, a device, another
            # user's link or a file over READ_LIMIT is keyed as "unreadable: <why>", never read).
            found = safe.digest(full, READ_LIMIT)
            digests[name] = found[len("sha256:"):] if found.startswith("sha256:") else found
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


def is_secret(name: str) -> bool:
    """A variable whose value never goes into a key, a log or an argv (API keys, tokens)."""
    return any(word in name.upper() for word in SECRET_WORDS)


def environment(environ: t.Mapping[str, str]) -> dict[str, str]:
    """The variables vLLM, transformers and CUDA read, without anything that looks secret."""
    return {k: v for k, v in sorted(environ.items())
            if k.startswith(ENV_PREFIXES) and not is_secret(k)}


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
    for role, path in sorted(checkpoints(argv, config_file(argv)).items()):
        if not os.path.isdir(path):
            result["uncacheable"].append(f"the {role} {path} is not a local directory (what "
                                         "vLLM would read from it cannot be fingerprinted)")
    result["uncacheable"].extend(named_words(argv)[1])
    result["checkpoints"] = {path: checkpoint_digest(path) for path in local_dirs(argv)}
    result["files"] = {path: file_digest(path) for path in local_files(argv)}
    return result


def main() -> int:
    """`python SCRIPT REQUEST.json`: write the fingerprint of the request's argv to its result_path."""
    if os.path.isfile(sys.argv[0]) and sys.path[:1] == [os.path.dirname(os.path.abspath(sys.argv[0]))]:
        del sys.path[0]  # the module's temp directory this script runs from, new every run
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    with open(request["result_path"], "w", encoding="utf-8") as handle:
        json.dump(fingerprint(request["argv"]), handle, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
