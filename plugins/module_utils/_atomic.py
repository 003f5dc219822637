# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Whole-file writes, one way for every engine: a reader sees the old bytes or the new ones,
never half, and a crash right after the rename keeps the new ones.

The temp file sits beside the target (one filesystem: the rename is atomic), takes its mode and
owner and is fsynced before it takes the target's name; the folder is fsynced after. A killed
writer leaves only a '.<prefix>...tmp' file, which its owner knows by its prefix and removes.
Stdlib only, Python 3.9+, no Ansible imports: it runs on the managed node. Not used by
_vllm/_startrecord.py, which root runs as one self-contained file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import typing as t


def fsync_dir(path: str) -> None:
    """Make a rename or link in the folder durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_quietly(path: t.Optional[str]) -> None:
    """Unlink path if it is there (cleanup must not mask the error that caused it)."""
    if path:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def write_temp(target: str, data: bytes, *, mode: t.Optional[int] = None,
               owner: t.Optional[t.Tuple[int, int]] = None, owner_required: bool = True,
               prefix: t.Optional[str] = None, directory: t.Optional[str] = None) -> str:
    """A new temp file holding data, fsynced, with mode and owner set (mkstemp's 0600 and this
    process's user when not given); its path. Beside target unless directory says where. With
    owner_required=False an owner this process may not give is given as far as it may (the
    group, when it belongs to it); the caller compares and says so."""
    folder = directory if directory is not None else (os.path.dirname(target) or ".")
    fd, tmp = tempfile.mkstemp(prefix=prefix if prefix is not None else ".%s." % os.path.basename(target),
                               suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if owner is not None:
                try:
                    os.fchown(handle.fileno(), owner[0], owner[1])
                except PermissionError:
                    if owner_required:
                        raise
                    with contextlib.suppress(PermissionError):
                        os.fchown(handle.fileno(), -1, owner[1])
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp


def publish(tmp: str, target: str, *, replace: bool = True) -> None:
    """Give tmp the target's name, durably: os.replace, or with replace=False os.link (which
    raises FileExistsError when the target appeared meanwhile; the temp file is then removed)."""
    try:
        if replace:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)
    finally:
        remove_quietly(tmp)
    fsync_dir(os.path.dirname(os.path.abspath(target)))


def write(target: str, data: bytes, *, mode: t.Optional[int] = None,
          owner: t.Optional[t.Tuple[int, int]] = None, prefix: t.Optional[str] = None) -> None:
    """write_temp + publish: target holds data whole, with that mode and owner."""
    publish(write_temp(target, data, mode=mode, owner=owner, prefix=prefix), target)
