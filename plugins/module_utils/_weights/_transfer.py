# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Fetching a revision's files into its staging directory, as the transfer user (`Owner`).

From another host's verified copy or a local mirror with rsync (resumable, verified), or
from the Hub or an HTTP mirror with ranges. Stdlib only, no Ansible imports: runs on the
managed node.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import pwd
import re
import subprocess
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _hub as hub
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._layout import StageError
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._manifest import FileEntry


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
