"""Tables for root-cause extraction and progress lines from vLLM's journal (plugins/module_utils/_vllm_journal.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _vllm_journal as vj


DOUBLE = Path(__file__).resolve().parents[3] / "doubles" / "fake_vllm_server.py"


def double_crash_log(kind: str) -> list[str]:
    """The log the fake vLLM server double writes when it crashes at start."""
    out = subprocess.run([sys.executable, str(DOUBLE), "serve", "/m", "--double-mode", "crash-at-start",
                          "--double-crash", kind], capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 1
    return (out.stdout + out.stderr).splitlines()


@pytest.mark.parametrize("kind, first, also", [
    ("syntax", "SyntaxError: '(' was never closed -- in /opt/ml-env/lib/python3.12/site-packages/vllm/"
               "model_executor/models/deepseek_v2.py line 57", "Engine core initialization failed"),
    ("runtime", "RuntimeError: Model does not support EAGLE3 interface", "gpu_model_runner.py, line 2611"),
    ("oom", "torch.OutOfMemoryError: CUDA out of memory", "layer.py, line 912, in create_weights"),
    ("nccl", "torch.distributed.DistBackendError: NCCL error", "NCCL WARN P2P: peer access"),
])
def test_extract_root_cause_from_double(kind: str, first: str, also: str) -> None:
    causes = vj.extract_root_cause(double_crash_log(kind))
    assert causes[0].startswith(first), causes
    assert any(also in cause for cause in causes), causes


@pytest.mark.parametrize("lines, expected", [
    (["Traceback (most recent call last):", '  File "/a.py", line 3, in main', "    x()",
      "ValueError: bad value"],
     ["ValueError: bad value -- raised in /a.py, line 3, in main"]),
    (['Traceback (most recent call last):', '  File "/a.py", line 1, in <module>',
      '  File "/b.py", line 9', "    def f(:", "          ^", "SyntaxError: invalid syntax"],
     ["SyntaxError: invalid syntax -- in /b.py line 9 near `def f(:`"]),
    (["INFO 11-29 10:00:00 [x.py:1] fine", "ERROR 11-29 10:00:01 [y.py:2] something broke"],
     ["something broke"]),
    (["hello", "", "world"], ["hello", "world"]),
    (["(VllmWorker rank=2 pid=9) ERROR 11-29 10:00:01 [w.py:1] NCCL error: unhandled system error",
      "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1) ran for 600000 ms"],
     ["NCCL error: unhandled system error", "Watchdog caught collective operation timeout"]),
    (["ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"],
     ["ValueError: No available memory for the cache blocks"]),
    ([], []),
])
def test_extract_root_cause(lines: list[str], expected: list[str]) -> None:
    causes = vj.extract_root_cause(lines)
    assert len(causes) == len(expected), causes
    for cause, fragment in zip(causes, expected):
        assert cause.startswith(fragment), causes


@pytest.mark.parametrize("lines, expected", [
    (["INFO 11-29 10:00:00 [a.py:1] Starting to load model /m...",
      "(EngineCore_DP0 pid=1) Loading safetensors checkpoint shards:  40% Completed | 26/64",
      "INFO 11-29 10:00:05 [b.py:1] some chatter"],
     "Loading safetensors checkpoint shards:  40% Completed | 26/64"),
    (["x\rLoading safetensors checkpoint shards: 10% Completed\rLoading safetensors checkpoint shards: 20% Completed"],
     "Loading safetensors checkpoint shards: 20% Completed"),
    (["INFO 11-29 10:00:00 [a.py:1] Graph capturing finished in 31 secs",
      'INFO 11-29 10:00:01 [l.py:1] 127.0.0.1:5 - "GET /health HTTP/1.1" 200'],
     "Graph capturing finished in 31 secs"),
    (["INFO 11-29 10:00:00 [a.py:1] something else entirely"], "something else entirely"),
    (["\x1b[32mINFO\x1b[0m 11-29 10:00:00 [a.py:1] Available KV cache memory: 9.5 GiB"],
     "Available KV cache memory: 9.5 GiB"),
    (["not a log record"], None),
    ([], None),
])
def test_latest_meaningful_line(lines: list[str], expected: str | None) -> None:
    assert vj.latest_meaningful_line(lines) == expected
