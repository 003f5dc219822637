# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Give file trees (Python environments) to one owner: nobody else may change what root runs.

Every entry gets the owner and group, loses group and world write, and a file loses its set-id
bits. A folder is fixed before its entries are listed, so once it is walked nobody else can
rename, add or swap entries in it; links are given to the owner (lchown) and never followed, and
their mode (meaningless on Linux) is left alone. Nothing an earlier owner wrote is removed: that
needs a rebuilt env (README "Trust boundaries").

Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import typing as t

_FOREIGN_WRITE = stat.S_IWGRP | stat.S_IWOTH
_SET_ID = stat.S_ISUID | stat.S_ISGID


@dataclasses.dataclass
class Report:
    """What a run found (and fixed, unless checking)."""

    checked: int = 0
    fixed: int = 0
    examples: list[str] = dataclasses.field(default_factory=list)


def wanted_mode(mode: int) -> int:
    """The permission bits an entry keeps: no group/world write, no set-id bits on a file."""
    bits = stat.S_IMODE(mode) & ~_FOREIGN_WRITE
    if not stat.S_ISDIR(mode):
        bits &= ~_SET_ID
    return bits


def _fix(path: str, info: os.stat_result, uid: int, gid: int, check: bool, report: Report,
         limit: int) -> None:
    report.checked += 1
    changes = []
    if (info.st_uid, info.st_gid) != (uid, gid):
        changes.append("owner %d:%d -> %d:%d" % (info.st_uid, info.st_gid, uid, gid))
        if not check:
            os.lchown(path, uid, gid)
    if not stat.S_ISLNK(info.st_mode) and wanted_mode(info.st_mode) != stat.S_IMODE(info.st_mode):
        changes.append("mode %04o -> %04o" % (stat.S_IMODE(info.st_mode), wanted_mode(info.st_mode)))
        if not check:
            # Not a link (lstat said so), and its folder is already ours: it cannot be swapped.
            os.chmod(path, wanted_mode(info.st_mode))
    if changes:
        report.fixed += 1
        if len(report.examples) < limit:
            report.examples.append("%s: %s" % (path, ", ".join(changes)))


def protect(roots: t.Iterable[str], uid: int, gid: int, *, check: bool = False,
            limit: int = 10) -> Report:
    """Walk each root (a missing one is skipped; a link is given to the owner and its target
    walked) and give every entry to uid:gid without group/world write. check: only count."""
    report = Report()
    for root in roots:
        if not os.path.lexists(root):
            continue
        info = os.lstat(root)
        if stat.S_ISLNK(info.st_mode):
            _fix(root, info, uid, gid, check, report, limit)
            root = os.path.realpath(root)
            if not os.path.isdir(root):
                continue
            info = os.lstat(root)
        _fix(root, info, uid, gid, check, report, limit)
        if not stat.S_ISDIR(info.st_mode):
            continue
        folders = [root]
        while folders:
            folder = folders.pop()
            with os.scandir(folder) as entries:
                for entry in entries:
                    found = entry.stat(follow_symlinks=False)
                    _fix(entry.path, found, uid, gid, check, report, limit)
                    if stat.S_ISDIR(found.st_mode):
                        folders.append(entry.path)
    return report
