# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""One `ansible-playbook site.yml` at a time per fleet: the lock's holder record and its rules.

Two runs rolling the same fleet at once drain and restart the same nodes from two plans. The
lock file names its holder (controller, ansible-playbook pid and start ticks, boot, user,
command, run id) so a refusal says who to ask, and a run killed on this controller (its pid gone
or reused) is told apart from one still running or one that cannot be seen from here (another
controller or boot): only the first is taken over without an operator's word. Stdlib only, no
Ansible imports: the rules are table-tested, the module and the action plugin only do the I/O.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import time
import typing as t
import uuid

RECORD_FIELDS = ("run_id", "controller", "boot_id", "pid_ns", "pid", "pid_start", "started", "user", "command",
                 "heartbeat")  # and, once its heartbeat saw the run's process end, "ended" (mark_ended)

# ansible-playbook options whose values may be secrets (aliases included): never written down.
SECRET_LONG = ("--extra-vars", "--vault-password-file", "--vault-pass-file", "--vault-id",
               "--private-key", "--key-file", "--become-password-file", "--become-pass-file",
               "--connection-password-file", "--conn-pass-file")
# Whole options of their own that are also prefixes of a secret one (argparse takes exact first).
NOT_SECRET = ("--become", "--connection")
# Short flags that take no value and may come before `e` in one token (`-ve x`, `-vvve@f`).
SHORT_FLAGS = "vbkKCDJh"
MASK = "***"
ENDED = "the run ended"  # heartbeat()'s answer once the run's process is gone
RUN_NAMESPACE = uuid.UUID("5b0c3c1e-8d7a-4f7e-9a52-6a1f0c2d9e41")


class LockError(Exception):
    """The lock file holds something that is not a holder record."""


