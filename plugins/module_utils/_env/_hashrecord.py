# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""A root-only record of the sha256 of files that have not changed since they were hashed.

Why: a node's wheelhouse (torch, the CUDA wheels, vLLM: gigabytes) is checked byte for byte
before anything is installed from it, three times a run (site.yml, ml_env, vllm_install), on
every run, also when nothing changes. A file whose size, modification and status-change times,
inode and device are those recorded when it was hashed holds the bytes it held then: rewriting
it moves its times, replacing it moves its inode, and only root can set a status-change time
back (by setting the clock). So the record vouches for such a file and the hash is not read
again. It is trusted only where nobody but root could have written it: the folder and the record
are root's (no other user may write either, checked with _pyenv.path_problem), else every file is
hashed and nothing is recorded.

Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import json
import os
import stat

from ansible_collections.gpuserve.vllm.plugins.module_utils._env._pyenv import path_problem
from ansible_collections.gpuserve.vllm.plugins.module_utils._env._wheelhouse import sha256_file
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._manifest import write_text_atomic

RECORD = ".gpuserve-sha256-record.json"
FORMAT = 1


def _identity(info: os.stat_result) -> list[int]:
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


class HashRecord:
    """sha256 of the files of one folder, read from the record where it vouches for them.

    `sha256(path)` hashes what the record cannot vouch for; `save()` writes the record back
    (atomically, root's, 0644) when it changed and may be trusted. `hashed` lists the files that
    were read this time (for tests and benchmarks)."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        self.path = os.path.join(self.directory, RECORD)
        self.trusted = os.geteuid() == 0 and not path_problem(self.directory, trusted={0})
        self.entries: dict[str, list] = {}
        self.hashed: list[str] = []
        self._dirty = False
        if self.trusted:
            self.entries = self._load()

    def _load(self) -> dict[str, list]:
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return {}
        if not stat.S_ISREG(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
            self._dirty = True  # replaced by a root-only record at save()
            return {}
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            self._dirty = True
            return {}
        files = data.get("files") if isinstance(data, dict) and data.get("format") == FORMAT else None
        if not isinstance(files, dict):
            self._dirty = True
            return {}
        return {name: entry for name, entry in files.items()
                if isinstance(entry, list) and len(entry) == 6 and isinstance(entry[5], str)}

    def sha256(self, path: str) -> str:
        """The file's sha256: from the record when its identity is the recorded one, else read."""
        name = os.path.relpath(os.path.abspath(path), self.directory)
        info = os.stat(path)
        entry = self.entries.get(name)
        if self.trusted and entry and entry[:5] == _identity(info):
            return entry[5]
        digest = sha256_file(path)
        self.hashed.append(name)
        after = os.stat(path)
        # Changed while being read: the digest vouches for nothing, so it is not recorded.
        if self.trusted and _identity(after) == _identity(info):
            self.entries[name] = _identity(info) + [digest]
            self._dirty = True
        return digest

    def save(self) -> None:
        """Write the record when it may be trusted and changed; entries of files that are gone
        from the folder are dropped (the others stay: each caller asks about its own files)."""
        if not self.trusted:
            return
        kept = {name: entry for name, entry in self.entries.items()
                if os.path.lexists(os.path.join(self.directory, name))}
        if not self._dirty and kept == self.entries:
            return
        write_text_atomic(self.path, json.dumps({"format": FORMAT, "files": kept}, sort_keys=True) + "\n",
                          ".gpuserve-sha256-record.")
        self.entries, self._dirty = kept, False
