# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What a node's vLLM is doing right now, read without changing anything (vllm_node_state).

The serve plan (`_nodeplan`) decides from this and nothing else: which env the running
process uses (its interpreter path: uv and venv scripts name the env's real directory in their
shebang, so the kernel puts it in argv[0]), when that process started (systemd's monotonic
start timestamp, turned into epoch seconds), whether systemd loaded the unit file on disk
(NeedDaemonReload), the env link and `<link>.previous` as real paths, which envs are built,
what changed since the server's start record (_startrecord) or, without one, the mtimes of the
files a restart must follow, the journal a killed run left, a rollback hold, and the server's
own /health and /metrics.
Stdlib only, Python 3.9+, no Ansible imports: it runs on the managed node.
"""

from __future__ import annotations

import json
import os
import socket
import time
import typing as t
import urllib.parse

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _store as es
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _startrecord as sr
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._metrics import parse_prometheus, spec_decode_counters

UNIT_FIELDS = ("LoadState", "ActiveState", "SubState", "MainPID", "NRestarts",
               "ExecMainStartTimestampMonotonic", "InvocationID", "NeedDaemonReload")
GAUGE_RUNNING = "vllm:num_requests_running"
GAUGE_WAITING = "vllm:num_requests_waiting"
# KV-cache usage per engine, a fraction (1 = full); the node's is its fullest engine's.
GAUGE_KV = "vllm:kv_cache_usage_perc"
# Counters that grow while the engine makes progress on any request (prefill or decode).
PROGRESS_COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")


class StateError(ValueError):
    """A file the node keeps cannot be read as what it should be; the message names it."""


def unit_view(props: t.Mapping[str, str], mono_now: float, wall_now: float) -> dict[str, t.Any]:
    """systemctl show's properties as the plan reads them; `started` in epoch seconds;
    `need_daemon_reload`: the unit file (or a drop-in) on disk is not what systemd loaded, so a
    running server runs the unit systemd had in memory."""
    def number(key: str) -> int:
        try:
            return int(props.get(key) or 0)
        except ValueError:
            return 0
    started_mono = number("ExecMainStartTimestampMonotonic")
    return {
        "load_state": props.get("LoadState", ""),
        "active_state": props.get("ActiveState", ""),
        "sub_state": props.get("SubState", ""),
        "main_pid": number("MainPID"),
        "n_restarts": number("NRestarts"),
        "invocation": props.get("InvocationID", ""),
        "need_daemon_reload": props.get("NeedDaemonReload") == "yes",
        "started": (wall_now - mono_now + started_mono / 1e6) if started_mono else None,
    }


def process_env(argv: t.Sequence[str], link: str, link_changed: float | None,
                started: float | None) -> tuple[str, str]:
    """(real path of the env the process runs from, note) from its argv.

    argv[0] is the interpreter the script's shebang named. When that path goes through the
    stable link itself (a unit whose ExecStart names <link>/bin/python), the env it resolved at
    start is the link's current one only if the link has not changed since: otherwise "" and a
    note say it cannot be told.
    """
    if not argv or not os.path.isabs(argv[0]):
        return "", f"argv[0] {argv[0] if argv else '(none)'!r} is not an absolute interpreter path"
    bindir = os.path.dirname(os.path.normpath(argv[0]))
    if os.path.basename(bindir) != "bin":
        return "", f"the process runs {argv[0]}, not an env's bin/ interpreter"
    env = os.path.dirname(bindir)
    link = os.path.normpath(link) if link else ""
    if link and (env == link or env.startswith(link + os.sep)):
        if link_changed is not None and started is not None and link_changed > started:
            return "", (f"the process runs {argv[0]} through {link}, which changed after it "
                        "started: its env cannot be told")
    return os.path.realpath(env), ""


# `vllm serve` listens on all addresses at this port unless told otherwise (vLLM's own defaults).
VLLM_DEFAULT_PORT = 8000


def served_address(argv: t.Sequence[str]) -> tuple[str, int] | None:
    """(host, port) a `vllm serve` process listens on, from its argv (argparse's way: the last
    `--host`/`--port`, as `--flag value` or `--flag=value`; unset: all addresses, port 8000);
    None when argv is no `serve` command or its port is not a number."""
    words = list(argv)
    if "serve" not in words:
        return None
    found: dict[str, str] = {}
    for i, word in enumerate(words):
        for flag in ("--host", "--port"):
            if word == flag and i + 1 < len(words):
                found[flag] = words[i + 1]
            elif word.startswith(flag + "="):
                found[flag] = word[len(flag) + 1:]
    try:
        port = int(found.get("--port", VLLM_DEFAULT_PORT))
    except ValueError:
        return None
    return found.get("--host", ""), port


def is_local(address: str) -> bool:
    """Whether `address` is an IP address of this node (a socket binds to it); names are not."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        socket.inet_pton(family, address)
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


