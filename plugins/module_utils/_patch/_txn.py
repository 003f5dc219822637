# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The write side of python_patch: a crash-safe transaction over several files.

Stdlib only, no Ansible imports. A run, holding the locks of its files, writes a journal
``<state_dir>/journal/txn-<stamp>.json`` (fsynced) before the first record change or
replacement. It holds, per file, the bytes before and the sha256 after, the temp file, the
record files as they were and the files the run creates. The journal is removed only once
every file is written and checked: that is the commit point. A run that finds a journal
touching its files (its writer was killed) rolls it back first: a file holding the new bytes
gets the old ones, the record files get their old bytes, the run's temp files, backups and
superseded copies go. Every step is idempotent, so a kill during the roll-back is rolled back by
the next run too.
"""

from __future__ import annotations

import base64
import errno
import glob
import json
import os
import shlex
import signal
import subprocess
import typing as t

from .. import _atomic
from . import _files as pf

JOURNAL_SUBDIR = "journal"
JOURNAL_FORMAT = 1


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _read_or_none(path: str) -> bytes | None:
    try:
        return pf.read_bytes(path)
    except FileNotFoundError:
        return None


class Change:
    """One file of a transaction: its bytes now and to be, and what the run did to the disk."""

    # pylint: disable=too-many-instance-attributes,too-few-public-methods

    def __init__(self, real: str, before: bytes, after: bytes, like: os.stat_result | None,
                 record: t.Tuple[t.Any, ...] | None) -> None:
        self.real = real
        self.before = before
        self.after = after
        self.like = like
        # ("save", original bytes, edits, supersede: bool) | ("delete",) | None
        self.record = record
        self.tmp: str | None = None
        self.backup: str | None = None
        self.created: t.List[str] = []  # files this run made in state_dir (superseded copies)
        self.written = False


def journals(state_dir: str) -> t.List[str]:
    """The journals of unfinished runs, oldest first."""
    return sorted(glob.glob(os.path.join(state_dir, JOURNAL_SUBDIR, "txn-*.json")))


def read_journal(path: str) -> t.Dict[str, t.Any]:
    """A journal's content; a journal that cannot be read is an error naming it."""
    with pf.phase("journal read", path):
        with open(path, "r", encoding="utf-8") as handle:
            data = json.load(handle)
    if data.get("format") != JOURNAL_FORMAT:
        raise ValueError("journal %s has format %r, expected %r"
                         % (path, data.get("format"), JOURNAL_FORMAT))
    return data


def dead_journal_temps(state_dir: str) -> t.List[str]:
    """Temp files of journals whose writer (the pid in the name) is gone: a killed run's."""
    found = []
    for tmp in glob.glob(os.path.join(state_dir, JOURNAL_SUBDIR, ".txn-*.json.*.tmp")):
        pid = os.path.basename(tmp).split(".json.")[0].rsplit(".", 1)[-1]
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            found.append(tmp)
        except (ValueError, PermissionError):
            pass
    return found


def journal_files(state_dir: str) -> t.Dict[str, t.Set[str]]:
    """{journal path: the real paths it touches} for every unfinished run.

    A journal that vanishes while being listed belongs to a run on other files that just
    committed; it is skipped.
    """
    found = {}
    for path in journals(state_dir):
        try:
            found[path] = {f["path"] for f in read_journal(path)["files"]}
        except pf.DiskError as exc:
            if exc.errno != errno.ENOENT:
                raise
    return found


