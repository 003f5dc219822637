#!/usr/bin/env python3
"""TEST DOUBLE of a vLLM serving node in a fleet -- not vLLM, never installed by the roles.

tests/doubles/fake_vllm_server.py with what a drained rolling restart depends on:
  * a completion takes time (FAKE_VLLM_REQUEST_SECONDS, default 0.3 s), so a restart without a
    drain really cuts requests off (SIGTERM ends the process, in-flight connections are reset);
  * `"stream": true` streams the completion as vLLM does (server-sent events over a chunked
    response, one `data: {...text_completion chunk...}` per token, `data: [DONE]` last; see
    https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html), one token every
    FAKE_VLLM_TOKEN_SECONDS (default 0.05 s), so max_tokens=400 streams for 20 s;
  * the vLLM gauges `vllm:num_requests_running` and `vllm:num_requests_waiting` on /metrics count
    the requests in flight, and the counters `vllm:prompt_tokens_total` and
    `vllm:generation_tokens_total` grow with every token (names, HELP text and labels as vLLM's
    v1 metrics print them, see https://docs.vllm.ai/en/latest/design/metrics.html), with
    FAKE_VLLM_MAX_RUNNING (default 4) running at once and the rest waiting;
  * FAKE_VLLM_STALE_ON_ABORT=1 leaves a stream the client aborted counted as running, the way
    vLLM's gauges can keep their last value after aborts (vllm #29928, #22545);
  * FAKE_VLLM_METRICS_FAIL_EVERY=N answers every Nth /metrics read with a 500 (uvicorn's plain
    "Internal Server Error"), a scrape that fails while the node serves;
  * FAKE_VLLM_HANG_FILE=PATH: while that file exists, a completion is taken and counted as
    running but no token is generated (it waits for the file to go, then completes), while /health
    still answers 200: the engine core hung behind a live API server (vllm #39863).
FAKE_VLLM_NODE_NAME is returned in the completion's `system_fingerprint`, so a load generator
behind a router can count which node answered. Everything else is fake_vllm_server's.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_vllm_server as base  # noqa: E402  (sibling file, copied next to this one)

REQUEST_SECONDS = float(os.environ.get("FAKE_VLLM_REQUEST_SECONDS", "0.3"))
TOKEN_SECONDS = float(os.environ.get("FAKE_VLLM_TOKEN_SECONDS", "0.05"))
MAX_RUNNING = int(os.environ.get("FAKE_VLLM_MAX_RUNNING", "4"))
NODE_NAME = os.environ.get("FAKE_VLLM_NODE_NAME", "")
STALE_ON_ABORT = os.environ.get("FAKE_VLLM_STALE_ON_ABORT", "") == "1"
METRICS_FAIL_EVERY = int(os.environ.get("FAKE_VLLM_METRICS_FAIL_EVERY", "0"))
HANG_FILE = os.environ.get("FAKE_VLLM_HANG_FILE", "")
PROMPT_TOKENS = 5


class FleetState(base.State):
    """State whose completions take REQUEST_SECONDS and are counted as running/waiting."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(MAX_RUNNING)
        self.gauge_lock = threading.Lock()
        self.running = 0
        self.waiting = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.metrics_reads = 0

    def _enter(self) -> None:
        with self.gauge_lock:
            self.waiting += 1
        self.slots.acquire()
        with self.gauge_lock:
            self.waiting -= 1
            self.running += 1
            self.prompt_tokens += PROMPT_TOKENS
        while HANG_FILE and os.path.exists(HANG_FILE):  # the hung engine: running, no token
            time.sleep(0.2)

    def _leave(self, stale: bool = False) -> None:
        self.slots.release()
        if not stale:
            with self.gauge_lock:
                self.running -= 1

    def generate(self, max_tokens: int) -> int:
        self._enter()
        try:
            time.sleep(REQUEST_SECONDS)
            produced = super().generate(max_tokens)
            with self.gauge_lock:
                self.generation_tokens += produced
            return produced
        finally:
            self._leave()

    def stream(self, max_tokens: int, send_chunk) -> None:
        """One token every TOKEN_SECONDS through send_chunk(text); an aborted client ends it."""
        self._enter()
        aborted = False
        try:
            for _token in range(max_tokens):
                time.sleep(TOKEN_SECONDS)
                super().generate(1)
                with self.gauge_lock:
                    self.generation_tokens += 1
                send_chunk(" Paris")
        except OSError:
            aborted = True
        finally:
            self._leave(stale=aborted and STALE_ON_ABORT)

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
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{labels}}} {float(self.prompt_tokens)}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {float(self.generation_tokens)}",
        ]
        rest = [line for line in super().metrics().splitlines() if "num_requests_running" not in line]
        return "\n".join(head + rest) + "\n"


def make_handler(state: FleetState, original=base.make_handler):
    """The base handler, plus streamed completions and the node's name in every completion."""
    handler = original(state)

    class FleetHandler(handler):
        def _send(self, code, body, ctype="application/json"):
            if NODE_NAME and isinstance(body, dict) and body.get("object") == "text_completion":
                body = dict(body, system_fingerprint=NODE_NAME)
            super()._send(code, body, ctype)

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            if self.path == "/metrics" and METRICS_FAIL_EVERY:
                with state.gauge_lock:
                    state.metrics_reads += 1
                    fail = state.metrics_reads % METRICS_FAIL_EVERY == 0
                if fail:
                    return super()._send(500, b"Internal Server Error", "text/plain; charset=utf-8")
            return super().do_GET()

        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) or b"{}"
            try:
                request = json.loads(raw)
            except ValueError:
                request = {}
            if self.path != "/v1/completions" or not request.get("stream"):
                self.rfile = _Replay(raw, self.rfile)
                return super().do_POST()
            if not self._authorised():
                return
            if request.get("model") != state.served_name:
                return super()._send(404, {"error": {"message": f"The model `{request.get('model')}` does not exist."}})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def event(payload: str) -> None:
                data = f"data: {payload}\n\n".encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def send_chunk(text: str) -> None:
                event(json.dumps({"id": "cmpl-testdouble", "object": "text_completion",
                                  "created": int(time.time()), "model": state.served_name,
                                  "system_fingerprint": NODE_NAME or None,
                                  "choices": [{"index": 0, "text": text, "logprobs": None,
                                               "finish_reason": None}]}))

            state.stream(int(request.get("max_tokens") or 16), send_chunk)
            try:
                event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass

    return FleetHandler


class _Replay:
    """A request body already read, handed to the base handler as if unread."""

    def __init__(self, data: bytes, rest) -> None:
        self.data, self.rest = data, rest

    def read(self, n: int = -1) -> bytes:
        if self.data:
            chunk, self.data = (self.data, b"") if n < 0 else (self.data[:n], self.data[n:])
            return chunk
        return self.rest.read(n) if n >= 0 else b""

    def __getattr__(self, name):
        return getattr(self.rest, name)


def main(argv: list[str]) -> int:
    base.State = FleetState  # the base main() builds its State and handler from the module
    base.make_handler = make_handler
    return base.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