def listen_view(argv: t.Sequence[str], health_url: str, metrics_url: str) -> dict[str, t.Any]:
    """Where the running server is read: the address its own argv says it listens on, not the one
    this run configures (a changed port or host is served on the old one until the restart).

    Returns {host, port, source (process | configured), health_url, metrics_url}: the configured
    URLs' path on the process's address (all addresses are read on 127.0.0.1; a host that is not
    one of this node's IP addresses is not followed, the configured one is kept: the argv is the
    service user's to rewrite); with no `vllm serve` argv to read, the configured URLs themselves.
    """
    configured = urllib.parse.urlsplit(health_url or "")
    served = served_address(argv) if argv else None
    if served is None or not configured.hostname:
        return {"host": configured.hostname or "", "port": configured.port, "source": "configured",
                "health_url": health_url, "metrics_url": metrics_url}
    host, port = served
    bare = host.strip().strip("[]")
    if bare not in ("", "0.0.0.0", "::") and not is_local(bare):
        # The service user can rewrite its process's argv: root follows no address but this node's.
        bare = configured.hostname.strip("[]")
    client = "127.0.0.1" if bare in ("", "0.0.0.0", "::") else bare
    netloc = f"[{client}]:{port}" if ":" in client else f"{client}:{port}"

    def there(url: str) -> str:
        parts = urllib.parse.urlsplit(url)
        return urllib.parse.urlunsplit((parts.scheme or "http", netloc, parts.path, parts.query, "")) if url else url

    return {"host": bare, "port": port, "source": "process",
            "health_url": there(health_url), "metrics_url": there(metrics_url)}


def read_cmdline(pid: int, proc: str = "/proc") -> list[str]:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0") if part]


def link_view(path: str) -> dict[str, str]:
    """A link, dangling link, real directory or nothing; `env` is always a real path."""
    state = es.read_link(path)
    return {"path": path, "kind": state.kind,
            "env": os.path.realpath(path) if state.kind in ("link", "dir") else ""}


def mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def link_mtime(path: str) -> float | None:
    """When a path last changed as a path: a link's own time (when it was switched), else the
    directory's or file's. The weights' paths are switched, not rewritten."""
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None


def code_mtime(env: str) -> float | None:
    """When the vLLM code an env holds last changed: the newest of _startrecord.code_files
    (what a server loads; whatever uv's link mode keeps of the files' own times, each install
    makes a new `*.dist-info` directory). None when the env has no site-packages. Used only for
    a server whose start record is missing (see start_view)."""
    times = [stat.st_mtime for _path, stat in sr.code_files(env)]
    return max(times) if times else None


def start_view(path: str, invocation: str, model: str, drafter: str, unit: str, env_file: str,
               nccl_conf: str) -> dict[str, t.Any]:
    """The start record and, when it is the running process's own (systemd's InvocationID of
    this start), the names of what changed on disk since (`changed`). `current` False: no
    record, another start's (the record could not be written), or an unreadable one (`error`):
    the plan then reads the files' times instead."""
    view: dict[str, t.Any] = {"path": path, "present": False, "current": False, "at": None, "env": "",
                              "vllm_version": "", "model": "", "drafter": "", "changed": [], "unreadable": [],
                              "error": ""}
    try:
        record = sr.read(path) if path else None
    except sr.RecordError as exc:
        return dict(view, present=True, error=str(exc))
    if record is None:
        return view
    view.update(present=True, at=record.get("at"), env=str(record.get("env") or ""),
                vllm_version=str(record.get("vllm_version") or ""),
                model=str((record.get("fingerprint") or {}).get("model") or ""),
                drafter=str((record.get("fingerprint") or {}).get("drafter") or ""),
                current=bool(invocation) and record.get("invocation") == invocation)
    if view["current"]:
        now = sr.fingerprint(unit, env_file, nccl_conf, view["env"], model, drafter)
        view["changed"] = sr.changed(record["fingerprint"], now)
        view["unreadable"] = [f"{name} ({now[name] if str(now[name]).startswith('unreadable') else 'at the start'})"
                              for name in sr.unreadable(now, record["fingerprint"])]
    return view


def read_record(path: str) -> dict[str, t.Any] | None:
    """A JSON record the serve play wrote atomically (journal, hold); None when absent."""
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise StateError(f"{path} cannot be read as JSON ({exc}); it is written atomically by "
                         "gpuserve.vllm, so something else changed it: check which env serves, "
                         "then remove the file and re-run") from exc
    if not isinstance(data, dict):
        raise StateError(f"{path} holds {type(data).__name__}, not a JSON object; remove it and re-run")
    return data


