#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for vLLM's /health while watching its systemd unit, failing with the root cause."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_health_wait
short_description: Wait for a vLLM server to become healthy, failing within seconds if it dies
version_added: 0.1.0
description:
  - Polls the server's C(/health) endpoint and, at the same time, the systemd unit running it
    (C(systemctl show) C(ActiveState), C(SubState), C(MainPID), C(NRestarts)).
  - If the process exits, is restarted by systemd, or the unit stops, the wait ends at once;
    the module reads the journal of the unit's start it watches (C(_SYSTEMD_INVOCATION_ID), else
    C(journalctl -u) since that process started, never an earlier start's lines) and fails
    with the root-cause lines in its message. vLLM's per-process prefixes (C((Worker_TP3 pid=..\)),
    level, date, C([file:line])) are removed and tracebacks read per process, so the message
    leads with the first real exception (type, message, file, line, source line) -- for example
    a worker's C(IndentationError), C(ModuleNotFoundError), CUDA out of memory, an NCCL error,
    C(No valid attention backend), an argument error or a config C(ValidationError) -- followed
    by vLLM's generic C(Engine core initialization failed), and a hint what to do.
  - A model load takes up to an hour and an Ansible task prints only when it ends, so the module
    returns after O(progress_interval) seconds with the elapsed time and the latest meaningful
    log line (weights loaded, KV cache sized, CUDA graphs captured). The companion action plugin
    of the same name calls it again until the server is healthy, dies or O(timeout) passes, and
    prints one progress line per call.
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
  - gpuserve.vllm.attributes.read_only
options:
  url:
    description: The health URL.
    type: str
    default: http://127.0.0.1:8000/health
  unit:
    description:
      - The systemd unit running vLLM. Without it the wait cannot notice a death and only times out.
    type: str
  timeout:
    description: Seconds to wait in all before failing.
    type: int
    default: 3600
  progress_interval:
    description:
      - Seconds per call before the module returns a progress report (the action plugin then
        calls it again). V(0) waits for the whole O(timeout) in one call.
    type: int
    default: 30
  poll_interval:
    description: Seconds between two looks at the endpoint and the unit.
    type: float
    default: 1.0
  unhealthy_grace:
    description:
      - Seconds the server may answer C(/health) with an error status (it listens but says the
        engine is dead) before the wait fails with the journal's root cause.
    type: int
    default: 120
  journal_lines:
    description: At most this many journal lines are read to find the root cause and progress.
    type: int
    default: 5000
  started:
    description:
      - Internal, set by the action plugin between calls. Epoch seconds when the whole wait began.
    type: float
  baseline:
    description:
      - Internal, set by the action plugin between calls. The unit's properties when the wait
        began, to recognise a restart.
    type: dict
notes:
  - Requires C(systemctl) and C(journalctl) on the target when O(unit) is set.
  - The health endpoint needs no API key in vLLM.
seealso:
  - module: gpuserve.vllm.vllm_server_check
"""

EXAMPLES = r"""
- name: Wait up to an hour for vLLM, reporting progress every 30 s
  gpuserve.vllm.vllm_health_wait:
    url: http://127.0.0.1:8000/health
    unit: vllm.service
    timeout: 3600
    progress_interval: 30
"""

RETURN = r"""
healthy:
  description: Whether /health answered 200.
  returned: always
  type: bool
  sample: true
done:
  description: False when the call only returned to report progress and the wait goes on.
  returned: always
  type: bool
  sample: true
elapsed:
  description: Seconds since the whole wait began.
  returned: always
  type: float
  sample: 1712.4
elapsed_text:
  description: RV(elapsed) for people, for example C(27m41s).
  returned: always
  type: str
  sample: 28m32s
latest_line:
  description: The newest meaningful line of the unit's journal.
  returned: when the unit logged one
  type: str
  sample: "Loading safetensors checkpoint shards:  45% Completed | 29/64"
http_status:
  description: The last status /health answered, or null when nothing listened.
  returned: always
  type: int
  sample: 200
