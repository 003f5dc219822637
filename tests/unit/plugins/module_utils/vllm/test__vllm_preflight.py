"""Table tests for the pure side of the vLLM serve preflight (naming variables, the refusal)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _preflight as vp
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._server import systemd_env_lines


@pytest.mark.parametrize("argv, extra, flag, variable", [
    (["/v", "serve", "/m", "--kv-cache-dtype", "fp8"], [], "--kv-cache-dtype",
     "vllm_server_kv_cache_dtype"),
    (["/v", "serve", "/m", "--language-model-only"], [], "--language-model-only",
     "vllm_server_language_model_only"),
    (["/v", "serve", "/m", "--speculative-config", "{}"], [], "--speculative-config",
     "vllm_server_speculative_method / vllm_server_drafter_path / "
     "vllm_server_num_speculative_tokens / vllm_server_speculative_extra"),
    (["/v", "serve", "/m", "--enforce-eager"], ["enforce_eager"], "--enforce-eager",
     "vllm_server_extra_flags['--enforce-eager']"),
    (["/v", "serve", "/m", "--compilation-config.pass_config.fuse_allreduce_rms", "true"],
     ["compilation_config.pass_config.fuse_allreduce_rms"],
     "--compilation-config.pass_config.fuse_allreduce_rms",
     "vllm_server_extra_flags['--compilation-config.pass_config.fuse_allreduce_rms']"),
    ([], [], "--model", "vllm_server_model_path"),
])
def test_flag_variables(argv: list, extra: list, flag: str, variable: str) -> None:
    assert vp.flag_variables(argv, extra)[flag] == variable


def test_flag_variables_skips_values() -> None:
    names = vp.flag_variables(["/v", "serve", "/m", "--port", "8000"])
    assert "8000" not in names and "/m" not in names


def test_refusal_message_names_everything() -> None:
    text = vp.refusal_message({"vllm_version": "0.17.0", "problems": [
        {"variables": ["vllm_server_kv_cache_dtype"], "message": "no attention backend",
         "fix": "set it to auto"}]}, host="gpu01")
    assert text.splitlines()[0].startswith("vLLM 0.17.0 on gpu01 would refuse")
    assert "not touched" in text
    assert "- vllm_server_kv_cache_dtype: no attention backend Fix: set it to auto." in text


@pytest.mark.parametrize("value", ["PCI_BUS_ID", "", "a b", 'say "hi"', "back\\slash", "$HOME",
                                   "`id`", "100%", "x=y", "'single'", "line\nbreak"])
def test_unit_environment_reads_back_what_the_env_file_holds(value: str) -> None:
    lines = systemd_env_lines({"VLLM_X": value, "NCCL_DEBUG": "WARN", "UNSET": None})
    assert vp.unit_environment(lines) == {"NCCL_DEBUG": "WARN", "VLLM_X": value}


@pytest.mark.parametrize("lines, found", [
    (["# managed", "", "A=plain", "B='x y'"], {"A": "plain", "B": "x y"}),
    (['A="1"', 'A="2"'], {"A": "2"}),  # the last one wins, as in systemd
])
def test_unit_environment_forms(lines: list, found: dict) -> None:
    assert vp.unit_environment(lines) == found


@pytest.mark.parametrize("line", ["no equals sign", "1BAD=x", "BAD NAME=x"])
def test_unit_environment_refuses_a_bad_line_without_echoing_it(line: str) -> None:
    with pytest.raises(ValueError) as raised:
        vp.unit_environment(['VLLM_API_KEY="s3cret"', line])
    assert "line 2" in str(raised.value) and line not in str(raised.value)
