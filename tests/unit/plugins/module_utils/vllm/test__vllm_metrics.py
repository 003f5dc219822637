"""Tables for the spec-decode counters read from /metrics (plugins/module_utils/_vllm/_metrics.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _metrics as vm


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
    samples = vm.parse_prometheus('a{x="1",y="q\\"t"} 2.5\nb 1e3\n# c 1\nbad line\n')
    assert samples == {"a": [({"x": "1", "y": 'q\\"t'}, 2.5)], "b": [({}, 1000.0)]}


@pytest.mark.parametrize("text, expected", [
    (METRICS, {"present": True, "drafts": 20.0, "draft_tokens": 60.0, "accepted_tokens": 30.0,
               "accepted_per_position": {"0": 16.0, "1": 9.0, "2": 5.0}}),
    ("vllm:num_requests_running 0\n",
     {"present": False, "drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "accepted_per_position": {}}),
])
def test_spec_decode_counters(text: str, expected: dict) -> None:
    assert vm.spec_decode_counters(text) == expected


ZERO = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "accepted_per_position": {}}


@pytest.mark.parametrize("before, after, expected", [
    (ZERO, vm.spec_decode_counters(METRICS),
     {"drafts": 20, "draft_tokens": 60, "accepted_tokens": 30, "grew": True, "acceptance_rate": 0.5,
      "mean_acceptance_length": 2.5, "per_position_acceptance_rate": {"0": 0.8, "1": 0.45, "2": 0.25}}),
    (vm.spec_decode_counters(METRICS), vm.spec_decode_counters(METRICS),
     {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "grew": False, "acceptance_rate": None,
      "mean_acceptance_length": None, "per_position_acceptance_rate": {"0": None, "1": None, "2": None}}),
    (ZERO, ZERO, {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "grew": False,
                  "acceptance_rate": None, "mean_acceptance_length": None,
                  "per_position_acceptance_rate": {}}),
])
def test_spec_decode_delta(before: dict, after: dict, expected: dict) -> None:
    assert vm.spec_decode_delta(before, after) == expected
