"""How long the python_patch engine takes per file (target: < 100 ms for a 2,000-line file).

Usage: python3 benchmarks/bench_pyedit.py [--runs N] [--version 0.17.0]
Prints the median wall-clock and CPU time of N runs for a typical edit set, once on the
pristine file (edits applied) and once on the result (a re-run: everything already there), for
real vLLM files and a synthetic 2,000-line file. Prints figures only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
import typing as t
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.vllm_wheels import wheel_file  # noqa: E402


def load_engine() -> t.Any:
    """Load the _pyedit package by path: the benchmark needs no ansible_collections tree."""
    package = REPO / "plugins/module_utils/_pyedit"
    spec = importlib.util.spec_from_file_location("_pyedit", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["_pyedit"] = module  # its relative imports and dataclasses look it up by name
    spec.loader.exec_module(module)
    return module


pe = load_engine()

REAL_EDITS: t.Dict[str, t.List[t.Dict[str, t.Any]]] = {
    "vllm/model_executor/models/deepseek_v2.py": [
        {"import": {"module": ".interfaces", "names": ["SupportsEagle3"]}},
        {"base": {"class": "DeepseekV2ForCausalLM", "names": ["SupportsEagle3"]}},
        {"member": {"class": "DeepseekV2ForCausalLM", "source":
                    "def get_eagle3_aux_hidden_state_layers(self):\n"
                    "    n = len(self.model.layers)\n    return (2, n // 2, n - 3)"}},
        {"member": {"class": "DeepseekV2Model", "source": "aux_hidden_state_layers: tuple = ()"}},
        {"replace": {"scope": "DeepseekV2Model.forward",
                     "old": "hidden_states, _ = self.norm(hidden_states, residual)\nreturn hidden_states",
                     "new": "hidden_states, _ = self.norm(hidden_states, residual)\n"
                            "assert hidden_states is not None\nreturn hidden_states"}},
    ],
    "vllm/model_executor/models/kimi_k25.py": [
        {"import": {"module": "vllm.model_executor.models.interfaces", "names": ["SupportsEagle3"]}},
        {"base": {"class": "KimiK25ForConditionalGeneration", "names": ["SupportsEagle3"]}},
    ],
    "vllm/config/speculative.py": [
        {"when_missing": "skip", "element": {"scope": "SpeculativeConfig._verify_args",
                                             "name": name, "values": ["kimi_k2", "deepseek_v3"]}}
        for name in ("eagle3_target_supported", "aux_hidden_states_supported")
    ],
    "vllm/v1/spec_decode/eagle.py": [
        {"replace": {"scope": "SpecDecodeBaseProposer.load_model",
                     "old": "self.model.config.image_token_index = target_model.config.image_token_index",
                     "new": "self.model.config.image_token_index = getattr(target_model.config, "
                            "'image_token_index', None)"}},
    ],
}


def synthetic(lines: int = 2000) -> t.Tuple[str, t.List[t.Dict[str, t.Any]]]:
    """A module of many small classes, like a model file, with the same edit kinds."""
    out = ['"""Synthetic module."""', "import os", "from .interfaces import A, B, C", ""]
    index = 0
    while len(out) < lines - 12:
        out += ["", "", f"class Model{index}(Base, Mixin):", f'    """Model {index}."""', "",
                "    def __init__(self, config):", "        self.config = config  # keep",
                f"        self.layers = [Layer(i) for i in range({index})]", "",
                "    def forward(self, x):", "        for layer in self.layers:",
                "            x = layer(x)", "        return x"]
        index += 1
    out += ["", "", "SUPPORTED = [", '    "llama",', '    "qwen",', "]", ""]
    last = f"Model{index - 1}"
    edits = [
        {"import": {"module": ".interfaces", "names": ["SupportsEagle3"]}},
        {"base": {"class": last, "names": ["SupportsEagle3"]}},
        {"member": {"class": last, "source": "def extra(self):\n    return 1"}},
        {"replace": {"scope": f"{last}.forward", "old": "x = layer(x)", "new": "x = layer(x) + 0"}},
        {"element": {"name": "SUPPORTED", "values": ["kimi_k2"]}},
    ]
    return "\n".join(out), edits


def median_ms(source: str, edits: t.Sequence[t.Any], runs: int) -> t.Tuple[float, float]:
    """Median wall-clock and CPU milliseconds; CPU time shows the engine's own cost when other
    work shares the machine's two cores."""
    wall, cpu = [], []
    for _run in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        pe.apply_edits(source, edits, path="bench.py")
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def measure(name: str, source: str, raw_edits: t.Sequence[t.Any], runs: int) -> None:
    edits = pe.parse_edits(raw_edits)
    patched = pe.apply_edits(source, edits).source
    first, first_cpu = median_ms(source, edits, runs)
    again, again_cpu = median_ms(patched, edits, runs)
    print(f"{name:<48} {source.count(chr(10)) + 1:>6} {len(edits):>6} "
          f"{first:>9.1f} {first_cpu:>8.1f} {again:>9.1f} {again_cpu:>8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--version", default="0.17.0", help="vLLM release to read real files from")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, median of {args.runs} runs")
    print(f"{'file':<48} {'lines':>6} {'edits':>6} {'apply ms':>9} {'(cpu)':>8} {'re-run ms':>9} {'(cpu)':>8}")
    for member, edits in REAL_EDITS.items():
        text = pe.decode_source(wheel_file(args.version, member))[0]
        measure(f"{member} ({args.version})", text, edits, args.runs)
    text, edits = synthetic()
    measure("synthetic", text, edits, args.runs)


if __name__ == "__main__":
    main()
