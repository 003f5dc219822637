"""playbooks/fleet_status.yml run for real: 16 GPU "nodes" that are this machine (local connection),
in check mode, each reading its own loopback port with the real gpuserve.vllm.vllm_node_state.

Two ports are served by a TEST DOUBLE HTTP server (a thread here) that answers /health with 200
and /metrics with tests/fixtures/monitoring/vllm-0.33.0-metrics.txt (vLLM 0.33.0's own
exposition, tests/support/record_vllm_metrics.py); the other 14 ports have nothing listening.
This machine runs no systemd, so no unit runs anywhere: the rows say what the module reads here.
The test asserts the table and prints how long the run took (16 nodes, forks 16, no routers).
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
METRICS = (REPO / "tests" / "fixtures" / "monitoring" / "vllm-0.33.0-metrics.txt").read_bytes()

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")


class _VllmDouble(http.server.BaseHTTPRequestHandler):
    """TEST DOUBLE: vLLM's /health and /metrics, nothing else."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = {"/health": b"", "/metrics": METRICS}.get(self.path)
        self.send_response(404 if body is None else 200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(name="served")
def fixture_served():
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _VllmDouble) for _index in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield [server.server_address[1] for server in servers]
    for server in servers:
        server.shutdown()
        server.server_close()


def test_fleet_status_16_nodes_check_mode(tmp_path: Path, served: list[int]) -> None:
    ports = served + [_free_port() for _index in range(14)]
    lines = ["[gpu_nodes]"]
    for index, port in enumerate(ports, start=1):
        lines.append(f"gpu{index:02d} ansible_connection=local ansible_become=false ansible_python_interpreter={os.sys.executable} "
                     f"vllm_server_host=127.0.0.1 vllm_server_port={port} vllm_server_state_dir={tmp_path}/state{index} "
                     f"ml_env_dir={tmp_path}/ml-env")
    (tmp_path / "hosts.ini").write_text("\n".join(lines) + "\n")
    start = time.monotonic()
    result = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.ini"), str(REPO / "playbooks" / "fleet_status.yml"),
                             "--check"], capture_output=True, text=True, cwd=REPO, timeout=300, check=False,
                            env=dict(os.environ, ANSIBLE_CALLBACK_RESULT_FORMAT="yaml", ANSIBLE_FORKS="16"))
    elapsed = time.monotonic() - start
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    (Path(os.environ.get("GPUSERVE_TEST_OUTPUT", tmp_path)) / "fleet_status.out").write_text(out)
    block = out.split("msg: |-\n", 1)[1].split("\n\n", 1)[0]
    table = [line.strip() for line in block.splitlines()]
    assert len(table) == 19, out  # header, rule, 16 rows, summary
    rows = {line.split()[0]: line.split()[1:] for line in table[2:18]}
    # The two served ports: healthy (no unit runs here, so no version, env or start); 54 running, 0 waiting,
    # the fuller engine's KV cache, mean acceptance length 1 + 38561 / 21998.
    assert rows["gpu01"] == ["healthy", "-", "-", "-", "-", "54", "0", "72%", "2.75", "-", "-"], table
    assert rows["gpu02"] == rows["gpu01"]
    # Nothing listens and no unit runs: inactive/not-found, nothing to show (not "?": the refusal is an answer).
    assert rows["gpu03"][0] == "inactive" and rows["gpu03"][5:9] == ["-", "-", "-", "-"], table
    assert table[18] == "16 node(s): 2 healthy, 14 not healthy, 0 unknown; 0 with a restart pending"
    print(f"fleet_status.yml, 16 local nodes, check mode: {elapsed:.1f} s")
