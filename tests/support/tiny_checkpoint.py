"""Small real checkpoints for tests and benchmarks, written with the stdlib.

A checkpoint here is what `hf download` leaves for a sharded model: ``model-0000k-of-0000n
.safetensors`` shards in the safetensors format (8-byte little-endian header length, the JSON
header with each tensor's dtype, shape and ``data_offsets``, then the data), the
``model.safetensors.index.json`` that maps every tensor to its shard, and ``config.json``.

``hub_tree`` describes such a directory the way the Hub's tree API does
(``GET /api/models/{repo}/tree/{commit}``, recorded in tests/fixtures/hub/): LFS files
(``*.safetensors``) carry ``lfs.oid`` = the sha256 of the content and ``oid`` = the git blob id
of their LFS pointer file; other files carry ``oid`` = the git blob id of the content. The
values are computed from the files, the shape is the recorded one.

Usable as a script: ``python3 tiny_checkpoint.py DIR [--shards N] [--shard-bytes N]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import struct
import typing as t
from pathlib import Path

LFS_SUFFIXES = (".safetensors",)


def write_safetensors(path: Path, tensors: t.Mapping[str, tuple[str, list[int], bytes]],
                      metadata: t.Mapping[str, str] | None = None) -> int:
    """Write a safetensors file; tensors: name -> (dtype, shape, raw bytes). Returns its size."""
    header: dict[str, t.Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        for _dtype, _shape, data in tensors.values():
            handle.write(data)
    return 8 + len(raw) + offset


def _random_bytes(rng: random.Random | None, count: int) -> bytes:
    return rng.randbytes(count) if rng is not None else os.urandom(count)


def make_checkpoint(directory: Path, shards: int = 3, shard_bytes: int = 1 << 20,
                    seed: int | None = 0, tensors_per_shard: int = 2) -> list[str]:
    """A sharded checkpoint of ``shards`` files of about ``shard_bytes`` each; returns its files.

    seed None: os.urandom (fast, for benchmarks); otherwise reproducible bytes.
    """
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed) if seed is not None else None
    weight_map: dict[str, str] = {}
    total = 0
    per_tensor = max(2, shard_bytes // tensors_per_shard) // 2 * 2  # BF16: 2 bytes per element
    for k in range(1, shards + 1):
        name = f"model-{k:05d}-of-{shards:05d}.safetensors"
        tensors = {}
        for j in range(tensors_per_shard):
            tensor = f"model.layers.{(k - 1) * tensors_per_shard + j}.mlp.weight"
            tensors[tensor] = ("BF16", [per_tensor // 2], _random_bytes(rng, per_tensor))
            weight_map[tensor] = name
        total += write_safetensors(directory / name, tensors, {"format": "pt"})
    (directory / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
    (directory / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
         "num_hidden_layers": shards * tensors_per_shard}, indent=2) + "\n")
    return sorted(p.name for p in directory.iterdir() if p.is_file())


def make_single_file(directory: Path, size: int = 256 << 10, seed: int | None = 1) -> list[str]:
    """A one-file checkpoint (model.safetensors + config.json), as EAGLE-3 drafters ship."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed) if seed is not None else None
    write_safetensors(directory / "model.safetensors",
                      {"midlayer.mlp.weight": ("BF16", [size // 2], _random_bytes(rng, size // 2 * 2))})
    (directory / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"}, indent=2) + "\n")
    return sorted(p.name for p in directory.iterdir() if p.is_file())


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file the Hub's git stores for an LFS file (git-lfs spec v1)."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def hub_tree(directory: Path) -> list[dict[str, t.Any]]:
    """The Hub tree API's entries for the files of directory (recursive listing)."""
    entries: list[dict[str, t.Any]] = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        data = path.read_bytes()
        if rel.endswith(LFS_SUFFIXES):
            sha256 = hashlib.sha256(data).hexdigest()
            pointer = lfs_pointer(sha256, len(data))
            entries.append({"type": "file", "oid": git_blob_sha1(pointer), "size": len(data),
                            "lfs": {"oid": sha256, "size": len(data), "pointerSize": len(pointer)},
                            "path": rel})
        else:
            entries.append({"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": rel})
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--shard-bytes", type=int, default=1 << 20)
    parser.add_argument("--seed", type=int, default=0, help="-1: os.urandom (fast, not reproducible)")
    parser.add_argument("--tree", type=Path, help="also write the Hub tree listing here")
    args = parser.parse_args()
    make_checkpoint(args.directory, args.shards, args.shard_bytes, None if args.seed < 0 else args.seed)
    if args.tree:
        args.tree.write_text(json.dumps(hub_tree(args.directory), indent=1) + "\n")


if __name__ == "__main__":
    main()
