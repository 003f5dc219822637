# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST SEAM (tests only, never shipped in a role): SIGKILL ansible-playbook at a task boundary.

Enabled with ANSIBLE_CALLBACK_PLUGINS=tests/support/callback_plugins and
ANSIBLE_CALLBACKS_ENABLED=gpuserve_kill. GPUSERVE_KILL_TRACE=FILE appends one line per task
result that changed something ("changed\\t<host>\\t<task>"); GPUSERVE_KILL_AT=N kills the
controller (SIGKILL, as an operator's kill -9 or a lost session would) at the start of the first
task after the N-th such result, writing "killed\\t<task>" first. Between two changing tasks the
nodes are in the same state, so killing after each change covers every state a killed run can
leave behind. GPUSERVE_KILL_AT_TASK=TEXT kills at the start of the first task whose name holds
TEXT instead (a run killed right after a given step, e.g. the unit's render).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpuserve_kill
type: aggregate
short_description: TEST SEAM - kill ansible-playbook after the N-th changed task result
description:
  - Tests only. See the module docstring.
requirements:
  - GPUSERVE_KILL_TRACE and/or GPUSERVE_KILL_AT or GPUSERVE_KILL_AT_TASK in the environment
"""

import os
import signal

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    """Count changed results; kill at the next task start once the count is reached."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuserve_kill"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.trace = os.environ.get("GPUSERVE_KILL_TRACE", "")
        at = os.environ.get("GPUSERVE_KILL_AT", "")
        self.kill_at = int(at) if at else 0
        self.kill_at_task = os.environ.get("GPUSERVE_KILL_AT_TASK", "")
        self.changed = 0

    def _write(self, line: str) -> None:
        if self.trace:
            with open(self.trace, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
                handle.flush()
                os.fsync(handle.fileno())

    def v2_runner_on_ok(self, result) -> None:
        if result._result.get("changed"):
            self.changed += 1
            self._write(f"changed\t{result._host.get_name()}\t{result._task.get_name()}")

    def _maybe_kill(self, task) -> None:
        if (self.kill_at and self.changed >= self.kill_at) or (
                self.kill_at_task and self.kill_at_task in task.get_name()):
            self._write(f"killed\t{task.get_name()}")
            os.kill(os.getpid(), signal.SIGKILL)

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        self._maybe_kill(task)

    def v2_playbook_on_handler_task_start(self, task) -> None:
        self._maybe_kill(task)
