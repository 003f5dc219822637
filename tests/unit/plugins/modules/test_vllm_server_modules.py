"""vllm_weights_check, vllm_health_wait and vllm_server_check against the fake vLLM server double.

The double (tests/doubles/fake_vllm_server.py, a TEST DOUBLE) runs as a real process on
127.0.0.1 with a random port; systemctl/journalctl are doubles that follow that process
(tests/doubles/fake_systemd.py). The molecule scenario runs the same modules with real systemd.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.modules import (
    vllm_health_wait,
    vllm_server_check,
    vllm_weights_check,
)

from module_runner import run_module_main

DOUBLES = Path(__file__).resolve().parents[3] / "doubles"
sys.path.insert(0, str(DOUBLES))
from fake_systemd import make_fake_systemd  # noqa: E402  (test double helper)

PORT_LINE = re.compile(r"Uvicorn running on http://([\d.]+):(\d+)")


class Double:
    """A running fake vLLM server process and what it logged."""

    def __init__(self, proc: subprocess.Popen, log: Path, pidfile: Path) -> None:
        self.proc, self.log, self.pidfile = proc, log, pidfile
        self.base_url: str | None = None

    def wait_for_port(self, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = PORT_LINE.search(self.log.read_text(errors="replace"))
            if match:
                self.base_url = f"http://{match.group(1)}:{match.group(2)}"
                return self.base_url
            if self.proc.poll() is not None:
                raise AssertionError(f"double exited: {self.log.read_text()}")
            time.sleep(0.05)
        raise AssertionError("double never printed its port")


@pytest.fixture
def double(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> t.Iterator[t.Callable[..., Double]]:
    """Start the double with the given arguments; systemctl/journalctl doubles follow it."""
    started: list[Double] = []
    bin_dir = make_fake_systemd(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    def start(*args: str, spec: bool = True, port: int = 0) -> Double:
        log = tmp_path / f"double-{len(started)}.log"
        pidfile = tmp_path / f"double-{len(started)}.pid"
        argv = [sys.executable, str(DOUBLES / "fake_vllm_server.py"), "serve", "/srv/models/m",
                "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "kimi-k2.5",
                "--tensor-parallel-size", "8", "--trust-remote-code", *args]
        if spec:
            argv += ["--speculative-config",
                     json.dumps({"method": "eagle3", "model": "/d", "num_speculative_tokens": 3})]
        with open(log, "wb") as handle:
            proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT,
                                    env=dict(os.environ, VLLM_API_KEY=""))
        pidfile.write_text(str(proc.pid))
        monkeypatch.setenv("FAKE_SYSTEMD_PIDFILE", str(pidfile))
        monkeypatch.setenv("FAKE_SYSTEMD_LOG", str(log))
        started.append(Double(proc, log, pidfile))
        return started[-1]

    yield start
    for d in started:
        if d.proc.poll() is None:
            d.proc.terminate()
        d.proc.wait(timeout=10)


# ---- vllm_weights_check -------------------------------------------------------------------

def test_weights_check_lists_every_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, drafter = tmp_path / "model", tmp_path / "drafter"
    model.mkdir()
    drafter.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "c": "s3.safetensors"}}))
    (model / "s1.safetensors").write_text("x")
    (model / "s3.safetensors").write_text("")
    result = run_module_main(vllm_weights_check, {"paths": [str(model), str(drafter)], "headers": False},  # placeholders
                             monkeypatch)
    assert result["failed"] and not result["complete"] and not result["changed"]
    assert "4 problem(s)" in result["msg"]
    for fragment in ("s2.safetensors: missing", "s3.safetensors: empty", "drafter/config.json: missing",
                     "drafter: no model.safetensors.index.json and no *.safetensors file"):
        assert fragment in result["msg"]


def test_weights_check_passes_complete_dirs_and_can_only_report(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_text("x")
    assert run_module_main(vllm_weights_check, {"paths": [str(tmp_path)], "headers": False},  # a placeholder shard
                           monkeypatch)["complete"] is True
    result = run_module_main(vllm_weights_check, {"paths": [str(tmp_path / "none")], "fail_on_problems": False},
                             monkeypatch)
    assert result["failed"] is False and result["complete"] is False and len(result["problems"]) == 1


# ---- vllm_server_check --------------------------------------------------------------------

def test_server_check_reports_acceptance(double: t.Callable[..., Double], monkeypatch: pytest.MonkeyPatch) -> None:
    server = double("--double-load-seconds", "0")
    base = server.wait_for_port()
    result = run_module_main(vllm_server_check, {"base_url": base, "model": "kimi-k2.5", "max_tokens": 48},
                             monkeypatch)
    assert result["failed"] is False, result
    assert result["models"] == ["kimi-k2.5"]
    spec = result["spec_decode"]
    # The double accepts (3, 2, 1, 2, 0, 3, 1, 1) tokens per draft of 3: 48 tokens need 18 drafts
    # (54 draft tokens) of which 31 tokens were accepted.
    assert (spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"]) == (18, 54, 31)
    assert spec["acceptance_rate"] == round(31 / 54, 4)
    assert spec["mean_acceptance_length"] == round(1 + 31 / 18, 4)
    assert "acceptance rate 57.4%" in result["summary"]


def failing_scrapes(monkeypatch: pytest.MonkeyPatch, fail: t.Callable[[int], bool]) -> list[str]:
    """The double's /metrics, with the reads `fail(n)` picks answered 500 (n counts from 1)."""
    real, calls = vllm_server_check.http_request, []

    def read(url: str, **kwargs: t.Any) -> tuple[int | None, str]:
        if url.endswith("/metrics"):
            calls.append(url)
            if fail(len(calls)):
                return 500, "Internal Server Error"
        return real(url, **kwargs)

    monkeypatch.setattr(vllm_server_check, "http_request", read)
    monkeypatch.setattr(vllm_server_check.time, "sleep", lambda _s: None)
    return calls


