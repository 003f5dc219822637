# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""One python_patch run: lock, roll back what a killed run left, plan, check, write all or nothing.

Stdlib only, no Ansible imports: the module hands in its parameters, check and diff mode and
its warn function; PatchFailed carries what fail_json reports.
"""

from __future__ import annotations

import contextlib
import os
import sys
import typing as t

from . import _files as pf
from . import _txn as px
from ._check import Checks
from ._plan import FileJob, PatchFailed, Plan


class PythonPatch(Plan, Checks):
    """The module's run: read and compute everything, check it, then write it all or nothing."""

    def __init__(self, params: t.Dict[str, t.Any], *, check: bool, diff: bool,
                 warn: t.Callable[[str], None]) -> None:
        self.params = params
        self.check = check
        self.diff = diff
        self.warn = warn  # type: ignore[assignment]
        self.state: str = params["state"]
        self.state_dir: str = params["state_dir"]
        self.python: str = params["python"] or sys.executable
        self.timeout: int = params["check_timeout"]
        self.recovered: t.List[str] = []
        self.state_dir_narrowed: t.List[str] = []
        if params["files"] is not None:
            specs = [(f["path"], f.get("edits") or []) for f in params["files"]]
        else:
            if self.state == "present" and not params["edits"]:
                raise PatchFailed("edits is required with path when state=present")
            specs = [(params["path"], params["edits"] or [])]
        self.jobs = [FileJob(path, edits) for path, edits in specs]
        seen: t.Dict[str, str] = {}
        for job in self.jobs:
            if job.real in seen:
                raise PatchFailed("%s and %s are the same file (%s); give each file once"
                                  % (seen[job.real], job.path, job.real))
            seen[job.real] = job.path

    def _transaction(self, changed: t.List[FileJob]) -> None:
        params = self.params
        for job in self.jobs:
            if job.changed or job.record_action is not None:
                job.change = px.Change(job.real, job.before, job.after, job.stat,
                                       job.record_action)
        txn = px.Transaction(self.state_dir, [j.change for j in self.jobs if j.change],
                             pf.backup_stamp())
        by_real = {j.real: j for j in self.jobs}
        try:
            txn.prepare((lambda change, tmp: self._validate(by_real[change.real], tmp))
                        if params["validate"] else None, params["backup_dir"], params["backup"])
            txn.apply()
            if changed and params["import_check"]:
                self._import_check()
            txn.commit()
        except BaseException as exc:
            try:
                problems = txn.rollback()
            except (OSError, ValueError, pf.DiskError) as again:
                problems = [str(again)]
            if isinstance(exc, PatchFailed):
                msg = exc.msg
            elif isinstance(exc, (pf.DiskError, OSError)):
                msg = "writing failed: %s" % exc
            else:
                raise
            if problems:
                msg += ("; putting back failed for: %s. The journal %s keeps what is needed; the "
                        "next run on these files finishes putting them back"
                        % ("; ".join(problems), txn.journal))
            else:
                msg += "; every file and record was put back, nothing was changed"
            raise PatchFailed(msg, **(exc.extra if isinstance(exc, PatchFailed) else {})) from exc
        for warning in txn.warnings:
            self.warn(warning)

    def _secure_state_dir(self) -> None:
        try:
            self.state_dir_narrowed = pf.secure_state_dir(self.state_dir, self.check)
        except pf.ForeignStateDir as exc:
            raise PatchFailed("state_dir %s cannot be trusted: %s. Its records and journals say "
                              "what this module writes, so only the user running it (root) may "
                              "own and change it; check what is in it, give it to root (chown -R, "
                              "chmod -R go-rwx) or choose another state_dir. Nothing was written"
                              % (self.state_dir, exc)) from exc
        except OSError as exc:
            raise PatchFailed("cannot read state_dir %s: %s; nothing was written"
                              % (self.state_dir, exc)) from exc
        if self.state_dir_narrowed:
            self.warn("%s only root could read: %s" % (
                "state_dir entries would be made" if self.check else "narrowed state_dir entries",
                ", ".join(self.state_dir_narrowed[:10])))

    def run(self) -> t.Dict[str, t.Any]:
        self._secure_state_dir()
        if self.check:  # check mode writes nothing, not even a lock file
            self._warn_unfinished()
            return self._run_locked()
        paths = {j.real for j in self.jobs}
        for _attempt in range(10):
            with self._locks(paths):
                extra = self._recover(paths)
                if not extra:
                    return self._run_locked()
            paths |= extra  # an unfinished run touched other files too: lock them as well
        raise PatchFailed("unfinished runs in %s keep touching more files; roll them back by "
                          "hand" % os.path.join(self.state_dir, px.JOURNAL_SUBDIR))

    @contextlib.contextmanager
    def _locks(self, paths: t.Set[str]) -> t.Iterator[None]:
        try:
            with pf.phase("state_dir", self.state_dir):
                pf._makedirs(self.state_dir)  # pylint: disable=protected-access
            with pf.locked(self.state_dir, paths, self.params["lock_timeout"]):
                yield
        except pf.LockTimeout as exc:
            raise PatchFailed("%s (lock_timeout); nothing was written" % exc) from exc
        except pf.DiskError as exc:
            raise PatchFailed("cannot take the lock in state_dir %s: %s (set state_dir to a "
                              "writable directory)" % (self.state_dir, exc)) from exc

    def _unfinished(self, paths: t.Set[str]) -> t.Dict[str, t.Set[str]]:
        try:
            found = px.journal_files(self.state_dir)
        except (ValueError, KeyError, pf.DiskError) as exc:
            raise PatchFailed("cannot read the journal of an unfinished run: %s; nothing was "
                              "written" % exc) from exc
        return {path: files for path, files in found.items() if files & paths}

    def _warn_unfinished(self) -> None:
        for journal in self._unfinished({j.real for j in self.jobs}):
            self.warn("an unfinished run left %s; the next run (not in check mode) rolls "
                      "it back first, which this prediction does not include" % journal)

    def _recover(self, paths: t.Set[str]) -> t.Set[str]:
        """Roll back unfinished runs on our (locked) files; return files we must lock first."""
        found = self._unfinished(paths)
        extra = set().union(*found.values()) - paths if found else set()
        if extra:
            return extra
        for journal in found:
            data, problems = px.rollback_journal(self.state_dir, journal)
            if problems:
                raise PatchFailed("an unfinished run (pid %s, started %s) left %s; rolling it "
                                  "back failed for: %s; nothing else was done"
                                  % (data.get("pid"), data.get("started"), journal,
                                     "; ".join(problems)))
            note = ("rolled back an unfinished run (pid %s, started %s, killed or failed before "
                    "its end): %s hold their bytes from before it again"
                    % (data.get("pid"), data.get("started"),
                       ", ".join(f["path"] for f in data["files"])))
            self.recovered.append(note)
            self.warn(note)
        strays = px.dead_journal_temps(self.state_dir)
        for real in paths:  # temp files of a run killed before it wrote its journal
            strays += pf.stray_temps(real)
            strays += [p for r in pf.record_paths(self.state_dir, real) for p in pf.stray_temps(r)]
        for stray in strays:
            with contextlib.suppress(OSError):
                os.unlink(stray)
        return set()

    def _run_locked(self) -> t.Dict[str, t.Any]:
        for job in self.jobs:
            self._read(job)
        for job in self.jobs:
            if self.state == "present":
                self._compute_present(job)
            else:
                self._compute_absent(job)
        changed = [j for j in self.jobs if j.changed]
        if changed and self.state == "present":
            self._compile_check(changed)
        if self.check:
            self._check_mode_validate(changed)
        elif changed or any(j.record_action for j in self.jobs):
            self._transaction(changed)
        result: t.Dict[str, t.Any] = {
            "changed": bool(changed or self.state_dir_narrowed),
            "files": [j.result() for j in self.jobs],
            "recovered": self.recovered,
            "state_dir_narrowed": self.state_dir_narrowed,
        }
        if self.diff:
            result["diff"] = [self._diff(j) for j in changed]
        return result
