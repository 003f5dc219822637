# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST SEAM (tests only, never shipped in a role): run one command when a task starts, once.

Enabled with ANSIBLE_CALLBACK_PLUGINS=tests/support/callback_plugins and
ANSIBLE_CALLBACKS_ENABLED=gpuserve_at_task. At the start of the first task whose name holds
GPUSERVE_AT_TASK, before any host runs it, the controller runs GPUSERVE_AT_TASK_ARGV (a JSON
list, no shell) and waits for it: what a second operator does at that moment, e.g. putting a node
back into a router while the run has it out. Its exit status and output are appended to
GPUSERVE_AT_TASK_TRACE ("ran\\t<task>\\trc=<rc>\\t<output>"), for the test to see that it fired.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpuserve_at_task
type: aggregate
short_description: TEST SEAM - run one command at the start of a named task
description:
  - Tests only. See the module docstring.
requirements:
  - GPUSERVE_AT_TASK and GPUSERVE_AT_TASK_ARGV in the environment
"""

import json
import os
import subprocess

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    """Run the command once, at the first task start whose name matches."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuserve_at_task"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.name = os.environ.get("GPUSERVE_AT_TASK", "")
        self.argv = json.loads(os.environ.get("GPUSERVE_AT_TASK_ARGV", "[]"))
        self.trace = os.environ.get("GPUSERVE_AT_TASK_TRACE", "")
        self.fired = False

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        if self.fired or not self.name or not self.argv or self.name not in task.get_name():
            return
        self.fired = True
        done = subprocess.run(self.argv, capture_output=True, text=True, timeout=60, check=False)
        if self.trace:
            output = " ".join((done.stdout + done.stderr).split())
            with open(self.trace, "a", encoding="utf-8") as handle:
                handle.write(f"ran\t{task.get_name()}\trc={done.returncode}\t{output}\n")
