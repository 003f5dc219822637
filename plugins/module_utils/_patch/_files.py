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
maps to one record. Locks are ``<state_dir>/locks/<basename>-<key>.lock`` (fcntl.flock); the
holder writes its pid and start time into it so a waiting run can name it.

The state_dir is root's alone (folders 0700, files 0600): its records and journals decide what
root writes into the env, so one another user owns or could write is refused (secure_state_dir).

A record is never overwritten or deleted by a run that did not write it, except when state=absent
puts its original bytes back: a run that must describe a new original first copies the current
pair to ``<basename>-<key>.superseded-<stamp>.json`` / ``.orig`` (see superseded_records).
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
import time
import typing as t

from .. import _atomic
from .._atomic import remove_quietly
from .._env import _pyenv

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


class DiskError(Exception):
    """An OSError with the phase and the path it happened on, e.g. 'replace /x.py: [Errno 28] ...'."""

    def __init__(self, phase_name: str, path: str, exc: OSError) -> None:
        super().__init__("%s %s: %s" % (phase_name, path, exc.strerror or exc))
        self.phase = phase_name
        self.path = path
        self.errno = exc.errno


@contextlib.contextmanager
def phase(name: str, path: str) -> t.Iterator[None]:
    """Turn an OSError raised inside into a DiskError naming the phase and the path."""
    try:
        yield
    except OSError as exc:
        raise DiskError(name, path, exc) from exc


def _makedirs(path: str) -> None:
    """Create path and its missing parents with mode 0700 (umask does not widen or narrow it)."""
    missing = []
    head = os.path.abspath(path)
    while not os.path.isdir(head):
        missing.append(head)
        head = os.path.dirname(head)
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
            os.chmod(folder, 0o700)


class ForeignStateDir(Exception):
    """Another user owns, or could change, the state_dir; the message names the path."""


def secure_state_dir(state_dir: str, check: bool) -> t.List[str]:
    """Narrow what is wider than 0700 (folders) / 0600 (files) in state_dir, and return those
    paths (in check mode, only return them). Refuses (ForeignStateDir) a state_dir, or an entry
    of it, that is not owned by this process's user or is a link, or a folder above it another
    user could change: their records would tell this module what to write."""
    head = os.path.dirname(os.path.abspath(state_dir))
    while not os.path.isdir(head):
        head = os.path.dirname(head)
    problem = _pyenv.path_problem(head)
    if problem:
        raise ForeignStateDir(problem)
    if not os.path.lexists(state_dir):
        return []
    narrowed = []
    entries = [state_dir]
    while entries:
        path = entries.pop()
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid():
            raise ForeignStateDir("%s is %s" % (path, "a symbolic link" if stat.S_ISLNK(info.st_mode)
                                                else "owned by uid %d" % info.st_uid))
        if stat.S_ISDIR(info.st_mode):
            entries += [os.path.join(path, name) for name in sorted(os.listdir(path))]
        if stat.S_IMODE(info.st_mode) & 0o077:
            narrowed.append(path)
            if not check:
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~0o077)
    return narrowed


class LockTimeout(Exception):
    """The lock of a file stayed held longer than allowed; the message names the holder."""


def _holder(handle: t.IO[str]) -> str:
    handle.seek(0)
    return handle.read().strip() or "a process that has not written its pid yet"


@contextlib.contextmanager
def locked(state_dir: str, real_paths: t.Iterable[str],
           timeout: float | None = None) -> t.Iterator[None]:
    """Hold exclusive flocks on every path, taken in sorted order so runs cannot deadlock.

    Waits at most ``timeout`` seconds in all (None: forever), then raises LockTimeout naming
    the lock file and its holder ('pid N, started T'), which each holder writes into it.
    """
    handles: t.List[t.IO[str]] = []
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        for real_path in sorted(set(real_paths)):
            lock = lock_path(state_dir, real_path)
            with phase("lock", lock):
                _makedirs(os.path.dirname(lock))
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
                handle = os.fdopen(fd, "a+", encoding="utf-8")  # pylint: disable=consider-using-with
            handles.append(handle)
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise LockTimeout("the lock %s of %s is still held after %s s by %s"
                                          % (lock, real_path, timeout, _holder(handle))) from None
                    time.sleep(0.05)
            with phase("lock", lock):
                handle.truncate(0)
                handle.write("pid %d, started %s\n" % (os.getpid(), timestamp()))
                handle.flush()
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


def write_temp(target: str, data: bytes, *, like: os.stat_result | None = None,
               directory: str | None = None, warnings: t.List[str] | None = None) -> str:
    """Write data to a new temp file (fsynced) and return its path.

    By default the temp file sits next to target so a later replace is atomic. Mode and
    owner are copied from ``like`` (the stat of the file being replaced) so the rename keeps
    them; when the owner cannot be kept (not root), a sentence saying so goes to ``warnings``.
    ``directory`` overrides the location (check mode uses a private tempdir).
    """
    if like is None:
        return _atomic.write_temp(target, data, directory=directory)
    owner = (like.st_uid, like.st_gid)
    tmp = _atomic.write_temp(target, data, mode=stat.S_IMODE(like.st_mode), owner=owner,
                             owner_required=False, directory=directory)
    now = os.stat(tmp)
    if (now.st_uid, now.st_gid) != owner and warnings is not None:
        warnings.append("%s: its owner %d:%d could not be kept (running as uid %d); it is now "
                        "owned by %d:%d" % (target, like.st_uid, like.st_gid, os.geteuid(),
                                            now.st_uid, now.st_gid))
    return tmp


