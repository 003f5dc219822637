# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What vLLM needs in a checkpoint directory, checked before the unit starts.

Stdlib only, Python 3.9+, no Ansible imports: modules run this on the managed node
and plugins on the controller.
"""

from __future__ import annotations

import json
import os
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._safetensors import size_problem


INDEX_NAME = "model.safetensors.index.json"


def check_weights_dir(path: str, headers: bool = True) -> dict[str, t.Any]:
    """What vLLM needs in a checkpoint directory, as a list of problems (empty: fine).

    config.json present and non-empty; every shard named by model.safetensors.index.json
    present and non-empty; without an index, at least one non-empty *.safetensors file. With
    ``headers``, every shard also has exactly the size its safetensors header gives (a truncated
    shard is found in milliseconds instead of half an hour into vLLM's load).
    """
    problems: list[str] = []
    shards: list[str] = []
    result: dict[str, t.Any] = {"path": path, "problems": problems, "shards": shards}
    if not os.path.isdir(path):
        problems.append(f"{path}: directory does not exist")
        return result

    def _size(name: str) -> int | None:
        full = os.path.join(path, name)
        return os.path.getsize(full) if os.path.isfile(full) else None

    size = _size("config.json")
    if size is None:
        problems.append(f"{os.path.join(path, 'config.json')}: missing")
    elif size == 0:
        problems.append(f"{os.path.join(path, 'config.json')}: empty")

    index_path = os.path.join(path, INDEX_NAME)
    if os.path.isfile(index_path):
        try:
            with open(index_path, encoding="utf-8") as handle:
                weight_map = json.load(handle).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise ValueError("no weight_map")
        except (ValueError, AttributeError) as exc:
            problems.append(f"{index_path}: unreadable index ({exc})")
            return result
        shards.extend(sorted(set(str(v) for v in weight_map.values())))
        for shard in shards:
            size = _size(shard)
            if size is None:
                problems.append(f"{os.path.join(path, shard)}: missing (named by {INDEX_NAME})")
            elif size == 0:
                problems.append(f"{os.path.join(path, shard)}: empty (named by {INDEX_NAME})")
            elif headers:
                _header_problem(os.path.join(path, shard), size, problems)
    else:
        found = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
        shards.extend(found)
        if not found:
            problems.append(f"{path}: no {INDEX_NAME} and no *.safetensors file")
        for shard in found:
            size = _size(shard)
            if size == 0:
                problems.append(f"{os.path.join(path, shard)}: empty")
            elif headers and size is not None:
                _header_problem(os.path.join(path, shard), size, problems)
    return result


def _header_problem(shard: str, size: int, problems: list[str]) -> None:
    if shard.endswith(".safetensors"):
        problem = size_problem(shard, size)
        if problem:
            problems.append(problem)


# `hf download --local-dir` keeps, per file, `.cache/huggingface/download/<file>.metadata`: the
# commit it came from, its etag, a timestamp, one per line (huggingface_hub's
# _local_folder.write_download_metadata).
HF_METADATA_DIR = os.path.join(".cache", "huggingface", "download")
COMMIT_LENGTH = 40


def downloaded_commits(path: str) -> dict[str, int]:
    """{commit: number of files} that `hf download --local-dir` recorded in `path` (read only)."""
    found: dict[str, int] = {}
    for root, _dirs, files in os.walk(os.path.join(path, HF_METADATA_DIR)):
        for name in files:
            if not name.endswith(".metadata"):
                continue
            try:
                with open(os.path.join(root, name), encoding="utf-8") as handle:
                    commit = handle.readline().strip()
            except (OSError, UnicodeDecodeError):
                commit = ""
            found[commit or "(unreadable)"] = found.get(commit or "(unreadable)", 0) + 1
    return found


def revision_problem(path: str, pinned: str, found: t.Mapping[str, int]) -> str:
    """Why `path` does not hold the pinned commit, or "" when it does (or the pin is not a commit,
    which only the Hub can resolve: not judged here)."""
    pinned = pinned.strip().lower()
    if len(pinned) != COMMIT_LENGTH or any(c not in "0123456789abcdef" for c in pinned):
        return ""
    if not found:
        return (f"{path}: which revision it holds cannot be told (no hf download metadata under "
                f"{HF_METADATA_DIR}); the pin is {pinned}")
    others = sorted(c for c in found if c != pinned)
    if not others:
        return ""
    counts = ", ".join(f"{c} ({found[c]} file(s))" for c in sorted(found))
    return f"{path}: holds {counts}; the pin is {pinned}"