def reboot_view(path: str) -> dict[str, t.Any]:
    """The reboot gpu_node left for the serve play: its reason, and the staged packages to install first.

    The file's first line is the reason; a line ``install: <package> ...`` names the driver packages
    gpu_node downloaded but did not install because the server ran (installed on the stopped node).
    """
    if not path or not os.path.exists(path):
        return {"pending": False, "reason": "", "install": []}
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        return {"pending": True, "reason": f"unreadable: {exc}", "install": []}
    install = [name for line in lines[1:] if line.startswith("install:") for name in line[len("install:"):].split()]
    return {"pending": True, "reason": lines[0].strip() if lines else "", "install": install}


def acceptance_view(path: str) -> dict[str, t.Any]:
    """Node acceptance gpu_node left for the serve play (due while the server ran): the file's
    first line is the reason. The plan runs it drained, on the stopped server."""
    view = reboot_view(path)
    return {"pending": view["pending"], "reason": view["reason"]}


def gauges(text: str) -> dict[str, t.Any]:
    """vLLM's running/waiting gauges and its token counters, summed over engines."""
    samples = parse_prometheus(text)

    def total(name: str) -> float | None:
        rows = samples.get(name)
        return None if rows is None else sum(value for _labels, value in rows)

    running, waiting = total(GAUGE_RUNNING), total(GAUGE_WAITING)
    counters = [total(name) for name in PROGRESS_COUNTERS]
    kv = [value for _labels, value in samples.get(GAUGE_KV, [])]
    spec = spec_decode_counters(text)
    return {
        "present": running is not None or waiting is not None,
        "running": running or 0.0,
        "waiting": waiting or 0.0,
        "progress": sum(c for c in counters if c is not None) if any(c is not None for c in counters) else None,
        "kv_cache_usage": max(kv) if kv else None,
        # Since the server started (the counters'): drafts, draft tokens, accepted tokens; None without spec decoding.
        "spec_decode": {k: spec[k] for k in ("drafts", "draft_tokens", "accepted_tokens")} if spec["present"] else None,
    }


def answer_kind(status: int | None, text: str) -> str:
    """What one HTTP read says: `answer` (a status came back), `refused` (the host says nothing
    listens on that port: known), or `unknown` (a time-out, a reset, anything else)."""
    if status is not None:
        return "answer"
    return "refused" if "refused" in (text or "").lower() else "unknown"


def probe(read: t.Callable[[], tuple[int | None, str]], tries: int,
          pause: t.Callable[[], None]) -> tuple[int | None, str, str, int]:
    """(status, text, kind, tries used): the read again while it says nothing (`unknown`),
    at most `tries` times, so that one missed read is not taken for an answer."""
    status, text, kind, used = None, "", "unknown", 0
    for used in range(1, max(1, tries) + 1):
        status, text = read()
        kind = answer_kind(status, text)
        if kind != "unknown" or used >= tries:
            break
        pause()
    return status, text, kind, used


def health_view(status: int | None, text: str, kind: str, tries: int) -> dict[str, t.Any]:
    """/health as the plan reads it: `known` is false only when nothing could be told."""
    return {"status": status, "error": "" if status else text, "known": kind != "unknown",
            "tries": tries}


def metrics_view(status: int | None, text: str, kind: str, tries: int) -> dict[str, t.Any]:
    """/metrics as the plan and the drain read it. `reachable`: the gauges were read; `known`:
    either that, or it is known there is nothing to read (nothing listens, or no gauges)."""
    view: dict[str, t.Any] = {"reachable": False, "known": kind == "refused", "running": 0.0,
                              "waiting": 0.0, "progress": None, "kv_cache_usage": None, "spec_decode": None,
                              "error": "", "tries": tries}
    if status == 200:
        view.update(gauges(text))
        view["reachable"] = bool(view.pop("present"))
        view["known"] = True
        if not view["reachable"]:
            view["error"] = "no vllm:num_requests_running/waiting gauges"
    else:
        view["error"] = f"HTTP {status}" if status else text
    return view


def envs_view(paths: t.Iterable[str]) -> dict[str, dict[str, bool]]:
    """For each env named anywhere in the state: whether it is built (bin/vllm exists)."""
    view: dict[str, dict[str, bool]] = {}
    for path in paths:
        if path and path not in view:
            view[path] = {"exists": os.path.isdir(path),
                          "built": os.path.exists(os.path.join(path, "bin", "vllm"))}
    return view


def clocks() -> tuple[float, float]:
    return time.monotonic(), time.time()
