"""The fleet-node TEST DOUBLE's hung engine (FAKE_VLLM_HANG_FILE), which molecule/fleet's alert proof relies on.

A hung engine core behind a live API server (vllm #39863): the completion is counted as running, no
token is generated, /health still answers 200; when the file goes the request completes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

DOUBLE = Path(__file__).resolve().parents[2] / "doubles" / "fake_vllm_fleet_node.py"


def sample(metrics: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", metrics, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def test_a_hung_engine_runs_requests_without_tokens_and_stays_healthy(tmp_path: Path) -> None:
    hang = tmp_path / "hang"
    hang.touch()
    log = tmp_path / "log"
    with open(log, "wb") as handle:
        proc = subprocess.Popen([sys.executable, str(DOUBLE), "serve", "/m", "--port", "0", "--host", "127.0.0.1",
                                 "--served-model-name", "kimi"], stdout=handle, stderr=subprocess.STDOUT,
                                env=dict(os.environ, FAKE_VLLM_LOAD_SECONDS="0", FAKE_VLLM_REQUEST_SECONDS="0",
                                         FAKE_VLLM_HANG_FILE=str(hang)))
    try:
        for _attempt in range(200):
            match = re.search(r"Uvicorn running on (http://[\d.]+:\d+)", log.read_text())
            if match:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(log.read_text())
        url = match.group(1)
        answers: list[dict] = []
        body = json.dumps({"model": "kimi", "prompt": "x", "max_tokens": 4}).encode()
        client = threading.Thread(target=lambda: answers.append(json.load(urllib.request.urlopen(
            urllib.request.Request(f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"}),
            timeout=30))))
        client.start()
        time.sleep(1.0)
        metrics = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
        assert (sample(metrics, "vllm:num_requests_running"), sample(metrics, "vllm:generation_tokens_total")) == (1.0, 0.0)
        assert urllib.request.urlopen(f"{url}/health", timeout=10).status == 200
        assert answers == []

        hang.unlink()
        client.join(timeout=10)
        metrics = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
        assert len(answers) == 1 and answers[0]["usage"]["completion_tokens"] > 0
        assert sample(metrics, "vllm:num_requests_running") == 0.0
        assert sample(metrics, "vllm:generation_tokens_total") == answers[0]["usage"]["completion_tokens"]
    finally:
        proc.kill()
        proc.wait()
