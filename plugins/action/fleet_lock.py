# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action for gpuserve.vllm.fleet_lock: who this run is, and whether the holder still runs.

Both can only be told on the controller. Ansible runs each task in a worker forked from the
ansible-playbook process (ansible-core 2.19, start method "fork"), so the worker's parent is
that process: its pid, start ticks and boot id name the run, and hashing them gives every task of one
run the same run id with no shared state. A holder of another run that the module finds is
judged against this controller's /proc, and the module asked again with that judgement.

Once the lock is this run's, a heartbeat process (one per run, forked from the task's worker so it
has the task's connection, become and variables) renews it every `heartbeat_every` s through the
module's state=renew, however long a step of the run takes, and stops by itself within seconds of
the ansible-playbook process's end (_lock.heartbeat says how it is bound to the run).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import multiprocessing
import os
import signal
import socket
import sys
import time
import typing as t

from ansible import constants as C
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._lock import (
    ENDED, LockError, heartbeat, heartbeat_every, holder_alive, process_started, redact_command, run_id, start_ticks)

MODULE = "gpuserve.vllm.fleet_lock"
PROC = "/proc"
HEARTBEAT_POLL = 2.0  # seconds between two reads of whether the run still runs


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def playbook_process() -> tuple[int, list[str]]:
    """The ansible-playbook process and its argv (without the Python interpreter running it).

    Each task runs in a multiprocessing worker forked from ansible-playbook, whose pid is the
    worker's parent process (checked with ansible-core 2.19: os.getppid() is the same pid and
    its /proc cmdline is the ansible-playbook command). Outside a worker this process is it.
    """
    parent = multiprocessing.parent_process()
    pid = parent.pid if parent is not None and parent.pid else os.getpid()
    argv = _cmdline(pid) or list(sys.argv)
    if len(argv) > 1 and os.path.basename(argv[0]).startswith("python") and not argv[1].startswith("-"):
        argv = argv[1:]
    return pid, argv


def _pid_namespace() -> str:
    """This process's PID namespace (`pid:[4026531836]`), "" when it cannot be read."""
    try:
        return os.readlink(f"{PROC}/self/ns/pid")
    except OSError:
        return ""


def this_run() -> dict[str, t.Any]:
    """The holder record of the ansible-playbook run this task belongs to."""
    pid, argv = playbook_process()
    ticks = start_ticks(pid, PROC) or ""
    boot_id = _read(f"{PROC}/sys/kernel/random/boot_id")
    pid_ns = _pid_namespace()
    controller = socket.gethostname()
    return {
        "run_id": run_id(controller, boot_id, pid, ticks, pid_ns),
        "controller": controller,
        "boot_id": boot_id,
        "pid_ns": pid_ns,
        "pid": pid,
        "pid_start": ticks,
        "started": process_started(ticks, PROC) if ticks else time.time(),
        "user": getpass.getuser(),
        "command": redact_command(argv),
        "heartbeat": time.time(),
    }


def running(pid: int, ticks: str) -> bool:
    """Whether the process pid, started at `ticks`, still runs (a reused pid is another process)."""
    return bool(ticks) and start_ticks(pid, PROC) == ticks


