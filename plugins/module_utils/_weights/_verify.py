# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Verify a checkpoint directory against its manifest: full hashes once, a stat check after.

Each file is judged in order of cost: missing, size against the manifest, the safetensors header
(a truncated shard in milliseconds), then its hash (sha256 for LFS files, git blob sha1 for the
others). A file whose hash matched is remembered in a cache by (size, mtime, ctime, inode): a
re-run hashes only files whose stat changed. Any write to a file changes its ctime, which no
tool can set back, so a file edited in place (even with its mtime restored) is hashed again; only
corruption below the filesystem (bit rot, a bad disk) keeps the stat, which ``full=True`` (the
role's ``vllm_weights_reverify``) catches by hashing everything.

Stdlib only, no Ansible imports: runs on the managed node.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import typing as t
from stat import S_ISREG

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _safetensors as st
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._manifest import (
    FileEntry,
    Manifest,
    hash_file,
    write_text_atomic,
)

CACHE_FORMAT = 1
# Statuses: ok, missing, short (a prefix may be kept and resumed), long, corrupt (hash or header).
KEEP = ("ok", "short")


@dataclasses.dataclass
class FileCheck:
    path: str
    status: str
    size: int  # bytes on disk (0 when missing)
    detail: str = ""
    hashed: bool = False


@dataclasses.dataclass
class Report:
    root: str
    checks: list[FileCheck]
    hashed_bytes: int
    cached_files: int

    @property
    def ok(self) -> bool:
        return all(c.status == "ok" for c in self.checks)

    def bad(self) -> list[FileCheck]:
        return [c for c in self.checks if c.status != "ok"]

    def problems(self) -> list[str]:
        return [f"{os.path.join(self.root, c.path)}: {c.detail}" for c in self.bad()]

    def summary(self) -> dict[str, t.Any]:
        counts: dict[str, int] = {}
        for check in self.checks:
            counts[check.status] = counts.get(check.status, 0) + 1
        return {"ok": self.ok, "files": len(self.checks), "statuses": counts,
                "hashed_files": sum(c.hashed for c in self.checks),
                "hashed_bytes": self.hashed_bytes, "cached_files": self.cached_files}


def _stat_key(st_result: os.stat_result) -> list[int]:
    return [st_result.st_size, st_result.st_mtime_ns, st_result.st_ctime_ns, st_result.st_ino]


def load_cache(path: str, commit: str) -> dict[str, list[t.Any]]:
    """path -> [size, mtime_ns, ctime_ns, inode, digest]; empty when absent, foreign or unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT or data.get("commit") != commit:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def save_cache(path: str, commit: str, files: t.Mapping[str, list[t.Any]]) -> bool:
    """Write the cache atomically (temp file, fsync, rename); False when it was already so."""
    text = json.dumps({"format": CACHE_FORMAT, "commit": commit, "files": dict(files)},
                      sort_keys=True, indent=0) + "\n"
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except OSError:
        pass
    write_text_atomic(path, text, ".verified.")
    return True


def _judge(root: str, entry: FileEntry, cached: list[t.Any] | None, full: bool) -> tuple[FileCheck, list[t.Any] | None]:
    full_path = os.path.join(root, entry.path)
    try:
        stat = os.lstat(full_path)  # a symlink is not followed: it is a broken file, deleted
    except FileNotFoundError:
        return FileCheck(entry.path, "missing", 0, "missing"), None
    except NotADirectoryError:
        return FileCheck(entry.path, "corrupt", 0, "a parent directory is not a directory"), None
    if not S_ISREG(stat.st_mode):
        return FileCheck(entry.path, "corrupt", 0, "not a regular file"), None
    size = stat.st_size
    if size < entry.size:
        return FileCheck(entry.path, "short", size,
                         f"short: {size} of {entry.size} bytes ({entry.size - size} missing)"), None
    if size > entry.size:
        return FileCheck(entry.path, "long", size,
                         f"{size} bytes, the manifest says {entry.size}"), None
    if entry.path.endswith(".safetensors"):
        problem = st.size_problem(full_path, size)
        if problem:
            return FileCheck(entry.path, "corrupt", size,
                             problem.split(": ", 1)[-1] + " (the manifest's size agrees with the file, "
                             "so its bytes are wrong)"), None
    key = _stat_key(stat)
    if not full and cached == key + [entry.digest]:
        return FileCheck(entry.path, "ok", size), cached
    kind = "sha256" if entry.sha256 else "git-sha1"
    digest = hash_file(full_path, kind)[0]
    want = entry.sha256 or entry.git_sha1
    if digest != want:
        return FileCheck(entry.path, "corrupt", size, f"{kind} {digest}, the manifest says {want}",
                         hashed=True), None
    # Stat again after hashing: a file that changed while it was read is not remembered.
    after = _stat_key(os.lstat(full_path))
    return FileCheck(entry.path, "ok", size, hashed=True), (after + [entry.digest] if after == key else None)


def verify(root: str, manifest: Manifest, cache_path: str = "", full: bool = False,
           workers: int = 4, save: bool = True) -> Report:
    """Judge every file of the manifest under root; remember the matches in the cache.

    The cache is read when ``cache_path`` is given, and written when also ``save`` (not in check
    mode) and its content changed.
    """
    cache = load_cache(cache_path, manifest.commit) if cache_path else {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        judged = list(pool.map(lambda e: _judge(root, e, cache.get(e.path), full), manifest.files))
    if cache_path and save:
        save_cache(cache_path, manifest.commit,
                   {e.path: kept for e, (_check, kept) in zip(manifest.files, judged) if kept is not None})
    checks = [check for check, _kept in judged]
    return Report(root, checks, sum(c.size for c in checks if c.hashed),
                  sum(1 for c in checks if c.status == "ok" and not c.hashed))
