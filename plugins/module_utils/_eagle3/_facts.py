# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What the installed vLLM needs for EAGLE-3 with a Kimi-K2.5 target, decided without importing it.

Why this shape: only the ml-env interpreter sees the vLLM installation, and importing vLLM would
pull in torch and CUDA. So LOCATE_SCRIPT runs under that interpreter and reports the version,
package directory and RECORD hashes from ``importlib.metadata`` / ``find_spec`` (no import);
everything else here (AST facts of the source, file states against python_patch's records, the
decision) is pure functions used by the vllm_eagle3_facts module and the tests.

The decision (``action``: refuse | patch | native) comes from what the source contains; the
version is a cross-check. Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import typing as t

from .._patch import _files as pf

# Files whose shape decides the action, relative to the vllm package directory.
DEEPSEEK = "model_executor/models/deepseek_v2.py"
KIMI = "model_executor/models/kimi_k25.py"
SPECULATIVE = "config/speculative.py"
PROPOSERS = ("v1/spec_decode/eagle.py", "v1/spec_decode/llm_base_proposer.py")
ALLOW_LIST_NAMES = ("eagle3_target_supported", "aux_hidden_states_supported")
SUPPORTED = ("vLLM 0.16.x/0.17.x with this role's patches, or vLLM >= 0.18 "
             "(EAGLE-3 for Kimi-K2.5 is native there)")

# Runs as `<ml-env python> -I -c LOCATE_SCRIPT <file relative to vllm/>...`; prints one JSON line.
# find_spec of a top-level name locates the package without importing it.
LOCATE_SCRIPT = r"""
import json, os, sys
from importlib import metadata, util
out = {"python": sys.executable, "python_version": sys.version.split()[0], "installed": False,
       "version": None, "package_dir": None, "dist_info": None, "record": {}}
try:
    dist = metadata.distribution("vllm")
except metadata.PackageNotFoundError:
    dist = None
spec = util.find_spec("vllm") if dist is not None else None
if spec is not None and spec.submodule_search_locations:
    pkg = os.path.realpath(list(spec.submodule_search_locations)[0])
    wanted = set(os.path.realpath(os.path.join(pkg, rel)) for rel in sys.argv[1:])
    for entry in dist.files or []:
        path = os.path.realpath(str(dist.locate_file(entry)))
        if path in wanted:
            out["record"][path] = "%s=%s" % (entry.hash.mode, entry.hash.value) if entry.hash else None
    out.update(installed=True, version=dist.version, package_dir=pkg,
               dist_info=str(getattr(dist, "_path", "")) or None)
print(json.dumps(out))
"""


def parse_locate_output(text: str) -> t.Dict[str, t.Any]:
    """LOCATE_SCRIPT's answer (its last non-empty line); ValueError when it is not that."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the interpreter printed nothing")
    data = json.loads(lines[-1])
    if not isinstance(data, dict) or "installed" not in data or not isinstance(data.get("record"), dict):
        raise ValueError("not the locate script's JSON: %r" % lines[-1][:200])
    return data


def parse_version(text: str | None) -> t.Tuple[int, int, int] | None:
    """'0.17.1.dev3+gabc' -> (0, 17, 1); None when it does not start with digits."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def record_hex(value: str | None) -> str | None:
    """RECORD's 'sha256=<urlsafe b64, unpadded>' value -> hex, None for other algorithms."""
    algo, sep, b64 = (value or "").partition("=")
    if algo != "sha256" or not sep or not b64:
        return None
    return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()


def model_types(config: t.Mapping[str, t.Any] | None, defaults: t.Sequence[str]) -> t.List[str]:
    """Allow-list entries for a checkpoint's config.json (None: no config, the defaults).

    vLLM's test is ``entry in hf_text_config.model_type``: the checkpoint's text_config.model_type.
    vLLM builds a Kimi-K2.5 text config as DeepseekV3Config, so a missing one means deepseek_v3;
    a config without text_config is its own text config (model_type at the top level).
    """
    if config is None:
        return list(defaults)
    if not isinstance(config, dict):
        raise ValueError("expected a JSON object, found %s" % type(config).__name__)
    if "text_config" in config:
        text_config = config["text_config"]
        found = text_config.get("model_type", "deepseek_v3") if isinstance(text_config, dict) else None
    else:
        found = config.get("model_type", "kimi_k25")
        found = "deepseek_v3" if found == "kimi_k25" else found
    if not isinstance(found, str) or not found:
        raise ValueError("model_type must be a non-empty string, got %r" % (found,))
    return [found]