class Transaction:
    """Writes a set of Changes all or nothing; see the module docstring for the protocol."""

    def __init__(self, state_dir: str, changes: t.Sequence[Change], stamp: str) -> None:
        self.state_dir = state_dir
        self.changes = list(changes)
        self.stamp = stamp
        self.journal = os.path.join(state_dir, JOURNAL_SUBDIR, "txn-%s.json" % stamp)
        self.warnings: t.List[str] = []

    def prepare(self, validate: t.Callable[[Change, str], None] | None,
                backup_dir: str | None, backup: bool) -> None:
        """Temp files next to their targets (validated), backups, then the journal (fsynced)."""
        for change in self.changes:
            if change.after == change.before:
                continue
            with pf.phase("temp file", os.path.dirname(change.real)):
                change.tmp = pf.write_temp(change.real, change.after, like=change.like,
                                           warnings=self.warnings)
            if validate is not None:
                validate(change, change.tmp)
        if backup:
            for change in self.changes:
                if change.after != change.before:
                    with pf.phase("backup", change.real):
                        change.backup = pf.backup(change.real, backup_dir, self.stamp)
        self._write_journal()

    def _write_journal(self) -> None:
        files = []
        for change in self.changes:
            json_path, orig_path = pf.record_paths(self.state_dir, change.real)
            files.append({
                "path": change.real, "before": _b64(change.before),
                "sha256_before": pf.sha256_bytes(change.before),
                "sha256_after": pf.sha256_bytes(change.after),
                # Put back with its time too: a file whose bytes and time are as before was not
                # changed for whoever reads times (vllm_node_state: a server's restart reasons).
                "mtime_ns_before": change.like.st_mtime_ns if change.like else None,
                "tmp": change.tmp, "backup": change.backup,
                "record_json": _b64(_read_or_none(json_path)),
                "record_orig": _b64(_read_or_none(orig_path)),
                "created": [p + ".json" for p in self._superseded_base(change)]
                + [p + ".orig" for p in self._superseded_base(change)],
            })
        body = {"format": JOURNAL_FORMAT, "module": "gpuserve.vllm.python_patch",
                "pid": os.getpid(), "started": pf.timestamp(), "files": files}
        with pf.phase("journal", self.journal):
            pf._makedirs(os.path.dirname(self.journal))  # pylint: disable=protected-access
            pf.atomic_write(self.journal, json.dumps(body).encode("utf-8"))
            os.chmod(self.journal, 0o600)

    def _superseded_base(self, change: Change) -> t.List[str]:
        if change.record is None or change.record[0] != "save" or not change.record[3]:
            return []
        json_path = pf.record_paths(self.state_dir, change.real)[0]
        return [json_path[:-len(".json")] + ".superseded-" + self.stamp]

    def apply(self) -> None:
        """Record changes, then the replacements (each atomic), then stale bytecode goes."""
        for change in self.changes:
            if change.record is None:
                continue
            json_path = pf.record_paths(self.state_dir, change.real)[0]
            with pf.phase("record", json_path):
                if change.record[0] == "save":
                    _kind, original, edits, supersede = change.record
                    if supersede:
                        change.created = pf.supersede_record(self.state_dir, change.real,
                                                             self.stamp)
                    pf.save_record(self.state_dir, change.real, original, change.after, edits)
                else:
                    pf.delete_record(self.state_dir, change.real)
        for change in self.changes:
            if change.tmp is None:
                continue
            with pf.phase("replace", change.real):
                pf.replace(change.tmp, change.real)
            change.tmp = None
            change.written = True
            with pf.phase("bytecode removal", change.real):
                pf.remove_stale_bytecode(change.real)

    def commit(self) -> None:
        """The commit point: the journal goes, the run is final."""
        with pf.phase("journal", self.journal):
            pf.remove_quietly(self.journal)
            _atomic.fsync_dir(os.path.dirname(self.journal))

    def rollback(self) -> t.List[str]:
        """Undo everything of this run (the journal says what); return what could not be undone."""
        if not os.path.exists(self.journal):  # killed or failed before the journal: only temps
            for change in self.changes:
                pf.remove_quietly(change.tmp)
                pf.remove_quietly(change.backup)
            return []
        return rollback_journal(self.state_dir, self.journal)[1]


def rollback_journal(state_dir: str, journal: str) -> t.Tuple[t.Dict[str, t.Any], t.List[str]]:
    """Put back every file and record the journal names; remove the journal when all went well.

    Returns (the journal's content, problems). A file holding neither the old nor the new bytes
    was changed by someone else since: it is left alone and named as a problem.
    """
    data = read_journal(journal)
    problems = []
    for entry in data["files"]:
        real = entry["path"]
        try:
            for extra in [entry.get("tmp"), entry.get("backup")] + list(entry.get("created", [])):
                with pf.phase("restore (cleanup)", extra or real):
                    pf.remove_quietly(extra)
            current = _read_or_none(real)
            current_sha = None if current is None else pf.sha256_bytes(current)
            if current_sha == entry["sha256_after"] and current_sha != entry["sha256_before"]:
                like = os.stat(real)
                with pf.phase("restore", real):
                    pf.atomic_write(real, t.cast(bytes, _unb64(entry["before"])), like=like)
                    if entry.get("mtime_ns_before") is not None:
                        os.utime(real, ns=(like.st_atime_ns, int(entry["mtime_ns_before"])))
                    pf.remove_stale_bytecode(real)
            elif current_sha != entry["sha256_before"]:
                problems.append("%s: holds neither the bytes from before (sha256 %s) nor those "
                                "written (sha256 %s) but sha256 %s; left alone"
                                % (real, entry["sha256_before"], entry["sha256_after"],
                                   current_sha))
            json_path, orig_path = pf.record_paths(state_dir, real)
            for path, key in ((orig_path, "record_orig"), (json_path, "record_json")):
                old = _unb64(entry.get(key))
                with pf.phase("restore record", path):
                    if old is None:
                        pf.remove_quietly(path)
                    elif _read_or_none(path) != old:
                        pf.atomic_write(path, old)
                        os.chmod(path, 0o600)
        except pf.DiskError as exc:
            problems.append(str(exc))
    if not problems:
        with pf.phase("journal", journal):
            pf.remove_quietly(journal)
            _atomic.fsync_dir(os.path.dirname(journal))
    return data, problems


def run_bounded(argv: t.Sequence[str], timeout: float, *, data: bytes | None = None,
                env: t.Mapping[str, str] | None = None,
                cwd: str | None = None) -> t.Tuple[int | None, str, str]:
    """Run argv in its own process group; (rc, stdout, stderr), rc None when it timed out.

    On timeout, or when this process is interrupted, the whole group is killed (SIGKILL), so
    children the command started cannot outlive the check.
    """
    with subprocess.Popen(list(argv), stdin=subprocess.PIPE if data is not None else
                          subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=True, env=env, cwd=cwd) as proc:
        try:
            out, err = proc.communicate(data, timeout=timeout)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, err = proc.communicate()
            rc = None
        except BaseException:
            _kill_group(proc.pid)
            raise
        _kill_group(proc.pid)  # what the command left running in its group goes with it
    return rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def split_command(command: str) -> t.List[str]:
    """A validate command as argv (no shell), like Ansible's run_command does with a string."""
    return shlex.split(command)
