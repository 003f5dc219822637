"""Tables for the role's range checks (plugins/module_utils/_vllm/_ranges.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _ranges as vr


@pytest.mark.parametrize("values", [
    {"vllm_server_port": 8000, "vllm_server_tensor_parallel_size": 8, "vllm_server_gpu_memory_utilization": 0.95},
    {"vllm_server_port": 1, "vllm_server_gpu_memory_utilization": 1, "vllm_server_restart_sec": 0},
    {"vllm_server_port": "65535", "vllm_server_check_max_tokens": "48"},  # -e gives strings
    {"vllm_server_max_model_len": "", "vllm_server_draft_tensor_parallel_size": None},  # flag left out
    {"some_other_var": -1},
])
def test_range_problems_accepts(values: dict) -> None:
    assert vr.range_problems(values) == []


@pytest.mark.parametrize("name, value, expected", [
    ("vllm_server_port", 99999, "vllm_server_port must be an integer from 1 to 65535, found 99999"),
    ("vllm_server_port", 0, "from 1 to 65535, found 0"),
    ("vllm_server_port", "80a", "found '80a'"),
    ("vllm_server_tensor_parallel_size", 0, "vllm_server_tensor_parallel_size must be an integer >= 1, found 0"),
    ("vllm_server_tensor_parallel_size", True, "found True"),
    ("vllm_server_tensor_parallel_size", 2.5, "found 2.5"),
    ("vllm_server_num_speculative_tokens", -3, "integer >= 1"),
    ("vllm_server_gpu_memory_utilization", 0, "must be a number above 0 up to 1, found 0"),
    ("vllm_server_gpu_memory_utilization", 1.5, "found 1.5"),
    ("vllm_server_gpu_memory_utilization", "nan", "found 'nan'"),
    ("vllm_server_max_model_len", 0, "(or empty to leave the flag out)"),
    ("vllm_server_restart_sec", -1, "integer >= 0"),
    ("vllm_server_start_limit_burst", 0, "integer >= 1"),
])
def test_range_problems_refuses(name: str, value: object, expected: str) -> None:
    problems = vr.range_problems({name: value})
    assert len(problems) == 1 and expected in problems[0], problems
    assert problems[0].startswith(name) and "inventory" in problems[0]


def test_every_range_names_a_role_variable() -> None:
    assert all(name.startswith("vllm_server_") for name in vr.RANGES)