# --------------------------------------------------------------------------- AST facts


def _parse(path: str) -> ast.Module | None:
    try:
        return ast.parse(pf.read_bytes(path), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None


def _class(tree: ast.Module | None, name: str) -> ast.ClassDef | None:
    for node in tree.body if tree else ():
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _method(cls: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    for node in cls.body if cls else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node  # type: ignore[return-value]
    return None


def _base_names(cls: ast.ClassDef | None) -> t.List[str]:
    names = []
    for base in cls.bases if cls else ():
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
    return names


def _uses_attr(node: ast.AST | None, attr: str) -> bool:
    return node is not None and any(
        isinstance(n, ast.Attribute) and n.attr == attr for n in ast.walk(node))


def _eagle3_class(cls: ast.ClassDef | None) -> bool:
    """The class lists SupportsEagle3 and defines what the runner calls on it."""
    return ("SupportsEagle3" in _base_names(cls)
            and _method(cls, "set_aux_hidden_state_layers") is not None)


def kimi_wrapper_shape(tree: ast.Module | None) -> str:
    """How KimiK25ForConditionalGeneration builds its language model.

    'registered': init_vllm_registered_model(...) -> a DeepseekV2ForCausalLM (0.16 on), which
    the proposer and the delegating methods expect. 'bare': a DeepseekV2Model with its own
    lm_head (0.15), on which the proposer's '.model' access fails: not safely patchable.
    """
    init = _method(_class(tree, "KimiK25ForConditionalGeneration"), "__init__")
    if init is None:
        return "missing"
    for node in ast.walk(init):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        if not any(isinstance(tg, ast.Attribute) and tg.attr == "language_model"
                   for tg in node.targets):
            continue
        func = node.value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name == "init_vllm_registered_model":
            return "registered"
        if name == "DeepseekV2Model":
            return "bare"
        return "unknown:" + name
    return "unknown"


def allow_list(tree: ast.Module | None) -> t.Dict[str, t.Any] | None:
    """The EAGLE-3 target allow-list in SpeculativeConfig._verify_args, None when there is none."""
    func = _method(_class(tree, "SpeculativeConfig"), "_verify_args")
    for node in ast.walk(func) if func else ():
        if not isinstance(node, ast.Assign) or not isinstance(node.value, (ast.List, ast.Tuple)):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id in ALLOW_LIST_NAMES:
                values = [e.value for e in node.value.elts
                          if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                return {"name": target.id, "values": values, "lineno": node.lineno}
    return None


def proposer_kimi_branch(trees: t.Iterable[ast.Module | None]) -> bool:
    """SpecDecodeBaseProposer.load_model reads Kimi's media_placeholder_token_id somewhere."""
    return any(
        _uses_attr(_method(_class(tree, "SpecDecodeBaseProposer"), "load_model"),
                   "media_placeholder_token_id")
        for tree in trees)


def markers(pkg: str) -> t.Tuple[t.Dict[str, bool], t.Dict[str, t.Any]]:
    """Which parts of EAGLE-3-for-Kimi support the source already has, plus other shape facts."""
    deepseek = _parse(os.path.join(pkg, DEEPSEEK))
    kimi = _parse(os.path.join(pkg, KIMI))
    model = _class(deepseek, "DeepseekV2Model")
    found = {
        # edit 1: SupportsEagle3 + methods on DeepseekV2ForCausalLM
        "deepseek_eagle3": _eagle3_class(_class(deepseek, "DeepseekV2ForCausalLM")),
        # edit 1b: DeepseekV2Model collects aux hidden states
        "deepseek_aux_capture": (_uses_attr(_method(model, "__init__"), "aux_hidden_state_layers")
                                 and _uses_attr(_method(model, "forward"),
                                                "aux_hidden_state_layers")),
        # edit 2: SupportsEagle3 + delegation on the Kimi wrapper
        "kimi_eagle3": _eagle3_class(_class(kimi, "KimiK25ForConditionalGeneration")),
        # edit 4: the proposer knows Kimi's image token attribute
        "proposer_kimi_branch": proposer_kimi_branch(
            _parse(os.path.join(pkg, p)) for p in PROPOSERS),
    }
    shape = {
        "kimi_k25_present": os.path.isfile(os.path.join(pkg, KIMI)),
        "kimi_wrapper": kimi_wrapper_shape(kimi),
        "allow_list": allow_list(_parse(os.path.join(pkg, SPECULATIVE))),
        "unparsable": sorted(rel for rel, tree in ((DEEPSEEK, deepseek), (KIMI, kimi))
                             if tree is None and os.path.isfile(os.path.join(pkg, rel))),
    }
    return found, shape


# --------------------------------------------------------------------------- file states


def records(state_dir: str | None, paths: t.Iterable[str]) -> t.Dict[str, pf.Record]:
    """python_patch's records for these real paths (read through _patch._files); a record that
    cannot be read counts as none, so the file is judged by its hash alone."""
    out = {}
    for path in paths if state_dir else ():
        try:
            record = pf.load_record(state_dir, path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            record = None
        if record is not None:
            out[path] = record
    return out


def file_states(pkg: str, rels: t.Sequence[str], record_hashes: t.Mapping[str, str | None],
                patch_records: t.Mapping[str, pf.Record]) -> t.Dict[str, t.Dict[str, t.Any]]:
    """Per file: pristine (RECORD hash), patched (what python_patch wrote over the pristine
    bytes), modified (anything else), unverified (no RECORD hash) or missing.

    record_hashes: real path -> hex sha256 from the wheel's RECORD.
    """
    out = {}
    for rel in rels:
        path = os.path.realpath(os.path.join(pkg, rel))
        info: t.Dict[str, t.Any] = {"path": path, "sha256": None,
                                    "record_sha256": record_hashes.get(path), "state": "missing"}
        if os.path.isfile(path):
            info["sha256"] = pf.sha256_bytes(pf.read_bytes(path))
            rec = patch_records.get(path)
            wrote_it = rec is not None and rec.sha256_written == info["sha256"]
            if info["record_sha256"] is None:
                info["state"] = "unverified"
            elif info["sha256"] == info["record_sha256"]:
                info["state"] = "pristine"
            else:
                own = wrote_it and rec.sha256_original == info["record_sha256"]
                info["state"] = "patched" if own else "modified"
                if wrote_it:
                    info["python_patch_record"] = rec.json_path
        out[rel] = info
    return out


def gather(located: t.Mapping[str, t.Any], rels: t.Sequence[str],
           state_dir: str | None) -> t.Dict[str, t.Any]:
    """All facts about the vllm distribution LOCATE_SCRIPT found (``located``)."""
    facts: t.Dict[str, t.Any] = {key: located.get(key) for key in (
        "python", "python_version", "installed", "version", "package_dir", "dist_info")}
    facts.update(installed=bool(located.get("installed")), files={}, markers={}, shape={})
    pkg = facts["package_dir"]
    if not facts["installed"] or not pkg:
        return facts
    hashes = {path: record_hex(value) for path, value in located["record"].items()}
    paths = [os.path.realpath(os.path.join(pkg, rel)) for rel in rels]
    facts["files"] = file_states(pkg, rels, hashes, records(state_dir, paths))
    facts["markers"], facts["shape"] = markers(pkg)
    return facts


# --------------------------------------------------------------------------- decision


def covered(model_types: t.Sequence[str], values: t.Sequence[str]) -> t.List[str]:
    """model types the allow-list does not admit (vLLM's test: any(v in model_type))."""
    return [mt for mt in model_types if not any(v in mt for v in values)]


def decide(facts: t.Dict[str, t.Any], allow_modified: bool,
           model_types: t.Sequence[str]) -> t.Tuple[str, t.List[str], str]:
    """(action, reasons, one-line message) from the source facts, version as cross-check."""
    version = facts["version"]
    vt = parse_version(version)
    shape, found = facts["shape"], facts["markers"]
    reasons: t.List[str] = []
    if not facts["installed"]:
        return "refuse", ["no vllm distribution"], (
            "vLLM is not installed for %s; install %s." % (facts["python"], SUPPORTED))
    if not shape["kimi_k25_present"] or (vt is not None and vt < (0, 15, 0)):
        return "refuse", ["no kimi_k25.py: Kimi-K2.5 is not servable"], (
            "vLLM %s cannot serve Kimi-K2.5 at all (it has no kimi_k25.py). Install %s."
            % (version, SUPPORTED))
    wrapper = shape["kimi_wrapper"]
    if wrapper != "registered" or (vt is not None and vt < (0, 16, 0)):
        if wrapper == "bare":
            why = ("its KimiK25ForConditionalGeneration holds a bare DeepseekV2Model with its own "
                   "lm_head, on which the EAGLE proposer's '.model' access fails")
        elif wrapper != "registered":
            why = ("its KimiK25ForConditionalGeneration builds its language model in a way this "
                   "role does not know (%s)" % wrapper)
        else:
            why = "0.15.x releases are not patchable safely (version cross-check)"
        return "refuse", ["Kimi wrapper: %s" % wrapper], (
            "vLLM %s is not safely patchable for EAGLE-3: %s. Install %s." % (version, why,
                                                                              SUPPORTED))
    if shape["unparsable"]:
        return "refuse", ["unparsable: %s" % ", ".join(shape["unparsable"])], (
            "vLLM %s: %s do not parse; reinstall with 'pip install --force-reinstall "
            "--no-deps vllm==%s'." % (version, ", ".join(shape["unparsable"]), version))
    files = facts["files"]
    foreign = sorted(info["path"] for info in files.values()
                     if info["state"] in ("modified", "unverified"))
    own = sorted(info["path"] for info in files.values() if info["state"] == "patched")
    native = all(found.values())
    missing = sorted(k for k, v in found.items() if not v)
    listed = shape["allow_list"]
    if native and not own and (not foreign or vt is None or vt >= (0, 18, 0)):
        reasons.append("source already supports EAGLE-3 for Kimi-K2.5")
        if listed is None:
            reasons.append("no EAGLE-3 target allow-list")
        elif covered(model_types, listed["values"]):
            reasons.append("WARNING: the allow-list %s does not admit %s"
                           % (listed["name"], ", ".join(covered(model_types, listed["values"]))))
        if foreign:
            reasons.append("WARNING: files differ from RECORD (not touched): %s"
                           % ", ".join(foreign))
        if vt is not None and vt < (0, 18, 0):
            reasons.append("note: native support in a release older than 0.18")
        return "native", reasons, "vLLM %s supports EAGLE-3 with Kimi-K2.5 natively; no file " \
                                  "is touched." % version
    if foreign and not allow_modified:
        return "refuse", ["files differ from RECORD: %s" % ", ".join(foreign)], (
            "vLLM %s: refusing to patch files that differ from the wheel's RECORD (hand-edited "
            "or unverifiable): %s. Restore them with 'pip install --force-reinstall --no-deps "
            "vllm==%s' (run with %s), or set eagle3_patches_allow_modified: true to patch "
            "them anyway." % (version, ", ".join(foreign), version, facts["python"]))
    if vt is not None and vt >= (0, 18, 0) and not own:
        return "refuse", ["expected native, missing: %s" % ", ".join(missing)], (
            "vLLM %s should support EAGLE-3 for Kimi-K2.5 natively but its source lacks: %s. "
            "This role patches only 0.16.x/0.17.x; reinstall with 'pip install "
            "--force-reinstall --no-deps vllm==%s' or report the release."
            % (version, ", ".join(missing), version))
    if listed is None and not found["deepseek_eagle3"]:
        return "refuse", ["no allow-list in SpeculativeConfig._verify_args"], (
            "vLLM %s: SpeculativeConfig._verify_args has none of %s; this source is not a "
            "release the patch set knows. Install %s." % (version, ", ".join(ALLOW_LIST_NAMES),
                                                          SUPPORTED))
    if own:
        reasons.append("already patched by python_patch: %s" % ", ".join(own))
    if foreign:
        reasons.append("patching modified files (eagle3_patches_allow_modified): %s"
                       % ", ".join(foreign))
    if missing:
        reasons.append("source lacks: %s" % ", ".join(missing))
    return "patch", reasons, "vLLM %s needs the EAGLE-3 patches for Kimi-K2.5 (%s)." % (
        version, "; ".join(reasons) if reasons else "nothing missing")
