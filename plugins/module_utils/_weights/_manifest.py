# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""A checkpoint's manifest: its commit and every file's size and hash, the judge of every copy.

Built once per revision on the staging host, from the Hub's own metadata (the tree listing of
``GET /api/models/{repo}/tree/{commit}?recursive=true``, the format huggingface_hub's
``list_repo_tree`` / ``get_paths_info`` read: ``lfs.oid`` is the sha256 of an LFS file, ``oid``
the git blob sha1 of any other file) or, for a mirror directory without Hub metadata, by hashing
that directory. Every node verifies its copy against it.

Stdlib only, no Ansible imports: runs on the managed node.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import fnmatch
import hashlib
import json
import os
import re
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils import _atomic

FORMAT = 1
HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 8 * 1024 * 1024
# Directories a copy may hold that are not part of the checkpoint: our own metadata, the
# huggingface_hub local-dir metadata (`hf download --local-dir`), a git checkout's database.
METADATA_DIRS = (".gpuserve", ".cache", ".git")


class ManifestError(ValueError):
    """Bad Hub metadata or manifest (the message names the source and what was found)."""


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """One file of the checkpoint: sha256 for LFS files, git blob sha1 for the others."""

    path: str
    size: int
    sha256: str | None = None
    git_sha1: str | None = None

    @property
    def digest(self) -> str:
        return f"sha256:{self.sha256}" if self.sha256 else f"git-sha1:{self.git_sha1}"


@dataclasses.dataclass(frozen=True)
class Manifest:
    repo: str
    commit: str
    source: str  # "hub" (the Hub's metadata) or "mirror" (hashes of the operator's directory)
    files: tuple[FileEntry, ...]
    exclude: tuple[str, ...] = ()  # patterns left out when it was built

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, t.Any]:
        return {
            "format": FORMAT, "repo": self.repo, "commit": self.commit, "source": self.source,
            "exclude": list(self.exclude), "total_bytes": self.total_bytes, "file_count": len(self.files),
            "files": [{k: v for k, v in dataclasses.asdict(f).items() if v is not None}
                      for f in self.files],
        }

    def dumps(self) -> str:
        """Deterministic text: the same manifest is the same bytes on every host and every run."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"


def safe_relpath(path: t.Any, where: str) -> str:
    """A path inside the checkpoint, refused when it could escape it."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or "\0" in path \
            or "\n" in path or any(part in ("", ".", "..") for part in path.split("/")):
        raise ManifestError(f"{where}: file path {path!r} is not a plain relative path")
    return path


def excluded(path: str, patterns: t.Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def from_hub_tree(entries: t.Any, repo: str, commit: str, exclude: t.Sequence[str] = (),
                  where: str = "the Hub's tree listing") -> Manifest:
    """Manifest from the Hub's tree entries (all pages concatenated; folders are skipped)."""
    if not isinstance(entries, list):
        raise ManifestError(f"{where}: expected a JSON list of tree entries, found "
                            f"{type(entries).__name__}")
    files = []
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict) or entry.get("type") not in ("file", "directory"):
            raise ManifestError(f"{where}: entry {number} is not a tree entry "
                                f"(type file or directory): {str(entry)[:200]}")
        if entry["type"] != "file":
            continue
        path = safe_relpath(entry.get("path"), where)
        if excluded(path, exclude):
            continue
        size = entry.get("size")
        if not isinstance(size, int) or size < 0:
            raise ManifestError(f"{where}: {path} has size {size!r}")
        lfs = entry.get("lfs")
        if lfs:
            sha256 = str(lfs.get("oid", "")).lower()
            if not HEX64.match(sha256) or lfs.get("size") != size:
                raise ManifestError(f"{where}: {path} has LFS metadata {lfs!r}, expected a 64-hex "
                                    f"oid (sha256) and size {size}")
            files.append(FileEntry(path, size, sha256=sha256))
        else:
            oid = str(entry.get("oid", "")).lower()
            if not HEX40.match(oid):
                raise ManifestError(f"{where}: {path} has oid {entry.get('oid')!r}, expected a "
                                    f"40-hex git blob id")
            files.append(FileEntry(path, size, git_sha1=oid))
    paths = [f.path for f in files]
    if len(set(paths)) != len(paths):
        raise ManifestError(f"{where}: a path is listed twice")
    return _checked(Manifest(repo, commit, "hub", tuple(sorted(files, key=lambda f: f.path)),
                             tuple(exclude)), where)


