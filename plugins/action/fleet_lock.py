# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action for gpuserve.vllm.fleet_lock: who this run is, and whether the holder still runs.

Both can only be told on the controller. Ansible runs each task in a worker forked from the
ansible-playbook process (ansible-core 2.19, start method "fork"), so the worker's parent is
that process: its pid, start ticks and boot id name the run, and hashing them gives every task of one
run the same run id with no shared state. A holder of another run that the module finds is
judged against this controller's /proc, and the module asked again with that judgement.
"""

from __future__ import annotations

import getpass
import multiprocessing
import os
import socket
import sys
import time
import typing as t

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._lock import (
    holder_alive, process_started, redact_command, run_id, start_ticks)

MODULE = "gpuserve.vllm.fleet_lock"
PROC = "/proc"


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
            if reply.get("action") == "takeover":  # the operator must see it, without -v
                result.setdefault("warnings", []).append(str(reply.get("msg", "")))
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def _module(self, module_args: dict, task_vars: dict) -> dict:
        return self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)
