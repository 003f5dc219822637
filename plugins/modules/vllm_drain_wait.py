#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: wait until a node out of its routers has finished its requests."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_drain_wait
short_description: Wait until vLLM has no request running or waiting, bounded for stale gauges
version_added: 0.3.0
description:
  - Run on a serving node after it left its routers. Waits O(settle) seconds (a request routed
    just before the removal may still be on its way), then reads C(/metrics) every O(poll)
    seconds until C(vllm:num_requests_running) + C(vllm:num_requests_waiting) is 0 in two
    readings with no token produced between them (a request still on its way when the first one
    was taken shows up in the second). A failed reading between the two neither confirms nor
    breaks them (the unchanged token counters show that nothing ran in between).
  - vLLM's gauges can keep their last value after the requests were aborted (vllm issues 29928
    and 22545). While gauges and token counters (C(vllm:prompt_tokens_total),
    C(vllm:generation_tokens_total)) stay unchanged for O(stale_after) seconds, the gauges are
    taken for stale - the module returns with outcome C(stale) and a warning.
  - A failed reading is not "drained". When C(/metrics) gives no reading and systemd says the
    server's process is gone (O(service)), the wait ends at once - outcome C(gone), nothing to
    drain. While the process runs, or its state cannot be read, the wait goes on; O(unread_after)
    seconds of failed readings in a row fail it - outcome C(unread) - and the node is not stopped.
  - Fails with outcome C(timeout) after O(timeout) seconds of requests still making progress.
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
  - gpuserve.vllm.attributes.READ_ONLY
options:
  metrics_url:
    description: The node's C(/metrics).
    type: str
    default: http://127.0.0.1:8000/metrics
  timeout:
    description: Seconds to wait for requests that still produce tokens.
    type: int
    default: 1830
  poll:
    description: Seconds between two readings.
    type: float
    default: 1
  settle:
    description: Seconds to wait before the first reading.
    type: float
    default: 2
  stale_after:
    description: Seconds of unchanged gauges and token counters after which the gauges count as stale.
    type: int
    default: 120
  unread_after:
    description: Seconds of failed C(/metrics) readings in a row, while the process runs, after which the drain fails.
    type: int
    default: 60
  service:
    description:
      - The server's systemd unit, asked (C(systemctl show)) whether its process still runs when a reading fails.
      - Empty, or a host without systemd - it cannot be told, and a failed reading waits as for a live process.
    type: str
    default: vllm.service
"""

EXAMPLES = r"""
- name: Wait until the node has finished its requests
  gpuserve.vllm.vllm_drain_wait:
    metrics_url: http://127.0.0.1:8000/metrics
    timeout: 1830
"""

RETURN = r"""
outcome:
  description: C(drained), C(stale), C(gone) (the process is gone - nothing to drain), C(unread) (failed) or C(timeout) (failed).
  returned: always
  type: str
elapsed:
  description: Seconds from the first reading to the last.
  returned: always
  type: float
polls:
  description: Readings taken.
  returned: always
  type: int
running:
  description: The running gauge at the last reading.
  returned: always
  type: float
waiting:
  description: The waiting gauge at the last reading.
  returned: always
  type: float
max_in_flight:
  description: The most requests seen running or waiting during the wait.
  returned: always
  type: float
msg:
  description: One line saying what was seen.
  returned: always
  type: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._drain import DrainWatch
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._http import http_request
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._nodestate import gauges
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._unit import parse_systemctl_show


def read(url: str) -> dict | None:
    status, text = http_request(url, timeout=5)
    if status != 200:
        return None
    reading = gauges(text)
    return reading if reading["present"] else None


def process_alive(module: AnsibleModule, service: str) -> bool | None:
    """Whether the unit's main process runs; None when it cannot be told (no systemd, no answer)."""
    if not service or not os.path.isdir("/run/systemd/system"):
        return None
    rc, out, _err = module.run_command(["systemctl", "show", service, "--property=ActiveState",
                                        "--property=MainPID"])
    if rc != 0:
        return None
    props = parse_systemctl_show(out)
    try:
        pid = int(props.get("MainPID") or 0)
    except ValueError:
        return None
    return props.get("ActiveState") in ("active", "reloading", "deactivating") and pid > 0


def main() -> None:
    """Poll until drained, stale, gone or out of time."""
    module = AnsibleModule(
        argument_spec={
            "metrics_url": {"type": "str", "default": "http://127.0.0.1:8000/metrics"},
            "timeout": {"type": "int", "default": 1830},
            "poll": {"type": "float", "default": 1.0},
            "settle": {"type": "float", "default": 2.0},
            "stale_after": {"type": "int", "default": 120},
            "unread_after": {"type": "int", "default": 60},
            "service": {"type": "str", "default": "vllm.service"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        watch = DrainWatch(p["timeout"], p["stale_after"], p["unread_after"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if module.check_mode:
        module.exit_json(changed=False, outcome="check_mode", elapsed=0.0, polls=0, running=0.0,
                         waiting=0.0, max_in_flight=0.0, msg="check mode: the drain is not waited for")
    time.sleep(max(0.0, p["settle"]))
    while True:
        reading = read(p["metrics_url"])
        alive = process_alive(module, p["service"]) if reading is None else True
        verdict = watch.feed(time.monotonic(), reading, alive)
        if verdict["done"]:
            break
        time.sleep(max(0.1, p["poll"]))
    result = {k: verdict[k] for k in ("outcome", "elapsed", "polls", "running", "waiting",
                                      "max_in_flight", "msg")}
    if verdict["outcome"] in ("timeout", "unread"):
        module.fail_json(**result)
    if verdict["outcome"] == "stale":
        module.warn(verdict["msg"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