def hash_file(path: str, entry_kind: str) -> tuple[str, int]:
    """(hex digest, bytes read): sha256 of the content, or git's blob sha1 ("git-sha1")."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    size = os.fstat(fd).st_size
    digest = hashlib.sha256() if entry_kind == "sha256" else hashlib.sha1(b"blob %d\0" % size)
    read = 0
    with os.fdopen(fd, "rb") as handle:
        while True:
            block = handle.read(CHUNK)
            if not block:
                break
            digest.update(block)
            read += len(block)
    return digest.hexdigest(), read


def list_files(root: str, exclude: t.Sequence[str] = ()) -> list[str]:
    """Relative paths of the regular files under root, metadata directories left out."""
    found = []
    for directory, dirs, names in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        if rel_dir == ".":
            dirs[:] = [d for d in dirs if d not in METADATA_DIRS]
        dirs.sort()
        for name in sorted(names):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            full = os.path.join(directory, name)
            if os.path.isfile(full) and not os.path.islink(full) and not excluded(rel, exclude):
                found.append(rel)
    return found


def from_directory(root: str, repo: str, commit: str, exclude: t.Sequence[str] = (),
                   workers: int = 4) -> Manifest:
    """Manifest of a mirror directory by hashing it: sha256 for every file (no Hub metadata)."""
    if not os.path.isdir(root):
        raise ManifestError(f"{root}: mirror directory does not exist")
    paths = list_files(root, exclude)
    if not paths:
        raise ManifestError(f"{root}: mirror directory holds no files")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        digests = list(pool.map(lambda p: hash_file(os.path.join(root, p), "sha256"), paths))
    files = tuple(FileEntry(p, size, sha256=d) for p, (d, size) in zip(paths, digests))
    return _checked(Manifest(repo, commit, "mirror", files, tuple(exclude)), root)


def _checked(manifest: Manifest, where: str) -> Manifest:
    if not HEX40.match(manifest.commit):
        raise ManifestError(f"{where}: commit {manifest.commit!r} is not a 40-hex commit id")
    if not manifest.files:
        raise ManifestError(f"{where}: no files left for {manifest.repo}@{manifest.commit} "
                            f"(all excluded?)")
    return manifest


def write_text_atomic(path: str, text: str, prefix: str) -> None:
    """Write text whole (_atomic.write), mode 0644, in a folder made 0755 when missing."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o755, exist_ok=True)
    _atomic.write(path, text.encode("utf-8"), mode=0o644, prefix=prefix)


def write(path: str, manifest: Manifest) -> None:
    """Write the manifest atomically, mode 0644."""
    write_text_atomic(path, manifest.dumps(), ".manifest.")


def load(path: str) -> Manifest:
    """Read a manifest written by dumps(); ManifestError naming the file otherwise."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the manifest ({exc.strerror})") from None
    except ValueError as exc:
        raise ManifestError(f"{path}: manifest is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), list):
        raise ManifestError(f"{path}: not a gpuserve weights manifest of format {FORMAT}")
    files = []
    for item in data["files"]:
        if not isinstance(item, dict) or not isinstance(item.get("size"), int):
            raise ManifestError(f"{path}: bad file entry {str(item)[:200]}")
        sha256, git_sha1 = item.get("sha256"), item.get("git_sha1")
        if not ((isinstance(sha256, str) and HEX64.match(sha256))
                or (isinstance(git_sha1, str) and HEX40.match(git_sha1))):
            raise ManifestError(f"{path}: {item.get('path')!r} has no sha256 or git_sha1")
        files.append(FileEntry(safe_relpath(item.get("path"), path), item["size"], sha256, git_sha1))
    exclude = data.get("exclude", [])
    if not isinstance(exclude, list) or not all(isinstance(p, str) for p in exclude):
        raise ManifestError(f"{path}: exclude is {exclude!r}, not a list of patterns")
    return _checked(Manifest(str(data.get("repo", "")), str(data.get("commit", "")),
                             str(data.get("source", "")), tuple(files), tuple(exclude)), path)
