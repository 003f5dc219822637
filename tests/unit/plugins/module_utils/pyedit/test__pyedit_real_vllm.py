"""The engine against real vLLM sources (0.16.0, 0.17.0 patched; 0.18.0 already native).

The wheels are downloaded once into $GPUSERVE_WHEEL_CACHE by tests/support/vllm_wheels.py.
Set GPUSERVE_OFFLINE=1 to skip these tests where the package index cannot be reached.
"""

from __future__ import annotations

import ast
import functools
import os
import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _pyedit as pe

if os.environ.get("GPUSERVE_OFFLINE") == "1":
    pytest.skip("GPUSERVE_OFFLINE=1: these tests need real vLLM wheels from the package index",
                allow_module_level=True)

from tests.support.vllm_wheels import wheel_file  # noqa: E402  (after the offline skip)

DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
KIMI = "vllm/model_executor/models/kimi_k25.py"
SPECULATIVE = "vllm/config/speculative.py"
EAGLE = "vllm/v1/spec_decode/eagle.py"

FORWARD_OLD = """
for layer in islice(self.layers, self.start_layer, self.end_layer):
    hidden_states, residual = layer(positions, hidden_states, residual, llama_4_scaling)
if not get_pp_group().is_last_rank:
    return IntermediateTensors({"hidden_states": hidden_states, "residual": residual})
hidden_states, _ = self.norm(hidden_states, residual)
return hidden_states
"""
FORWARD_NEW = """
aux_hidden_states = []
for idx, layer in enumerate(islice(self.layers, self.start_layer, self.end_layer)):
    if idx + self.start_layer in self.aux_hidden_state_layers:
        aux_hidden_states.append(hidden_states + residual)
    hidden_states, residual = layer(
        positions, hidden_states, residual, llama_4_scaling
    )

if not get_pp_group().is_last_rank:
    return IntermediateTensors(
        {"hidden_states": hidden_states, "residual": residual}
    )

hidden_states, _ = self.norm(hidden_states, residual)
if aux_hidden_states:
    return hidden_states, aux_hidden_states
return hidden_states
"""
SET_LAYERS = """
def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
    self.model.aux_hidden_state_layers = layers
"""
GET_LAYERS = """
def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
    num_layers = len(self.model.layers)
    return (2, num_layers // 2, num_layers - 3)
"""

EDITS: t.Dict[str, t.List[t.Dict[str, t.Any]]] = {
    DEEPSEEK: [
        {"id": "import", "import": {"module": ".interfaces", "names": ["SupportsEagle3"]}},
        {"id": "base", "base": {"class": "DeepseekV2ForCausalLM", "names": ["SupportsEagle3"]}},
        {"id": "aux-default", "member": {"class": "DeepseekV2Model",
                                         "source": "aux_hidden_state_layers: tuple[int, ...] = ()"}},
        {"id": "forward", "replace": {"scope": "DeepseekV2Model.forward", "old": FORWARD_OLD, "new": FORWARD_NEW}},
        {"id": "set-layers", "member": {"class": "DeepseekV2ForCausalLM", "source": SET_LAYERS}},
        {"id": "get-layers", "member": {"class": "DeepseekV2ForCausalLM", "source": GET_LAYERS}},
    ],
    KIMI: [
        {"id": "import", "import": {"module": "vllm.model_executor.models.interfaces", "names": ["SupportsEagle3"]}},
        {"id": "base", "base": {"class": "KimiK25ForConditionalGeneration", "names": ["SupportsEagle3"]}},
        {"id": "set-layers", "member": {"class": "KimiK25ForConditionalGeneration", "source":
                                        "def set_aux_hidden_state_layers(self, layers):\n"
                                        "    self.language_model.set_aux_hidden_state_layers(layers)"}},
    ],
    SPECULATIVE: [  # the list was renamed in 0.17: one of the two edits is skipped
        {"id": f"allow-{name}", "when_missing": "skip",
         "element": {"scope": "SpeculativeConfig._verify_args", "name": name, "values": ["kimi_k2", "deepseek_v3"]}}
        for name in ("eagle3_target_supported", "aux_hidden_states_supported")
    ],
    EAGLE: [
        {"id": "kimi-image-token", "replace": {
            "scope": "SpecDecodeBaseProposer.load_model",
            "old": "self.model.config.image_token_index = target_model.config.image_token_index",
            "new": 'if self.get_model_name(target_model) == "KimiK25ForConditionalGeneration":\n'
                   "    self.model.config.image_token_index = target_model.config.media_placeholder_token_id\n"
                   "else:\n"
                   "    self.model.config.image_token_index = target_model.config.image_token_index\n"}},
    ],
}


@functools.lru_cache(maxsize=None)
def real_source(version: str, member: str) -> t.Tuple[str, str]:
    return pe.decode_source(wheel_file(version, member), path=member)


@functools.lru_cache(maxsize=None)
def patched(version: str, member: str) -> pe.PatchResult:
    text = real_source(version, member)[0]
    return pe.apply_edits(text, pe.parse_edits(EDITS[member], path=member), path=member)


def find_class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)


def method_names(cls: ast.ClassDef) -> t.Set[str]:
    return {node.name for node in cls.body if isinstance(node, ast.FunctionDef)}


def imported(tree: ast.Module, module: str, level: int = 0) -> t.Set[str]:
    return {alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
            and node.module == module and node.level == level for alias in node.names}


PATCHED = [(version, member) for version in ("0.16.0", "0.17.0") for member in EDITS]


