# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""File handling behind python_patch: atomic writes, locks, backups and revert records.

Stdlib only and free of Ansible imports, so it can be unit-tested on its own and runs on the
managed node under whatever Python is there (3.9+). The engine (_pyedit) works on text; this
file is everything that touches the disk.

Revert records live in ``<state_dir>/records/``, one pair per patched file:

* ``<basename>-<key>.json``: format, path, sha256 of the original bytes and of the bytes the
  module wrote, the edits (id and kind), timestamp, and the name of the ``.orig`` file;
* ``<basename>-<key>.orig``: the exact bytes that were there before the module changed the file.

``<key>`` is the first 16 hex digits of the sha256 of the file's real path, so one file always
maps to one record. Locks are ``<state_dir>/locks/<basename>-<key>.lock`` (fcntl.flock).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import typing as t

RECORD_FORMAT = 1
RECORDS_SUBDIR = "records"
LOCKS_SUBDIR = "locks"


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of bytes (what the record and the result report)."""
    return hashlib.sha256(data).hexdigest()


def record_stem(real_path: str) -> str:
    """Stable, operator-readable name of a file's record and lock: '<basename>-<hash16>'."""
    digest = hashlib.sha256(real_path.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return "%s-%s" % (os.path.basename(real_path) or "root", digest)


def record_paths(state_dir: str, real_path: str) -> t.Tuple[str, str]:
    """(json path, orig path) of the record for real_path."""
    base = os.path.join(state_dir, RECORDS_SUBDIR, record_stem(real_path))
    return base + ".json", base + ".orig"


def lock_path(state_dir: str, real_path: str) -> str:
    """Lock file that serialises module runs on real_path."""
    return os.path.join(state_dir, LOCKS_SUBDIR, record_stem(real_path) + ".lock")


def _makedirs(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)


@contextlib.contextmanager
def locked(state_dir: str, real_paths: t.Iterable[str]) -> t.Iterator[None]:
    """Hold exclusive flocks on every path, taken in sorted order so runs cannot deadlock."""
    handles: t.List[t.IO[str]] = []
    try:
        for real_path in sorted(set(real_paths)):
            lock = lock_path(state_dir, real_path)
            _makedirs(os.path.dirname(lock))
            handle = open(lock, "a", encoding="utf-8")  # pylint: disable=consider-using-with
            handles.append(handle)
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        for handle in reversed(handles):
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            finally:
                handle.close()


def read_bytes(path: str) -> bytes:
    """The file's bytes."""
    with open(path, "rb") as handle:
        return handle.read()


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_temp(target: str, data: bytes, *, like: os.stat_result | None = None,
               directory: str | None = None) -> str:
    """Write data to a new temp file (fsynced) and return its path.

    By default the temp file sits next to target so a later os.replace is atomic. Mode and
    owner are copied from ``like`` (the stat of the file being replaced) so the rename keeps
    them. ``directory`` overrides the location (check mode uses a private tempdir).
    """
    folder = directory if directory is not None else (os.path.dirname(target) or ".")
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(target), suffix=".tmp",
                               dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            if like is not None:
                os.fchmod(handle.fileno(), stat.S_IMODE(like.st_mode))
                if (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
                    try:
                        os.fchown(handle.fileno(), like.st_uid, like.st_gid)
                    except PermissionError:
                        # Not root: keep what we can (the group, when we belong to it).
                        with contextlib.suppress(PermissionError):
                            os.fchown(handle.fileno(), -1, like.st_gid)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def replace(tmp: str, target: str) -> None:
    """Atomically move tmp over target and make the rename durable."""
    os.replace(tmp, target)
    _fsync_dir(os.path.dirname(target) or ".")


def atomic_write(target: str, data: bytes, *, like: os.stat_result | None = None) -> None:
    """write_temp + replace: readers see either the old or the new bytes, never a mix."""
    if like is None:
        with contextlib.suppress(FileNotFoundError):
            like = os.stat(target)
    replace(write_temp(target, data, like=like), target)


def remove_quietly(path: str | None) -> None:
    """Unlink path if it exists (cleanup paths must not mask the real error)."""
    if path:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def stale_bytecode(path: str) -> t.List[str]:
    """The __pycache__/<stem>.*.pyc files compiled from path (any interpreter, any opt level)."""
    folder, name = os.path.split(path)
    stem = name[:-3] if name.endswith(".py") else name
    pattern = os.path.join(folder, "__pycache__", glob.escape(stem) + ".*.pyc")
    # '<stem>.<cache tag>[.opt-N].pyc' only: 'm.py.cpython-311.pyc' belongs to 'm.py.py'.
    tag = re.compile(re.escape(stem) + r"\.[A-Za-z]+[-_]?[0-9]+[A-Za-z0-9_-]*(\.opt-[0-9]+)?\.pyc\Z")
    return sorted(p for p in glob.glob(pattern) if tag.match(os.path.basename(p)))


def remove_stale_bytecode(path: str) -> t.List[str]:
    """Delete the bytecode of path so no interpreter can run the old code; return what went."""
    removed = []
    for pyc in stale_bytecode(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pyc)
            removed.append(pyc)
    return removed


def backup(path: str, backup_dir: str | None, stamp: str) -> str:
    """Copy path (data, mode, times) to a backup and return the backup's path.

    Without backup_dir: '<path>.<stamp>~' next to the file (like Ansible's backup_local).
    With backup_dir: the file's absolute path mirrored under it, so two '__init__.py' in
    different packages never collide.
    """
    if backup_dir:
        dest = os.path.join(backup_dir, os.path.abspath(path).lstrip(os.sep)) + ".%s~" % stamp
        os.makedirs(os.path.dirname(dest), exist_ok=True)
    else:
        dest = "%s.%s~" % (path, stamp)
    shutil.copy2(path, dest)
    return dest


def timestamp() -> str:
    """UTC time for records and backup names."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def backup_stamp() -> str:
    """Unique, sortable suffix for backup files."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return "%s.%d" % (now.strftime("%Y-%m-%dT%H%M%S.%fZ"), os.getpid())


class Record(t.NamedTuple):
    """What state=absent needs to put a file back."""

    path: str  # the file's real path
    sha256_original: str
    sha256_written: str
    edits: t.List[t.Dict[str, str]]  # [{id, kind}]
    timestamp: str
    json_path: str
    orig_path: str

    def original(self) -> bytes:
        """The exact bytes from before the module's first change (verified against the hash)."""
        data = read_bytes(self.orig_path)
        if sha256_bytes(data) != self.sha256_original:
            raise ValueError("record %s: %s does not match its sha256_original %s"
                             % (self.json_path, self.orig_path, self.sha256_original))
        return data


def load_record(state_dir: str, real_path: str) -> Record | None:
    """The record for real_path, or None when there is none."""
    json_path, orig_path = record_paths(state_dir, real_path)
    try:
        with open(json_path, "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    if data.get("format") != RECORD_FORMAT or data.get("path") != real_path:
        raise ValueError("record %s is not a python_patch record (format %r) for %s"
                         % (json_path, RECORD_FORMAT, real_path))
    return Record(path=data["path"], sha256_original=data["sha256_original"],
                  sha256_written=data["sha256_written"], edits=list(data.get("edits", [])),
                  timestamp=data.get("timestamp", ""), json_path=json_path,
                  orig_path=orig_path)


def save_record(state_dir: str, real_path: str, original: bytes, written: bytes,
                edits: t.Sequence[t.Mapping[str, str]]) -> Record:
    """Write (atomically) the .orig bytes, then the .json that points at them."""
    json_path, orig_path = record_paths(state_dir, real_path)
    _makedirs(os.path.dirname(json_path))
    record = Record(path=real_path, sha256_original=sha256_bytes(original),
                    sha256_written=sha256_bytes(written),
                    edits=[{"id": str(e["id"]), "kind": str(e["kind"])} for e in edits],
                    timestamp=timestamp(), json_path=json_path, orig_path=orig_path)
    atomic_write(orig_path, original, like=None)
    os.chmod(orig_path, 0o600)
    body = {
        "format": RECORD_FORMAT,
        "module": "gpuserve.vllm.python_patch",
        "path": record.path,
        "sha256_original": record.sha256_original,
        "sha256_written": record.sha256_written,
        "original": os.path.basename(orig_path),
        "edits": record.edits,
        "timestamp": record.timestamp,
    }
    atomic_write(json_path, (json.dumps(body, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    os.chmod(json_path, 0o600)
    return record


def delete_record(state_dir: str, real_path: str) -> None:
    """Remove both files of real_path's record (json first: a lone .orig is harmless)."""
    json_path, orig_path = record_paths(state_dir, real_path)
    remove_quietly(json_path)
    remove_quietly(orig_path)


class RecordSnapshot(t.NamedTuple):
    """A record's two files as bytes (None = absent), to undo a record change on rollback."""

    json_bytes: bytes | None
    orig_bytes: bytes | None


def snapshot_record(state_dir: str, real_path: str) -> RecordSnapshot:
    """Current bytes of the record files, for restore_record."""
    out = []
    for path in record_paths(state_dir, real_path):
        try:
            out.append(read_bytes(path))
        except FileNotFoundError:
            out.append(None)
    return RecordSnapshot(*out)


def restore_record(state_dir: str, real_path: str, snap: RecordSnapshot) -> None:
    """Put the record files back exactly as snapshot_record saw them."""
    json_path, orig_path = record_paths(state_dir, real_path)
    for path, data in ((orig_path, snap.orig_bytes), (json_path, snap.json_bytes)):
        if data is None:
            remove_quietly(path)
        else:
            _makedirs(os.path.dirname(path))
            atomic_write(path, data)
            os.chmod(path, 0o600)
