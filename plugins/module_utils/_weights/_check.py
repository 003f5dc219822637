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


def check_weights_dir(path: str, headers: bool = False) -> dict[str, t.Any]:
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
