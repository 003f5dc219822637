#!/usr/bin/env python3
"""TEST DOUBLE of a vLLM serving node in a fleet -- not vLLM, never installed by the roles.

tests/doubles/fake_vllm_server.py with two things a drained rolling restart depends on:
  * a completion takes time (FAKE_VLLM_REQUEST_SECONDS, default 0.3 s), so a restart without a
    drain really cuts requests off (SIGTERM ends the process, in-flight connections are reset);
  * the vLLM gauges `vllm:num_requests_running` and `vllm:num_requests_waiting` on /metrics count
    the requests in flight (names, HELP text and labels as vLLM's v1 metrics print them, see
    https://docs.vllm.ai/en/latest/design/metrics.html), with FAKE_VLLM_MAX_RUNNING (default 4)
    running at once and the rest waiting.
FAKE_VLLM_NODE_NAME is returned in the completion's `system_fingerprint`, so a load generator
behind a router can count which node answered. Everything else is fake_vllm_server's.
"""

from __future__ import annotations

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_vllm_server as base  # noqa: E402  (sibling file, copied next to this one)

REQUEST_SECONDS = float(os.environ.get("FAKE_VLLM_REQUEST_SECONDS", "0.3"))
MAX_RUNNING = int(os.environ.get("FAKE_VLLM_MAX_RUNNING", "4"))
NODE_NAME = os.environ.get("FAKE_VLLM_NODE_NAME", "")


class FleetState(base.State):
    """State whose completions take REQUEST_SECONDS and are counted as running/waiting."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(MAX_RUNNING)
        self.gauge_lock = threading.Lock()
        self.running = 0
        self.waiting = 0

    def generate(self, max_tokens: int) -> int:
        with self.gauge_lock:
            self.waiting += 1
        with self.slots:
            with self.gauge_lock:
                self.waiting -= 1
                self.running += 1
            try:
                time.sleep(REQUEST_SECONDS)
                return super().generate(max_tokens)
            finally:
                with self.gauge_lock:
                    self.running -= 1

    def metrics(self) -> str:
        labels = f'engine="0",model_name="{self.served_name}"'
        with self.gauge_lock:
            running, waiting = self.running, self.waiting
        head = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {float(running)}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {float(waiting)}",
        ]
        rest = [line for line in super().metrics().splitlines() if "num_requests_running" not in line]
        return "\n".join(head + rest) + "\n"


def main(argv: list[str]) -> int:
    base.State = FleetState  # the base main() builds its State from the module attribute
    if NODE_NAME:
        original = base.make_handler

        def make_handler(state):
            handler = original(state)
            send = handler._send

            def _send(self, code, body, ctype="application/json"):
                if isinstance(body, dict) and body.get("object") == "text_completion":
                    body = dict(body, system_fingerprint=NODE_NAME)
                send(self, code, body, ctype)

            handler._send = _send
            return handler

        base.make_handler = make_handler
    return base.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
