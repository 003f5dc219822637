# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What a vLLM server started with, written by its unit at every start and compared on every run.

The unit runs this file as root before vLLM (`ExecStartPre=-+`, installed root-owned by the
vllm_server role): it writes the start record, systemd's INVOCATION_ID of this start and a
fingerprint of everything the server loads at its start (the unit, the env file, the NCCL
configuration, vLLM's code in the env it runs, the model and drafter revisions). vllm_node_state
computes the same fingerprint from what is on disk now, and the serve plan restarts the server
for each name that differs. A fingerprint, not a time: a file put back with its old time (a
patch's rollback), a link switched back or a revision's manifest replaced reads as what it is,
and no handler that a failed task drops is needed to remember it.

The unit is recorded as systemd loaded it, not only as the file reads: when systemd says the file
on disk is not the one it loaded (NeedDaemonReload: a run wrote the unit and was killed before its
daemon-reload, then vLLM crashed and systemd restarted the unit it had in memory), or cannot say,
the unit's digest is recorded marked, so the next comparison names the unit and the plan restarts
the server (after a daemon-reload) instead of taking the old flags for the new ones.

The fingerprint reads, never imports: file digests, stat calls over vLLM's code (its
`*.dist-info` directories and the files under `vllm/`, bytecode left out, ~0.05 s for 3,500
files), the link's real path and a revision's manifest. What lies in the service user's model and
drafter directories is read through _saferead (no link another user placed is followed, no FIFO
or device opened, a size cap, a time bound) and kept as digests, never as lines: the record is
world-readable. A refused read is recorded as "unreadable: <why>" and compares as unknown.

Stdlib only, Python 3.9+. It also runs alone as a script with the system python (`python3 -I
-B`, from the unit as root): then it imports _saferead from beside it, where the vllm_server
role installs the collection's own copy (root's, in a root-only directory).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import typing as t

if __package__:  # a module of the collection (vllm_node_state, the unit tests)
    from ansible_collections.gpuserve.vllm.plugins.module_utils import _saferead as safe
else:  # the unit's script: _saferead.py lies beside it, a directory isolated mode (-I) leaves off sys.path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _saferead as safe

FORMAT = 1
# The names compared, in the order the plan reports them.
FIELDS = ("unit", "env_file", "nccl_conf", "env_code", "model", "drafter")
# Where vllm_weights keeps a staged revision's manifest, and `hf download --local-dir` its commits.
MANIFEST = os.path.join(".gpuserve", "manifest.json")
HF_METADATA = os.path.join(".cache", "huggingface", "download")
# By absolute path, with an empty environment: root runs this with the unit's environment, whose
# PATH the env file could set. The start waits for it at most SYSTEMCTL_TIMEOUT seconds.
SYSTEMCTL = ("/usr/bin/systemctl", "/bin/systemctl")
SYSTEMCTL_TIMEOUT = 5
# The caps of root's reads: a unit, env or NCCL file, a manifest (one line a file of a checkpoint),
# one `*.metadata` file (three short lines).
FILE_LIMIT = 1024 * 1024
MANIFEST_LIMIT = 16 * 1024 * 1024
METADATA_LIMIT = 4096


class RecordError(ValueError):
    """A start record that is not what this file writes; the message names the file."""


def file_digest(path: str, limit: int = FILE_LIMIT) -> str:
    """`sha256:<hex>` of a file's bytes, `absent` when there is none, `unreadable: <why>` (a
    link another user placed, not a regular file, over `limit` bytes: _saferead)."""
    return safe.digest(path, limit) if path else "absent"


def code_files(env: str) -> t.Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of vLLM's code in an env: every `*.dist-info` directory of its
    site-packages (an install, upgrade or reinstall of any package makes one) and every file
    under `vllm/` but bytecode (root importing vLLM writes `__pycache__` without changing what a
    server loads)."""
    for site in sorted(glob.glob(os.path.join(glob.escape(env), "lib", "python*", "site-packages"))):
        try:
            entries = sorted(os.listdir(site))
        except OSError:
            continue
        for name in entries:
            if name.endswith(".dist-info"):
                path = os.path.join(site, name)
                try:
                    yield path, os.lstat(path)
                except OSError:
                    continue
        for root, dirs, files in os.walk(os.path.join(site, "vllm")):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".pyc"):
                    continue
                path = os.path.join(root, name)
                try:
                    yield path, os.lstat(path)
                except OSError:
                    continue


def code_digest(env: str) -> str:
    """One digest of every code file's path, size and time (to the nanosecond): any install,
    patch or put-back changes it, whichever way the time moves. `absent` without an env."""
    if not env:
        return "absent"
    digest, count = hashlib.sha256(), 0
    for path, stat in code_files(env):
        digest.update(f"{os.path.relpath(path, env)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        count += 1
    return f"sha256:{digest.hexdigest()} ({count} files)" if count else "absent"


def vllm_version(env: str) -> str:
    """The vLLM version an env holds, from its dist-info directory's name; "" when none."""
    found = glob.glob(os.path.join(glob.escape(env), "lib", "python*", "site-packages", "vllm-*.dist-info")) if env else []
    return os.path.basename(sorted(found)[-1])[len("vllm-"):-len(".dist-info")] if found else ""


