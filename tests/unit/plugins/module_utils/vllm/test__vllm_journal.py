"""Tables for root-cause extraction and progress lines from vLLM's journal (plugins/module_utils/_vllm/_journal.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _journal as vj


DOUBLE = Path(__file__).resolve().parents[4] / "doubles" / "fake_vllm_server.py"
FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "vllm_logs"
SITE = "/opt/ml-env/lib/python3.12/site-packages/vllm"


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
    ("replay", "IndentationError: unexpected indent -- in /opt/ml-env/lib/python3.12/site-packages/vllm/"
               "model_executor/models/deepseek_v2.py line 84", "Engine core initialization failed"),
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


# ---- real vLLM crash logs (tests/fixtures/vllm_logs, each names its source in its header) ----

def fixture_lines(name: str) -> list[str]:
    return [line for line in (FIXTURES / name).read_text().splitlines() if not line.startswith("#")]


# file, what the first root-cause line starts with, what some line also says, the hint's start
REAL_LOGS = [
    ("seed_indentationerror_deepseek_v2.log",
     f"IndentationError: unexpected indent -- in {SITE}/model_executor/models/deepseek_v2.py line 84 "
     "near `from vllm.model_executor.layers.fused_moe import FusedMoE` (raised in 8 processes)",
     "RuntimeError: Engine core initialization failed", "a Python file"),
    ("attention_backend_worker_tp_ep.log", "ValueError: No valid attention backend found for cuda with "
     "AttentionSelectorConfig(head_size=576", "use_mla=True, has_sink=False",
     "no attention kernel"),
    ("oom_worker_tp0.log", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 136.00 MiB. GPU 0",
     "PYTORCH_CUDA_ALLOC_CONF", "GPU memory ran out"),
    ("oom_vllmworkerprocess.log", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 2",
     "14.62 GiB", "GPU memory ran out"),
    ("nccl_unhandled_cuda_error.log", "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO",
     "NCCL error", "NCCL between the GPUs"),
    ("pydantic_validation_apiserver.log",
     "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig: "
     "Value error, Expecting value: line 1 column 1 (char 0)", "ModelConfig", "vLLM refused its configuration"),
    ("unrecognized_arguments.log", "vllm: error: unrecognized arguments: --omni", "--omni",
     "vllm serve refused its command line"),
    ("workerproc_bare_exception_stage_tag.log",
     "Exception: WorkerProc initialization failed due to an exception in a background process.",
     "See stack trace", None),
    ("engine_core_generic_only.log",
     "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {} -- raised in "
     "/home/ss345/vllm-local-build/vllm/vllm/v1/engine/utils.py, line 759, in wait_for_engine_startup",
     "near `raise RuntimeError(", None),
]


def test_every_fixture_is_in_the_table_and_names_its_source() -> None:
    assert sorted(f.name for f in FIXTURES.glob("*.log")) == sorted(row[0] for row in REAL_LOGS)
    for row in REAL_LOGS:
        assert (FIXTURES / row[0]).read_text().startswith("# source: "), row[0]


@pytest.mark.parametrize("name, first, also, hint", REAL_LOGS, ids=[row[0] for row in REAL_LOGS])
def test_extract_root_cause_from_real_logs(name: str, first: str, also: str, hint: str | None) -> None:
    causes = vj.extract_root_cause(fixture_lines(name))
    assert causes[0].startswith(first), causes
    assert any(also in cause for cause in causes), causes
    found = vj.cause_hint(causes)
    assert (found is None) if hint is None else (found or "").startswith(hint), found


def test_seed_failure_leads_with_the_worker_then_the_generic_chain() -> None:
    causes = vj.extract_root_cause(fixture_lines("seed_indentationerror_deepseek_v2.log"))
    assert [c.split(":")[0] for c in causes] == ["IndentationError", "Exception", "RuntimeError"], causes
    assert "multiproc_executor.py, line 509, in wait_for_ready" in causes[1]


def test_interleaved_tracebacks_do_not_mix() -> None:
    """Two workers' tracebacks line by line: each keeps its own frames and exception."""
    a = ["Traceback (most recent call last):", '  File "/w/a.py", line 1, in f', "    a()",
         "KeyError: 'a'"]
    b = ["Traceback (most recent call last):", '  File "/w/b.py", line 2, in g', "    b()",
         "ImportError: cannot import name 'B' from 'w'"]
    lines = []
    for la, lb in zip(a, b):
        lines += [f"(Worker_TP0 pid=1) ERROR 11-29 18:45:21 [multiproc_executor.py:671] {la}",
                  f"(Worker_TP1 pid=2) ERROR 11-29 18:45:21 [multiproc_executor.py:671] {lb}"]
    assert vj.extract_root_cause(lines) == [
        "KeyError: 'a' -- raised in /w/a.py, line 1, in f near `a()`",
        "ImportError: cannot import name 'B' from 'w' -- raised in /w/b.py, line 2, in g near `b()`"]


