"""gpuserve.vllm.vllm_eagle3_facts main() in-process: its inputs, errors and one real lookup.

The real decision on real installs is tested through the role in
tests/integration/roles/eagle3_patches/; here the module's own wiring and error messages.
"""

from __future__ import annotations

import json
import sys
import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.modules import vllm_eagle3_facts

from module_runner import run_module_main

FILES = ["config/speculative.py"]


def run(monkeypatch: pytest.MonkeyPatch, **args: t.Any) -> t.Dict[str, t.Any]:
    return run_module_main(vllm_eagle3_facts, dict({"files": FILES}, **args), monkeypatch)


def test_missing_interpreter_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-env" / "bin" / "python")
    got = run(monkeypatch, python=missing)
    assert got["failed"] and missing in got["msg"] and "eagle3_patches_python" in got["msg"]


@pytest.mark.parametrize("content, words", [
    (None, "No such file"),
    ("{not json", "Expecting property name"),
    ("[1]", "expected a JSON object, found list"),
])
def test_bad_model_config_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                   content: str | None, words: str) -> None:
    config = tmp_path / "config.json"
    if content is not None:
        config.write_text(content)
    got = run(monkeypatch, python=sys.executable, model_config=str(config))
    assert got["failed"]
    assert got["msg"].startswith("model_config %s: " % config) and words in got["msg"]
    assert "model_types_default" in got["msg"]


def test_interpreter_without_vllm_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The test interpreter has no vllm distribution: a real lookup, answered 'refuse'."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "kimi_k25", "text_config": {"model_type": "kimi_k2"}}))
    got = run(monkeypatch, python=sys.executable, model_config=str(config))
    assert not got["failed"] and got["changed"] is False
    assert got["installed"] is False and got["action"] == "refuse"
    assert "not installed for" in got["message"] and got["model_types"] == ["kimi_k2"]
