"""The EAGLE-3 patch set judged by the real vLLM 0.17.0 with torch, and 0.18.0 as the native yardstick.

- python_patch applies the eagle3_patches patch set and its import_check imports the patched
  modules with torch present (it could never run in the rehearsal, which has no torch).
- vLLM's own supports_eagle3() says True for the patched KimiK25ForConditionalGeneration and
  DeepseekV2ForCausalLM, False unpatched, True on 0.18.0.
- vLLM's own SpeculativeConfig accepts EAGLE-3 for the Kimi-K2.5 config.json (public shape,
  fixtures/README.md) once patched, and refuses it unpatched with vLLM's allow-list message.
"""

from __future__ import annotations

import json
import time
import typing as t

import pytest

from conftest import FIXTURES, NATIVE, PATCHED, env_python, run_python, timed

# One process per env (vLLM's import dominates): vLLM's own supports_eagle3() on both classes,
# and SpeculativeConfig(...), whose _verify_args runs the allow-list test on the target's
# hf_text_config.model_type, with the target ModelConfig built from the Kimi-K2.5 config.json.
PROBE = """
import json
from vllm import platforms
from vllm.platforms.cpu import CpuPlatform
platforms.current_platform = CpuPlatform()
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
from vllm.model_executor.models.interfaces import supports_eagle3
from vllm.model_executor.models.deepseek_v2 import DeepseekV2ForCausalLM
from vllm.model_executor.models.kimi_k25 import KimiK25ForConditionalGeneration
import vllm.model_executor.models.deepseek_v2 as d
found = {"kimi": supports_eagle3(KimiK25ForConditionalGeneration),
         "deepseek": supports_eagle3(DeepseekV2ForCausalLM), "file": d.__file__}
target = ModelConfig(model=%(model)r, trust_remote_code=True)
found["type"] = target.hf_text_config.model_type
try:
    SpeculativeConfig(method="eagle3", model=%(drafter)r, num_speculative_tokens=3,
                      target_model_config=target,
                      target_parallel_config=ParallelConfig(tensor_parallel_size=8))
    found["spec_ok"] = True
except Exception as exc:
    found["spec_ok"], found["spec_error"] = False, str(exc)
print(json.dumps(found))
""" % {"model": str(FIXTURES / "kimi-k2.5"), "drafter": str(FIXTURES / "kimi-k2.5-eagle3")}
TEXT_TYPE = json.loads((FIXTURES / "kimi-k2.5" / "config.json").read_text())[
    "text_config"]["model_type"]


def _probe(label: str, python: t.Any, pythonpath: t.Any = None) -> dict:
    start = time.monotonic()
    found = json.loads(run_python(python, PROBE, pythonpath=pythonpath).splitlines()[-1])
    timed(f"supports_eagle3 + SpeculativeConfig on {label}", start)
    return found


@pytest.fixture(scope="module")
def patched(patched_overlay: tuple) -> dict:
    python, overlay, _result = patched_overlay
    found = _probe("patched 0.17.0", python, overlay)
    assert found["file"].startswith(str(overlay)), found["file"]
    return found


@pytest.fixture(scope="module")
def unpatched() -> dict:
    return _probe("unpatched 0.17.0", env_python(PATCHED))


@pytest.fixture(scope="module")
def native() -> dict:
    return _probe("native 0.18.0", env_python(NATIVE))


def test_python_patch_import_check_with_torch(patched_overlay: tuple) -> None:
    _python, overlay, result = patched_overlay
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is True
    patched = {f["path"].rsplit("/vllm/", 1)[1] for f in result["files"] if f["changed"]}
    assert patched == {"model_executor/models/deepseek_v2.py", "model_executor/models/kimi_k25.py",
                       "config/speculative.py", "v1/spec_decode/eagle.py"}
    assert (overlay / ".state").is_dir()


def test_supports_eagle3_patched(patched: dict) -> None:
    assert patched["kimi"] is True and patched["deepseek"] is True


def test_supports_eagle3_unpatched_is_false(unpatched: dict) -> None:
    assert unpatched["kimi"] is False and unpatched["deepseek"] is False


def test_supports_eagle3_native_0_18(native: dict) -> None:
    assert native["kimi"] is True and native["deepseek"] is True


def test_allow_list_accepts_kimi_k25_when_patched(patched: dict) -> None:
    assert patched["type"] == TEXT_TYPE
    assert patched["spec_ok"] is True, patched.get("spec_error")


def test_allow_list_refuses_kimi_k25_unpatched(unpatched: dict) -> None:
    assert unpatched["spec_ok"] is False
    assert "eagle3 is only supported for" in unpatched["spec_error"]


def test_allow_list_native_0_18(native: dict) -> None:
    assert native["spec_ok"] is True, native.get("spec_error")
