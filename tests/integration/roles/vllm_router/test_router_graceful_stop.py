"""What a router restart does to its clients, measured on the REAL vllm-router the role pins.

systemd stops the router with SIGTERM (the unit's TimeoutStopSec is the router's request
timeout + 30 s, so systemd waits as long as the router does). The router behind the fleet-node
TEST DOUBLE (tests/doubles/fake_vllm_fleet_node.py, streaming a token every 50 ms), all on
loopback: streams in flight at the signal end complete, a new connection is refused from the
signal on, the process exits when the last stream ends. A single router is therefore closed to
new requests for as long as its longest stream still runs plus its own start; the figures are
printed (docs/operations.md, "Router restarts"). Bounded: every wait here ends within seconds.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.vllm_router_bin import router_bin

DOUBLE = Path(__file__).resolve().parents[3] / "doubles" / "fake_vllm_fleet_node.py"
TOKENS = 60
TOKEN_SECONDS = 0.05


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, deadline: float) -> float:
    """Seconds until url answers 200 (fails the test past the deadline)."""
    started = time.monotonic()
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.05)
    pytest.fail(f"{url} not ready in time")


def stream(port: int, out: list, tag: str) -> None:
    """One streamed completion through the router: (tag, chunks, finished with [DONE], error)."""
    chunks, done, error = 0, False, ""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/v1/completions", json.dumps({"model": "kimi", "prompt": "x", "max_tokens": TOKENS,
                                                           "stream": True}), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: [DONE]"):
                done = True
                break
            if line.startswith(b"data: {"):
                chunks += 1
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc}"
    out.append((tag, chunks, done, error))


@pytest.fixture()
def fleet():
    """A node double and the real router in front of it, on loopback; killed at the end."""
    node_port, router_port = free_port(), free_port()
    procs = [subprocess.Popen([sys.executable, str(DOUBLE), "serve", "/m", "--port", str(node_port), "--host",
                               "127.0.0.1", "--served-model-name", "kimi"],
                              env=dict(os.environ, FAKE_VLLM_LOAD_SECONDS="0", FAKE_VLLM_TOKEN_SECONDS=str(TOKEN_SECONDS)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    argv = [str(router_bin()), "--host", "127.0.0.1", "--port", str(router_port), "--worker-urls",
            f"http://127.0.0.1:{node_port}", "--policy", "round_robin", "--request-timeout-secs", "60",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
            "--worker-startup-check-interval", "1"]

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield router_port, start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_sigterm_lets_the_streams_in_flight_end_and_refuses_new_connections(fleet):
    port, start = fleet
    router = start()
    wait_ready(f"http://127.0.0.1:{port}/readiness", time.monotonic() + 30)
    results: list = []
    streams = [threading.Thread(target=stream, args=(port, results, f"s{i}")) for i in range(4)]
    for thread in streams:
        thread.start()
    time.sleep(1.0)  # each stream has about 2 s of tokens left
    signalled = time.monotonic()
    router.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    late: list = []
    stream(port, late, "late")
    router.wait(timeout=30)
    exited = time.monotonic() - signalled
    for thread in streams:
        thread.join(timeout=30)

    assert sorted(results) == [(f"s{i}", TOKENS, True, "") for i in range(4)], results
    assert late[0][3].startswith("ConnectionRefusedError"), late
    assert router.returncode == 0
    # It exits when its streams end, not before (they had about 2 s left).
    assert exited > 1.0

    restarted = time.monotonic()
    start()
    ready = wait_ready(f"http://127.0.0.1:{port}/readiness", restarted + 30)
    print(f"router restart measured: {len(results)} streams in flight at SIGTERM, all completed; new "
          f"connections refused for {exited:.2f} s (until the last stream ended) + {ready:.2f} s until the "
          f"new router answered /readiness")
