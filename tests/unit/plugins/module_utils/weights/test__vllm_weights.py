"""Tables for the checkpoint directory check (plugins/module_utils/_weights/_check.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _check as vw

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "support"))
import tiny_checkpoint as tc  # noqa: E402


INDEX = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
                        "c": "model-00002-of-00002.safetensors"}}


@pytest.mark.parametrize("files, expected", [
    ({"config.json": "{}", "model.safetensors.index.json": json.dumps(INDEX),
      "model-00001-of-00002.safetensors": "x", "model-00002-of-00002.safetensors": "x"}, []),
    ({"config.json": "{}", "model.safetensors.index.json": json.dumps(INDEX),
      "model-00001-of-00002.safetensors": "x"},
     ["model-00002-of-00002.safetensors: missing (named by model.safetensors.index.json)"]),
    ({"config.json": "", "model.safetensors.index.json": json.dumps(INDEX),
      "model-00001-of-00002.safetensors": "", "model-00002-of-00002.safetensors": "x"},
     ["config.json: empty", "model-00001-of-00002.safetensors: empty (named by model.safetensors.index.json)"]),
    ({"model.safetensors": "x"}, ["config.json: missing"]),
    ({"config.json": "{}", "model.safetensors": "x"}, []),
    ({"config.json": "{}"}, ["no model.safetensors.index.json and no *.safetensors file"]),
    ({"config.json": "{}", "model.safetensors.index.json": "{not json"}, ["unreadable index"]),
])
def test_check_weights_dir(tmp_path: Path, files: dict[str, str], expected: list[str]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    problems = vw.check_weights_dir(str(tmp_path))["problems"]
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected):
        assert fragment in problem


def test_check_weights_dir_missing_directory(tmp_path: Path) -> None:
    assert vw.check_weights_dir(str(tmp_path / "nope"))["problems"] == [
        f"{tmp_path / 'nope'}: directory does not exist"]


def test_headers_find_a_truncated_shard(tmp_path: Path) -> None:
    tc.make_checkpoint(tmp_path, shards=2, shard_bytes=4096)
    shard = tmp_path / "model-00002-of-00002.safetensors"
    full = shard.stat().st_size
    assert vw.check_weights_dir(str(tmp_path), headers=True)["problems"] == []
    shard.write_bytes(shard.read_bytes()[:1000])
    assert vw.check_weights_dir(str(tmp_path))["problems"] == []  # non-empty: the old check passes it
    assert vw.check_weights_dir(str(tmp_path), headers=True)["problems"] == [
        f"{shard}: truncated: its header says {full} bytes, the file has 1000 ({full - 1000} missing)"]