unit_state:
  description: The unit's systemd properties at the end of the call.
  returned: when O(unit) is set
  type: dict
  sample: {"ActiveState": "active", "SubState": "running", "MainPID": "812", "NRestarts": "0"}
root_cause:
  description: The lines that say why the server died (on failure).
  returned: failure
  type: list
  elements: str
  sample:
    - >-
      IndentationError: unexpected indent -- in /opt/ml-env/.../deepseek_v2.py line 84 near
      `from vllm.model_executor.layers.fused_moe import FusedMoE` (raised in 8 processes)
    - "RuntimeError: Engine core initialization failed. See root cause above. ..."
root_cause_hint:
  description: What to do about the kind of failure recognised in RV(root_cause), if any.
  returned: failure
  type: str
  sample: >-
    a Python file of the environment does not parse (an edited or patched vLLM file?): fix the
    file and line named, or reinstall vLLM and re-run its patches
journal_tail:
  description: The last journal lines of the dead process (on failure).
  returned: failure
  type: list
  elements: str
progress:
  description: The progress lines the action plugin printed during the wait, oldest first.
  returned: always (through the action plugin)
  type: list
  elements: str
  sample:
    - >-
      vllm.service: 30s elapsed, not healthy yet (active/running, /health: not listening);
      latest: Loading safetensors checkpoint shards:  12% Completed | 8/64
started:
  description: Epoch seconds when the whole wait began (passed back by the action plugin).
  returned: always
  type: float
baseline:
  description: The unit's properties when the wait began (passed back by the action plugin).
  returned: always
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._http import format_duration, http_request
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._journal import (
    cause_hint,
    extract_root_cause,
    latest_meaningful_line,
)
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._unit import (
    UNIT_PROPERTIES,
    parse_systemctl_show,
    unit_death,
)


class Watcher:
    """The unit and its journal, read through systemctl/journalctl."""

    def __init__(self, module: AnsibleModule, unit: str | None, journal_lines: int) -> None:
        self.module = module
        self.unit = unit
        self.journal_lines = journal_lines
        self.systemctl = module.get_bin_path("systemctl", required=bool(unit))
        self.journalctl = module.get_bin_path("journalctl")

    def state(self) -> dict[str, str]:
        if not self.unit:
            return {}
        cmd = [self.systemctl, "show", self.unit] + [f"--property={p}" for p in UNIT_PROPERTIES]
        rc, out, err = self.module.run_command(cmd)
        if rc != 0:
            self.module.fail_json(msg=f"systemctl show {self.unit} failed: {err.strip() or out.strip()}")
        return parse_systemctl_show(out)

    def journal(self, since: float, invocation: str | None = None) -> list[str]:
        """The unit's lines since `since`; only those of one start when its invocation is known.

        journald tags a service's output with _SYSTEMD_INVOCATION_ID; where it cannot (some
        containers), the time window alone keeps earlier starts' lines out.
        """
        if not self.unit or not self.journalctl:
            return []
        tail = ["--since", f"@{int(since)}", "--output", "cat", "--no-pager", "--quiet",
                "--lines", str(self.journal_lines)]
        if invocation:
            rc, out, _err = self.module.run_command(
                [self.journalctl, f"_SYSTEMD_INVOCATION_ID={invocation}"] + tail, errors="surrogate_or_replace")
            if rc == 0 and out.strip():
                return out.splitlines()
        rc, out, _err = self.module.run_command([self.journalctl, "--unit", self.unit] + tail,
                                                errors="surrogate_or_replace")
        return out.splitlines() if rc == 0 else []