def _when(epoch: t.Any) -> str:
    """An epoch as UTC ISO 8601 to the second; "?" when it is not one."""
    try:
        moment = datetime.datetime.fromtimestamp(float(epoch), datetime.timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"
    return moment.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def holder_text(record: t.Mapping[str, t.Any]) -> str:
    """One line naming the holder, for refusals, warnings and takeovers."""
    return (f"run {record.get('run_id', '?')}: ansible-playbook pid {record.get('pid', '?')} "
            f"on controller {record.get('controller', '?')}, started {_when(record.get('started'))} "
            f"by {record.get('user', '?')}: {record.get('command', '?')}")


def check_record(record: t.Any, what: str = "lock file") -> dict:
    """The record as a dict; a LockError saying what was found when it is not a holder record."""
    if not isinstance(record, dict):
        raise LockError(f"the {what} holds {type(record).__name__} {str(record)[:80]!r}, "
                        "not a holder record (a mapping with run_id)")
    if not isinstance(record.get("run_id"), str) or not record["run_id"]:
        raise LockError(f"the {what} holds a mapping without a run_id "
                        f"(keys: {', '.join(sorted(map(str, record))) or 'none'})")
    return record


def parse_record(text: str) -> dict:
    """A lock file's text -> its record; LockError for anything else (empty, not JSON, no run_id)."""
    try:
        value = json.loads(text)
    except ValueError:
        raise LockError(f"the lock file holds {text[:80]!r}, not JSON") from None
    return check_record(value)


def decide(existing: dict | None, me: dict, *, holder_alive: bool | None,
           break_run_id: str = "", now: float | None = None, stale_after: float = 0) -> dict:
    """What this run does with the lock: acquire, keep, takeover or refuse, with one line why.

    holder_alive is the controller's judgement of the existing holder: False = it ran on this
    controller and boot and its process is gone (a killed run), True = still running, None =
    cannot be told from here (another controller or boot). A holder that cannot be told and
    whose last heartbeat (every play of site.yml renews it) is older than `stale_after` seconds
    is taken for gone: a run on another controller (an AWX job's container) that failed or was
    killed does not hold the fleet for ever.
    """
    check_record(me, "holder record of this run")
    if existing is None:
        return {"action": "acquire", "msg": f"lock acquired by {holder_text(me)}"}
    existing = check_record(existing)
    old = holder_text(existing)
    if existing["run_id"] == me["run_id"]:
        return {"action": "keep", "msg": f"lock already held by this run ({old})"}
    if existing.get("ended"):  # its heartbeat saw its process end (mark_ended): anyone may take it
        return {"action": "takeover",
                "msg": f"a lock left by a run that ended without releasing it (interrupted, killed, or cut "
                       f"short before its last play: its heartbeat saw its process end at "
                       f"{_when(existing.get('ended'))}) was taken over: {old}"}
    if holder_alive is True:
        return {"action": "refuse",
                "msg": f"another ansible-playbook run holds the fleet lock and is still running: {old}. "
                       "Wait for it to finish, or stop it first"}
    if holder_alive is False:
        return {"action": "takeover",
                "msg": f"a lock left by a run that ended without releasing it (killed, or stopped by "
                       f"a failure: its process is gone from this controller) was taken over: {old}"}
    silent = _silent_for(existing, now)
    if holder_alive is None and stale_after > 0 and silent is not None and silent > stale_after:
        return {"action": "takeover",
                "msg": f"a lock whose run gave no sign of life for {silent / 60:.0f} min "
                       f"(gpuserve_lock_stale_after: {stale_after / 60:.0f} min) was taken over: {old}"}
    if break_run_id and break_run_id == existing["run_id"]:
        return {"action": "takeover",
                "msg": f"the lock of run {break_run_id} was taken over on purpose "
                       f"(gpuserve_lock_break): {old}"}
    named = (f" (gpuserve_lock_break={break_run_id} names another run)"
             if break_run_id else "")
    return {"action": "refuse",
            "msg": f"the fleet lock is held by {old}; that run is on another controller or boot, "
                   f"so whether it still runs cannot be told from here{named}. Once you have "
                   f"checked that it is gone, take the lock over on purpose with "
                   f"-e gpuserve_lock_break={existing['run_id']}"}


def _silent_for(record: t.Mapping[str, t.Any], now: float | None) -> float | None:
    """Seconds since the holder's last heartbeat (its start when it has none); None if unknown."""
    if now is None:
        return None
    try:
        return float(now) - float(record.get("heartbeat") or record.get("started"))
    except (TypeError, ValueError):
        return None


def start_ticks(pid: int, proc: str = "/proc") -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks after boot); None if no such pid."""
    try:
        with open(os.path.join(proc, str(int(pid)), "stat"), encoding="utf-8", errors="replace") as handle:
            stat = handle.read()
    except (OSError, ValueError):
        return None
    # comm (field 2) may hold spaces and parentheses: count from the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def holder_alive(record: t.Mapping[str, t.Any], *, controller: str, boot_id: str,
                 proc: str = "/proc", pid_ns: str = "") -> bool | None:
    """Whether the holder's ansible-playbook still runs; None when it ran elsewhere or unknowably.

    Elsewhere includes another PID namespace of this host: two controller containers with the
    same host name on one machine share its boot id, and a pid of one means nothing in the other
    (a record without `pid_ns`, written before it was kept, is judged by host and boot alone)."""
    if not boot_id or record.get("controller") != controller or record.get("boot_id") != boot_id:
        return None
    if record.get("pid_ns") and record.get("pid_ns") != pid_ns:
        return None
    try:
        pid = int(record.get("pid"))
    except (TypeError, ValueError):
        return None
    if pid <= 0:
        return None
    ticks = start_ticks(pid, proc)
    return ticks is not None and ticks == str(record.get("pid_start"))


def process_started(ticks: str, proc: str = "/proc") -> float | None:
    """A process's start as epoch seconds: boot time (/proc/stat btime) + its start ticks."""
    try:
        with open(os.path.join(proc, "stat"), encoding="utf-8") as handle:
            btime = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
        return btime + int(ticks) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def run_id(controller: str, boot_id: str, pid: int, pid_start: str, pid_ns: str = "") -> str:
    """The same id from every task of one ansible-playbook process, a new one for the next run
    (also of a same-numbered process in another PID namespace of the same host)."""
    return str(uuid.uuid5(RUN_NAMESPACE, f"{controller}\0{boot_id}\0{pid_ns}\0{pid}\0{pid_start}"))


def _secret_long(name: str) -> bool:
    if name in SECRET_LONG:
        return True
    # argparse accepts unambiguous prefixes (`--extra x`); redacting too much is harmless.
    return name not in NOT_SECRET and len(name) > 2 and any(s.startswith(name) for s in SECRET_LONG)


