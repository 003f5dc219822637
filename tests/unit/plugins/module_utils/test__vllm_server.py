"""Tables for the pure logic of the vllm_server role (plugins/module_utils/_vllm_server.py)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _vllm_server as vs

DOUBLE = Path(__file__).resolve().parents[3] / "doubles" / "fake_vllm_server.py"


# ---- systemd quoting ------------------------------------------------------------------------

def systemd_unquote(line: str) -> list[str]:
    """What systemd makes of an ExecStart line for the characters we emit (reference model)."""
    words, word, i, quoted = [], None, 0, False
    while i < len(line):
        ch = line[i]
        if ch == "%" and line[i + 1:i + 2] == "%":
            word = (word or "") + "%"
            i += 2
            continue
        if ch == "$" and line[i + 1:i + 2] == "$":
            word = (word or "") + "$"
            i += 2
            continue
        if ch in "$%":
            raise AssertionError(f"unescaped {ch} at {i} in {line!r}")
        if quoted:
            if ch == "\\":
                nxt = line[i + 1]
                word += {"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt)
                i += 2
                continue
            if ch == '"':
                quoted = False
            else:
                word += ch
        elif ch == '"':
            quoted, word = True, word or ""
        elif ch == " ":
            if word is not None:
                words.append(word)
            word = None
        else:
            word = (word or "") + ch
        i += 1
    if word is not None:
        words.append(word)
    return words


@pytest.mark.parametrize("arg, expected", [
    ("--port", "--port"),
    ("/opt/ml-env/bin/vllm", "/opt/ml-env/bin/vllm"),
    ("0.95", "0.95"),
    ("a b", '"a b"'),
    ("100%", '"100%%"'),
    ("$HOME", '"$$HOME"'),
    ('{"method": "eagle3"}', '"{\\"method\\": \\"eagle3\\"}"'),
    ("back\\slash", '"back\\\\slash"'),
    ("", '""'),
    ("it's", '"it\'s"'),
])
def test_systemd_exec_quote(arg: str, expected: str) -> None:
    assert vs.systemd_exec_quote(arg) == expected


@pytest.mark.parametrize("argv", [
    ["/opt/ml-env/bin/vllm", "serve", "/srv/models/Kimi K2.5", "--port", "8000"],
    ["/x", "--speculative-config", json.dumps({"model": "/d/it's \"q\" $X 50% \\n"})],
    ["/x", "tab\there", "new\nline", ";", "a%b$c"],
])
def test_systemd_exec_line_round_trips(argv: list[str]) -> None:
    assert systemd_unquote(vs.systemd_exec_line(argv)) == argv


@pytest.mark.parametrize("argv, message", [
    ([], "empty"),
    (["vllm", "serve"], "absolute"),
    (["/x", "bell\x07"], "control"),
])
def test_systemd_exec_line_refuses(argv: list[str], message: str) -> None:
    with pytest.raises(vs.ServerConfigError, match=message):
        vs.systemd_exec_line(argv)


@pytest.mark.parametrize("value, expected", [
    ("plain", '"plain"'),
    ('quo"te', '"quo\\"te"'),
    ("dol$ar", '"dol\\$ar"'),
    ("back\\slash", '"back\\\\slash"'),
    ("tick`", '"tick\\`"'),
    (True, '"1"'),
    (3, '"3"'),
])
def test_systemd_env_value(value: object, expected: str) -> None:
    assert vs.systemd_env_value(value) == expected


@pytest.mark.parametrize("value", ["plain", 'a"b', "x$y z", "back\\slash", "t`ick", "it's"])
def test_systemd_env_value_is_read_back_by_a_posix_shell(value: str) -> None:
    """systemd's EnvironmentFile double quotes follow POSIX shell rules; sh is the reference."""
    out = subprocess.run(["sh", "-c", f"X={vs.systemd_env_value(value)}; printf %s \"$X\""],
                         capture_output=True, text=True, check=True).stdout
    assert out == value


@pytest.mark.parametrize("env, expected", [
    ({"B": "2", "A": "1"}, ['A="1"', 'B="2"']),
    ({"A": None, "B": "x"}, ['B="x"']),
    ({}, []),
])
def test_systemd_env_lines(env: dict, expected: list[str]) -> None:
    assert vs.systemd_env_lines(env) == expected


def test_systemd_env_lines_refuses_bad_names() -> None:
    with pytest.raises(vs.ServerConfigError, match="not a valid"):
        vs.systemd_env_lines({"BAD-NAME": "x"})


# ---- flags --------------------------------------------------------------------------------

