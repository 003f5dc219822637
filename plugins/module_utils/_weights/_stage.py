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

Stdlib only, no Ansible imports: runs on the managed node.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import dataclasses
import errno
import hashlib
import json
import os
import pwd
import re
import shutil
import subprocess
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _hub as hub
from ansible_collections.gpuserve.vllm.plugins.module_utils._env._store import fsync_dir, replace_symlink, temp_link
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._manifest import FileEntry, Manifest
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._manifest import write as write_manifest
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._verify import KEEP, Report, verify

META_DIR = ".gpuserve"
META_MANIFEST = f"{META_DIR}/manifest.json"


class StageError(RuntimeError):
    """Staging failed; the partial copy is kept so that the next run resumes it."""


class SpaceError(StageError):
    """Not enough free space; nothing was written."""


@dataclasses.dataclass(frozen=True)
class Layout:
    link: str
    final: str

    @property
    def partial(self) -> str:
        return self.final + ".partial"

    @property
    def link_target(self) -> str:
        """Relative, so the tree can be mounted elsewhere (a rescue system, a container)."""
        return os.path.relpath(self.final, os.path.dirname(self.link))


def layout(root: str, store_dir: str, name: str, commit: str) -> Layout:
    if not name or "/" in name or name.startswith("."):
        raise StageError(f"checkpoint name {name!r} must be a plain directory name")
    return Layout(os.path.join(os.path.abspath(root), name),
                  os.path.join(os.path.abspath(store_dir), name, commit))


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


@dataclasses.dataclass
class Owner:
    """Who owns the staged files and runs the transfer (the fleet's transfer user)."""

    uid: int
    gid: int
    home: str

    @classmethod
    def named(cls, name: str) -> "Owner":
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise StageError(f"owner {name!r} is not a user on this host") from None
        return cls(entry.pw_uid, entry.pw_gid, entry.pw_dir)

    @classmethod
    def me(cls) -> "Owner":
        return cls(os.getuid(), os.getgid(), os.path.expanduser("~"))

    def give(self, path: str) -> None:
        if os.geteuid() == 0 and (os.lstat(path).st_uid, os.lstat(path).st_gid) != (self.uid, self.gid):
            os.lchown(path, self.uid, self.gid)

    def give_tree(self, top: str) -> None:
        self.give(top)
        for directory, dirs, files in os.walk(top):
            for name in dirs + files:
                self.give(os.path.join(directory, name))

    def call(self, fn: t.Callable[..., t.Any], *args: t.Any) -> t.Any:
        """fn(*args) as this user: in a forked child that dropped root, so that root never writes
        into directories the transfer user controls (a planted symlink would redirect it).

        The result must be JSON-able; an exception in the child is raised here as StageError.
        Run in-process when there is nothing to drop (not root, or the owner is root).
        """
        if os.geteuid() != 0 or self.uid == 0:
            return fn(*args)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: drop root for good, do the work, report, exit without cleanup
            os.close(read_end)
            try:
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)
                os.environ["HOME"] = self.home
                report = {"result": fn(*args)}
            except BaseException as exc:  # noqa: BLE001 (everything goes back to the parent)
                report = {"error": f"{exc}" if isinstance(exc, (StageError, hub.HubError))
                          else f"{type(exc).__name__}: {exc}"}
            with os.fdopen(write_end, "w", encoding="utf-8") as handle:
                json.dump(report, handle)
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, encoding="utf-8") as handle:
            text = handle.read()
        status = os.waitpid(pid, 0)[1]
        try:
            report = json.loads(text)
        except ValueError:
            raise StageError(f"the step as uid {self.uid} died (wait status {status})") from None
        if "error" in report:
            raise StageError(report["error"])
        return report["result"]

    def run(self, argv: t.Sequence[str], data: bytes) -> subprocess.CompletedProcess:
        """Run argv as this user (from root), with a small fixed environment."""
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8"}
        drop = os.geteuid() == 0 and self.uid != 0
        return subprocess.run(list(argv), input=data, capture_output=True, env=env, check=False,
                              user=self.uid if drop else None, group=self.gid if drop else None,
                              extra_groups=[] if drop else None)


# ---- transfers -------------------------------------------------------------------------------

@dataclasses.dataclass
class Transfer:
    files: int
    bytes: int  # payload bytes that crossed (rsync: literal data; HTTP: body bytes)
    wire_bytes: int  # everything received, protocol included (rsync's "Total bytes received")


