# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What python_patch does to each file: read it, run the edit engine, decide the record change.

Stdlib only, no Ansible imports: FileJob is one file of a call; Plan is a mixin of PythonPatch
(see _run), which provides ``state_dir``, ``warn`` and ``_newer_syntax``.
"""

from __future__ import annotations

import json
import os
import typing as t

from . import _files as pf
from . import _txn as px
from .._pyedit import (
    STATUS_ALREADY,
    STATUS_APPLIED,
    STATUS_REVERTED,
    STATUS_SKIPPED,
    Edit,
    PyEditError,
    SourceSyntaxError,
    apply_edits,
    decode_source,
    encode_source,
    parse_edits,
    unified_diff,
)


class PatchFailed(Exception):
    """A failure to report with fail_json; extra keys go into the result."""

    def __init__(self, msg: str, **extra: t.Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.extra = extra


class FileJob:
    """One file of the call: what was there, what should be there, and what was done."""

    # pylint: disable=too-many-instance-attributes,too-few-public-methods

    def __init__(self, path: str, raw_edits: t.List[t.Dict[str, t.Any]]) -> None:
        self.path = path
        self.real = os.path.realpath(path)
        self.raw_edits = raw_edits
        self.edits: t.List[Edit] = []
        self.exists = False
        self.before = b""
        self.after = b""
        self.stat: os.stat_result | None = None
        self.results: t.List[t.Dict[str, str]] = []
        self.record: pf.Record | None = None
        self.replaced_since = False
        # ("save", original bytes, edit list, supersede) | ("delete",) | None
        self.record_action: t.Tuple[t.Any, ...] | None = None
        self.record_out: str | None = None
        self.change: px.Change | None = None

    @property
    def changed(self) -> bool:
        return self.exists and self.after != self.before

    def result(self) -> t.Dict[str, t.Any]:
        return {
            "path": self.path,
            "changed": self.changed,
            "sha256_before": pf.sha256_bytes(self.before) if self.exists else None,
            "sha256_after": pf.sha256_bytes(self.after) if self.exists else None,
            "backup_file": self.change.backup if self.change else None,
            "record": self.record_out,
            "replaced_since": self.replaced_since,
            "edits": self.results,
        }


class Plan:
    """Phase 1 of a run: read and compute every file, writing nothing."""

    state_dir: str
    warn: t.Callable[[str], None]
    _newer_syntax: t.Callable[..., str]

    def _read(self, job: FileJob) -> None:
        try:
            job.edits = parse_edits(job.raw_edits, path=job.path)
        except PyEditError as exc:
            raise PatchFailed(str(exc), file=job.path, edit_id=exc.edit_id) from exc
        try:
            job.record = pf.load_record(self.state_dir, job.real)
        except (ValueError, KeyError, OSError) as exc:
            raise PatchFailed("%s: cannot read its record: %s" % (job.path, exc),
                              file=job.path) from exc
        if not os.path.lexists(job.real):
            return
        if not os.path.isfile(job.real):
            raise PatchFailed("%s is not a regular file" % job.path, file=job.path)
        try:
            job.stat = os.stat(job.real)
            job.before = pf.read_bytes(job.real)
        except OSError as exc:
            raise PatchFailed("read %s: %s" % (job.path, exc.strerror or exc),
                              file=job.path) from exc
        job.after = job.before
        job.exists = True

    def _engine(self, job: FileJob) -> t.Tuple[bytes, t.List[t.Any]]:
        """Run the engine on the current bytes: (new bytes, EditResults)."""
        try:
            text, encoding = decode_source(job.before, path=job.path)
            patch = apply_edits(text, job.edits, path=job.path)
        except SourceSyntaxError as exc:
            raise PatchFailed(
                self._newer_syntax(job, exc) or "%s (refused; nothing was written)" % exc,
                file=job.path,
                syntax_error={"lineno": getattr(exc, "lineno", None),
                              "offset": getattr(exc, "offset", None),
                              "line": getattr(exc, "line", None)}) from exc
        except PyEditError as exc:
            raise PatchFailed("%s (nothing was written)" % exc, file=job.path,
                              edit_id=exc.edit_id) from exc
        new = job.before
        if patch.changed:
            # Re-encode only when something changed, so untouched files stay byte-identical.
            try:
                new = encode_source(patch.source, encoding)
            except UnicodeEncodeError as exc:
                bad = exc.object[exc.start:exc.end]
                ids = [e.id for e, raw in zip(job.edits, job.raw_edits) if bad in json.dumps(
                    raw, ensure_ascii=False)] or [r.id for r in patch.results
                                                  if r.status == STATUS_APPLIED]
                raise PatchFailed(
                    "%s: edit %s adds %r, which the file's encoding %s (its coding cookie or "
                    "the default utf-8) cannot encode; write it as an escape (for example %s) or "
                    "change the edit; nothing was written"
                    % (job.path, ", ".join(repr(i) for i in ids), bad, encoding,
                       bad.encode("ascii", "backslashreplace").decode("ascii")),
                    file=job.path, edit_id=ids[0] if ids else None) from exc
        return new, list(patch.results)

    def _compute_present(self, job: FileJob) -> None:
        if not job.exists:
            raise PatchFailed("%s: file not found (nothing was written)" % job.path, file=job.path)
        job.after, results = self._engine(job)
        job.results = [{"id": r.id, "kind": r.kind, "status": r.status, "detail": r.detail}
                       for r in results]
        current = pf.sha256_bytes(job.before)
        record = job.record
        if record is not None and record.sha256_written != current:
            job.replaced_since = True
        if record is not None:
            job.record_out = record.json_path
        if job.changed:
            # The record lists the edits this module applied since the original: the earlier
            # ones (when the file is still ours) plus those applied now.
            applied = [{"id": r.id, "kind": r.kind} for r in results if r.status == STATUS_APPLIED]
            if record is not None and not job.replaced_since:
                original = self._record_original(job)
                now = {e["id"] for e in applied}
                kept = [e for e in record.edits if e["id"] not in now]
            else:
                original, kept = job.before, []
            job.record_action = ("save", original, kept + applied, job.replaced_since)
            job.record_out = pf.record_paths(self.state_dir, job.real)[0]
        if job.replaced_since and record is not None:
            # Never drop a record this run did not write: it holds the only pristine bytes.
            what = ("the edits are applied to the new file; the record is rewritten and the "
                    "old one kept as %s.superseded-<time>.json/.orig"
                    % record.json_path[:-len(".json")]) if job.changed else (
                "it already contains the edits; the record is kept, so state=absent leaves "
                "the file alone")
            self.warn("%s was changed since python_patch wrote it (sha256 %s, record "
                      "expected %s); %s. The bytes from before python_patch's change "
                      "remain in %s" % (job.path, current, record.sha256_written, what,
                                        record.orig_path))

    def _record_original(self, job: FileJob) -> bytes:
        if job.record is None:
            raise PatchFailed("%s: no record to restore from" % job.path, file=job.path)
        try:
            return job.record.original()
        except (OSError, ValueError) as exc:
            raise PatchFailed("%s: its record is damaged: %s" % (job.path, exc),
                              file=job.path) from exc

    def _compute_absent(self, job: FileJob) -> None:
        record = job.record
        if record is not None:
            current = pf.sha256_bytes(job.before) if job.exists else None
            if current == record.sha256_written:
                job.after = self._record_original(job)
                job.record_action = ("delete",)
                job.record_out = None
                detail = ("put back the bytes from before python_patch changed the file "
                          "(record %s of %s)" % (record.json_path, record.timestamp))
                job.results = [{"id": e["id"], "kind": e["kind"], "status": STATUS_REVERTED,
                                "detail": detail} for e in record.edits]
                self._warn_superseded(job)
                return
            job.replaced_since = True
            job.record_out = record.json_path
            why = ("no longer exists" if not job.exists else
                   "was changed since python_patch wrote it (sha256 %s, record expected %s)"
                   % (current, record.sha256_written))
            self.warn("%s %s; refusing to put back the bytes from before python_patch's "
                      "change over it. They remain in %s (copy them back by hand if "
                      "that is what you want)" % (job.path, why, record.orig_path))
            job.results = [{"id": e["id"], "kind": e["kind"], "status": STATUS_SKIPPED,
                            "detail": "not reverted: the file %s" % why} for e in record.edits]
            return
        # No record: nothing of ours to revert. Say, per edit, whether its change is there.
        if not job.exists:
            job.results = [{"id": e.id, "kind": e.kind, "status": STATUS_ALREADY,
                            "detail": "the file does not exist"} for e in job.edits]
            return
        try:
            results = self._engine(job)[1]
        except PatchFailed as exc:
            job.results = [{"id": e.id, "kind": e.kind, "status": STATUS_ALREADY,
                            "detail": "not present: %s" % exc.msg} for e in job.edits]
            return
        job.results = []
        for res in results:
            if res.status == STATUS_ALREADY:
                status, detail = STATUS_SKIPPED, ("present, but not written by python_patch (no "
                                                  "record), so left alone")
            else:
                status, detail = STATUS_ALREADY, "not present: %s" % res.detail
            job.results.append({"id": res.id, "kind": res.kind, "status": status,
                                "detail": detail})

    def _warn_superseded(self, job: FileJob) -> None:
        """Absent undoes only the last change; say where the bytes from before older ones are.

        A superseded record is made when the file was re-patched after someone else changed it
        (a hand edit or a package upgrade, which look alike here), so restoring its bytes could
        undo an upgrade: the operator decides, with the path in hand.
        """
        older = pf.superseded_records(self.state_dir, job.real)
        if older:
            origs = [p[:-len(".json")] + ".orig" for p in older]
            self.warn("%s: put back the bytes from before python_patch's last change, which "
                      "were themselves changed by hand or by an upgrade after an earlier "
                      "python_patch run; the bytes from before that earlier run remain in %s"
                      % (job.path, ", ".join(origs)))

    def _diff(self, job: FileJob) -> t.Dict[str, str]:
        before = decode_source(job.before, path=job.path)[0]
        after = decode_source(job.after, path=job.path)[0]
        return {"before_header": job.path, "after_header": job.path,
                "prepared": unified_diff(before, after, job.path)}
