"""The fake vLLM server TEST DOUBLE behaves like the parts of vLLM the role relies on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import typing as t
import urllib.error
import urllib.request
from pathlib import Path

import pytest

DOUBLE = Path(__file__).resolve().parents[2] / "doubles" / "fake_vllm_server.py"


def get(url: str, body: dict | None = None, key: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def serve(tmp_path: Path) -> t.Iterator[t.Callable[..., str]]:
    procs: list[subprocess.Popen] = []

    def start(*args: str, env: dict[str, str] | None = None) -> str:
        log = tmp_path / f"log{len(procs)}"
        with open(log, "wb") as handle:
            procs.append(subprocess.Popen(
                [sys.executable, str(DOUBLE), "serve", "/m", "--port", "0", "--host", "127.0.0.1",
                 "--double-load-seconds", "0", *args],
                stdout=handle, stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {}))))
        for _attempt in range(200):
            match = re.search(r"Uvicorn running on (http://[\d.]+:\d+)", log.read_text())
            if match:
                return match.group(1)
            time.sleep(0.05)
        raise AssertionError(log.read_text())

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DOUBLE), "serve", "/m", *args], capture_output=True,
                          text=True, timeout=30, env=dict(os.environ, **(env or {})), check=False)


def test_invalid_speculative_config_is_refused_like_vllm() -> None:
    out = run("--speculative-config", "{'method': eagle3}")
    assert out.returncode == 2 and "--speculative-config" in out.stderr


@pytest.mark.parametrize("env", [{"FAKE_VLLM_MODE": "crash-at-start"}, {}])
def test_crash_at_start_from_flag_or_environment(env: dict[str, str]) -> None:
    args = () if env else ("--double-mode", "crash-at-start")
    out = run(*args, env=env)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1].startswith("RuntimeError: Engine core initialization failed")
    assert "SyntaxError: '(' was never closed" in out.stderr


def test_replay_prints_a_real_format_log(tmp_path: Path) -> None:
    """The replay crash prints every non-comment line of the log file as it is, then exits 1."""
    log = tmp_path / "crash.log"
    log.write_text("# source: header\n(Worker_TP1 pid=2) ERROR 11-29 18:45:21 [m.py:1] KeyError: 'x'\n"
                   "(APIServer pid=1) RuntimeError: Engine core initialization failed.\n")
    out = run("--double-mode", "crash-at-start", env={"FAKE_VLLM_CRASH": "replay", "FAKE_VLLM_REPLAY": str(log)})
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[-2:] == log.read_text().splitlines()[1:]
    assert not any(line.startswith("#") for line in lines)


def test_die_mid_load_logs_progress_first() -> None:
    begin = time.monotonic()
    out = run("--double-mode", "die-mid-load", "--double-die-after", "1")
    assert out.returncode == 1 and time.monotonic() - begin >= 1
    assert "Loading safetensors checkpoint shards: 100% Completed" in out.stdout
    assert "CUDA out of memory" in out.stderr


def test_endpoints_and_counters(serve: t.Callable[..., str]) -> None:
    base = serve("--served-model-name", "kimi", "--speculative-config", '{"num_speculative_tokens": 3}')
    assert get(base + "/health")[0] == 200
    assert json.loads(get(base + "/version")[1])["version"].endswith("testdouble")
    assert [m["id"] for m in json.loads(get(base + "/v1/models")[1])["data"]] == ["kimi"]
    assert get(base + "/v1/completions", {"model": "other", "prompt": "x"})[0] == 404
    status, text = get(base + "/v1/completions", {"model": "kimi", "prompt": "x", "max_tokens": 4})
    assert status == 200 and json.loads(text)["usage"]["completion_tokens"] == 4
    metrics = get(base + "/metrics")[1]
    # 4 tokens: first draft accepts 3 (+1 bonus token) -> 1 draft, 3 draft tokens, 3 accepted
    assert 'vllm:spec_decode_num_drafts_total{engine="0",model_name="kimi"} 1.0' in metrics
    assert 'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="kimi"} 3.0' in metrics
    assert 'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="kimi"} 3.0' in metrics
    assert 'position="2"} 1.0' in metrics


def test_flat_counters_and_unhealthy(serve: t.Callable[..., str]) -> None:
    flat = serve("--double-mode", "flat-counters", "--speculative-config", "{}")
    get(flat + "/v1/completions", {"model": "/m", "prompt": "x", "max_tokens": 8})
    assert "vllm:spec_decode_num_drafts_total{" in get(flat + "/metrics")[1]
    assert 'model_name="/m"} 0.0' in get(flat + "/metrics")[1]
    sick = serve("--double-mode", "unhealthy")
    assert get(sick + "/health")[0] == 503


def test_api_key_from_environment(serve: t.Callable[..., str]) -> None:
    base = serve(env={"VLLM_API_KEY": "k1"})
    assert get(base + "/v1/models")[0] == 401
    assert get(base + "/v1/models", key="k1")[0] == 200
    assert get(base + "/health")[0] == 200  # like vLLM: health needs no key


CANARY = {"FAKE_VLLM_CANARY_PORT": "18001", "FAKE_VLLM_LOAD_SECONDS": "0"}
LAYERS = '{"text_config": {"num_hidden_layers": 7}}'


@pytest.mark.parametrize("args, missing", [
    (("--port", "18001"), "with --load-format auto, not dummy"),
    (("--port", "18001", "--hf-overrides", LAYERS), "with --load-format auto, not dummy"),
    (("--port", "18001", "--load-format", "dummy"), "without a num_hidden_layers override"),
    (("--port", "18001", "--load-format", "dummy", "--hf-overrides", '{"text_config": {"a": 1}}'),
     "without a num_hidden_layers override"),
    (("--port", "18001", "--load-format", "dummy", "--hf-overrides", "{x"), "--hf-overrides is not JSON"),
])
def test_canary_port_refuses_a_full_load(args: tuple, missing: str) -> None:
    out = run(*args, env=CANARY)
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: TEST DOUBLE canary guard: ") and missing in last


@pytest.mark.parametrize("overrides", [LAYERS, '{"num_hidden_layers": 2}'])
def test_canary_port_serves_a_canary_and_logs_its_argv(serve: t.Callable[..., str], tmp_path: Path,
                                                       overrides: str) -> None:
    argv_log = tmp_path / "argv.jsonl"
    # the fixture passes --port 0 first; the canary port given after it wins, as in argparse
    base = serve("--port", "18001", "--load-format", "dummy", "--hf-overrides", overrides,
                 env=dict(CANARY, FAKE_VLLM_ARGV_LOG=str(argv_log)))
    assert get(base + "/health")[0] == 200
    (entry,) = [json.loads(line) for line in argv_log.read_text().splitlines()]
    assert entry["port"] == 18001 and entry["argv"][-2:] == ["--hf-overrides", overrides]
    assert entry["prefix"] == sys.prefix


def test_other_ports_load_fully(serve: t.Callable[..., str]) -> None:
    """The server's own port is not the canary's: no guard."""
    assert get(serve(env=CANARY) + "/health")[0] == 200
