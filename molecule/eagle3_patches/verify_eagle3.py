"""Verify an EAGLE-3 patched (or pristine) vLLM in the molecule container, without importing it.

Usage: python verify_eagle3.py patched|pristine. Stdlib only; run with the ml-env interpreter.
patched: the AST shows every edit (bases, methods, aux-state capture, allow-list, proposer branch).
pristine: every patched file matches the wheel's RECORD sha256 again.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib.metadata
import importlib.util
import os
import sys

FILES = ("model_executor/models/deepseek_v2.py", "model_executor/models/kimi_k25.py",
         "config/speculative.py", "v1/spec_decode/eagle.py")


def cls(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def meth(node: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == name)


def patched(pkg: str) -> None:
    trees = {rel: ast.parse(open(os.path.join(pkg, rel), "rb").read()) for rel in FILES}
    ds, kimi, spec, eagle = (trees[rel] for rel in FILES)
    causal = cls(ds, "DeepseekV2ForCausalLM")
    assert "SupportsEagle3" in [ast.unparse(b) for b in causal.bases]
    meth(causal, "set_aux_hidden_state_layers")
    meth(causal, "get_eagle3_aux_hidden_state_layers")
    forward = ast.unparse(meth(cls(ds, "DeepseekV2Model"), "forward"))
    assert "aux_hidden_states.append(hidden_states + residual)" in forward
    assert "return (hidden_states, aux_hidden_states)" in forward
    wrapper = cls(kimi, "KimiK25ForConditionalGeneration")
    assert "SupportsEagle3" in [ast.unparse(b) for b in wrapper.bases]
    assert "self.language_model" in ast.unparse(meth(wrapper, "set_aux_hidden_state_layers"))
    verify = ast.unparse(meth(cls(spec, "SpeculativeConfig"), "_verify_args"))
    assert "'kimi_k2'" in verify and "'deepseek_v3'" in verify
    load = ast.unparse(meth(cls(eagle, "SpecDecodeBaseProposer"), "load_model"))
    assert "media_placeholder_token_id" in load and "'KimiK25ForConditionalGeneration'" in load


def pristine(pkg: str) -> None:
    dist = importlib.metadata.distribution("vllm")
    hashes = {os.path.realpath(str(dist.locate_file(f))): f.hash.value
              for f in dist.files if f.hash}
    for rel in FILES:
        path = os.path.realpath(os.path.join(pkg, rel))
        digest = base64.urlsafe_b64encode(hashlib.sha256(open(path, "rb").read()).digest())
        assert digest.decode().rstrip("=") == hashes[path], "%s differs from RECORD" % path


if __name__ == "__main__":
    package = list(importlib.util.find_spec("vllm").submodule_search_locations)[0]
    {"patched": patched, "pristine": pristine}[sys.argv[1]](package)
    print("verified: %s (%s)" % (sys.argv[1], importlib.metadata.version("vllm")))