def replace(tmp: str, target: str) -> None:
    """Atomically move tmp over target and make the rename durable."""
    _atomic.publish(tmp, target)


def atomic_write(target: str, data: bytes, *, like: os.stat_result | None = None,
                 warnings: t.List[str] | None = None) -> None:
    """write_temp + replace: readers see either the old or the new bytes, never a mix."""
    if like is None:
        with contextlib.suppress(FileNotFoundError):
            like = os.stat(target)
    tmp = write_temp(target, data, like=like, warnings=warnings)
    try:
        replace(tmp, target)
    except BaseException:
        remove_quietly(tmp)
        raise


_TEMP_TAIL = re.compile(r"\.[a-z0-9_]{8}\.tmp\Z")


def stray_temps(path: str) -> t.List[str]:
    """Temp files write_temp made for path ('.<name>.<8 random>.tmp') that a killed run left."""
    folder, name = os.path.split(path)
    prefix = "." + name
    try:
        entries = os.listdir(folder or ".")
    except FileNotFoundError:
        return []
    return sorted(os.path.join(folder, e) for e in entries
                  if e.startswith(prefix) and _TEMP_TAIL.match(e[len(prefix):]))


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


def read_record(json_path: str, real_path: str | None = None) -> Record:
    """The record stored in json_path (current or superseded); real_path, if given, must match."""
    with open(json_path, "r", encoding="utf-8") as handle:
        data = json.load(handle)
    if data.get("format") != RECORD_FORMAT or (real_path is not None
                                               and data.get("path") != real_path):
        raise ValueError("record %s is not a python_patch record (format %r) for %s"
                         % (json_path, RECORD_FORMAT, real_path))
    orig_path = os.path.join(os.path.dirname(json_path), data.get("original") or
                             os.path.basename(json_path)[:-len(".json")] + ".orig")
    return Record(path=data["path"], sha256_original=data["sha256_original"],
                  sha256_written=data["sha256_written"], edits=list(data.get("edits", [])),
                  timestamp=data.get("timestamp", ""), json_path=json_path,
                  orig_path=orig_path)


def load_record(state_dir: str, real_path: str) -> Record | None:
    """The current record for real_path, or None when there is none."""
    try:
        return read_record(record_paths(state_dir, real_path)[0], real_path)
    except FileNotFoundError:
        return None


def superseded_records(state_dir: str, real_path: str) -> t.List[str]:
    """JSON paths of real_path's superseded records, oldest first (their .orig files are kept)."""
    base = os.path.join(state_dir, RECORDS_SUBDIR, glob.escape(record_stem(real_path)))
    return sorted(glob.glob(base + ".superseded-*.json"))


def supersede_record(state_dir: str, real_path: str, stamp: str) -> t.List[str]:
    """Copy the current record pair to '<stem>.superseded-<stamp>.{json,orig}'; return the copies.

    Called before a run writes a record describing a new original, so the bytes from before
    python_patch's earlier change stay on disk (the copies are new files; nothing is renamed).
    """
    json_path, orig_path = record_paths(state_dir, real_path)
    base = json_path[:-len(".json")] + ".superseded-" + stamp
    with open(json_path, "r", encoding="utf-8") as handle:
        body = json.load(handle)
    body["original"] = os.path.basename(base + ".orig")
    body["superseded"] = timestamp()
    atomic_write(base + ".orig", read_bytes(orig_path))
    os.chmod(base + ".orig", 0o600)
    atomic_write(base + ".json", (json.dumps(body, indent=2, sort_keys=True) + "\n").encode())
    os.chmod(base + ".json", 0o600)
    return [base + ".json", base + ".orig"]


def save_record(state_dir: str, real_path: str, original: bytes, written: bytes,
                edits: t.Sequence[t.Mapping[str, str]]) -> Record:
    """Write (atomically) the .orig bytes, then the .json that points at them."""
    json_path, orig_path = record_paths(state_dir, real_path)
    _makedirs(os.path.dirname(json_path))
    record = Record(path=real_path, sha256_original=sha256_bytes(original),
                    sha256_written=sha256_bytes(written),
                    edits=[{"id": str(e["id"]), "kind": str(e["kind"])} for e in edits],
                    timestamp=timestamp(), json_path=json_path, orig_path=orig_path)
    try:
        kept = sha256_bytes(read_bytes(orig_path)) == record.sha256_original
    except FileNotFoundError:
        kept = False
    if not kept:  # adding edits to a file still ours keeps the .orig file untouched
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