@pytest.mark.parametrize("line, tag, level, text", [
    ('(Worker_TP3 pid=41003) ERROR 11-29 18:45:21 [multiproc_executor.py:671]   File "/x.py", line 84',
     "Worker_TP3 pid=41003", "ERROR", '  File "/x.py", line 84'),
    ("Nov 29 18:45:21 gpu01 vllm[812]: (APIServer pid=812) INFO 11-29 18:45:21 [api_server.py:1] up",
     "APIServer pid=812", "INFO", "up"),
    ("2026-11-29T18:45:21+0000 gpu01 vllm[812]: plain line", "", "", "plain line"),
    ("\x1b[1;31m(EngineCore_DP0 pid=7) [Stage-0] ERROR 03-12 08:22:29.123 [core.py:1100] Exception: x",
     "EngineCore_DP0 pid=7", "ERROR", "Exception: x"),
    ("(VllmWorkerProcess pid=760) ERROR 07-24 08:26:01 multiproc_worker_utils.py:226]     raise E",
     "VllmWorkerProcess pid=760", "ERROR", "    raise E"),
    ("(VllmWorker rank=2 pid=9) WARNING 11-29 10:00:01 [v1/engine/core.py:936] careful",
     "VllmWorker rank=2 pid=9", "WARNING", "careful"),
])
def test_parse_line(line: str, tag: str, level: str, text: str) -> None:
    record = vj.parse_line(line)
    assert (record.tag, record.level, record.text) == (tag, level, text)


@pytest.mark.parametrize("lines, first", [
    (["Exception: WorkerProc initialization failed due to an exception"],
     "Exception: WorkerProc initialization failed"),
    (["Traceback (most recent call last):", '  File "/srv/m.py", line 3, in <module>', "    import flash_attn",
      "ModuleNotFoundError: No module named 'flash_attn'"],
     "ModuleNotFoundError: No module named 'flash_attn' -- raised in /srv/m.py, line 3, in <module> near "
     "`import flash_attn`"),
    (["usage: vllm serve [model_tag] [options]",
      "vllm serve: error: argument --port: invalid int value: 'x'"],
     "vllm serve: error: argument --port: invalid int value: 'x'"),
    (["(APIServer pid=5) Traceback (most recent call last):",
      '(APIServer pid=5)   File "/v/speculative.py", line 9, in __init__',
      "(APIServer pid=5)     s.__pydantic_validator__.validate_python(x)",
      "(APIServer pid=5) pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
      "(APIServer pid=5)   Value error, num_speculative_tokens must be > 0 [type=value_error]",
      "(APIServer pid=5)     For further information visit https://errors.pydantic.dev/2.12/v/value_error"],
     "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig: Value error, "
     "num_speculative_tokens must be > 0 [type=value_error] -- raised in /v/speculative.py, line 9"),
    # an INFO record that mentions an error is not an exception
    (["INFO 11-29 10:00:00 [x.py:1] RuntimeError: only a word in a message", "ERROR 11-29 10:00:01 [y.py:2] real"],
     "real"),
])
def test_extract_root_cause_kinds(lines: list[str], first: str) -> None:
    assert vj.extract_root_cause(lines)[0].startswith(first)


@pytest.mark.parametrize("causes, start", [
    (["TabError: inconsistent use of tabs"], "a Python file"),
    (["ImportError: libcudart.so.12: cannot open shared object file"], "a module is missing"),
    (["ValueError: No available memory for the cache blocks."], "GPU memory ran out"),
    (["RuntimeError: Engine core initialization failed."], None),
    ([], None),
])
def test_cause_hint(causes: list[str], start: str | None) -> None:
    hint = vj.cause_hint(causes)
    assert (hint is None) if start is None else hint.startswith(start), hint
