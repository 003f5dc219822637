"""Tables for the safetensors header size check (plugins/module_utils/_weights/_safetensors.py).

The files are real safetensors files written by tests/support/tiny_checkpoint.py (the format's
layout, stdlib only); tests/vllm_full/test_weights_real.py opens the same files with the
safetensors library and vLLM's loader.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _safetensors as st

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "support"))
import tiny_checkpoint as tc  # noqa: E402

TENSORS = {"a": ("BF16", [4], b"\1" * 8), "b": ("F32", [3], b"\2" * 12)}


def raw(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    path = tmp_path / "model-00001-of-00001.safetensors"
    size = tc.write_safetensors(path, TENSORS, {"format": "pt"})
    assert path.stat().st_size == size
    return path


def test_complete_file_has_its_header_size(shard: Path) -> None:
    assert st.expected_size(str(shard)) == shard.stat().st_size
    assert st.size_problem(str(shard)) is None


@pytest.mark.parametrize("cut, fragment", [
    (-1, "truncated: its header says {full} bytes, the file has {have} (1 missing)"),
    (-20, "truncated: its header says {full} bytes, the file has {have} (20 missing)"),
    (None, "truncated inside its header"),  # cut at 12 bytes: inside the JSON
    (5, "5 bytes, shorter than the 8-byte header length"),
])
def test_truncated_files(shard: Path, cut: int | None, fragment: str) -> None:
    data = shard.read_bytes()
    keep = 12 if cut is None else (cut if cut > 0 else len(data) + cut)
    shard.write_bytes(data[:keep])
    problem = st.size_problem(str(shard))
    assert problem and problem.startswith(f"{shard}: ")
    assert fragment.format(full=len(data), have=keep) in problem


def test_longer_than_the_header_says(shard: Path) -> None:
    with open(shard, "ab") as handle:
        handle.write(b"xyz")
    assert "3 more than its header says" in st.size_problem(str(shard))


@pytest.mark.parametrize("content, fragment", [
    (raw(b"[1, 2]"), "header is list, not a JSON object"),
    (raw(b"\xff\xfe{"), "header is not JSON"),
    (raw(json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}).encode()),
     "tensor 'w' has data_offsets [4, 0]"),
    (raw(json.dumps({"w": {"dtype": "F32", "shape": [1]}}).encode()), "tensor 'w' has data_offsets None"),
    (struct.pack("<Q", 10**12) + b"{}", "header length field is 1000000000000 bytes"),
])
def test_not_a_safetensors_file(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(content)
    with pytest.raises(st.HeaderError) as err:
        st.expected_size(str(path))
    assert fragment in str(err.value) and str(path) in str(err.value)


def test_metadata_only_file_is_header_sized(tmp_path: Path) -> None:
    path = tmp_path / "empty.safetensors"
    path.write_bytes(raw(b'{"__metadata__": {"format": "pt"}}'))
    assert st.size_problem(str(path)) is None


def test_unreadable_file(tmp_path: Path) -> None:
    assert "cannot read" in st.size_problem(str(tmp_path / "missing.safetensors"))