@pytest.mark.parametrize("options, extra, expected_tail", [
    ({"tensor_parallel_size": 8}, None, ["--tensor-parallel-size", "8"]),
    ({"trust_remote_code": True}, None, ["--trust-remote-code"]),
    ({"language_model_only": False, "x": None, "y": ""}, None, []),
    ({"gpu_memory_utilization": 0.95}, None, ["--gpu-memory-utilization", "0.95"]),
    ({"speculative_config": {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}}, None,
     ["--speculative-config", '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}']),
    ({"port": 8000}, {"port": 9000}, ["--port", "9000"]),
    ({"enable_auto_tool_choice": True}, {"enable_auto_tool_choice": False}, []),
    ({}, {"--max-num-seqs": 64, "enforce-eager": True}, ["--max-num-seqs", "64", "--enforce-eager"]),
    ({}, {"middleware[]": ["a.B", "c.D"]}, ["--middleware", "a.B", "--middleware", "c.D"]),
    # vLLM converts `_` only before the first dot; a bare dotted flag eats the next word.
    ({}, {"compilation_config.pass_config.fuse_allreduce_rms": True},
     ["--compilation-config.pass_config.fuse_allreduce_rms", "true"]),
    ({}, {"compilation_config.pass_config.fuse_allreduce_rms": False},
     ["--compilation-config.pass_config.fuse_allreduce_rms", "false"]),
    ({}, {"compilation_config.mode": 3, "compilation_config.cudagraph_sizes": [1, 2]},
     ["--compilation-config.mode", "3", "--compilation-config.cudagraph_sizes", "[1, 2]"]),
    ({}, {"compilation_config.mode": None}, []),
    ({}, {"--compilation-config.pass_config.fuse_allreduce_rms": True},
     ["--compilation-config.pass_config.fuse_allreduce_rms", "true"]),
    ({"enable_auto_tool_choice": True, "tool_call_parser": "kimi_k2"}, None,
     ["--enable-auto-tool-choice", "--tool-call-parser", "kimi_k2"]),
])
def test_serve_argv(options: dict, extra: dict | None, expected_tail: list[str]) -> None:
    argv = vs.serve_argv("/opt/ml-env/bin/vllm", "/srv/m", options, extra)
    assert argv[:3] == ["/opt/ml-env/bin/vllm", "serve", "/srv/m"]
    assert argv[3:] == expected_tail


@pytest.mark.parametrize("options", [
    {"enable_auto_tool_choice": True, "tool_call_parser": ""},
    {"enable_auto_tool_choice": True},
])
def test_serve_argv_refuses_auto_tool_choice_without_parser(options: dict) -> None:
    with pytest.raises(vs.ServerConfigError, match="vllm_server_tool_call_parser is empty"):
        vs.serve_argv("/x", "/m", options)


def test_serve_argv_needs_a_model() -> None:
    with pytest.raises(vs.ServerConfigError, match="model path"):
        vs.serve_argv("/x", "", {})


@pytest.mark.parametrize("args, expected", [
    ((None, "/d", 3), None),
    (("eagle3", "/d", 3, 8),
     {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 8}),
    (("eagle3", "/d", "3", None), {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}),
    (("eagle3", "/d", 2, 1, {"max_model_len": 2048}),
     {"method": "eagle3", "model": "/d", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1,
      "max_model_len": 2048}),
    (("ngram", None, 4), {"method": "ngram", "num_speculative_tokens": 4}),
    (("ngram", "", 4, "", {"prompt_lookup_max": 4}),
     {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}),
    (("suffix", "", 8), {"method": "suffix", "num_speculative_tokens": 8}),
    (("auto", "/d", 3), {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}),
    (("auto", "", 3), None),
    (("none", "/d", 3), None),
    (("", "/d", 3), None),
])
def test_speculative_config(args: tuple, expected: dict | None) -> None:
    assert vs.speculative_config(*args) == expected


@pytest.mark.parametrize("args, message", [
    (("eagle3", "", 3), "needs a drafter"),
    (("draft_model", None, 3), "vllm_server_drafter_path is empty"),
    (("eagle3", "/d", 0), ">= 1"),
    (("eagle3", "/d", "three"), "positive integer"),
])
def test_speculative_config_refuses(args: tuple, message: str) -> None:
    with pytest.raises(vs.ServerConfigError, match=message):
        vs.speculative_config(*args)


@pytest.mark.parametrize("host, expected", [
    ("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("gpu01.example", False),
])
def test_is_loopback(host: str, expected: bool) -> None:
    assert vs.is_loopback(host) is expected


# ---- weights ------------------------------------------------------------------------------

INDEX = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
                        "c": "model-00002-of-00002.safetensors"}}


@pytest.mark.parametrize("files, expected", [
    ({"config.json": "{}", "model.safetensors.index.json": json.dumps(INDEX),
      "model-00001-of-00002.safetensors": "x", "model-00002-of-00002.safetensors": "x"}, []),
    ({"config.json": "{}", "model.safetensors.index.json": json.dumps(INDEX),
      "model-00001-of-00002.safetensors": "x"},
     ["model-00002-of-00002.safetensors: missing (named by model.safetensors.index.json)"]),
    ({"config.json": "", "model.safetensors.index.json": json.dumps(INDEX),
      "model-00001-of-00002.safetensors": "", "model-00002-of-00002.safetensors": "x"},
     ["config.json: empty", "model-00001-of-00002.safetensors: empty (named by model.safetensors.index.json)"]),
    ({"model.safetensors": "x"}, ["config.json: missing"]),
    ({"config.json": "{}", "model.safetensors": "x"}, []),
    ({"config.json": "{}"}, ["no model.safetensors.index.json and no *.safetensors file"]),
    ({"config.json": "{}", "model.safetensors.index.json": "{not json"}, ["unreadable index"]),
])
def test_check_weights_dir(tmp_path: Path, files: dict[str, str], expected: list[str]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    problems = vs.check_weights_dir(str(tmp_path))["problems"]
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected):
        assert fragment in problem