def checkpoint_identity(path: str) -> str:
    """Which revision a model path names: its real path and the digest of the revision's
    manifest (staged by vllm_weights) or of the commits `hf download` recorded (each
    `*.metadata` file's first line; digested, never copied: the directory is the service
    user's); `absent` when the path names none; `unreadable: <why>` when any of it is refused."""
    if not path:
        return "absent"
    try:
        real = safe.directory(path)
        manifest = file_digest(os.path.join(real, MANIFEST), MANIFEST_LIMIT)
        if manifest != "absent":
            return manifest if manifest.startswith("unreadable") else f"{real} manifest {manifest}"
        commits = set()
        for meta, refused in safe.files(os.path.join(real, HF_METADATA), ".metadata"):
            if refused:
                raise safe.Unreadable(meta, refused)
            try:
                commits.add(safe.read_bytes(meta, METADATA_LIMIT).split(b"\n", 1)[0].strip())
            except safe.Absent:  # removed since it was listed
                continue
    except safe.Absent:
        return "absent"
    except safe.Unreadable as exc:
        return str(exc)
    if not commits:
        return real
    return f"{real} commits sha256:" + hashlib.sha256(b"\n".join(sorted(commits))).hexdigest()


def env_of(executable: str) -> str:
    """The env an executable runs from: the real directory above its `bin/` (the env link
    resolved, as the kernel resolves it when systemd starts the server)."""
    if not executable:
        return ""
    return os.path.dirname(os.path.dirname(os.path.realpath(executable)))


def fingerprint(unit: str, env_file: str, nccl_conf: str, env: str, model: str, drafter: str) -> dict[str, str]:
    """What a server starting now would load, one string per name of FIELDS."""
    return {"unit": file_digest(unit), "env_file": file_digest(env_file), "nccl_conf": file_digest(nccl_conf),
            "env_code": code_digest(env), "model": checkpoint_identity(model), "drafter": checkpoint_identity(drafter)}


def need_daemon_reload(unit: str) -> str:
    """systemd's NeedDaemonReload for the unit whose file is `unit` (systemd names a unit by its
    file): `yes`, `no`, or `unknown: <why>`. Never raises: whatever happens, the start goes on."""
    systemctl = next((path for path in SYSTEMCTL if os.path.exists(path)), "")
    if not systemctl:
        return f"unknown: no {' or '.join(SYSTEMCTL)}"
    argv = [systemctl, "show", "--property=NeedDaemonReload", "--value", os.path.basename(unit)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env={}, timeout=SYSTEMCTL_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown: {exc}"
    value = done.stdout.strip()
    if done.returncode != 0 or value not in ("yes", "no"):
        return f"unknown: systemctl show exited {done.returncode}, {(value or done.stderr.strip())[:200]!r}"
    return value


def as_loaded(digest: str, need_reload: str) -> str:
    """The unit's digest as this start loaded it: the file's when systemd loaded that file (no
    daemon-reload pending), else marked so that it equals no file's digest: what ran is the unit
    systemd had in memory, or is not known to be the file. Unknown is not "loaded": the next run
    restarts the server (its start runs daemon-reload first) and that start records again."""
    if need_reload == "no":
        return digest
    if need_reload == "yes":
        return f"not loaded (daemon-reload pending): {digest}"
    return f"not known to be loaded (NeedDaemonReload {need_reload}): {digest}"


def changed(started: t.Mapping[str, t.Any], now: t.Mapping[str, t.Any]) -> list[str]:
    """The names of FIELDS whose value at the start differs from now's, in FIELDS' order. A file
    that could not be read, at the start or now, is not a change (unknown is not changed: see
    unreadable())."""
    return [name for name in FIELDS if str(started.get(name)) != str(now.get(name))
            and name not in unreadable(now, started)]


def unreadable(now: t.Mapping[str, t.Any], started: t.Mapping[str, t.Any] | None = None) -> list[str]:
    """The names of FIELDS whose file could not be read now (or, given the start record's
    fingerprint, at the start): neither changed nor unchanged."""
    return [name for name in FIELDS if str(now.get(name)).startswith("unreadable")
            or str((started or {}).get(name)).startswith("unreadable")]


def make(invocation: str, env: str, files: t.Mapping[str, str], at: float) -> dict[str, t.Any]:
    return {"format": FORMAT, "invocation": invocation, "at": at, "env": env,
            "vllm_version": vllm_version(env), "fingerprint": dict(files)}


def read(path: str) -> dict[str, t.Any] | None:
    """The start record at `path`; None when there is none; RecordError when it is not one."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: the start record cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("fingerprint"), dict):
        raise RecordError(f"{path}: not a gpuserve.vllm start record of format {FORMAT}")
    return data


def write(path: str, record: t.Mapping[str, t.Any]) -> None:
    """Temp file beside it, fsync, rename: a reader sees the old record or the new one. Mode
    0644 in a directory made 0755: root-owned, readable by the status report."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".start-record.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: t.Sequence[str] | None = None, environ: t.Mapping[str, str] | None = None) -> int:
    """ExecStartPre: record this start. Without INVOCATION_ID (not run by systemd) it writes
    nothing: a record must name the start it describes. The unit is recorded as systemd loaded
    it (as_loaded)."""
    parser = argparse.ArgumentParser(description="Record what a vLLM server starts with (gpuserve.vllm).")
    parser.add_argument("--record", required=True)
    parser.add_argument("--executable", required=True)
    for name in ("unit", "env-file", "nccl-conf", "model", "drafter"):
        parser.add_argument("--" + name, default="")
    args = parser.parse_args(argv)
    invocation = (os.environ if environ is None else environ).get("INVOCATION_ID", "")
    if not invocation:
        sys.stderr.write("vllm start record: no INVOCATION_ID (not started by systemd): nothing written\n")
        return 2
    env = env_of(args.executable)
    files = fingerprint(args.unit, args.env_file, args.nccl_conf, env, args.model, args.drafter)
    if args.unit:
        files["unit"] = as_loaded(files["unit"], need_daemon_reload(args.unit))
    write(args.record, make(invocation, env, files, time.time()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