class ActionModule(ActionBase):
    """Take, keep or release the lock; judge here a holder of another run the module found."""

    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: t.Any = None, task_vars: dict | None = None) -> dict:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = {k: v for k, v in self._task.args.items()
                if k not in ("holder", "holder_alive", "judged_run_id")}
        state = args.get("state", "present")
        me = this_run()
        try:
            every = heartbeat_every(args.get("stale_after", 10800), args.get("heartbeat_every", 0))
        except (LockError, TypeError, ValueError) as exc:
            return dict(result, failed=True, msg=f"fleet_lock: {exc}")
        try:
            if state == "query":
                reply = self._module(args, task_vars)
            elif state == "absent":
                reply = self._module(dict(args, holder=me), task_vars)
            else:
                # One call where the lock is free or this run's (nearly every time): the module
                # takes a holder it was not told about for alive, so another run's lock is refused
                # unjudged, and only then judged here and asked again (its first answer dropped).
                reply = self._module(dict(args, state="present", holder=me), task_vars)
                existing = reply.get("holder")
                if (reply.get("action") == "refuse" and isinstance(existing, dict)
                        and existing.get("run_id") not in (None, "", me["run_id"])):
                    alive = holder_alive(existing, controller=me["controller"],
                                         boot_id=me["boot_id"], proc=PROC, pid_ns=me["pid_ns"])
                    reply = self._module(dict(args, state="present", holder=me, holder_alive=alive,
                                              judged_run_id=existing["run_id"]), task_vars)
            result.update(reply)
            if state == "present" and reply.get("action") in ("acquire", "keep", "takeover"):
                result["heartbeat_pid"] = (self._heartbeat(args, task_vars, me, every)
                                           if every and not self._task.check_mode else None)
            if reply.get("action") == "takeover":  # the operator must see it, without -v
                result.setdefault("warnings", []).append(str(reply.get("msg", "")))
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def _heartbeat(self, args: dict, task_vars: dict, me: dict, every: float) -> int | None:
        """The pid of this run's heartbeat process for this lock, started here unless one runs."""
        if not running(me["pid"], me["pid_start"]):
            return None  # no /proc to bind it to the run by: the tasks renew the lock alone
        where = json.dumps([me["run_id"], self._task.delegate_to or task_vars.get("inventory_hostname"),
                            args.get("path", "")])
        marker = os.path.join(C.DEFAULT_LOCAL_TMP,  # ansible-playbook's own tmp dir: gone with the run
                              f"gpuserve-lock-heartbeat-{hashlib.sha256(where.encode()).hexdigest()[:16]}")
        found = _read(marker).split()
        if len(found) == 2 and found[0].isdigit() and running(int(found[0]), found[1]):
            return int(found[0])
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            try:  # never return into Ansible's stack from here
                os.close(read_end)
                os.setsid()
                if os.fork() == 0:
                    os.write(write_end, str(os.getpid()).encode())
                    os.close(write_end)
                    self._beat_until_the_run_ends(args, task_vars, me, every)
            finally:
                os._exit(0)
        os.close(write_end)
        os.waitpid(child, 0)
        with os.fdopen(read_end, "rb") as pipe:
            pid = int(pipe.read() or 0)
        if not pid:
            return None
        with open(marker, "w", encoding="utf-8") as handle:
            handle.write(f"{pid} {start_ticks(pid, PROC) or ''}\n")
        return pid

    def _beat_until_the_run_ends(self, args: dict, task_vars: dict, me: dict, every: float) -> None:
        """The heartbeat process: renew the lock until the run ends or the lock is not its own."""
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # Nothing through the worker's queue to ansible-playbook (it may be gone): to /dev/null.
        Display()._final_q = None  # pylint: disable=protected-access
        sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")  # pylint: disable=consider-using-with
        # The task's remote tmp dir, made before the fork, is the worker's to remove: each beat makes its own.
        self._connection._shell.tmpdir = None

        def beat() -> str:
            try:
                reply = self._module(dict(args, state="renew", holder=me), task_vars)
                self._remove_tmp_path(self._connection._shell.tmpdir)
            except Exception:  # pylint: disable=broad-exception-caught
                return "error"  # the lock host did not answer: try again soon
            return "error" if reply.get("failed") else str(reply.get("action"))

        why = heartbeat(lambda: running(me["pid"], me["pid_start"]), beat, every, poll=HEARTBEAT_POLL)
        if why == ENDED:  # no last play released it: say so in the lock, for any run to take it over
            try:
                self._module(dict(args, state="ended", holder=me), task_vars)
                self._remove_tmp_path(self._connection._shell.tmpdir)
            except Exception:  # pylint: disable=broad-exception-caught
                pass  # the lock host did not answer: the lock goes stale after stale_after, as before

    def _module(self, module_args: dict, task_vars: dict) -> dict:
        return self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)
