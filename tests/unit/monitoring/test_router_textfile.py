"""The router hosts' worker-list script (roles/monitoring/files/gpuserve_router_workers.py) against the REAL vllm-router.

The pinned vllm-router (tests/support/vllm_router_bin.py) runs on loopback in front of two fleet-node
TEST DOUBLES; workers leave it through its own API (/remove_worker), as the serve plays and an
operator's hand remove them. The script's file is checked by the real promtool (`promtool check
metrics`). Bounded: every process is killed at the end, every wait stops within seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.support.promtool import promtool
from tests.support.vllm_router_bin import router_bin

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "roles" / "monitoring" / "files" / "gpuserve_router_workers.py"
DOUBLE = REPO / "tests" / "doubles" / "fake_vllm_fleet_node.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpuserve_router_workers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rw = _load()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listed(text: str) -> dict[str, str]:
    """node -> value of gpuserve_router_worker_listed (a worker without a node by its URL), plus the success gauge under ''."""
    out = {}
    for line in text.splitlines():
        if line.startswith("gpuserve_router_worker_listed{node="):
            out[line.split('node="', 1)[1].split('"', 1)[0]] = line.rsplit(" ", 1)[1]
        elif line.startswith('gpuserve_router_worker_listed{worker="'):
            out[line.split('worker="', 1)[1].split('"', 1)[0]] = line.rsplit(" ", 1)[1]
        elif line.startswith("gpuserve_router_workers_read_success "):
            out[""] = line.rsplit(" ", 1)[1]
    return out


def serve_double(port: int) -> subprocess.Popen:
    """A fleet-node TEST DOUBLE on loopback."""
    return subprocess.Popen([sys.executable, str(DOUBLE), "serve", "/m", "--port", str(port), "--host", "127.0.0.1",
                             "--served-model-name", "kimi"], env=dict(os.environ, FAKE_VLLM_LOAD_SECONDS="0"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture()
def router(tmp_path: Path):
    """Two node doubles and the real router listing both; yields (router URL, worker URLs, router process)."""
    nodes = [free_port(), free_port()]
    procs = [serve_double(port) for port in nodes]
    port = free_port()
    workers = [f"http://127.0.0.1:{node}" for node in nodes]
    log = tmp_path / "router.log"
    with open(log, "wb") as handle:
        procs.append(subprocess.Popen([str(router_bin()), "--host", "127.0.0.1", "--port", str(port), "--worker-urls",
                                       *workers, "--policy", "round_robin", "--prometheus-host", "127.0.0.1",
                                       "--prometheus-port", str(free_port()), "--worker-startup-check-interval", "1"],
                                      stdout=handle, stderr=subprocess.STDOUT))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while sorted(rw.read_workers(url, timeout=1) or []) != sorted(workers):
            assert time.monotonic() < deadline, f"the router did not list both workers within 90 s:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        yield url, workers, procs[-1]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def run_script(tmp_path: Path, url: str, workers: list[str]) -> tuple[int, str]:
    config = tmp_path / "router-workers.json"
    config.write_text(json.dumps({"router": url, "workers": {workers[0]: "gpu01", workers[1]: "gpu02"}}))
    out = tmp_path / "gpuserve_router.prom"
    result = subprocess.run([sys.executable, "-I", "-B", str(SCRIPT), str(config), str(out)], capture_output=True,
                            text=True, timeout=30, check=False)
    return result.returncode, out.read_text()


def test_listed_then_removed_then_unknown(router, tmp_path: Path) -> None:
    url, workers, process = router
    rc, text = run_script(tmp_path, url, workers)
    assert (rc, listed(text)) == (0, {"": "1", "gpu01": "1", "gpu02": "1"})
    check = subprocess.run([str(promtool()), "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr

    # A worker no inventory gives the router, added through its admin API (which takes no key): written
    # without a node label, which VllmRouterUnknownWorker fires on.
    rogue_port = free_port()
    rogue = serve_double(rogue_port)
    try:
        rogue_url = f"http://127.0.0.1:{rogue_port}"
        deadline = time.monotonic() + 60
        while True:
            addition = urllib.request.Request(f"{url}/add_worker?url={urllib.parse.quote(rogue_url, safe='')}", method="POST")
            try:
                with urllib.request.urlopen(addition, timeout=30):
                    break
            except OSError:  # the double not answering yet
                assert time.monotonic() < deadline, "the router did not take the added worker within 60 s"
                time.sleep(0.5)
        rc, text = run_script(tmp_path, url, workers)
        assert (rc, listed(text)) == (0, {"": "1", "gpu01": "1", "gpu02": "1", rogue_url: "1"})
        removal = urllib.request.Request(f"{url}/remove_worker?url={urllib.parse.quote(rogue_url, safe='')}", method="POST")
        with urllib.request.urlopen(removal, timeout=10):
            pass
    finally:
        rogue.kill()
        rogue.wait()

    removal = urllib.request.Request(f"{url}/remove_worker?url={urllib.parse.quote(workers[1], safe='')}", method="POST")
    with urllib.request.urlopen(removal, timeout=10):
        pass
    rc, text = run_script(tmp_path, url, workers)
    assert (rc, listed(text)) == (0, {"": "1", "gpu01": "1", "gpu02": "0"})

    process.kill()
    process.wait()
    rc, text = run_script(tmp_path, url, workers)
    assert (rc, listed(text)) == (1, {"": "0"}), "a router that does not answer lists nothing: unknown, not unlisted"


@pytest.mark.parametrize(("body", "expected"), [
    ({"workers": [{"url": "http://a:1/", "is_healthy": False}, {"url": "http://b:1"}]}, ["http://a:1", "http://b:1"]),
    ({"workers": []}, []),
    ({"error": "x"}, None),
    ([], None),
])
def test_listed_urls(body, expected) -> None:
    assert rw.listed_urls(body) == expected


def test_a_worker_the_inventory_does_not_know_has_no_node() -> None:
    text = rw.render({"http://a:1": "gpu01"}, ["http://a:1", "http://z:1"], 5.0)
    assert 'gpuserve_router_worker_listed{node="gpu01",worker="http://a:1"} 1' in text.splitlines()
    assert 'gpuserve_router_worker_listed{worker="http://z:1"} 1' in text.splitlines()
    assert "gpuserve_router_workers_timestamp_seconds 5.000" in text.splitlines()


def test_a_fleet_node_under_its_old_port_is_that_node_not_a_stranger() -> None:
    """A drained port move lists the node under its old URL until the new one is in: planned
    work, not a rogue worker. A host two nodes share cannot be told: no node."""
    expected = {"http://gpu01:8010": "gpu01", "http://gpu02:8010": "gpu02", "http://shared:8001": "gpu03",
                "http://shared:8002": "gpu04"}
    text = rw.render(expected, ["http://gpu01:8000", "http://GPU02:8010", "http://shared:9000"], 5.0).splitlines()
    assert 'gpuserve_router_worker_listed{node="gpu01",worker="http://gpu01:8000"} 1' in text
    assert 'gpuserve_router_worker_listed{node="gpu01",worker="http://gpu01:8010"} 0' in text
    assert 'gpuserve_router_worker_listed{node="gpu02",worker="http://GPU02:8010"} 1' in text
    assert 'gpuserve_router_worker_listed{worker="http://shared:9000"} 1' in text


def test_an_answer_over_the_cap_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root runs the script: a /workers answer over the cap (valid JSON, 2 MB) is refused (unknown), not read."""
    import http.server  # pylint: disable=import-outside-toplevel
    import threading  # pylint: disable=import-outside-toplevel

    class Endless(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's API)
            self.send_response(200)
            self.end_headers()
            try:
                self.wfile.write(b'{"workers": [' + b'{"url": "http://x"}, ' * 100_000 + b'{"url": "http://y"}]}')
            except OSError:
                pass

        def log_message(self, *_args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(rw, "BODY_LIMIT", 1024 * 1024)
    try:
        assert rw.read_workers(f"http://127.0.0.1:{server.server_address[1]}", timeout=5) is None
    finally:
        server.shutdown()
        server.server_close()
