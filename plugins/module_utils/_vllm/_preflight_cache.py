# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The preflight's verdict cache: its key, which verdicts may be stored, and its files.

An accepted verdict is stored under a key made of everything it depends on: the argv, the
extra flags' names, the compute capability asked for, the code that judged it, the unit's
environment (a secret's name only), and the fingerprint of the install, the checkpoints and the
files the argv names (_preflight_key.py). Any change gives
another key, so vLLM judges again; nothing is ever looked up by a partial match.

The directory must belong to the user running the module and be closed to others (0700): an
entry someone else could write would be a verdict vLLM never gave. Entries are written to a
temp file, fsynced and renamed, so a reader sees a whole entry or none. Refusals, skips and
crashes are never stored, nor a verdict with a check not run. Stdlib only, no Ansible imports.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils import _atomic
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._preflight_key import is_secret

FORMAT = 1
KEEP = 16  # newest entries kept per directory
_ENTRY = re.compile(r"^[0-9a-f]{64}\.json$")
_TEMP_PREFIX = ".entry-"
_STALE_TEMP_S = 600
SECRET_SET = "(secret: set; its value is never part of the key)"


def keyed_environment(environment: t.Mapping[str, str]) -> dict[str, str]:
    """The unit's environment as the key holds it: a secret's name, never its value.

    An API key or a token changes no verdict, and a digest of one in a key others may read
    could be guessed offline; that it is set (or not) is kept.
    """
    return {str(name): SECRET_SET if is_secret(str(name)) else str(value)
            for name, value in sorted(environment.items())}


def cache_key(fingerprint: t.Mapping[str, t.Any], argv: t.Sequence[str],
              extra_flags: t.Iterable[str], compute_capability: str, code: str,
              environment: t.Mapping[str, str] | None = None) -> str:
    """sha256 over everything a verdict depends on (code: digest of the probe's source;
    environment: the unit's, which the probe runs with)."""
    material = {"format": FORMAT, "argv": [str(a) for a in argv],
                "extra_flags": sorted(str(f) for f in extra_flags),
                "compute_capability": str(compute_capability).strip(), "code": code,
                "fingerprint": fingerprint,
                "environment": keyed_environment(environment or {})}
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def code_digest(*sources: str) -> str:
    """Digest of the judging code, so that a new collection release judges again."""
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


def why_not_cacheable(result: t.Mapping[str, t.Any],
                      fingerprint: t.Mapping[str, t.Any]) -> str:
    """"" when the verdict may be stored, else why not. Only a clean acceptance is stored."""
    if result.get("crashed"):
        return "the probe crashed"
    if result.get("skipped"):
        return "the preflight was skipped"
    if result.get("problems"):
        return "vLLM refused the configuration (refusals are always judged again)"
    checks = result.get("checks") or []
    not_run = [c["name"] for c in checks if c.get("status") == "not run"]
    if not_run:
        return f"not every check ran here ({', '.join(not_run)} not run)"
    if not checks or not all(c.get("ok") for c in checks):
        return "no complete set of passed checks"
    reasons = list(fingerprint.get("uncacheable") or [])
    return "; ".join(reasons)


def directory_problem(path: str, euid: int | None = None) -> str:
    """"" when path is a cache directory this user may trust, else why not (missing is fine)."""
    euid = os.geteuid() if euid is None else euid
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"cannot stat {path}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != euid:
        return f"{path} belongs to uid {st.st_uid}, not to uid {euid} running the preflight"
    if st.st_mode & 0o077:
        return f"{path} has mode {stat.S_IMODE(st.st_mode):04o}; it must be 0700"
    return ""


def entry_path(cache_dir: str, key: str) -> str:
    return os.path.join(cache_dir, key + ".json")


def read_entry(cache_dir: str, key: str) -> tuple[dict | None, str]:
    """(the stored entry, "") on a hit; (None, why) otherwise ("" why: simply not there)."""
    problem = directory_problem(cache_dir)
    if problem:
        return None, f"verdict cache not used: {problem}"
    path = entry_path(cache_dir, key)
    try:
        with open(path, encoding="utf-8") as handle:
            entry = json.load(handle)
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError) as exc:
        return None, f"verdict cache entry {path} unreadable ({exc}); judging again"
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != key \
            or not isinstance(entry.get("result"), dict):
        return None, f"verdict cache entry {path} is not a verdict for this key; judging again"
    return entry, ""


def write_entry(cache_dir: str, key: str, result: t.Mapping[str, t.Any],
                now: float | None = None) -> str:
    """Store an accepted verdict atomically; the entry's path. Raises OSError/ValueError."""
    now = time.time() if now is None else now
    if not os.path.isdir(cache_dir):
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        os.chmod(cache_dir, 0o700)
    problem = directory_problem(cache_dir)
    if problem:
        raise ValueError(problem)
    entry = {"format": FORMAT, "key": key, "stored_at": now,
             "stored_at_text": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now)),
             "result": dict(result)}
    path = entry_path(cache_dir, key)
    _atomic.write(path, json.dumps(entry, sort_keys=True).encode("utf-8"), prefix=_TEMP_PREFIX)
    prune(cache_dir, now)
    return path


def prune(cache_dir: str, now: float, keep: int = KEEP) -> list[str]:
    """Remove all but the newest `keep` entries and temp files left by a killed writer."""
    removed = []
    entries = []
    for name in os.listdir(cache_dir):
        full = os.path.join(cache_dir, name)
        try:
            mtime = os.lstat(full).st_mtime
        except OSError:
            continue
        if name.startswith(_TEMP_PREFIX) and now - mtime > _STALE_TEMP_S:
            removed.append(full)
        elif _ENTRY.match(name):
            entries.append((mtime, full))
    entries.sort(reverse=True)
    removed.extend(full for _mtime, full in entries[keep:])
    for full in removed:
        _unlink(full)
    return removed


def cached_result(entry: t.Mapping[str, t.Any], key: str, seconds: float) -> dict[str, t.Any]:
    """The stored verdict, marked as cached, with this run's time."""
    result = dict(entry["result"])
    result.update({"cached": True, "cache_key": key, "cached_at": entry.get("stored_at_text", ""),
                   "seconds": round(seconds, 2), "timings": {"cache lookup": round(seconds, 2)},
                   "cache": f"cached verdict from {entry.get('stored_at_text', '?')}: vLLM's "
                            "files, its dependencies, the flags and the checkpoints' configs "
                            "are unchanged since vLLM judged them"})
    return result


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
