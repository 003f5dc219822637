"""Shared helpers of the eagle3_patches tests: the patch set, real wheel sources, AST assertions.

The assertions read the patched source with `ast` (never by text) and compare the aux-hidden-state
code with what upstream vLLM 0.18.0 itself shipped, read from the real 0.18.0 wheel.
"""

from __future__ import annotations

import ast
import typing as t
from pathlib import Path

import yaml

from tests.support.vllm_wheels import wheel_file

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "eagle3_patches"

DEEPSEEK = "model_executor/models/deepseek_v2.py"
KIMI = "model_executor/models/kimi_k25.py"
SPECULATIVE = "config/speculative.py"
EAGLE = "v1/spec_decode/eagle.py"
PATCHED_FILES = (DEEPSEEK, KIMI, SPECULATIVE, EAGLE)
DEFAULT_TYPES = ("kimi_k2", "deepseek_v3")


def patchset(model_types: t.Sequence[str] = DEFAULT_TYPES) -> t.List[t.Dict[str, t.Any]]:
    """vars/patchset.yml with the allow-list template replaced by model_types."""
    data = yaml.safe_load((ROLE / "vars" / "patchset.yml").read_text())
    out = []
    for entry in data["eagle3_patches_patchset"]:
        edits = []
        for edit in entry["edits"]:
            edit = dict(edit)
            if "element" in edit:
                assert edit["element"]["values"] == "{{ __eagle3_patches_model_types }}"
                edit["element"] = dict(edit["element"], values=list(model_types))
            edits.append(edit)
        out.append({"file": entry["file"], "edits": edits})
    return out


def wheel_source(version: str, rel: str) -> bytes:
    """Bytes of vllm/<rel> in the real wheel."""
    return wheel_file(version, "vllm/" + rel)


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    assert len(found) == 1, "class %s: %d definitions" % (name, len(found))
    return found[0]


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    found = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, "%s.%s: %d definitions" % (cls.name, name, len(found))
    return found[0]


def _bases(cls: ast.ClassDef) -> t.List[str]:
    return [ast.unparse(b) for b in cls.bases]


def _imported(tree: ast.Module, module: str, level: int) -> t.Set[str]:
    return {a.name for n in tree.body if isinstance(n, ast.ImportFrom)
            and n.module == module and n.level == level for a in n.names}


def _loop_with_aux(func: ast.FunctionDef) -> ast.For:
    loops = [n for n in ast.walk(func) if isinstance(n, ast.For)
             and "aux_hidden_state_layers" in ast.dump(n)]
    assert len(loops) == 1, "forward has %d loops collecting aux states" % len(loops)
    return loops[0]


def upstream_018_loop() -> str:
    """ast.dump of the layer loop of DeepseekV2Model.forward as upstream 0.18.0 wrote it."""
    tree = ast.parse(wheel_source("0.18.0", DEEPSEEK))
    return ast.dump(_loop_with_aux(_method(_class(tree, "DeepseekV2Model"), "forward")))


def allow_list(tree: ast.Module) -> t.Tuple[str, t.List[str]]:
    """(name, values) of the EAGLE-3 allow-list in SpeculativeConfig._verify_args."""
    func = _method(_class(tree, "SpeculativeConfig"), "_verify_args")
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and \
                node.targets[0].id in ("eagle3_target_supported", "aux_hidden_states_supported"):
            return node.targets[0].id, [ast.literal_eval(e) for e in node.value.elts]
    raise AssertionError("no allow-list in SpeculativeConfig._verify_args")


def assert_patched(sources: t.Mapping[str, bytes], model_types: t.Sequence[str] = DEFAULT_TYPES,
                   ) -> None:
    """Everything EAGLE-3 with a Kimi-K2.5 target needs is in these (patched) sources."""
    for rel, data in sources.items():
        compile(data, rel, "exec", dont_inherit=True)
    trees = {rel: ast.parse(data) for rel, data in sources.items()}

    # Edit 1: DeepseekV2ForCausalLM implements SupportsEagle3.
    deepseek = trees[DEEPSEEK]
    assert "SupportsEagle3" in _imported(deepseek, "interfaces", 1)
    causal = _class(deepseek, "DeepseekV2ForCausalLM")
    assert _bases(causal)[-1] == "SupportsEagle3"
    assert "SupportsEagle" in _bases(causal) and "nn.Module" in _bases(causal)
    setter = _method(causal, "set_aux_hidden_state_layers")
    assert ast.unparse(setter.body[0]) == "self.model.aux_hidden_state_layers = layers"
    getter = _method(causal, "get_eagle3_aux_hidden_state_layers")
    assert ast.unparse(getter.body[-1]) == "return (2, num_layers // 2, num_layers - 3)"
    assert _class(deepseek, "DeepseekV3ForCausalLM").bases[0].id == "DeepseekV2ForCausalLM"

    # Edit 1b: DeepseekV2Model collects aux hidden states exactly as upstream 0.18.0 does.
    model = _class(deepseek, "DeepseekV2Model")
    init_assigns = [ast.unparse(n) for n in _method(model, "__init__").body
                    if isinstance(n, ast.Assign)]
    assert "self.aux_hidden_state_layers = tuple[int, ...]()" in init_assigns
    forward = _method(model, "forward")
    assert ast.dump(_loop_with_aux(forward)) == upstream_018_loop()
    stmts = [ast.unparse(s) for s in forward.body]
    assert "aux_hidden_states = []" in stmts
    assert stmts[-2:] == ["if len(aux_hidden_states) > 0:\n    return (hidden_states, aux_hidden_states)",
                          "return hidden_states"]

    # Edit 2: the Kimi wrapper implements SupportsEagle3 by delegating to its language model.
    kimi = trees[KIMI]
    assert "SupportsEagle3" in _imported(kimi, "vllm.model_executor.models.interfaces", 0)
    wrapper = _class(kimi, "KimiK25ForConditionalGeneration")
    assert "SupportsEagle3" in _bases(wrapper) and "SupportsMultiModal" in _bases(wrapper)
    assert ast.unparse(_method(wrapper, "set_aux_hidden_state_layers").body[0]) == \
        "self.language_model.set_aux_hidden_state_layers(layers)"
    assert ast.unparse(_method(wrapper, "get_eagle3_aux_hidden_state_layers").body[0]) == \
        "return self.language_model.get_eagle3_aux_hidden_state_layers()"

    # Edit 3: the allow-list admits the checkpoint's text model type.
    values = allow_list(trees[SPECULATIVE])[1]
    for model_type in model_types:
        assert values.count(model_type) == 1, (model_type, values)
    assert "llama" in values  # the existing entries stay

    # Edit 4: the proposer reads Kimi's media_placeholder_token_id.
    load = _method(_class(trees[EAGLE], "SpecDecodeBaseProposer"), "load_model")
    branches = [n for n in ast.walk(load) if isinstance(n, ast.If)
                and ast.unparse(n.test) ==
                "self.get_model_name(target_model) == 'KimiK25ForConditionalGeneration'"]
    assert len(branches) == 1
    assert ast.unparse(branches[0].body[0]) == \
        "self.model.config.image_token_index = target_model.config.media_placeholder_token_id"
    assert ast.unparse(branches[0].orelse[0]) == \
        "self.model.config.image_token_index = target_model.config.image_token_index"
