"""Tables for the canary's argv and systemd-run line (plugins/module_utils/_vllm/_canary.py).

The model configs are the public Kimi-K2.5 config.json (tests/vllm_full/fixtures, nested
text_config) and a flat DeepSeek-V3-shaped one made from its text_config.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _canary as vc

FIXTURES = Path(__file__).resolve().parents[4] / "vllm_full" / "fixtures"
KIMI = json.loads((FIXTURES / "kimi-k2.5" / "config.json").read_text())
FLAT = dict(KIMI["text_config"])
DRAFTER = json.loads((FIXTURES / "kimi-k2.5-eagle3" / "config.json").read_text())
ARGV = ["/opt/ml-env/bin/vllm", "serve", "/srv/models/Kimi-K2.5", "--served-model-name", "kimi-k2.5",
        "--host", "0.0.0.0", "--port", "8000", "--tensor-parallel-size", "8", "--trust-remote-code",
        "--speculative-config", '{"method": "eagle3", "model": "/srv/models/d", "num_speculative_tokens": 3}']
TARGET = "/opt/ml-env.d/vllm-0.18.0-0123456789ab"


@pytest.mark.parametrize("config, asked, drafter, method, layers, why", [
    (KIMI, 2, None, None, 2, []),
    (FLAT, 2, None, None, 2, []),
    (KIMI, 1, None, None, 2, ["first_k_dense_replace is 1"]),
    (dict(FLAT, first_k_dense_replace=3), 2, None, None, 4, ["first_k_dense_replace is 3"]),
    (KIMI, 2, DRAFTER, "eagle3", 7, ["three distinct target layers"]),
    (KIMI, 9, DRAFTER, "eagle3", 9, []),
    (KIMI, 2, DRAFTER, "ngram", 2, []),
    (KIMI, 2, dict(DRAFTER, eagle_aux_hidden_state_layer_ids=[1, 4, 9]), "eagle3", 10, ["layers [1, 4, 9]"]),
    (dict(FLAT, num_hidden_layers=5), 2, DRAFTER, "eagle3", 5, ["three distinct", "only 5 layers"]),
    ({"num_hidden_layers": 2}, 4, None, None, 2, ["only 2 layers"]),
    ({}, 3, None, None, 3, []),
])
def test_layers(config, asked, drafter, method, layers, why):
    got, reasons = vc.canary_layers(config, asked, drafter, method)
    assert got == layers
    assert len(reasons) == len(why)
    for fragment, reason in zip(why, reasons):
        assert fragment in reason


@pytest.mark.parametrize("asked", [0, -1, "two", None, True])
def test_layers_refuses_bad_counts(asked):
    with pytest.raises(vc.CanaryError, match="vllm_server_canary_layers must be an integer >= 1"):
        vc.canary_layers(KIMI, asked)


@pytest.mark.parametrize("config, user, expected", [
    (KIMI, None, {"text_config": {"num_hidden_layers": 3}}),
    (FLAT, None, {"num_hidden_layers": 3}),
    (KIMI, {"text_config": {"num_hidden_layers": 40, "rope_theta": 1.0}, "a": 1},
     {"text_config": {"num_hidden_layers": 3, "rope_theta": 1.0}, "a": 1}),
    (KIMI, {"text_config": 5}, {"text_config": {"num_hidden_layers": 3}}),
    (FLAT, {"max_position_embeddings": 4096}, {"max_position_embeddings": 4096, "num_hidden_layers": 3}),
])
def test_overrides(config, user, expected):
    assert vc.canary_overrides(config, 3, user) == expected


def test_argv_from_the_units():
    plan = vc.canary_plan(ARGV, TARGET, 8001, 2, KIMI)
    argv = plan["argv"]
    assert argv[0] == TARGET + "/bin/vllm"
    assert argv[1:3] == ["serve", "/srv/models/Kimi-K2.5"]
    assert vc.flag_value(argv, "--port") == "8001"
    assert vc.flag_value(argv, "--host") == "127.0.0.1"
    assert vc.flag_value(argv, "--load-format") == "dummy"
    assert json.loads(vc.flag_value(argv, "--hf-overrides")) == {"text_config": {"num_hidden_layers": 2}}
    assert argv.count("--port") == 1 and argv.count("--host") == 1
    # every other flag of the unit, in order
    assert vc.without_flags(argv[1:], ("--host", "--port", "--load-format", "--hf-overrides")) \
        == vc.without_flags(ARGV[1:], ("--host", "--port"))
    assert plan["nested"] and plan["layers"] == 2 and plan["hf_overrides"] == {"text_config": {"num_hidden_layers": 2}}


def test_argv_replaces_the_users_load_format_and_merges_overrides():
    argv = ARGV + ["--load-format=safetensors", "--hf-overrides", '{"text_config": {"foo": 1}}', "--port=9000"]
    got = vc.canary_plan(argv, TARGET + "/", 8001, 4, KIMI)["argv"]
    assert got[0] == TARGET + "/bin/vllm"
    assert "--load-format=safetensors" not in got and "--port=9000" not in got
    assert vc.flag_value(got, "--port") == "8001"
    assert json.loads(vc.flag_value(got, "--hf-overrides")) == {"text_config": {"foo": 1, "num_hidden_layers": 4}}


def test_argv_with_drafter_raises_layers():
    plan = vc.canary_plan(ARGV, TARGET, 8001, 2, KIMI, DRAFTER, "eagle3")
    assert plan["layers"] == 7 and "three distinct" in plan["layers_reasons"][0]


@pytest.mark.parametrize("argv, target, port, message", [
    (ARGV, TARGET, 8000, "is the server's own port"),
    (ARGV, TARGET, 0, "vllm_server_canary_port must be an integer from 1 to 65535"),
    (ARGV, TARGET, "x", "vllm_server_canary_port"),
    (ARGV, "relative/env", 8001, "vllm_server_env_target must be an absolute path"),
    (["/opt/ml-env/bin/vllm", "bench"], TARGET, 8001, "not a `vllm serve` command line"),
    (ARGV + ["--hf-overrides", "{not json"], TARGET, 8001, "--hf-overrides is not JSON"),
    (ARGV + ["--hf-overrides", "[1]"], TARGET, 8001, "must be a JSON object"),
])
def test_argv_refusals(argv, target, port, message):
    with pytest.raises(vc.CanaryError, match=message.replace("(", r"\(").replace("`", "`")):
        vc.canary_plan(argv, target, port, 2, KIMI)


def test_plan_refuses_a_config_that_is_not_an_object():
    with pytest.raises(vc.CanaryError, match="not a JSON object"):
        vc.canary_plan(ARGV, TARGET, 8001, 2, ["x"])


@pytest.mark.parametrize("argv, flag, value", [
    (["a", "--port", "1", "--port", "2"], "--port", "2"),
    (["a", "--port=3"], "--port", "3"),
    (["a", "--port"], "--port", None),
    (["a", "--portx", "1"], "--port", None),
])
def test_flag_value(argv, flag, value):
    assert vc.flag_value(argv, flag) == value


def test_systemd_run_line():
    cmd = vc.systemd_run_argv("vllm-canary", ["/e/bin/vllm", "serve", "m", "--x", '{"a": "$HOME 100%"}'],
                              {"User": "vllm", "Group": "vllm", "EnvironmentFile": "/etc/vllm/vllm.env",
                               "CapabilityBoundingSet": "", "LimitNOFILE": 1048576, "CPUAffinity": None,
                               "DeviceAllow": ["char-nvidia rw", "char-nvidia-uvm rw"]})
    assert cmd[:3] == ["systemd-run", "--unit=vllm-canary.service", "--quiet"]
    assert "--property=User=vllm" in cmd and "--property=LimitNOFILE=1048576" in cmd
    assert "--property=CapabilityBoundingSet=" in cmd  # an empty assignment, as in the unit file
    assert not any(c.startswith("--property=CPUAffinity") for c in cmd)
    assert [c for c in cmd if c.startswith("--property=DeviceAllow=")] == [
        "--property=DeviceAllow=char-nvidia rw", "--property=DeviceAllow=char-nvidia-uvm rw"]
    # $ doubled (systemd expands $VAR in the command), % untouched (no specifiers through D-Bus)
    assert cmd[-1] == '{"a": "$$HOME 100%"}' and cmd[-5] == "/e/bin/vllm"
