"""vllm_drain_wait against the fleet-node TEST DOUBLE on loopback (tests/doubles/fake_vllm_fleet_node.py).

Real streamed completions keep the gauges up while their tokens flow: the drain waits for
them. A stream the client aborts while the double keeps counting it (FAKE_VLLM_STALE_ON_ABORT,
vLLM's stale gauges of vllm #29928) ends the drain after the stale bound, with the warning. A
dead server ends it at once. Bounded: every request and wait here stops within seconds.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.modules import vllm_drain_wait

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "unit" / "plugins" / "modules"))
from module_runner import run_module_main  # noqa: E402

DOUBLE = Path(__file__).resolve().parents[3] / "doubles" / "fake_vllm_fleet_node.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def server(request):
    port = free_port()
    env = dict(os.environ, FAKE_VLLM_LOAD_SECONDS="0", FAKE_VLLM_TOKEN_SECONDS="0.05",
               **getattr(request, "param", {}))
    proc = subprocess.Popen([sys.executable, str(DOUBLE), "serve", "/m", "--port", str(port),
                             "--host", "127.0.0.1", "--served-model-name", "kimi"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield port, proc
    proc.kill()
    proc.wait()


def stream(port: int, tokens: int, abort_after: float | None = None) -> int:
    """One streamed completion; returns the chunks read (stops early when abort_after passes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps({"model": "kimi", "prompt": "x", "max_tokens": tokens,
                                                       "stream": True}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    chunks, started = 0, time.monotonic()
    while True:
        line = resp.readline()
        if not line or line.startswith(b"data: [DONE]"):
            break
        if line.startswith(b"data: {"):
            chunks += 1
        if abort_after is not None and time.monotonic() - started > abort_after:
            conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
            break
    return chunks


def drain(port: int, monkeypatch, **args) -> dict:
    return run_module_main(vllm_drain_wait, dict({"metrics_url": f"http://127.0.0.1:{port}/metrics",
                                                  "settle": 0.2, "poll": 0.2}, **args), monkeypatch)


def test_the_drain_waits_for_a_stream_to_finish(server, monkeypatch):
    port, _proc = server
    done = []
    thread = threading.Thread(target=lambda: done.append(stream(port, 60)))  # 3 s of tokens
    thread.start()
    time.sleep(0.5)
    result = drain(port, monkeypatch, timeout=30, stale_after=10)
    thread.join()
    assert result["outcome"] == "drained" and not result["failed"]
    assert done == [60]  # the stream was not cut
    assert result["elapsed"] >= 1.5 and result["max_in_flight"] == 1


@pytest.mark.parametrize("server", [{"FAKE_VLLM_METRICS_FAIL_EVERY": "2"}], indirect=True)
def test_metrics_failing_every_other_read_do_not_end_the_drain(server, monkeypatch):
    """A failed read is no reading: the drain holds until two confirmed empty readings."""
    port, _proc = server
    server_process_is(monkeypatch, True)
    done = []
    thread = threading.Thread(target=lambda: done.append(stream(port, 60)))  # 3 s of tokens
    thread.start()
    time.sleep(0.5)
    result = drain(port, monkeypatch, timeout=30, stale_after=10, unread_after=5)
    thread.join()
    assert result["outcome"] == "drained" and not result["failed"]
    assert done == [60]
    assert result["elapsed"] >= 1.5 and result["max_in_flight"] == 1


def test_a_stream_longer_than_the_timeout_fails_the_drain(server, monkeypatch):
    port, _proc = server
    thread = threading.Thread(target=stream, args=(port, 80))  # 4 s
    thread.start()
    time.sleep(0.5)
    result = drain(port, monkeypatch, timeout=1, stale_after=10)
    thread.join()
    assert result["failed"] and result["outcome"] == "timeout"
    assert result["msg"].startswith("did not drain within 1 s (vllm_router_drain_timeout): 1 running")


@pytest.mark.parametrize("server", [{"FAKE_VLLM_STALE_ON_ABORT": "1"}], indirect=True)
def test_stale_gauges_after_an_abort_end_the_drain_with_a_warning(server, monkeypatch):
    port, _proc = server
    assert stream(port, 400, abort_after=0.5) < 400
    time.sleep(0.5)
    warnings = []
    monkeypatch.setattr(vllm_drain_wait.AnsibleModule, "warn", lambda self, msg: warnings.append(msg))
    result = drain(port, monkeypatch, timeout=60, stale_after=2)
    assert result["outcome"] == "stale" and not result["failed"]
    assert result["running"] == 1 and 2 <= result["elapsed"] < 10
    assert warnings and "taken for stale values" in warnings[0]


def server_process_is(monkeypatch, alive):
    """What `systemctl show vllm.service` would say of the double's process (no systemd here;
    molecule/fleet's drains read the real one)."""
    monkeypatch.setattr(vllm_drain_wait, "process_alive", lambda _module, _service: alive)


def test_a_dead_server_has_nothing_to_drain(server, monkeypatch):
    port, proc = server
    proc.kill()
    proc.wait()
    server_process_is(monkeypatch, False)
    result = drain(port, monkeypatch, timeout=30, stale_after=10)
    assert result["outcome"] == "gone" and result["elapsed"] == 0 and not result["failed"]


@pytest.mark.parametrize("alive", [True, None])
def test_metrics_that_stop_answering_while_the_process_runs_fail_the_drain(server, monkeypatch, alive):
    """A failed read is not "drained": the drain fails after unread_after, it does not end as empty."""
    port, proc = server
    proc.kill()
    proc.wait()
    server_process_is(monkeypatch, alive)
    started = time.monotonic()
    result = drain(port, monkeypatch, timeout=30, stale_after=10, unread_after=2)
    assert result["failed"] and result["outcome"] == "unread"
    assert 2 <= time.monotonic() - started < 10 and result["polls"] >= 5
    assert "so the node is not stopped" in result["msg"]


def test_the_service_is_read_from_systemd_only_where_it_runs(monkeypatch, tmp_path):
    """No systemd on the host: whether the process lives cannot be told (None), never False."""
    monkeypatch.setattr(vllm_drain_wait.os.path, "isdir", lambda path: False)
    assert vllm_drain_wait.process_alive(None, "vllm.service") is None
    assert vllm_drain_wait.process_alive(None, "") is None
