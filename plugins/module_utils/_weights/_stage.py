# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Stage one checkpoint revision on one host: complete and verified, or not visible at all.

Layout (``root`` and ``store_dir`` on one filesystem):

    <root>/<name>                          symlink: the path vLLM is given
      -> <store_dir>/<name>/<commit>/      complete, verified against the manifest
    <store_dir>/<name>/<commit>.partial/   being staged; never named by the link

A copy is staged in ``.partial`` (files fetched with resumption: rsync ``--append-verify``, or
HTTP ranges), verified against the manifest, the broken files alone fetched again, and only
then renamed to ``<commit>`` and the link switched (both atomic renames). A verified copy that
goes bad later is renamed back to ``.partial`` before it is repaired, so the link never names a
copy known to be broken. The free space is compared with the bytes still missing before the
first byte is written.

Here: what a host holds (`inspect`) and the decisions of `stage`; the fetching is _transfer's,
the renames and the link _publish's. Stdlib only, no Ansible imports: runs on the managed node.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._layout import Layout, SpaceError, StageError
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._manifest import FileEntry, Manifest
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._publish import (
    _adoption_leftovers, _delete_broken, _link_files, _open_partial, _publish, _replace_dir_with_link, _switch_link)
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._transfer import Owner, Source
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._verify import KEEP, Report, verify


def human(count: int) -> str:
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{count} bytes" if unit == "bytes" else f"{value:.1f} {unit} ({count} bytes)"
        value /= 1024
    return f"{count} bytes"


