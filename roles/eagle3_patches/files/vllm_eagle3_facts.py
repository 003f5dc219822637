"""What the installed vLLM needs for EAGLE-3 with a Kimi-K2.5 target, decided without importing it.

Run by the eagle3_patches role with the ml-env interpreter (``eagle3_patches_python``), because
only that interpreter sees the vLLM installation: a module would run under
``ansible_python_interpreter`` instead. Importing vLLM would pull in torch and CUDA, so this reads
``importlib.metadata`` (version, RECORD hashes), ``importlib.util.find_spec`` (package directory,
no import) and the source files' AST. Stdlib only, Python 3.9+. Prints one JSON object.

The decision (``action``: refuse | patch | native) comes from what the source contains; the
version is a cross-check. See roles/eagle3_patches/README.md for the rules.
"""

from __future__ import annotations

import argparse
import ast
import base64
import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import typing as t

# Files whose shape decides the action, relative to the vllm package directory.
DEEPSEEK = "model_executor/models/deepseek_v2.py"
KIMI = "model_executor/models/kimi_k25.py"
SPECULATIVE = "config/speculative.py"
PROPOSERS = ("v1/spec_decode/eagle.py", "v1/spec_decode/llm_base_proposer.py")
ALLOW_LIST_NAMES = ("eagle3_target_supported", "aux_hidden_states_supported")
SUPPORTED = ("vLLM 0.16.x/0.17.x with this role's patches, or vLLM >= 0.18 "
             "(EAGLE-3 for Kimi-K2.5 is native there)")


def parse_version(text: str | None) -> t.Tuple[int, int, int] | None:
    """'0.17.1.dev3+gabc' -> (0, 17, 1); None when it does not start with digits."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def sha256_file(path: str) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def record_hex(value: str) -> str | None:
    """RECORD's 'sha256=<urlsafe b64, unpadded>' value -> hex, None for other algorithms."""
    algo, sep, b64 = value.partition("=")
    if algo != "sha256" or not sep or not b64:
        return None
    return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()


# --------------------------------------------------------------------------- AST facts


def _parse(path: str) -> ast.Module | None:
    try:
        with open(path, "rb") as handle:
            return ast.parse(handle.read(), filename=path)
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


def python_patch_records(records_dir: str) -> t.Dict[str, t.Dict[str, t.Any]]:
    """python_patch revert records (<state_dir>/records/*.json) by the real path they cover."""
    out: t.Dict[str, t.Dict[str, t.Any]] = {}
    for json_path in glob.glob(os.path.join(glob.escape(records_dir), "*.json")):
        try:
            with open(json_path, "r", encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("path"), str):
            data["record_file"] = json_path
            out[data["path"]] = data
    return out


def file_states(dist: t.Any, pkg: str, rels: t.Sequence[str],
                records: t.Mapping[str, t.Mapping[str, t.Any]]) -> t.Dict[str, t.Dict[str, t.Any]]:
    """Per file: pristine (RECORD hash), patched (what python_patch wrote over the pristine
    bytes), modified (anything else), unverified (no RECORD hash) or missing."""
    hashes: t.Dict[str, str | None] = {}
    for entry in (dist.files or []) if dist is not None else []:
        located = os.path.realpath(str(dist.locate_file(entry)))
        hashes[located] = record_hex(f"{entry.hash.mode}={entry.hash.value}") if entry.hash else None
    out = {}
    for rel in rels:
        path = os.path.realpath(os.path.join(pkg, rel))
        info: t.Dict[str, t.Any] = {"path": path, "sha256": None,
                                    "record_sha256": hashes.get(path), "state": "missing"}
        if os.path.isfile(path):
            info["sha256"] = sha256_file(path)
            rec = records.get(path)
            if info["record_sha256"] is None:
                info["state"] = "unverified"
            elif info["sha256"] == info["record_sha256"]:
                info["state"] = "pristine"
            elif (rec and rec.get("sha256_written") == info["sha256"]
                  and rec.get("sha256_original") == info["record_sha256"]):
                info["state"] = "patched"
                info["python_patch_record"] = rec.get("record_file")
            else:
                info["state"] = "modified"
                if rec and rec.get("sha256_written") == info["sha256"]:
                    info["python_patch_record"] = rec.get("record_file")
        out[rel] = info
    return out


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


def gather(rels: t.Sequence[str], records_dir: str | None) -> t.Dict[str, t.Any]:
    """All facts about the vllm distribution visible to this interpreter."""
    facts: t.Dict[str, t.Any] = {"python": sys.executable, "python_version": sys.version.split()[0],
                                 "installed": False, "version": None, "package_dir": None,
                                 "files": {}, "markers": {}, "shape": {}}
    try:
        dist = importlib.metadata.distribution("vllm")
    except importlib.metadata.PackageNotFoundError:
        return facts
    spec = importlib.util.find_spec("vllm")  # top-level name: locates, does not import
    if spec is None or not spec.submodule_search_locations:
        return facts
    pkg = os.path.realpath(list(spec.submodule_search_locations)[0])
    facts.update(installed=True, version=dist.version, package_dir=pkg,
                 dist_info=str(getattr(dist, "_path", "")) or None)
    records = python_patch_records(os.path.join(records_dir, "records")) if records_dir else {}
    facts["files"] = file_states(dist, pkg, rels, records)
    facts["markers"], facts["shape"] = markers(pkg)
    return facts


def main(argv: t.Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", dest="files", action="append", default=[],
                        help="patch-set file relative to the vllm package (RECORD check)")
    parser.add_argument("--state-dir", default=None, help="python_patch's state directory")
    parser.add_argument("--model-type", dest="model_types", action="append", default=[])
    parser.add_argument("--allow-modified", action="store_true")
    args = parser.parse_args(argv)
    facts = gather(args.files, args.state_dir)
    action, reasons, message = decide(facts, args.allow_modified, args.model_types)
    facts.update(action=action, reasons=reasons, message=message)
    json.dump(facts, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
