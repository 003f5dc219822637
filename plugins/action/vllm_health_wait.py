# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action for gpuserve.vllm.vllm_health_wait: call the module in chunks, print progress.

An Ansible task prints only when it ends; a vLLM load takes up to an hour. The module returns
every `progress_interval` seconds, and this action prints elapsed time and the latest
meaningful log line before calling it again, so operators never watch a silent hour.
"""

from __future__ import annotations

import typing as t

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

MODULE = "gpuserve.vllm.vllm_health_wait"


class ActionModule(ActionBase):
    """Loop the module until healthy, dead or timed out."""

    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: t.Any = None, task_vars: dict | None = None) -> dict:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        host = task_vars.get("inventory_hostname", "?")
        label = args.get("unit") or args.get("url") or "vLLM"
        module_args = dict(args)
        progress: list[str] = []
        try:
            while True:
                reply = self._execute_module(module_name=MODULE, module_args=module_args,
                                             task_vars=task_vars)
                if reply.get("failed") or reply.get("done", True):
                    result.update(reply)
                    result["progress"] = progress
                    return result
                module_args = dict(args, started=reply["started"], baseline=reply["baseline"])
                state = reply.get("unit_state") or {}
                where = f"{state.get('ActiveState', '?')}/{state.get('SubState', '?')}" if state else ""
                answer = reply.get("http_status")
                line = reply.get("latest_line") or "(no log line yet)"
                message = (f"{label}: {reply.get('elapsed_text')} elapsed, not healthy yet "
                           f"({where + ', ' if where else ''}/health: "
                           f"{answer if answer is not None else 'not listening'}); latest: {line}")
                progress.append(message)
                display.display(f"[{host}] {message}", color="cyan")
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
