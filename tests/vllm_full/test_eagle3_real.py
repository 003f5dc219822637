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

from conftest import FIXTURES, NATIVE, PATCHED, env_python, run_python, timed

SUPPORTS = """
import json
from vllm.model_executor.models.interfaces import supports_eagle3
from vllm.model_executor.models.deepseek_v2 import DeepseekV2ForCausalLM
from vllm.model_executor.models.kimi_k25 import KimiK25ForConditionalGeneration
import vllm.model_executor.models.deepseek_v2 as d
print(json.dumps({"kimi": supports_eagle3(KimiK25ForConditionalGeneration),
                  "deepseek": supports_eagle3(DeepseekV2ForCausalLM), "file": d.__file__}))
"""

# SpeculativeConfig(...) runs _verify_args, whose allow-list test reads the target's
# hf_text_config.model_type; the target ModelConfig comes from the Kimi-K2.5 config.json.
SPECULATIVE = """
import json, sys
from vllm import platforms
from vllm.platforms.cpu import CpuPlatform
platforms.current_platform = CpuPlatform()
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
target = ModelConfig(model=sys.argv[1] if len(sys.argv) > 1 else %(model)r, trust_remote_code=True)
try:
    spec = SpeculativeConfig(method="eagle3", model=%(drafter)r, num_speculative_tokens=3,
                             target_model_config=target,
                             target_parallel_config=ParallelConfig(tensor_parallel_size=8))
    print(json.dumps({"ok": True, "type": target.hf_text_config.model_type,
                      "method": spec.method}))
except Exception as exc:
    print(json.dumps({"ok": False, "type": target.hf_text_config.model_type,
                      "error": str(exc)}))
""" % {"model": str(FIXTURES / "kimi-k2.5"), "drafter": str(FIXTURES / "kimi-k2.5-eagle3")}


def test_python_patch_import_check_with_torch(patched_overlay: tuple) -> None:
    _python, overlay, result = patched_overlay
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is True
    patched = {f["path"].rsplit("/vllm/", 1)[1] for f in result["files"] if f["changed"]}
    assert patched == {"model_executor/models/deepseek_v2.py", "model_executor/models/kimi_k25.py",
                       "config/speculative.py", "v1/spec_decode/eagle.py"}
    assert (overlay / ".state").is_dir()


def test_supports_eagle3_patched(patched_overlay: tuple) -> None:
    python, overlay, _result = patched_overlay
    start = time.monotonic()
    found = json.loads(run_python(python, SUPPORTS, pythonpath=overlay).splitlines()[-1])
    timed("supports_eagle3 on patched 0.17.0", start)
    assert found["file"].startswith(str(overlay)), found["file"]
    assert found["kimi"] is True and found["deepseek"] is True


def test_supports_eagle3_unpatched_is_false() -> None:
    python = env_python(PATCHED)
    found = json.loads(run_python(python, SUPPORTS).splitlines()[-1])
    assert found["kimi"] is False and found["deepseek"] is False


def test_supports_eagle3_native_0_18() -> None:
    python = env_python(NATIVE)
    found = json.loads(run_python(python, SUPPORTS).splitlines()[-1])
    assert found["kimi"] is True and found["deepseek"] is True


def test_allow_list_accepts_kimi_k25_when_patched(patched_overlay: tuple) -> None:
    python, overlay, _result = patched_overlay
    start = time.monotonic()
    found = json.loads(run_python(python, SPECULATIVE, pythonpath=overlay).splitlines()[-1])
    timed("SpeculativeConfig(eagle3) for Kimi-K2.5 on patched 0.17.0", start)
    text_type = json.loads((FIXTURES / "kimi-k2.5" / "config.json").read_text())[
        "text_config"]["model_type"]
    assert found["type"] == text_type
    assert found["ok"] is True, found.get("error")


def test_allow_list_refuses_kimi_k25_unpatched() -> None:
    python = env_python(PATCHED)
    found = json.loads(run_python(python, SPECULATIVE).splitlines()[-1])
    assert found["ok"] is False
    assert "eagle3 is only supported for" in found["error"]
