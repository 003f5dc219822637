"""Kimi-K2.5 whose config.json says `text_config.model_type: kimi_k2`, judged by the real vLLM.

The fixture (fixtures/README.md) says `deepseek_v3`, from a dump of the *loaded* KimiK25Config:
such a dump prints the class's model_type, and vLLM builds the text config as DeepseekV3Config.
Public Kimi configs nested the same way carry `kimi_k2` in the file (fixtures/README.md), and
vLLM keeps the file's value: hf_text_config.model_type is then `kimi_k2`. What that changes:

- 0.17.0 unpatched: SpeculativeConfig._verify_args refuses EAGLE-3 (vllm/config/speculative.py
  lines 768-789 in 0.17.0, the `aux_hidden_states_supported` substring test; `deepseek_v3` does
  not occur in `kimi_k2`);
- 0.17.0 patched by eagle3_patches: the role derives the allow-list entry from the checkpoint's
  config.json (`_eagle3._facts.model_types`, here `kimi_k2`; without a config its default list
  has both), so the patched vLLM accepts it; a vLLM patched for `deepseek_v3` only would not;
- 0.18.0: native, its list holds deepseek_v3, kimi_k2 and kimi_k25.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from conftest import (FIXTURES, NATIVE, PATCHED, REPO, env_python, overlay_python, patch_overlay,
                      playbook, run_python, timed)

sys.path.insert(0, str(REPO / "collections"))  # the committed link tree, as tests/unit does
from ansible_collections.gpuserve.vllm.plugins.module_utils._eagle3 import _facts  # noqa: E402

ROLE = REPO / "roles" / "vllm_server"
EXAMPLE = REPO / "inventories" / "example" / "group_vars" / "gpu_nodes" / "main.yml"
DEFAULTS = REPO / "roles" / "eagle3_patches" / "defaults" / "main.yml"

PROBE = """
import json, sys
from vllm import platforms
from vllm.platforms.cpu import CpuPlatform
platforms.current_platform = CpuPlatform()
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
from vllm.model_executor.models.interfaces import supports_eagle3
from vllm.model_executor.models.deepseek_v2 import DeepseekV2ForCausalLM
from vllm.model_executor.models.kimi_k25 import KimiK25ForConditionalGeneration
model, drafter = sys.argv[1:3]
target = ModelConfig(model=model, trust_remote_code=True)
found = {"kimi": supports_eagle3(KimiK25ForConditionalGeneration),
         "deepseek": supports_eagle3(DeepseekV2ForCausalLM),
         "type": target.hf_text_config.model_type, "mla": target.use_mla}
try:
    SpeculativeConfig(method="eagle3", model=drafter, num_speculative_tokens=3,
                      target_model_config=target,
                      target_parallel_config=ParallelConfig(tensor_parallel_size=8))
    found["spec_ok"] = True
except Exception as exc:
    found["spec_ok"], found["spec_error"] = False, str(exc)
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def kimi_k2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Kimi-K2.5 fixture with text_config.model_type `kimi_k2` (nothing else changed)."""
    config = json.loads((FIXTURES / "kimi-k2.5" / "config.json").read_text())
    config["text_config"]["model_type"] = "kimi_k2"
    path = tmp_path_factory.mktemp("kimi-k2.5-kimi_k2")
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


@pytest.fixture(scope="module")
def overlay(kimi_k2: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0.17.0 patched by the role's patch set for the allow-list the role derives from it."""
    types = _facts.model_types(json.loads((kimi_k2 / "config.json").read_text()), [])
    assert types == ["kimi_k2"]
    _python, path, result = patch_overlay(tmp_path_factory.mktemp("vllm-0.17.0-kimi_k2"),
                                          types, "kimi_k2")
    assert not result.get("failed"), result.get("msg")
    return path


@pytest.fixture(scope="module")
def argv(kimi_k2: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The example inventory's argv, rendered by the role, pointed at the kimi_k2 variant."""
    (task,) = playbook([{
        "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml"),
                       str(EXAMPLE)],
        "tasks": [{"ansible.builtin.debug": {"var": "__vllm_server_argv"}, "vars": {
            "vllm_server_model_path": str(kimi_k2),
            "vllm_server_drafter_path": str(FIXTURES / "kimi-k2.5-eagle3")}}],
    }], tmp_path_factory.mktemp("render-k2"))
    return task["__vllm_server_argv"]


def _probe(label: str, version: str, model: Path, pythonpath: Path | None = None) -> dict:
    start = time.monotonic()
    code = PROBE.replace("sys.argv[1:3]", repr([str(model), str(FIXTURES / "kimi-k2.5-eagle3")]))
    found = json.loads(run_python(env_python(version), code, pythonpath).splitlines()[-1])
    timed(f"kimi_k2 variant: supports_eagle3 + SpeculativeConfig on {label}", start)
    return found


def _preflight(label: str, version: str, argv: list[str], work: Path,
               pythonpath: Path | None = None) -> dict:
    start = time.monotonic()
    (result,) = playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "gpuserve.vllm.vllm_serve_preflight": {
            "python": str(overlay_python(env_python(version), pythonpath) if pythonpath
                          else env_python(version)),
            "argv": argv, "compute_capability": "12.0", "fail_on_problems": False}}]}], work)
    timed(f"kimi_k2 variant: preflight on {label} (probe {result.get('seconds', '?')} s)", start)
    assert "checks" in result, result.get("msg")
    return result


def test_role_default_allow_list_covers_both_types() -> None:
    text = DEFAULTS.read_text()
    assert "  - kimi_k2\n" in text and "  - deepseek_v3\n" in text
    assert _facts.model_types(None, ["kimi_k2", "deepseek_v3"]) == ["kimi_k2", "deepseek_v3"]


def test_patched_0_17_accepts_kimi_k2(kimi_k2: Path, overlay: Path) -> None:
    found = _probe("0.17.0 patched for kimi_k2", PATCHED, kimi_k2, overlay)
    assert found["type"] == "kimi_k2" and found["mla"] is True
    assert found["kimi"] is True and found["deepseek"] is True
    assert found["spec_ok"] is True, found.get("spec_error")


def test_native_0_18_accepts_kimi_k2(kimi_k2: Path) -> None:
    found = _probe("0.18.0", NATIVE, kimi_k2)
    assert found["type"] == "kimi_k2" and found["kimi"] is True
    assert found["spec_ok"] is True, found.get("spec_error")


def test_preflight_kimi_k2_patched_0_17(argv: list, overlay: Path, tmp_path: Path) -> None:
    result = _preflight("0.17.0 patched for kimi_k2", PATCHED, argv, tmp_path, overlay)
    assert result["problems"] == []
    target = next(c for c in result["checks"] if c["name"] == "model-config")
    assert "text model_type kimi_k2" in target["detail"] and "MLA True" in target["detail"]
    assert {"speculative-config", "attention-backend-target"} <= {
        c["name"] for c in result["checks"] if c["ok"]}


def test_preflight_kimi_k2_native_0_18(argv: list, tmp_path: Path) -> None:
    result = _preflight("0.18.0", NATIVE, argv, tmp_path)
    assert result["problems"] == [], result["problems"]


def test_preflight_kimi_k2_unpatched_0_17_names_the_allow_list(argv: list, tmp_path: Path) -> None:
    (problem,) = _preflight("0.17.0 unpatched", PATCHED, argv, tmp_path)["problems"]
    assert problem["check"] == "speculative-config"
    assert "eagle3 is only supported for" in problem["message"]
    assert "model_type='kimi_k2'" in problem["message"]