@pytest.mark.parametrize("version, member", PATCHED)
def test_patched_result_compiles_and_reapplies_unchanged(version: str, member: str) -> None:
    result = patched(version, member)
    assert result.changed
    compile(result.source, member, "exec", dont_inherit=True)
    again = pe.apply_edits(result.source, pe.parse_edits(EDITS[member]), path=member)
    assert again.source == result.source
    assert not again.changed
    assert {r.status for r in again.results} <= {pe.STATUS_ALREADY, pe.STATUS_SKIPPED}


@pytest.mark.parametrize("version, member", PATCHED)
def test_only_touched_lines_change(version: str, member: str) -> None:
    before = real_source(version, member)[0]
    after = patched(version, member).source
    diff = pe.unified_diff(before, after, member).splitlines()[2:]
    removed = [line for line in diff if line.startswith("-")]
    added = [line for line in diff if line.startswith("+")]
    assert added
    assert len(removed) <= 10  # the import line, the header line, the forward block; no comment lines
    assert all(not line[1:].lstrip().startswith("#") for line in removed)


@pytest.mark.parametrize("version", ["0.16.0", "0.17.0"])
def test_deepseek_v2_supports_eagle3(version: str) -> None:
    tree = ast.parse(patched(version, DEEPSEEK).source)
    assert "SupportsEagle3" in imported(tree, "interfaces", level=1)
    causal_lm = find_class(tree, "DeepseekV2ForCausalLM")
    assert "SupportsEagle3" in [ast.unparse(b) for b in causal_lm.bases]
    assert {"set_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers"} <= method_names(causal_lm)
    model = find_class(tree, "DeepseekV2Model")
    forward = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    returns = [ast.unparse(n.value) for n in ast.walk(forward) if isinstance(n, ast.Return) and n.value]
    assert "(hidden_states, aux_hidden_states)" in returns
    assert any(isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "aux_hidden_state_layers"
               for n in model.body)


@pytest.mark.parametrize("version", ["0.16.0", "0.17.0"])
def test_kimi_k25_supports_eagle3(version: str) -> None:
    result = patched(version, KIMI)
    tree = ast.parse(result.source)
    assert "SupportsEagle3" in imported(tree, "vllm.model_executor.models.interfaces")
    assert "    SupportsQuant,\n    SupportsEagle3,\n)\n" in result.source  # parenthesised style kept
    kimi = find_class(tree, "KimiK25ForConditionalGeneration")
    assert "SupportsEagle3" in [ast.unparse(b) for b in kimi.bases]
    assert "set_aux_hidden_state_layers" in method_names(kimi)


@pytest.mark.parametrize("version, applied, skipped", [
    ("0.16.0", "allow-eagle3_target_supported", "allow-aux_hidden_states_supported"),
    ("0.17.0", "allow-aux_hidden_states_supported", "allow-eagle3_target_supported"),
])
def test_speculative_allow_list(version: str, applied: str, skipped: str) -> None:
    result = patched(version, SPECULATIVE)
    statuses = {r.id: r.status for r in result.results}
    assert statuses == {applied: pe.STATUS_APPLIED, skipped: pe.STATUS_SKIPPED}
    tree = ast.parse(result.source)
    name = applied[len("allow-"):]
    literal = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                   and ast.unparse(n.targets[0]) == name)
    values = [e.value for e in literal.elts]
    assert values[-2:] == ["kimi_k2", "deepseek_v3"] and "llama" in values


@pytest.mark.parametrize("version", ["0.16.0", "0.17.0"])
def test_eagle_proposer_kimi_branch(version: str) -> None:
    tree = ast.parse(patched(version, EAGLE).source)
    proposer = find_class(tree, "SpecDecodeBaseProposer")
    load_model = next(n for n in proposer.body if isinstance(n, ast.FunctionDef) and n.name == "load_model")
    assert "media_placeholder_token_id" in ast.unparse(load_model)


@pytest.mark.parametrize("member, kinds", [
    (DEEPSEEK, ("import", "base")),
    (KIMI, ("import", "base")),
    (SPECULATIVE, ("element",)),
])
def test_native_release_reports_already(member: str, kinds: t.Tuple[str, ...]) -> None:
    text = real_source("0.18.0", member)[0]
    edits = [edit for edit in EDITS[member] if any(kind in edit for kind in kinds)]
    result = pe.apply_edits(text, pe.parse_edits(edits), path=member)
    assert result.source == text
    assert pe.STATUS_ALREADY in {r.status for r in result.results}
    assert {r.status for r in result.results} <= {pe.STATUS_ALREADY, pe.STATUS_SKIPPED}


@pytest.mark.parametrize("member", [DEEPSEEK, EAGLE, SPECULATIVE])
def test_every_class_of_a_real_file(member: str) -> None:
    """A base and a method for every top-level class: all land, nothing else moves."""
    text = real_source("0.17.0", member)[0]
    classes = [node.name for node in ast.parse(text).body if isinstance(node, ast.ClassDef)]
    raw = [edit for name in classes for edit in (
        {"base": {"class": name, "names": ["ZzMixin"]}},
        {"member": {"class": name, "source": "def zz_added(self):\n    '''Doc.\n\n    More.\n    '''\n    return 1"}},
    )]
    edits = pe.parse_edits(raw)
    result = pe.apply_edits(text, edits, path=member)
    tree = ast.parse(result.source)
    for name in classes:
        cls = find_class(tree, name)
        assert "ZzMixin" in [ast.unparse(b) for b in cls.bases]
        assert "zz_added" in method_names(cls)
    headers = {number for node in ast.parse(text).body if isinstance(node, ast.ClassDef)
               for number in range(node.lineno, node.body[0].lineno)}
    kept = iter(result.source.splitlines(True))
    untouched = [line for number, line in enumerate(text.splitlines(True), 1) if number not in headers]
    assert all(line in kept for line in untouched)  # the rest, in order, byte for byte
    assert not pe.apply_edits(result.source, edits, path=member).changed
