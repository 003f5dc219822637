# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The envs other records name, for the prune to keep (private to gpuserve.vllm; stdlib only).

A record is a small root-owned JSON file another part of the collection keeps on the node (the
serve plan's journal, a rollback hold): every absolute path anywhere in it counts as named, so
the prune needs no knowledge of what the record means. A record that is absent names nothing. One
that cannot be read safely -- a link, not a regular file, not root's, writable by others, too
large, not JSON -- says nothing certain about what it names: the caller keeps every env (unknown
is not no, never "protects nothing").
"""

from __future__ import annotations

import errno
import json
import os
import stat
import typing as t

# A journal or a hold is a few hundred bytes; anything this large is no such record.
MAX_BYTES = 1 << 20


class RecordUnreadable(ValueError):
    """A record that cannot be trusted or parsed; the message names the file and why."""


def _read(path: str) -> bytes | None:
    """The record's bytes (None when absent), read without following a link, after checking on
    the open file that it is a regular file of root's that nobody else may write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise RecordUnreadable(f"{path}: {why}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RecordUnreadable(f"{path}: not a regular file")
        if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise RecordUnreadable(f"{path}: owned by uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o} "
                                   "(root's, written by root alone, is expected)")
        data = os.read(fd, MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise RecordUnreadable(f"{path}: larger than {MAX_BYTES} bytes")
        return data
    finally:
        os.close(fd)


def named_paths(value: t.Any) -> list[str]:
    """Every absolute path among the strings of a JSON value, in order, once each."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop(0)
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and os.path.isabs(item) and item not in found:
            found.append(item)
    return found


def protected_by(paths: t.Iterable[str]) -> tuple[list[str], list[str]]:
    """(the paths the records name, one problem per record that could not be read safely)."""
    named: list[str] = []
    problems: list[str] = []
    for path in paths:
        try:
            data = _read(path)
            if data is None:
                continue
            value = json.loads(data.decode("utf-8"))
        except RecordUnreadable as exc:
            problems.append(str(exc))
            continue
        except ValueError as exc:
            problems.append(f"{path}: not JSON ({exc})")
            continue
        named += [p for p in named_paths(value) if p not in named]
    return named, problems
