# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The digest of what a run was given, made on the controller (see _converged for the node's side).

A node whose artefacts are as recorded has nothing to prepare only if the run asks for what the
recorded run asked for: the same role options (templated, as the roles would see them), the
same collection (its roles, plugins and playbooks, byte for byte) and the same wheelhouse on the
controller (its files' names, sizes and modification times: build_wheelhouse.yml writes a new
file for a new wheel). A byte of any of them changed is another run.

Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import hashlib
import json
import os
import typing as t

COLLECTION_PARTS = ("meta", "playbooks", "plugins", "roles")
_SKIPPED = ("__pycache__",)


def collection_digest(root: str) -> str:
    """sha256 over every file under the collection's meta/, playbooks/, plugins/ and roles/:
    path and bytes (not Python's caches, which the controller writes as it imports plugins)."""
    digest = hashlib.sha256()
    for part in COLLECTION_PARTS:
        for folder, dirs, files in os.walk(os.path.join(root, part)):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED)
            for name in sorted(files):
                if name.endswith(".pyc"):
                    continue
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode("utf-8", "surrogateescape") + b"\0")
                with open(path, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def folder_listing(path: str) -> t.Optional[t.List[t.List[t.Any]]]:
    """[relative path, size, modification time ns] of every file under path; None when path is
    not a folder."""
    if not os.path.isdir(path):
        return None
    found = []
    for folder, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            info = os.stat(os.path.join(folder, name))
            found.append([os.path.relpath(os.path.join(folder, name), path), info.st_size, info.st_mtime_ns])
    return found


def inputs_digest(values: t.Mapping[str, t.Any], collection: str, wheelhouse: str = "") -> str:
    """sha256 of the values (canonical JSON), the collection's digest and the wheelhouse's listing."""
    payload = {
        "values": values,
        "collection": collection,
        "wheelhouse": folder_listing(wheelhouse) if wheelhouse else [],
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
