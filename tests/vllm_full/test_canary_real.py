"""The canary's command line judged by the real vLLM 0.17.0 (patched) and 0.18.0 (native), torch included.

The example inventory's argv is rendered by the vllm_server role's own variables (as in
test_preflight.py), turned into the canary's by _vllm._canary (what the role's filter calls), and
then, in each real env:
- vLLM's own `vllm serve` parser takes it (the preflight probe's parser stage, CPU platform);
- vLLM's ModelConfig built from it has the reduced layer count in the NESTED text config
  (`hf_text_config.num_hidden_layers`), the vision tower's config untouched, 61 without it;
- the load config says `dummy`, and the speculative config has no `draft_load_config`, so the
  EAGLE-3 proposer's `get_model(load_config=draft_load_config)` falls back to the same dummy
  loader (read in vllm/v1/spec_decode/eagle.py `_get_model` and model_loader `get_model`);
- vLLM's own DeepseekV2ForCausalLM.get_eagle3_aux_hidden_state_layers (patched in 0.17, native
  in 0.18) names three distinct existing layers for the canary's count and not for fewer.
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from conftest import FIXTURES, NATIVE, REPO, env_python, playbook, run_python, timed

sys.path.insert(0, str(REPO / "collections"))
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _canary as vc  # noqa: E402

ROLE = REPO / "roles" / "vllm_server"
EXAMPLE = REPO / "inventories" / "example" / "group_vars" / "gpu_nodes" / "main.yml"
PROBE_DIR = REPO / "plugins" / "module_utils" / "_vllm"
TARGET_ENV = "/opt/ml-env.d/vllm-canary-test"

CHECK = """
import json, sys, types
sys.path.insert(0, %(probe_dir)r)
import _preflight_probe as pp
argv = json.loads(%(argv)r)
probe = pp.Probe({"argv": argv})
probe.platform()
args = probe.parse()
assert args is not None, probe.problems
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.config import ParallelConfig
from vllm.model_executor.model_loader import get_model_loader
from vllm.model_executor.models.deepseek_v2 import DeepseekV2ForCausalLM
engine_args = AsyncEngineArgs.from_cli_args(args)
model = engine_args.create_model_config()
load = engine_args.create_load_config()
spec = engine_args.create_speculative_config(
    model, ParallelConfig(tensor_parallel_size=engine_args.tensor_parallel_size))
def aux(n):
    stub = types.SimpleNamespace(model=types.SimpleNamespace(layers=[None] * n))
    return list(DeepseekV2ForCausalLM.get_eagle3_aux_hidden_state_layers(stub))
print(json.dumps({
    "parsed_port": args.port, "parsed_host": args.host, "parsed_overrides": args.hf_overrides,
    "text_layers": model.hf_text_config.num_hidden_layers,
    "nested_layers": model.hf_config.text_config.num_hidden_layers,
    "text_type": model.hf_text_config.model_type,
    "vision_layers": model.hf_config.vision_config.vt_num_hidden_layers,
    "load_format": str(getattr(load.load_format, "value", load.load_format)),
    "loader": type(get_model_loader(load)).__name__,
    "draft_load_config": repr(spec.draft_load_config),
    "draft_model": spec.draft_model_config.model,
    "aux": {n: aux(n) for n in (2, 6, %(layers)d)},
}))
"""


@pytest.fixture(scope="module")
def example_argv(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The example inventory's unit argv, rendered by the role's own variables through Ansible."""
    work = tmp_path_factory.mktemp("render-canary")
    tasks = playbook([{
        "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml"),
                       str(EXAMPLE)],
        "tasks": [{"name": "argv", "ansible.builtin.debug": {"var": "__vllm_server_argv"},
                   "vars": {"vllm_server_model_path": str(FIXTURES / "kimi-k2.5"),
                            "vllm_server_drafter_path": str(FIXTURES / "kimi-k2.5-eagle3"),
                            "vault_vllm_server_api_key": "x"}}],
    }], work)
    return tasks[0]["__vllm_server_argv"]