class Source(t.Protocol):
    def describe(self) -> str: ...

    def transfer(self, entries: t.Sequence[FileEntry], dest: str, owner: Owner) -> Transfer:
        """Fetch entries into dest; runs as the owner (Owner.call)."""


_QUOTE_UNSAFE = re.compile(r"['\"\\\s]")


def _plain(value: str, what: str) -> str:
    if not value or _QUOTE_UNSAFE.search(value):
        raise StageError(f"{what} {value!r} must not be empty or hold quotes, backslashes or spaces")
    return value


def ssh_command(key: str, known_hosts: str, port: int, connect_timeout: int = 30) -> str:
    """rsync's -e: key and host keys pinned, no prompts, dead peers noticed in a minute."""
    return " ".join(["ssh", "-i", _plain(key, "ssh key"), "-o", "IdentitiesOnly=yes",
                     "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                     "-o", f"UserKnownHostsFile={_plain(known_hosts, 'known_hosts file')}",
                     "-o", f"ConnectTimeout={connect_timeout}", "-o", "ServerAliveInterval=15",
                     "-o", "ServerAliveCountMax=4", "-p", str(port)])


def rsync_argv(rsync: str, source: str, dest: str, ssh: str = "", io_timeout: int = 600,
               extra: t.Sequence[str] = ()) -> list[str]:
    """Resumable, verified rsync of the files named on stdin (NUL-separated) into dest.

    ``--append-verify`` continues a short file from where it stopped and checks the whole file
    afterwards (re-sending it on a mismatch); it implies ``--inplace``, so even a transfer killed
    with SIGKILL leaves its bytes under the file's own name in the staging directory, ready to
    be continued. Files of the right size are never re-sent here: the manifest check that runs
    before deletes the ones with wrong bytes.
    """
    argv = [rsync, "--recursive", "--times", "--inplace", "--append-verify", "--chmod=D0755,F0644",
            "--from0", "--files-from=-", "--stats", "--no-human-readable", f"--timeout={io_timeout}",
            *extra]
    if ssh:
        argv += ["-e", ssh]
    return argv + [source, dest.rstrip("/") + "/"]


STATS = {
    "files": re.compile(r"^Number of regular files transferred: (\d+)", re.M),
    "literal": re.compile(r"^Literal data: (\d+)", re.M),
    "received": re.compile(r"^Total bytes received: (\d+)", re.M),
}


def parse_rsync_stats(text: str) -> Transfer:
    found = {k: int(m.group(1)) if (m := rx.search(text.replace(",", ""))) else 0 for k, rx in STATS.items()}
    return Transfer(found["files"], found["literal"], found["received"])


@dataclasses.dataclass
class RsyncSource:
    """Another host's verified copy over SSH (rrsync -ro on its side), or a local directory."""

    path: str  # "name/commit/" below the peer's rrsync root, or a local mirror directory
    host: str = ""
    user: str = ""
    ssh: str = ""
    rsync: str = "rsync"
    io_timeout: int = 600
    extra: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.user}@{self.host}:{self.path}" if self.host else self.path

    def location(self) -> str:
        if not self.host:
            return self.path.rstrip("/") + "/"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{self.path.rstrip('/')}/"

    def transfer(self, entries: t.Sequence[FileEntry], dest: str, owner: Owner) -> Transfer:
        argv = rsync_argv(self.rsync, self.location(), dest, self.ssh, self.io_timeout, self.extra)
        names = b"".join(e.path.encode() + b"\0" for e in entries)
        done = owner.run(argv, names)
        out, err = done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
        if done.returncode != 0:
            how = (f"was killed by signal {-done.returncode}" if done.returncode < 0
                   else f"exited {done.returncode}")
            tail = " | ".join(line for line in err.strip().splitlines()[-5:])
            raise StageError(f"rsync from {self.describe()} {how}: {tail or '(no message)'}; what "
                             f"arrived is kept in {dest} and the next run continues it")
        return parse_rsync_stats(out)


