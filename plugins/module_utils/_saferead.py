# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""How root reads a file another user can write: the one way, for every such read.

Root reads the service user's directories (a model's manifest, `hf download`'s metadata, a
checkpoint's config files). A plain open() there follows whatever that user planted: a link to a
root-only file (its bytes then land where root writes them), a FIFO (the open blocks for good),
a link to /dev/zero (an unbounded read). Here:

- the path is walked one component at a time from /, each opened relative to its parent's
  descriptor with O_NOFOLLOW; a link is followed only where it lies in a directory that only
  root can change (root's, no group or other write bit): a link another user could have
  placed is refused, never followed;
- the file is opened with O_NONBLOCK (a FIFO's open returns at once; a socket's fails) and
  must be a regular file by fstat on the open descriptor, not by a path looked up again;
- at most `limit` bytes are read (a larger file is refused, not cut), within `seconds`;
- a listing walks directories the same way, never into a link, within an entry and depth cap.

What is refused raises Unreadable, whose text is "unreadable: <why>": a caller records that
as unknown (neither changed nor unchanged), never as content. Content that goes into a record
another user can read is digested (digest()), not copied.

Stdlib only, Python 3.9+, no import from the collection: root also runs it beside scripts that
run alone (the start record script, the preflight key).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import time
import typing as t

LIMIT = 1024 * 1024  # bytes, the default cap of one read
SECONDS = 10.0  # the default time bound of one read or listing
MAX_LINKS = 40  # links followed in one walk (the kernel's own bound)
MAX_ENTRIES = 100_000  # entries one listing looks at
MAX_DEPTH = 32  # directories one listing descends
CHUNK = 1024 * 1024
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unreadable(Exception):
    """A read refused; str() is "unreadable: <path>: <why>"."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"unreadable: {path}: {why}")
        self.path, self.why = path, why


class Absent(Unreadable):
    """Nothing there (no such file, or a component is not a directory): known, not unknown."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def root_only(info: os.stat_result) -> bool:
    """Whether only root can change what a directory holds (root's, no group or other write)."""
    return info.st_uid == 0 and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


class _Deadline:
    def __init__(self, path: str, seconds: float) -> None:
        self.path, self.seconds, self.end = path, seconds, time.monotonic() + seconds

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise Unreadable(self.path, f"not read within {self.seconds:g} s")


def _refusal(path: str, exc: OSError) -> Unreadable:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return Absent(path, "absent")
    if exc.errno == errno.ENXIO:
        return Unreadable(path, "a socket or a device without a reader, not a regular file")
    return Unreadable(path, exc.strerror or str(exc))


def _open(path: str, leaf_flags: int, deadline: _Deadline) -> t.Tuple[int, str]:
    """(descriptor, real path) of `path` (absolute), every component opened below its parent's
    with O_NOFOLLOW; a link is followed only in a root-only directory. Unreadable otherwise."""
    if not os.path.isabs(path):
        raise Unreadable(path, "not an absolute path")
    todo = [part for part in path.split("/") if part not in ("", ".")]
    fd = os.open("/", _DIR)
    links = 0
    real: t.List[str] = []
    try:
        while todo:
            deadline.check()
            name = todo.pop(0)
            flags = _DIR if todo else leaf_flags
            try:
                new = os.open(name, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise _refusal(path, exc) from None
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError as again:
                    raise _refusal(path, again) from None
                if not stat.S_ISLNK(info.st_mode):
                    raise _refusal(path, exc) from None
                if not root_only(os.fstat(fd)):
                    raise Unreadable(path, f"{name} is a link in a directory another user can write: "
                                           "not followed") from None
                links += 1
                if links > MAX_LINKS:
                    raise Unreadable(path, f"more than {MAX_LINKS} links") from None
                target = os.readlink(name, dir_fd=fd)
                todo[:0] = [part for part in target.split("/") if part not in ("", ".")]
                if target.startswith("/"):
                    os.close(fd)
                    fd, real = os.open("/", _DIR), []
                continue
            os.close(fd)
            fd = new
            if name != "..":
                real.append(name)
            elif real:
                real.pop()
        return fd, "/" + "/".join(real)
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def opened(path: str, limit: int = LIMIT, seconds: float = SECONDS) -> t.Iterator[t.Tuple[int, os.stat_result, _Deadline]]:
    """(descriptor, fstat, deadline) of a regular file of at most `limit` bytes; Unreadable."""
    deadline = _Deadline(path, seconds)
    fd, _real = _open(os.path.normpath(path), _FILE, deadline)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(path, f"{_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise Unreadable(path, f"{info.st_size} bytes, over the {limit}-byte cap")
        yield fd, info, deadline
    finally:
        os.close(fd)


def _chunks(fd: int, path: str, limit: int, deadline: _Deadline) -> t.Iterator[bytes]:
    """The file's bytes in chunks; Unreadable once more than `limit` came (it grew) or time ran out."""
    total = 0
    while True:
        deadline.check()
        try:
            block = os.read(fd, CHUNK)
        except OSError as exc:
            raise _refusal(path, exc) from None
        if not block:
            return
        total += len(block)
        if total > limit:
            raise Unreadable(path, f"over the {limit}-byte cap")
        yield block


def read_bytes(path: str, limit: int = LIMIT, seconds: float = SECONDS) -> bytes:
    """A regular file's bytes (at most `limit`); Unreadable (Absent when there is none)."""
    with opened(path, limit, seconds) as (fd, _info, deadline):
        return b"".join(_chunks(fd, path, limit, deadline))


def read_text(path: str, limit: int = LIMIT, seconds: float = SECONDS) -> str:
    """read_bytes as UTF-8; Unreadable when it is not UTF-8."""
    data = read_bytes(path, limit, seconds)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable(path, "not UTF-8 text") from None


def digest(path: str, limit: int = LIMIT, seconds: float = SECONDS) -> str:
    """`sha256:<hex>` of a regular file's bytes, `absent` when there is none, else
    `unreadable: <path>: <why>`: never the bytes themselves."""
    try:
        with opened(path, limit, seconds) as (fd, _info, deadline):
            sha = hashlib.sha256()
            for block in _chunks(fd, path, limit, deadline):
                sha.update(block)
            return "sha256:" + sha.hexdigest()
    except Absent:
        return "absent"
    except Unreadable as exc:
        return str(exc)


def directory(path: str, seconds: float = SECONDS) -> str:
    """The real path of a directory reached without following another user's link (root's
    links are followed); Absent when there is none or it is not a directory, else Unreadable."""
    fd, real = _open(os.path.normpath(path), _DIR, _Deadline(path, seconds))
    os.close(fd)
    return real


def files(top: str, suffix: str = "", seconds: float = SECONDS, max_entries: int = MAX_ENTRIES,
          max_depth: int = MAX_DEPTH) -> t.List[t.Tuple[str, str]]:
    """(path, "") of each regular file under `top` whose name ends with `suffix`, sorted, and
    (path, why) of each such name that is not a regular file (a link, a FIFO: refused by name).
    Links are never followed (no loop can form); [] when `top` is absent. Unreadable when a
    directory cannot be read, or past the entry, depth or time bound."""
    deadline = _Deadline(top, seconds)
    try:
        fd, _real = _open(os.path.normpath(top), _DIR, deadline)
    except Absent:
        return []
    found: t.List[t.Tuple[str, str]] = []
    seen = [0]

    def walk(dir_fd: int, where: str, depth: int) -> None:
        if depth > max_depth:
            raise Unreadable(top, f"deeper than {max_depth} directories")
        try:
            entries = sorted((entry.name, entry.stat(follow_symlinks=False).st_mode) for entry in os.scandir(dir_fd))
        except OSError as exc:
            raise _refusal(where, exc) from None
        for name, mode in entries:
            deadline.check()
            seen[0] += 1
            if seen[0] > max_entries:
                raise Unreadable(top, f"more than {max_entries} entries")
            path = os.path.join(where, name)
            if stat.S_ISDIR(mode):
                try:
                    sub = os.open(name, _DIR, dir_fd=dir_fd)
                except OSError as exc:  # replaced since it was listed
                    raise _refusal(path, exc) from None
                try:
                    walk(sub, path, depth + 1)
                finally:
                    os.close(sub)
            elif name.endswith(suffix):
                found.append((path, "" if stat.S_ISREG(mode) else f"{_kind(mode)}, not a regular file"))

    try:
        walk(fd, os.path.normpath(top), 0)
    finally:
        os.close(fd)
    return sorted(found)