@pytest.fixture(scope="module")
def canary(example_argv: list[str]) -> dict:
    config = json.loads((FIXTURES / "kimi-k2.5" / "config.json").read_text())
    drafter = json.loads((FIXTURES / "kimi-k2.5-eagle3" / "config.json").read_text())
    return vc.canary_plan(example_argv, TARGET_ENV, 8001, 2, config, drafter, "eagle3")


def _judge(label: str, python, canary: dict, pythonpath=None) -> dict:
    # argv[0] is the target env's vllm (not here); the parser sees argv[1:] anyway.
    code = CHECK % {"probe_dir": str(PROBE_DIR), "argv": json.dumps(canary["argv"]),
                    "layers": canary["layers"]}
    start = time.monotonic()
    found = json.loads(run_python(python, code, pythonpath=pythonpath).splitlines()[-1])
    timed(f"canary argv parsed + ModelConfig/LoadConfig/SpeculativeConfig on {label}", start)
    return found


@pytest.fixture(scope="module")
def judged(canary: dict, patched_overlay: tuple) -> dict[str, dict]:
    python, overlay, _result = patched_overlay
    return {"0.17.0 patched": _judge("0.17.0 patched", python, canary, overlay),
            "0.18.0": _judge("0.18.0", env_python(NATIVE), canary)}


def test_canary_argv_shape(canary: dict, example_argv: list[str]) -> None:
    argv = canary["argv"]
    assert argv[0] == TARGET_ENV + "/bin/vllm" and argv[1:3] == example_argv[1:3]
    assert canary["layers"] == 7, canary["layers_reasons"]  # asked 2; the EAGLE-3 drafter needs 7
    assert canary["hf_overrides"] == {"text_config": {"num_hidden_layers": 7}}
    assert vc.flag_value(example_argv, "--port") == "8000"


@pytest.mark.parametrize("version", ["0.17.0 patched", "0.18.0"])
def test_real_vllm_takes_the_canary(judged: dict, version: str) -> None:
    found = judged[version]
    assert found["parsed_port"] == 8001 and found["parsed_host"] == "127.0.0.1"
    assert found["parsed_overrides"] == {"text_config": {"num_hidden_layers": 7}}
    # the nested override reached the language model's config, not the top level alone
    assert found["text_layers"] == 7 and found["nested_layers"] == 7
    assert found["text_type"] == "deepseek_v3"
    assert found["vision_layers"] == 27
    assert found["load_format"] == "dummy" and found["loader"] == "DummyModelLoader"
    # no loader of its own: the drafter is loaded with the target's (dummy) load config
    assert found["draft_load_config"] == "None"
    assert found["draft_model"] == str(FIXTURES / "kimi-k2.5-eagle3")


@pytest.mark.parametrize("version", ["0.17.0 patched", "0.18.0"])
def test_eagle3_aux_layers_need_the_raised_count(judged: dict, version: str) -> None:
    aux = {int(n): layers for n, layers in judged[version]["aux"].items()}
    assert aux[7] == [2, 3, 4]  # three distinct layers, all below 7
    for n in (2, 6):  # a layer missing (2 of 2) or two the same (3, 3): fewer than three states
        assert len({i for i in aux[n] if 0 <= i < n}) < 3, aux[n]


def test_without_the_override_the_model_has_61_layers(patched_overlay: tuple, example_argv: list[str]) -> None:
    """The yardstick: the same parser and ModelConfig on the unit's own argv say 61."""
    python, overlay, _result = patched_overlay
    plain = {"argv": vc.without_flags(example_argv, ()), "layers": 7}
    code = CHECK % {"probe_dir": str(PROBE_DIR), "argv": json.dumps(plain["argv"]), "layers": 7}
    found = json.loads(run_python(python, code, pythonpath=overlay).splitlines()[-1])
    assert found["text_layers"] == 61 and found["load_format"] == "auto"