@dataclasses.dataclass
class HttpSource:
    """The Hub's resolve URLs at the commit, or an HTTP mirror (``<base_url>/<path>``)."""

    base_url: str
    token: str = ""
    workers: int = 4
    timeout: float = 60.0

    def describe(self) -> str:
        return self.base_url

    def transfer(self, entries: t.Sequence[FileEntry], dest: str, owner: Owner) -> Transfer:
        def one(entry: FileEntry) -> int:
            target = os.path.join(dest, entry.path)
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            url = f"{self.base_url.rstrip('/')}/{hub.urllib.parse.quote(entry.path)}"
            try:
                return hub.fetch(url, target, entry.size, self.token, self.timeout)
            finally:
                if os.path.exists(target):
                    os.chmod(target, 0o644)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.workers)) as pool:
            futures = [pool.submit(one, e) for e in entries]
            errors, total = [], 0
            for future in futures:
                try:
                    total += future.result()
                except (hub.HubError, OSError) as exc:
                    errors.append(str(exc))
        if errors:
            raise StageError(f"{len(errors)} file(s) failed from {self.describe()}: "
                             f"{'; '.join(errors[:5])}; what arrived is kept in {dest} and the "
                             f"next run continues it")
        return Transfer(len(entries), total, total)


# ---- staging ---------------------------------------------------------------------------------
# The steps that write into the store run as the transfer user (Owner.call); root only reads
# (verification), writes its own state directory (the cache) and switches the link in <root>.

def _open_partial(final: str, partial: str, move_final: bool) -> None:
    """<store>/<name>/<commit>.partial ready for fetching: the broken copy moved there, or new."""
    os.makedirs(os.path.dirname(final), mode=0o755, exist_ok=True)
    if move_final:
        if os.path.isdir(partial):
            shutil.rmtree(partial)
        os.rename(final, partial)
    elif not os.path.isdir(partial):
        os.mkdir(partial, 0o755)
    fsync_dir(os.path.dirname(final))


def _delete_broken(partial: str, paths: list[str]) -> list[str]:
    for rel in paths:
        path = os.path.join(partial, rel)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    return paths


def _transfer(source: Source, entries: list[FileEntry], partial: str, owner: Owner) -> dict[str, int]:
    return dataclasses.asdict(source.transfer(entries, partial, owner))


def _publish(partial: str, final: str, manifest: Manifest) -> None:
    """The manifest beside the files (which commit a directory holds), then <commit> appears."""
    meta = os.path.join(partial, META_DIR)
    if os.path.lexists(meta) and not os.path.isdir(meta):
        os.unlink(meta)
    os.makedirs(meta, mode=0o755, exist_ok=True)
    write_manifest(os.path.join(partial, META_MANIFEST), manifest)
    os.rename(partial, final)
    fsync_dir(os.path.dirname(final))


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


def _link_files(src: str, dest: str, paths: list[str]) -> None:
    """Hard links of src's files under a new dest (made here, so nothing in it is anyone else's)."""
    os.mkdir(dest, 0o755)
    for rel in paths:
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        os.link(os.path.join(src, rel), target, follow_symlinks=False)
    fsync_dir(os.path.dirname(dest))


RENAME_EXCHANGE = 2  # renameat2(2)
AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE); False where the kernel or the
    filesystem cannot (then the caller does it in two renames)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), a)


def _adoption_leftovers(lay: Layout) -> list[str]:
    """The old directory a run killed between an adoption's swap and its removal left beside the
    link (a real directory, never a link; its good files live on in the published copy)."""
    return [path for path in (temp_link(lay.link), lay.link + ".gpuserve-adopted")
            if os.path.isdir(path) and not os.path.islink(path) and os.path.islink(lay.link)]


def _replace_dir_with_link(lay: Layout) -> None:
    """The adopted directory at the link's path becomes the link to the published copy in one
    step, so the path vLLM reads never goes missing; the old directory is removed after."""
    tmp = temp_link(lay.link)
    if os.path.isdir(tmp) and not os.path.islink(tmp):
        shutil.rmtree(tmp)  # an old directory a run killed right after the swap left
    elif os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(lay.link_target, tmp)
    if not _exchange(tmp, lay.link):
        aside = lay.link + ".gpuserve-adopted"
        os.rename(lay.link, aside)  # a gap of two renames where the kernel cannot swap
        os.rename(tmp, lay.link)
        tmp = aside
    fsync_dir(os.path.dirname(lay.link))
    shutil.rmtree(tmp)  # the directory (its good files live on in the published copy)


def _switch_link(lay: Layout) -> None:
    if os.path.isdir(lay.link) and not os.path.islink(lay.link):
        raise StageError(f"{lay.link} is a real directory, not the link this role manages; move "
                         f"it aside (or into {lay.partial} to reuse its files), then re-run")
    replace_symlink(lay.link, lay.link_target)