def test_check_weights_dir_missing_directory(tmp_path: Path) -> None:
    assert vs.check_weights_dir(str(tmp_path / "nope"))["problems"] == [
        f"{tmp_path / 'nope'}: directory does not exist"]


# ---- journal ------------------------------------------------------------------------------

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
    causes = vs.extract_root_cause(double_crash_log(kind))
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
    causes = vs.extract_root_cause(lines)
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
    assert vs.latest_meaningful_line(lines) == expected


# ---- unit state ---------------------------------------------------------------------------

RUNNING = {"ActiveState": "active", "SubState": "running", "MainPID": "100", "NRestarts": "0"}


@pytest.mark.parametrize("current, fragment", [
    (RUNNING, None),
    (dict(RUNNING, NRestarts="1", MainPID="200"), "restarted it 1 time(s)"),
    ({"ActiveState": "activating", "SubState": "auto-restart", "MainPID": "0", "NRestarts": "0",
      "ExecMainStatus": "1"}, "died (main process exit status 1); systemd will restart it"),
    ({"ActiveState": "failed", "SubState": "failed", "MainPID": "0", "Result": "exit-code",
      "ExecMainStatus": "1"}, "failed (main process exit status 1) (result exit-code"),
    ({"ActiveState": "inactive", "SubState": "dead", "MainPID": "0"}, "is not running"),
    (dict(RUNNING, MainPID="300"), "main process 100 is gone"),
    ({"LoadState": "not-found", "ActiveState": "inactive"}, "does not exist"),
])
def test_unit_death(current: dict, fragment: str | None) -> None:
    reason = vs.unit_death("vllm.service", RUNNING, current)
    if fragment is None:
        assert reason is None
    else:
        assert reason is not None and fragment in reason, reason


def test_parse_systemctl_show() -> None:
    assert vs.parse_systemctl_show("ActiveState=active\nMainPID=12\nbroken\nX=a=b\n") == {
        "ActiveState": "active", "MainPID": "12", "X": "a=b"}


# ---- metrics ------------------------------------------------------------------------------

METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="k"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="k"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="k"} 60.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="k"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="k",position="0"} 16.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="k",position="1"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="k",position="2"} 5.0
vllm:num_requests_running{engine="0",model_name="k"} 0.0
"""


def test_parse_prometheus_labels_and_values() -> None:
    samples = vs.parse_prometheus('a{x="1",y="q\\"t"} 2.5\nb 1e3\n# c 1\nbad line\n')
    assert samples == {"a": [({"x": "1", "y": 'q\\"t'}, 2.5)], "b": [({}, 1000.0)]}


@pytest.mark.parametrize("text, expected", [
    (METRICS, {"present": True, "drafts": 20.0, "draft_tokens": 60.0, "accepted_tokens": 30.0,
               "accepted_per_position": {"0": 16.0, "1": 9.0, "2": 5.0}}),
    ("vllm:num_requests_running 0\n",
     {"present": False, "drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "accepted_per_position": {}}),
])
def test_spec_decode_counters(text: str, expected: dict) -> None:
    assert vs.spec_decode_counters(text) == expected


ZERO = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "accepted_per_position": {}}


@pytest.mark.parametrize("before, after, expected", [
    (ZERO, vs.spec_decode_counters(METRICS),
     {"drafts": 20, "draft_tokens": 60, "accepted_tokens": 30, "grew": True, "acceptance_rate": 0.5,
      "mean_acceptance_length": 2.5, "per_position_acceptance_rate": {"0": 0.8, "1": 0.45, "2": 0.25}}),
    (vs.spec_decode_counters(METRICS), vs.spec_decode_counters(METRICS),
     {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "grew": False, "acceptance_rate": None,
      "mean_acceptance_length": None, "per_position_acceptance_rate": {"0": None, "1": None, "2": None}}),
    (ZERO, ZERO, {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "grew": False,
                  "acceptance_rate": None, "mean_acceptance_length": None,
                  "per_position_acceptance_rate": {}}),
])
def test_spec_decode_delta(before: dict, after: dict, expected: dict) -> None:
    assert vs.spec_decode_delta(before, after) == expected


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (12.4, "12s"), (754, "12m34s"), (3700, "1h01m40s")])
def test_format_duration(seconds: float, text: str) -> None:
    assert vs.format_duration(seconds) == text


def test_shlex_sanity_of_reference_model() -> None:
    """The reference unquoter agrees with shlex on simple lines (guards the guard)."""
    assert systemd_unquote('/x "a b" c') == shlex.split('/x "a b" c')
