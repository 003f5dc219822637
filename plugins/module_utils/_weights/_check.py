# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What vLLM needs in a checkpoint directory, checked before the unit starts.

Stdlib only, Python 3.9+, no Ansible imports: modules run this on the managed node
and plugins on the controller.
"""

from __future__ import annotations

import json
import os
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils import _saferead as safe
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
    try:
        safe.directory(path)
    except safe.Absent:
        problems.append(f"{path}: directory does not exist")
        return result
    except safe.Unreadable as exc:
        problems.append(str(exc))
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
    if os.path.lexists(index_path):  # a planted FIFO or link is refused by name below
        try:
            weight_map = json.loads(safe.read_text(index_path, INDEX_LIMIT)).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise ValueError("no weight_map")
        except safe.Unreadable as exc:
            problems.append(str(exc))
            return result
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
METADATA_LIMIT = 4096
INDEX_LIMIT = 64 * 1024 * 1024


def downloaded_commits(path: str) -> dict[str, int]:
    """{commit: number of files} that `hf download --local-dir` recorded in `path` (read only,
    through _saferead: root reads the service user's directory); a metadata file that is
    refused, or whose first line is not a commit, counts as "(unreadable)", never as its line."""
    found: dict[str, int] = {}
    try:
        listed = safe.files(os.path.join(path, HF_METADATA_DIR), ".metadata")
    except safe.Unreadable:
        return {"(unreadable)": 1}
    for meta, refused in listed:
        commit = ""
        if not refused:
            try:
                commit = safe.read_bytes(meta, METADATA_LIMIT).split(b"\n", 1)[0].strip().decode("ascii")
            except (safe.Unreadable, UnicodeDecodeError):
                commit = ""
        if len(commit) != COMMIT_LENGTH or any(c not in "0123456789abcdef" for c in commit):
            commit = "(unreadable)"
        found[commit] = found.get(commit, 0) + 1
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