def process_start_epoch(props: dict[str, str], now: float) -> float:
    """Wall-clock time the unit's main process started (monotonic stamp mapped to epoch)."""
    try:
        mono = int(props.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
    except ValueError:
        mono = 0
    if mono <= 0:
        return now - 5
    # journalctl --since takes whole seconds and rounds down: no slack needed, and none taken,
    # so the lines of a start that ended just before this one stay out.
    return now - max(0.0, time.monotonic() - mono)


def main() -> None:
    """One call: wait until healthy, dead, the progress interval or the overall timeout."""
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": "http://127.0.0.1:8000/health"},
            "unit": {"type": "str"},
            "timeout": {"type": "int", "default": 3600},
            "progress_interval": {"type": "int", "default": 30},
            "poll_interval": {"type": "float", "default": 1.0},
            "unhealthy_grace": {"type": "int", "default": 120},
            "journal_lines": {"type": "int", "default": 5000},
            "started": {"type": "float"},
            "baseline": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    p = module.params
    watcher = Watcher(module, p["unit"], p["journal_lines"])
    now = time.time()
    started = p["started"] or now
    deadline = started + p["timeout"]
    call_end = min(deadline, now + p["progress_interval"]) if p["progress_interval"] > 0 else deadline
    baseline = p["baseline"]
    if not baseline:
        baseline = watcher.state()
        baseline["since"] = str(process_start_epoch(baseline, now)) if baseline else str(now)
    since = float(baseline.get("since") or started)
    status: int | None = None
    unhealthy_since = float(baseline.get("unhealthy_since") or 0) or None  # kept across calls
    current = baseline

    def report(**extra) -> dict:
        elapsed = time.time() - started
        lines = watcher.journal(since, baseline.get("InvocationID"))
        result = {"changed": False, "started": started, "baseline": baseline,
                  "elapsed": round(elapsed, 1), "elapsed_text": format_duration(elapsed),
                  "http_status": status, "latest_line": latest_meaningful_line(lines)}
        if p["unit"]:
            result["unit_state"] = {k: current.get(k) for k in UNIT_PROPERTIES if k in current}
        result.update(extra)
        return result

    def fail(reason: str) -> None:
        lines = watcher.journal(since, baseline.get("InvocationID"))
        for _attempt in range(6):  # journald may still be taking in a dying process's last lines
            time.sleep(0.25)
            again = watcher.journal(since, baseline.get("InvocationID"))
            if len(again) <= len(lines):
                break
            lines = again
        causes = extract_root_cause(lines)
        hint = cause_hint(causes)
        result = report(healthy=False, done=True, root_cause=causes, root_cause_hint=hint,
                        journal_tail=lines[-40:])
        cause_text = " | ".join(causes) if causes else "no root cause found in the journal"
        module.fail_json(
            msg=(f"vLLM is not serving: {reason}. Root cause: {cause_text}. "
                 + (f"Hint: {hint}. " if hint else "")
                 + f"Full log: journalctl -u {p['unit']} --since @{int(since)}"),
            **result,
        )

    while True:
        status, _text = http_request(p["url"], timeout=min(5.0, max(1.0, p["poll_interval"] * 2)))
        if status == 200:
            module.exit_json(**report(healthy=True, done=True,
                                      msg=f"{p['url']} answered 200 after "
                                          f"{format_duration(time.time() - started)}"))
        if p["unit"]:
            current = watcher.state()
            reason = unit_death(p["unit"], baseline, current)
            if reason:
                fail(reason)
        if status is not None:
            unhealthy_since = unhealthy_since or time.time()
            if time.time() - unhealthy_since >= p["unhealthy_grace"]:
                fail(f"{p['url']} has answered HTTP {status} for "
                     f"{format_duration(time.time() - unhealthy_since)} (engine unhealthy)")
        else:
            unhealthy_since = None
        baseline["unhealthy_since"] = str(unhealthy_since or "")
        now = time.time()
        if now >= deadline:
            fail(f"{p['url']} did not answer 200 within {format_duration(p['timeout'])} "
                 f"(last answer: {status if status is not None else 'nothing listening'})")
        if now >= call_end:
            module.exit_json(**report(healthy=False, done=False))
        time.sleep(max(0.05, min(p["poll_interval"], call_end - now)))


if __name__ == "__main__":
    main()