def test_server_check_reads_a_failed_scrape_again(double: t.Callable[..., Double],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A missed scrape is no reading, not "no counters": every other read failing still passes."""
    base = double("--double-load-seconds", "0").wait_for_port()
    calls = failing_scrapes(monkeypatch, lambda n: n % 2 == 1)
    result = run_module_main(vllm_server_check, {"base_url": base, "model": "kimi-k2.5", "max_tokens": 48},
                             monkeypatch)
    assert result["failed"] is False, result
    assert result["spec_decode"]["drafts"] == 18 and len(calls) == 4


def test_server_check_says_when_metrics_could_not_be_read(double: t.Callable[..., Double],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    base = double("--double-load-seconds", "0").wait_for_port()
    calls = failing_scrapes(monkeypatch, lambda n: True)
    result = run_module_main(vllm_server_check, {"base_url": base, "model": "kimi-k2.5"}, monkeypatch)
    assert result["failed"] and len(calls) == 3
    assert "/metrics failed 3 times (last: HTTP 500): whether speculative decoding happens could not be read" in result["msg"]


def test_server_check_fails_on_flat_counters(double: t.Callable[..., Double],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    base = double("--double-load-seconds", "0", "--double-mode", "flat-counters").wait_for_port()
    result = run_module_main(vllm_server_check, {"base_url": base, "model": "kimi-k2.5"}, monkeypatch)
    assert result["failed"] and "counters stayed flat" in result["msg"]
    assert result["spec_decode"]["grew"] is False


def test_server_check_without_speculation(double: t.Callable[..., Double], monkeypatch: pytest.MonkeyPatch) -> None:
    base = double("--double-load-seconds", "0", spec=False).wait_for_port()
    expect = run_module_main(vllm_server_check, {"base_url": base, "model": "kimi-k2.5"}, monkeypatch)
    assert expect["failed"] and "exports no vllm:spec_decode_* counters" in expect["msg"]
    plain = run_module_main(vllm_server_check, {"base_url": base, "model": "kimi-k2.5", "expect_speculation": False},
                            monkeypatch)
    assert plain["failed"] is False and "no speculative decoding observed" in plain["summary"]


def test_server_check_wrong_served_name(double: t.Callable[..., Double], monkeypatch: pytest.MonkeyPatch) -> None:
    base = double("--double-load-seconds", "0").wait_for_port()
    result = run_module_main(vllm_server_check, {"base_url": base, "model": "kimi"}, monkeypatch)
    assert result["failed"] and "not the served name 'kimi'" in result["msg"]


def test_server_check_api_key(double: t.Callable[..., Double], monkeypatch: pytest.MonkeyPatch) -> None:
    base = double("--double-load-seconds", "0", "--api-key", "s3cret").wait_for_port()
    denied = run_module_main(vllm_server_check, {"base_url": base, "model": "kimi-k2.5"}, monkeypatch)
    assert denied["failed"] and "401" in denied["msg"] and "API key" in denied["msg"]
    allowed = run_module_main(vllm_server_check, {"base_url": base, "model": "kimi-k2.5", "api_key": "s3cret"},
                              monkeypatch)
    assert allowed["failed"] is False


# ---- vllm_health_wait ---------------------------------------------------------------------

def wait_args(base: str, **extra: t.Any) -> dict[str, t.Any]:
    return dict({"url": f"{base}/health", "unit": "vllm.service", "timeout": 60, "progress_interval": 0,
                 "poll_interval": 0.2}, **extra)


def test_health_wait_success(double: t.Callable[..., Double], monkeypatch: pytest.MonkeyPatch) -> None:
    base = double("--double-load-seconds", "0.5").wait_for_port()
    result = run_module_main(vllm_health_wait, wait_args(base), monkeypatch)
    assert result["failed"] is False and result["healthy"] is True and result["done"] is True
    assert result["http_status"] == 200


@pytest.mark.parametrize("args, expected", [
    (("--double-mode", "crash-at-start"), "SyntaxError: '(' was never closed -- in "),
    (("--double-mode", "crash-at-start", "--double-crash", "runtime"), "does not support EAGLE3"),
    (("--double-mode", "die-mid-load", "--double-die-after", "1"), "CUDA out of memory"),
    (("--double-mode", "die-mid-load", "--double-die-after", "1", "--double-crash", "nccl"), "NCCL error"),
    # real vLLM format: prefixed worker lines, interleaved, generic RuntimeError last
    (("--double-mode", "crash-at-start", "--double-crash", "replay"),
     "IndentationError: unexpected indent -- in /opt/ml-env/lib/python3.12/site-packages/vllm/model_executor/"
     "models/deepseek_v2.py line 84 near `from vllm.model_executor.layers.fused_moe import FusedMoE`"),
])
def test_health_wait_fails_fast_with_root_cause(double: t.Callable[..., Double], monkeypatch: pytest.MonkeyPatch,
                                                args: tuple[str, ...], expected: str) -> None:
    server = double(*args, port=1)  # port 1: nothing ever listens before it dies
    begin = time.monotonic()
    result = run_module_main(vllm_health_wait, wait_args("http://127.0.0.1:1", timeout=120), monkeypatch)
    elapsed = time.monotonic() - begin
    assert server.proc.wait(timeout=5) == 1
    assert result["failed"] is True and result["healthy"] is False
    assert "vllm.service failed" in result["msg"] and expected in result["msg"], result["msg"]
    assert expected in result["root_cause"][0]
    hint = result["root_cause_hint"]  # every kind here has one but a plain RuntimeError
    assert (hint is None) if "EAGLE3" in expected else f"Hint: {hint}. " in result["msg"], result["msg"]
    assert elapsed < 60  # bounded; the benchmark prints the real figure


def test_health_wait_reports_only_the_watched_start(double: t.Callable[..., Double], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit's history holds an earlier start's OOM; the new start dies of a SyntaxError."""
    history = tmp_path / "unit-history.log"
    history.write_text("(Worker_TP0 pid=9) ERROR 11-29 10:00:00 [multiproc_executor.py:671] "
                       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB.\n")
    monkeypatch.setenv("FAKE_SYSTEMD_UNIT_LOG", str(history))
    server = double("--double-mode", "crash-at-start", port=1)
    result = run_module_main(vllm_health_wait, wait_args("http://127.0.0.1:1", timeout=120), monkeypatch)
    assert server.proc.wait(timeout=5) == 1
    assert result["root_cause"][0].startswith("SyntaxError: '(' was never closed"), result["root_cause"]
    assert "out of memory" not in result["msg"]


def test_health_wait_returns_progress_then_continues(double: t.Callable[..., Double],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    server = double("--double-load-seconds", "4", port=0)
    first = run_module_main(vllm_health_wait, wait_args("http://127.0.0.1:1", progress_interval=1), monkeypatch)
    assert first["failed"] is False and first["done"] is False and first["healthy"] is False
    assert first["latest_line"] and "Loading safetensors checkpoint shards" in first["latest_line"]
    base = server.wait_for_port()
    second = run_module_main(vllm_health_wait, wait_args(base, started=first["started"], baseline=first["baseline"]),
                             monkeypatch)
    assert second["healthy"] is True and second["elapsed"] >= first["elapsed"]


def test_health_wait_unhealthy_server_fails_after_grace(double: t.Callable[..., Double],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    base = double("--double-load-seconds", "0", "--double-mode", "unhealthy").wait_for_port()
    result = run_module_main(vllm_health_wait, wait_args(base, unhealthy_grace=1), monkeypatch)
    assert result["failed"] and "answered HTTP 503" in result["msg"]
    assert "died unexpectedly" in result["msg"]


def test_health_wait_times_out(double: t.Callable[..., Double], monkeypatch: pytest.MonkeyPatch) -> None:
    double("--double-load-seconds", "30", port=0)
    result = run_module_main(vllm_health_wait, wait_args("http://127.0.0.1:1", timeout=1), monkeypatch)
    assert result["failed"] and "did not answer 200 within 1s" in result["msg"]
    assert "Loading safetensors checkpoint shards" in (result["latest_line"] or "")
