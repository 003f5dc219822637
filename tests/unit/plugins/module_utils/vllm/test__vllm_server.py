"""Tables for the unit rendering logic: systemd quoting and vllm serve flags (plugins/module_utils/_vllm/_server.py)."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _server as vs


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
    (("ngram", "", 4, 8), {"method": "ngram", "num_speculative_tokens": 4}),
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


def test_shlex_sanity_of_reference_model() -> None:
    """The reference unquoter agrees with shlex on simple lines (guards the guard)."""
    assert systemd_unquote('/x "a b" c') == shlex.split('/x "a b" c')