def free_bytes(path: str) -> tuple[str, int]:
    """(the existing directory measured, bytes free to an unprivileged writer) for a future path."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    stat = os.statvfs(probe)
    return probe, stat.f_bavail * stat.f_frsize


@dataclasses.dataclass
class State:
    """What a host holds of one revision, and what staging it would take."""

    layout: Layout
    where: str  # the copy judged: final, partial, the link's real directory, or "" (none)
    report: Report | None
    link_ok: bool
    needed_bytes: int  # bytes still to fetch
    freed_bytes: int  # bytes of broken files that will be deleted first
    free_bytes: int
    measured: str  # the directory whose filesystem was measured

    @property
    def holder(self) -> bool:
        """A verified complete copy at <commit>: this host can serve it to others."""
        return self.where == self.layout.final and self.report is not None and self.report.ok

    @property
    def current(self) -> bool:
        return self.holder and self.link_ok

    def space_problem(self, manifest: Manifest, reserve: int) -> str | None:
        if self.holder or self.needed_bytes + reserve <= self.free_bytes + self.freed_bytes:
            return None
        extra = f" plus {human(reserve)} kept free (vllm_weights_reserve_bytes)" if reserve else ""
        freed = f", and {human(self.freed_bytes)} of broken files to delete" if self.freed_bytes else ""
        return (f"{self.layout.final}: not enough disk space for {manifest.repo}@{manifest.commit}: "
                f"it needs {human(self.needed_bytes)} more{extra}, and {self.measured} has "
                f"{human(self.free_bytes)} free{freed}. Nothing was written. Free space there or "
                f"point vllm_weights_root / vllm_weights_store_dir at a larger filesystem")


def _link_ok(lay: Layout) -> bool:
    return os.path.islink(lay.link) and os.path.realpath(lay.link) == os.path.realpath(lay.final)


def cache_path(manifest_path: str, lay: Layout) -> str:
    """The verification cache of this copy, beside the manifest in root's state directory.

    One per copy location (a hash of its path), so two copies of a revision on one host (another
    vllm_weights_root) never overwrite each other's cache.
    """
    where = hashlib.sha256(lay.final.encode()).hexdigest()[:12]
    return os.path.join(os.path.dirname(manifest_path), f"{os.path.basename(lay.final)}.{where}.verified.json")


def inspect(lay: Layout, manifest: Manifest, cache: str, full: bool = False,
            workers: int = 4, save: bool = True) -> State:
    """Judge the copy this host has (read-only, except the verification cache when save)."""
    if os.path.isdir(lay.final):
        where = lay.final
    elif os.path.isdir(lay.partial):
        where = lay.partial
    elif os.path.isdir(lay.link) and not os.path.islink(lay.link):
        where = lay.link  # a directory an earlier per-node download left: adopted, not re-fetched
    else:
        where = ""
    report = verify(where, manifest, cache, full, workers, save) if where else None
    sizes = {c.path: c for c in report.checks} if report else {}
    needed = freed = 0
    for entry in manifest.files:
        check = sizes.get(entry.path)
        kept = check.size if check and check.status in KEEP else 0
        needed += entry.size - kept
        if check and check.status not in KEEP:
            freed += check.size
    measured, free = free_bytes(os.path.dirname(lay.final))
    return State(lay, where, report, _link_ok(lay), needed, freed, free, measured)


# ---- staging ---------------------------------------------------------------------------------
# The steps that write into the store run as the transfer user (Owner.call); root only reads
# (verification), writes its own state directory (the cache) and switches the link in <root>.

def _transfer(source: Source, entries: list[FileEntry], partial: str, owner: Owner) -> dict[str, int]:
    return dataclasses.asdict(source.transfer(entries, partial, owner))


@dataclasses.dataclass
class Outcome:
    changed: bool
    actions: list[str]
    transfers: list[dict[str, t.Any]]
    deleted: list[str]
    report: Report | None
    switched: bool = False  # the link now names another revision than before (vLLM must restart)

    def as_dict(self) -> dict[str, t.Any]:
        return {"actions": self.actions, "switched": self.switched, "transfers": self.transfers, "deleted": self.deleted,
                "files_fetched": sorted({p for tr in self.transfers for p in tr["paths"]}),
                "bytes_fetched": sum(tr["bytes"] for tr in self.transfers),
                "wire_bytes": sum(tr["wire_bytes"] for tr in self.transfers),
                "verify": self.report.summary() if self.report else None}


def stage(lay: Layout, manifest: Manifest, source: Source | None, owner: Owner, cache: str,
          *, full: bool = False, reserve: int = 0, attempts: int = 2, workers: int = 4,
          check_mode: bool = False) -> Outcome:
    """Make <commit> complete and verified and the link name it, fetching only what is missing."""
    state = inspect(lay, manifest, cache, full, workers, save=not check_mode)
    actions: list[str] = []
    if state.holder:
        for old in _adoption_leftovers(lay):
            actions.append(f"removed {old}, the directory a run killed right after adopting {lay.link} left")
            if not check_mode:
                shutil.rmtree(old)
        if not state.link_ok:
            actions.append(f"link {lay.link} -> {lay.link_target}")
            if not check_mode:
                _switch_link(lay)
        return Outcome(bool(actions), actions, [], [], state.report, switched=not state.link_ok)
    problem = state.space_problem(manifest, reserve)
    if problem:
        raise SpaceError(problem)
    if source is None:
        raise StageError(f"{lay.final}: no verified copy here and no source to fetch it from")
    if check_mode:
        actions.append(f"fetch {human(state.needed_bytes)} from {source.describe()} into {lay.partial}")
        return Outcome(True, actions, [], [], state.report, switched=not state.link_ok)

    if state.where == lay.link:
        # The directory vLLM reads stays as it is until the verified copy replaces it at once: its
        # good files are linked into a new .partial (no byte copied, none of its files written).
        parent = os.path.dirname(lay.final)
        owner.call(os.makedirs, parent, 0o755, True)
        if os.stat(lay.link).st_dev != os.stat(parent).st_dev:
            raise StageError(f"{lay.link} is a directory on another filesystem than {parent}; "
                             f"move it aside (or into {lay.partial} to reuse its files), then re-run")
        good = [c.path for c in state.report.checks if c.status == "ok"] if state.report else []
        _link_files(lay.link, lay.partial, good)  # root, into a directory it has just made
        owner.give_tree(lay.partial)
        actions.append(f"adopting the directory {lay.link}: {len(good)} good file(s) linked into "
                       f"{lay.partial}, the directory left as it is until the copy is verified")
    else:
        owner.call(_open_partial, lay.final, lay.partial, state.where == lay.final)
        if state.where == lay.final:
            actions.append(f"moved the broken copy {lay.final} to {lay.partial} for repair")

    report = state.report if state.where else None
    transfers: list[dict[str, t.Any]] = []
    deleted: list[str] = []
    for attempt in range(1, max(1, attempts) + 1):
        if report is not None:
            broken = [c.path for c in report.bad() if c.status not in KEEP and c.status != "missing"]
            deleted += owner.call(_delete_broken, lay.partial, broken) if broken else []
            wanted = [e for e, c in zip(manifest.files, report.checks) if c.status != "ok"]
        else:
            wanted = list(manifest.files)
        if wanted:
            done = owner.call(_transfer, source, wanted, lay.partial, owner)
            transfers.append({"attempt": attempt, "source": source.describe(), "files": done["files"],
                              "paths": [e.path for e in wanted], "bytes": done["bytes"],
                              "wire_bytes": done["wire_bytes"]})
        report = verify(lay.partial, manifest, cache, False, workers)
        if report.ok:
            break
    if not report.ok:
        raise StageError(f"{lay.partial}: still broken after {attempts} attempt(s) from "
                         f"{source.describe()}: {'; '.join(report.problems()[:10])}")
    owner.call(_publish, lay.partial, lay.final, manifest)
    actions.append(f"verified and published {lay.final}")
    if state.where == lay.link:
        _replace_dir_with_link(lay)
        actions.append(f"{lay.link} (the adopted directory) replaced by the link -> {lay.link_target} at once")
    else:
        _switch_link(lay)
        if not state.link_ok:
            actions.append(f"link {lay.link} -> {lay.link_target}")
    return Outcome(True, actions, transfers, deleted, report, switched=not state.link_ok)