def redact_command(argv: t.Sequence[str]) -> str:
    """The command line with every secret-bearing option's value replaced by ***, shell-quoted."""
    out: list[str] = []
    hide_next = False
    for index, arg in enumerate(argv):
        if hide_next:
            out.append(MASK)
            hide_next = False
        elif arg == "--":
            out.extend(argv[index:])
            break
        elif arg.startswith("--"):
            name, eq, _value = arg.partition("=")
            if _secret_long(name):
                out.append(f"{name}={MASK}" if eq else arg)
                hide_next = not eq
            else:
                out.append(arg)
        elif arg.startswith("-") and len(arg) > 1:
            out.append(_redact_short(arg))
            hide_next = arg[1:].lstrip(SHORT_FLAGS) == "e"
        else:
            out.append(arg)
    return shlex.join(out)


def _redact_short(arg: str) -> str:
    """`-e x` stays, `-ex=1`/`-e=x`/`-ve@f` keep their flags and lose the value."""
    rest = arg[1:].lstrip(SHORT_FLAGS)
    if not rest.startswith("e") or rest == "e":
        return arg
    head = arg[: len(arg) - len(rest) + 1]
    return head + ("=" if rest[1:].startswith("=") else "") + MASK


def renew(existing: dict | None, me: dict) -> dict:
    """The heartbeat's renewal: this run's lock gets a new stamp, and nothing else happens.

    A heartbeat never takes a lock: one released by its run, or taken over by another, is lost
    to it for good, and the heartbeat stops (the next play of a live run takes it again)."""
    check_record(me, "holder record of this run")
    if existing is not None and check_record(existing)["run_id"] == me["run_id"]:
        return {"action": "keep", "msg": f"heartbeat of {holder_text(existing)}"}
    held = f"held by {holder_text(existing)}" if existing is not None else "released"
    return {"action": "lost", "msg": f"the fleet lock is no longer this run's ({held}): the heartbeat stops"}


def mark_ended(existing: dict | None, me: dict, now: float) -> dict:
    """The heartbeat's last act once its run's process is gone and the lock is still the run's:
    the record stays (the next run says whose it was and finishes its journals) but is marked
    `ended`, so that a run from any controller takes it over at once -- not after the stale age,
    not only with gpuserve_lock_break. Any other lock, or none, is left alone."""
    check_record(me, "holder record of this run")
    if existing is None or check_record(existing)["run_id"] != me["run_id"]:
        return {"action": "lost", "msg": "the fleet lock is no longer this run's: nothing to mark"}
    return {"action": "ended", "record": dict(existing, ended=float(now)),
            "msg": f"the run ended without releasing the fleet lock: marked for any run to take over ({holder_text(existing)})"}


def heartbeat_every(stale_after: float, every: float = 0) -> float:
    """Seconds between two heartbeats of a live run: `every`, or a sixth of stale_after when 0;
    0 (no heartbeat) when no lock ever goes stale. A LockError when fewer than three beats fit
    into stale_after: one beat lost to a busy lock host must not make a live run look dead."""
    stale_after, every = float(stale_after), float(every)
    if stale_after <= 0:
        return 0.0
    every = every if every > 0 else stale_after / 6
    if every * 3 > stale_after:
        raise LockError(f"a heartbeat every {every:.0f} s does not fit three times into gpuserve_lock_stale_after "
                        f"({stale_after:.0f} s): a live run could be judged gone. Set gpuserve_lock_heartbeat "
                        "to at most a third of it")
    return every


def heartbeat(alive: t.Callable[[], bool], beat: t.Callable[[], str], every: float, *, poll: float = 2.0,
              retry: float = 30.0, clock: t.Callable[[], float] | None = None,
              sleep: t.Callable[[float], None] | None = None) -> str:
    """Renew the lock every `every` s while its run lives; return why it stopped.

    Bound to the run: `alive()` (the ansible-playbook process, its pid and start ticks) is read
    every `poll` s and again right before each beat, so a heartbeat outlives its run by at most
    `poll` s plus one beat in flight, and a dead run's lock goes stale `stale_after` after its last
    beat. `beat()` answers keep (renewed), lost (released or taken: stop) or anything else (the lock
    host did not answer: try again after `retry` s, while the lock still has time)."""
    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    due = clock() + every
    while True:
        if not alive():
            return ENDED
        if clock() >= due:
            outcome = beat()
            if outcome == "lost":
                return "the lock is no longer this run's"
            due = clock() + (every if outcome == "keep" else min(every, retry))
            continue
        sleep(max(0.0, min(poll, due - clock())))
