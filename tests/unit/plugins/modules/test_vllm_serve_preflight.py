"""vllm_serve_preflight without vLLM: it must say it was skipped and why, never pass silently.

The checks with the real vLLM (parser, configs, attention backends) are in tests/vllm_full.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from module_runner import run_module_main  # noqa: E402

from ansible_collections.gpuserve.vllm.plugins.modules import vllm_serve_preflight  # noqa: E402

ARGV = ["/opt/ml-env/bin/vllm", "serve", "/srv/m", "--kv-cache-dtype", "fp8"]


def test_skips_without_vllm_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    # This test's interpreter has no vLLM: the probe must report that, not a pass.
    result = run_module_main(vllm_serve_preflight,
                             {"python": sys.executable, "argv": ARGV}, monkeypatch)
    assert result["failed"] is False, result.get("msg")
    assert result["changed"] is False
    assert result["skipped"] is True
    assert "vLLM is not installed" in result["skip_reason"]


def test_refuses_a_missing_interpreter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    result = run_module_main(vllm_serve_preflight,
                             {"python": str(tmp_path / "nope"), "argv": ARGV}, monkeypatch)
    assert result["failed"] is True
    assert "is not an executable interpreter" in result["msg"]


def test_a_crashing_interpreter_fails_with_its_output(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'boom: no such library' >&2\nexit 3\n")
    broken.chmod(0o755)
    result = run_module_main(vllm_serve_preflight, {"python": str(broken), "argv": ARGV},
                             monkeypatch)
    assert result["failed"] is True
    assert "exited 3 without a result" in result["msg"] and "boom" in result["msg"]
