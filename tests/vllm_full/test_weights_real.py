"""The test checkpoints and the safetensors header check, judged by vLLM's own weight loader.

tests/support/tiny_checkpoint.py writes the checkpoints every vllm_weights test stages. Here the
real vLLM 0.17.0 (with torch and the safetensors library) loads them with
vllm.model_executor.model_loader.weight_utils.safetensors_weights_iterator, the loop of a real
model load; then one shard is truncated: vLLM fails on it (after the shards before it were
read), while gpuserve's header check names it without reading any tensor.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from conftest import PATCHED, REPO, env_python, run_python, timed

sys.path[:0] = [str(REPO / "tests" / "support"), str(REPO / "collections")]
import tiny_checkpoint as tc  # noqa: E402
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._safetensors import size_problem  # noqa: E402

# One process (vLLM's import dominates): load the complete checkpoint, cut 1000 bytes off the
# last shard, load again.
PROBE = """
import json, os
from vllm.model_executor.model_loader.weight_utils import safetensors_weights_iterator
files = %(files)r

def load():
    try:
        return {"loaded": [(n, list(t.shape), str(t.dtype)) for n, t in safetensors_weights_iterator(files, False)]}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}

complete = load()
os.truncate(files[-1], os.path.getsize(files[-1]) - 1000)
print(json.dumps({"complete": complete, "truncated": load()}))
"""


def test_vllm_loads_the_test_checkpoint_and_fails_on_a_truncated_shard(tmp_path: Path) -> None:
    python = env_python(PATCHED)
    tc.make_checkpoint(tmp_path, shards=3, shard_bytes=64 << 10, seed=5)
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    assert all(size_problem(str(s)) is None for s in shards)
    start = time.monotonic()
    found = json.loads(run_python(python, PROBE % {"files": [str(f) for f in shards]}).strip().splitlines()[-1])
    timed("vLLM loads the 3-shard test checkpoint, then a truncated one", start)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    assert sorted(entry[0] for entry in found["complete"]["loaded"]) == sorted(index)
    assert {entry[2] for entry in found["complete"]["loaded"]} == {"torch.bfloat16"}
    assert "error" in found["truncated"], found["truncated"]
    start = time.monotonic()
    problem = size_problem(str(shards[-1]))
    seconds = time.monotonic() - start
    print(f"\nvLLM: {found['truncated']['error']}\ngpuserve header check ({seconds * 1000:.2f} ms): {problem}")
    assert problem and "truncated: its header says" in problem and "(1000 missing)" in problem
