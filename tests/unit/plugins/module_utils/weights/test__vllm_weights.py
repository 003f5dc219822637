"""Tables for the checkpoint directory check (plugins/module_utils/_weights/_check.py)."""

from __future__ import annotations

import json
import os
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
    problems = vw.check_weights_dir(str(tmp_path), headers=False)["problems"]  # placeholder shards
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
    assert vw.check_weights_dir(str(tmp_path), headers=False)["problems"] == []  # non-empty: passes without headers
    assert vw.check_weights_dir(str(tmp_path), headers=True)["problems"] == [
        f"{shard}: truncated: its header says {full} bytes, the file has 1000 ({full - 1000} missing)"]


OLD, NEW = "1" * 40, "2" * 40


def hf_downloaded(path: Path, files: dict[str, str]) -> None:
    """What `hf download --local-dir` leaves: each file, and beside it under .cache/huggingface/download
    `<file>.metadata` = commit, etag, timestamp, one per line (huggingface_hub 0.36.2,
    _local_folder.write_download_metadata)."""
    for name, commit in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text("{}" if name.endswith(".json") else "x")
        meta = path / ".cache" / "huggingface" / "download" / f"{name}.metadata"
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(f"{commit}\n\"etag-{name}\"\n1796274797.0\n")


@pytest.mark.parametrize("files, pinned, problem", [
    ({"config.json": NEW, "model.safetensors": NEW}, NEW, ""),
    ({"config.json": OLD, "model.safetensors": OLD}, NEW, f"holds {OLD} (2 file(s)); the pin is {NEW}"),
    ({"config.json": NEW, "model.safetensors": OLD}, NEW, f"holds {OLD} (1 file(s)), {NEW} (1 file(s)); the pin is {NEW}"),
    ({"config.json": OLD, "model.safetensors": OLD}, "main", ""),  # a branch: only the Hub can tell
    ({}, NEW, "which revision it holds cannot be told"),
])
def test_the_revision_an_hf_download_left(tmp_path: Path, files: dict, pinned: str, problem: str) -> None:
    hf_downloaded(tmp_path, files)
    found = vw.downloaded_commits(str(tmp_path))
    assert sum(found.values()) == len(files)
    got = vw.revision_problem(str(tmp_path), pinned, found)
    assert (problem in got) if problem else got == ""
    assert not problem or got.startswith(str(tmp_path))


@pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's directory: root only")
def test_root_checks_a_planted_service_directory_without_following_or_blocking(tmp_path: Path) -> None:
    """vllm_weights_check runs as root on the service user's download: a FIFO as the index, a
    link to a root-only file as a shard and as a metadata file are each refused by name, never
    read (nothing blocks, no line of the secret comes back)."""
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef01234567\n")
    secret.chmod(0o600)
    model = tmp_path / "model"
    meta = model / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    for folder in (model, model / ".cache", model / ".cache" / "huggingface", meta):
        os.chown(folder, 65534, 65534)
    (model / "config.json").write_text("{}")
    os.mkfifo(model / vw.INDEX_NAME)
    os.symlink(secret, meta / "config.json.metadata")
    problems = vw.check_weights_dir(str(model))["problems"]
    assert problems == [f"unreadable: {model / vw.INDEX_NAME}: a FIFO, not a regular file"]
    assert vw.downloaded_commits(str(model)) == {"(unreadable)": 1}
    os.unlink(model / vw.INDEX_NAME)
    os.symlink(secret, model / "model.safetensors")
    problems = vw.check_weights_dir(str(model))["problems"]
    assert problems == [f"{model / 'model.safetensors'}: cannot read (model.safetensors is a link in a directory "
                        "another user can write: not followed)"]
