# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Root's files of a role (scripts root runs, what they read, their units), converged in one pass.

Why: ansible.builtin.copy and template cost two module runs a file on a run with nothing to
change (a stat, then `file` for mode and owner), so the monitoring exporters' dozen files were
about two dozen module runs a node. Here one pass reads them all and writes only what differs.

Each file is root's (owner and group 0) with a mode nobody else may write through (no group or
other write bit), in a folder nobody but root can change (every folder from / down: a file root
runs from a folder another user can write could be swapped under it). A file that differs in
bytes, mode or owner is written to a temp file beside it (fsynced, mode and owner set) and
renamed over it: a reader sees the old file or the new one. Every entry is checked before
anything is written, so bad input changes nothing.

Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import contextlib
import os
import stat
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils import _atomic
from ansible_collections.gpuserve.vllm.plugins.module_utils._env._pyenv import path_problem

DIFF_LIMIT = 64 * 1024  # larger files show in a diff as their size only


class RootFilesError(ValueError):
    """An entry that cannot be converged as asked; its message names the entry."""


class Folder(t.NamedTuple):
    path: str
    mode: int


class File(t.NamedTuple):
    path: str
    content: bytes
    mode: int


def _mode(text: str, where: str) -> int:
    try:
        mode = int(str(text), 8)
    except ValueError:
        raise RootFilesError("%s: mode %r is not an octal number such as '0644'" % (where, text)) from None
    if not 0 <= mode <= 0o7777:
        raise RootFilesError("%s: mode %r is out of range" % (where, text))
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RootFilesError("%s: mode %04o lets users other than root write it" % (where, mode))
    return mode


def _path(value: t.Any, where: str) -> str:
    path = str(value or "")
    if not os.path.isabs(path) or os.path.normpath(path) != path or path == os.sep:
        raise RootFilesError("%s: %r is not a normalized absolute path" % (where, path))
    return path


def parse(folders: t.Sequence[t.Mapping[str, t.Any]],
          files: t.Sequence[t.Mapping[str, t.Any]]) -> t.Tuple[t.List[Folder], t.List[File]]:
    """The entries as checked values; RootFilesError naming the first bad one."""
    parsed_folders = [Folder(_path(entry.get("path"), "directories[%d]" % index),
                             _mode(entry.get("mode", "0755"), "directories[%d]" % index))
                      for index, entry in enumerate(folders)]
    parsed_files = [File(_path(entry.get("path"), "files[%d]" % index),
                         str(entry.get("content", "")).encode("utf-8"),
                         _mode(entry.get("mode", "0644"), "files[%d]" % index))
                    for index, entry in enumerate(files)]
    seen: t.Dict[str, str] = {}
    for kind, entries in (("directories", parsed_folders), ("files", parsed_files)):
        for index, entry in enumerate(entries):
            where = "%s[%d]" % (kind, index)
            if entry.path in seen:
                raise RootFilesError("%s: %s is also %s" % (where, entry.path, seen[entry.path]))
            seen[entry.path] = where
    return parsed_folders, parsed_files


def _lstat(path: str) -> t.Optional[os.stat_result]:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def folder_differences(folder: Folder) -> t.List[str]:
    """What differs from the wanted folder ([] when nothing); RootFilesError for a non-folder."""
    info = _lstat(folder.path)
    if info is None:
        return ["absent"]
    if not stat.S_ISDIR(info.st_mode):
        raise RootFilesError("%s exists and is not a folder" % folder.path)
    found = []
    if stat.S_IMODE(info.st_mode) != folder.mode:
        found.append("mode %04o, not %04o" % (stat.S_IMODE(info.st_mode), folder.mode))
    if (info.st_uid, info.st_gid) != (0, 0):
        found.append("owner %d:%d, not 0:0" % (info.st_uid, info.st_gid))
    return found


def file_differences(wanted: File) -> t.List[str]:
    """What differs from the wanted file ([] when nothing); RootFilesError for a folder there."""
    info = _lstat(wanted.path)
    if info is None:
        return ["absent"]
    if stat.S_ISDIR(info.st_mode):
        raise RootFilesError("%s exists and is a folder" % wanted.path)
    if not stat.S_ISREG(info.st_mode):
        return ["not a regular file"]  # a link is replaced, never followed
    found = []
    if stat.S_IMODE(info.st_mode) != wanted.mode:
        found.append("mode %04o, not %04o" % (stat.S_IMODE(info.st_mode), wanted.mode))
    if (info.st_uid, info.st_gid) != (0, 0):
        found.append("owner %d:%d, not 0:0" % (info.st_uid, info.st_gid))
    if info.st_size != len(wanted.content) or _read(wanted.path) != wanted.content:
        found.append("content")
    return found


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _text(data: t.Optional[bytes]) -> str:
    if data is None:
        return ""
    if len(data) > DIFF_LIMIT:
        return "(%d bytes)\n" % len(data)
    return data.decode("utf-8", errors="replace")


def diff_of(wanted: File) -> t.Dict[str, str]:
    """Ansible's diff entry for a file about to change."""
    before = None
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.lstat(wanted.path).st_mode):
            before = _read(wanted.path)
    return {"before_header": wanted.path, "after_header": wanted.path,
            "before": _text(before), "after": _text(wanted.content)}


def _make_folder(folder: Folder) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder.path, folder.mode)
    os.chown(folder.path, 0, 0, follow_symlinks=False)
    os.chmod(folder.path, folder.mode)


def _check_parent(path: str, listed: t.Set[str]) -> None:
    """RootFilesError unless path's folder exists or is listed (made before it), and nobody but
    root can change a folder from / down to it (a listed one is made root's 0755 or tighter)."""
    parent = os.path.dirname(path)
    if parent not in listed and not os.path.isdir(parent):
        raise RootFilesError("%s: its folder %s does not exist (list it in directories, before)"
                             % (path, parent))
    while parent in listed:  # made or given back to root before the file is written
        parent = os.path.dirname(parent)
    problem = path_problem(parent, trusted={0})
    if problem:
        raise RootFilesError("%s: not written, %s" % (path, problem))


class Outcome(t.NamedTuple):
    changes: t.List[str]  # "path: what differed", in the order written
    diff: t.List[t.Dict[str, str]]


def converge(folders: t.Sequence[Folder], files: t.Sequence[File], check: bool,
             want_diff: bool = False) -> Outcome:
    """Make the folders, then write the files that differ (nothing in check mode).

    Every entry is read and judged first: a folder or file that cannot be made as asked, or a
    file's folder that another user could change, raises RootFilesError before any write.
    """
    listed: t.Set[str] = set()
    folder_work = []
    for folder in folders:
        _check_parent(folder.path, listed)
        folder_work.append((folder, folder_differences(folder)))
        listed.add(folder.path)
    file_work = []
    for wanted in files:
        _check_parent(wanted.path, listed)
        file_work.append((wanted, file_differences(wanted)))
    changes, diff = [], []
    for folder, found in folder_work:
        if found:
            changes.append("%s: %s" % (folder.path, ", ".join(found)))
            if not check:
                _make_folder(folder)
    for wanted, found in file_work:
        if found:
            changes.append("%s: %s" % (wanted.path, ", ".join(found)))
            if want_diff:
                diff.append(diff_of(wanted))
            if not check:
                _atomic.write(wanted.path, wanted.content, mode=wanted.mode, owner=(0, 0))
    return Outcome(changes, diff)
