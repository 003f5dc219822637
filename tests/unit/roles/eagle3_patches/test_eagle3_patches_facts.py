"""The eagle3 facts logic (plugins/module_utils/_eagle3/_facts.py) as tables.

AST facts are read from the real wheels' files; the decision is a pure function of the facts,
tested with one row per situation an operator meets.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._eagle3 import _facts as facts_script
from ansible_collections.gpuserve.vllm.plugins.module_utils._patch import _files as pf

from tests.support import eagle3_checks as ec
from tests.support.vllm_wheels import wheel_file

SHAPE_FILES = (ec.DEEPSEEK, ec.KIMI, ec.SPECULATIVE, ec.EAGLE, "v1/spec_decode/llm_base_proposer.py")


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> t.Callable[[str], Path]:
    """version -> a directory laid out like the vllm package, holding the real wheel's files."""
    made: t.Dict[str, Path] = {}

    def make(version: str) -> Path:
        if version not in made:
            pkg = tmp_path_factory.mktemp("vllm-%s" % version) / "vllm"
            for rel in SHAPE_FILES:
                try:
                    data = ec.wheel_source(version, rel)
                except KeyError:  # not in this release
                    continue
                (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
                (pkg / rel).write_bytes(data)
            made[version] = pkg
        return made[version]
    return make


ALL = {"deepseek_eagle3": True, "deepseek_aux_capture": True, "kimi_eagle3": True,
       "proposer_kimi_branch": True}
NONE = {k: False for k in ALL}


@pytest.mark.parametrize("version, markers, wrapper, list_name, has_kimi_k2", [
    ("0.14.1", NONE, "missing", "eagle3_target_supported", False),
    ("0.15.1", NONE, "bare", "eagle3_target_supported", False),
    ("0.16.0", NONE, "registered", "eagle3_target_supported", False),
    ("0.17.0", NONE, "registered", "aux_hidden_states_supported", False),
    ("0.17.1", NONE, "registered", "aux_hidden_states_supported", False),
    ("0.18.0", ALL, "registered", "aux_hidden_states_supported", True),
    ("0.22.0", ALL, "registered", None, False),
    ("0.33.0", ALL, "registered", None, False),
])
def test_markers_of_real_releases(sources: t.Callable[[str], Path], version: str,
                                  markers: t.Dict[str, bool], wrapper: str,
                                  list_name: str | None, has_kimi_k2: bool) -> None:
    found, shape = facts_script.markers(str(sources(version)))
    assert found == markers
    assert shape["kimi_wrapper"] == wrapper
    assert shape["kimi_k25_present"] == (wrapper != "missing")
    listed = shape["allow_list"]
    assert (listed and listed["name"]) == list_name
    if listed:
        assert ("kimi_k2" in listed["values"]) == has_kimi_k2


def _facts(version: str | None, markers: t.Mapping[str, bool] = NONE, *,
           wrapper: str = "registered", states: t.Sequence[str] = ("pristine",) * 4,
           allow: t.Any = "default", installed: bool = True) -> t.Dict[str, t.Any]:
    if allow == "default":
        allow = {"name": "aux_hidden_states_supported", "values": ["llama"], "lineno": 1}
    return {
        "installed": installed, "version": version, "python": "/opt/ml-env/bin/python",
        "markers": dict(markers),
        "shape": {"kimi_k25_present": wrapper != "missing", "kimi_wrapper": wrapper,
                  "allow_list": allow, "unparsable": []},
        "files": {rel: {"path": "/pkg/vllm/" + rel, "state": st}
                  for rel, st in zip(ec.PATCHED_FILES, states)},
    }


OWN = ("patched",) * 4
HAND = ("pristine", "pristine", "modified", "pristine")


@pytest.mark.parametrize("facts, allow_modified, action, words", [
    (_facts(None, installed=False), False, "refuse", ["not installed"]),
    (_facts("0.14.1", wrapper="missing"), False, "refuse",
     ["0.14.1", "no kimi_k25.py", "0.16.x/0.17.x", ">= 0.18"]),
    (_facts("0.15.1", wrapper="bare"), False, "refuse",
     ["0.15.1", "not safely patchable", "0.16.x/0.17.x", ">= 0.18"]),
    # version as cross-check: a 0.15.x is refused even if its wrapper looked like 0.16's
    (_facts("0.15.9"), False, "refuse", ["0.15.9", "not safely patchable"]),
    (_facts("0.16.0"), False, "patch", ["needs the EAGLE-3 patches", "deepseek_aux_capture"]),
    # a future 0.16.x / 0.17.x that no table knows: decided from the source
    (_facts("0.16.7"), False, "patch", ["0.16.7"]),
    (_facts("0.17.0", ALL, states=OWN), False, "patch", ["already patched by python_patch"]),
    (_facts("0.17.0", states=HAND), False, "refuse",
     ["differ from the wheel's RECORD", "/pkg/vllm/config/speculative.py",
      "pip install --force-reinstall --no-deps vllm==0.17.0", "eagle3_patches_allow_modified"]),
    (_facts("0.17.0", states=HAND), True, "patch", ["patching modified files"]),
    (_facts("0.17.0", states=("pristine", "unverified", "pristine", "pristine")), False,
     "refuse", ["unverifiable"]),
    (_facts("0.18.0", ALL), False, "native", ["natively", "no file is touched"]),
    (_facts("0.33.0", ALL, allow=None), False, "native", ["no EAGLE-3 target allow-list"]),
    (_facts("0.18.0", ALL, states=HAND), False, "native", ["WARNING: files differ from RECORD"]),
    # a release that should be native but is not: refuse rather than patch blindly
    (_facts("0.19.0"), False, "refuse", ["should support EAGLE-3", "deepseek_eagle3"]),
    # a backport: native code in an older release is accepted, with a note
    (_facts("0.17.5", ALL), False, "native", ["older than 0.18"]),
    # source without either allow-list name and without the fix: not a release we know
    (_facts("0.17.0", allow=None), False, "refuse", ["_verify_args has none of"]),
])
def test_decide(facts: t.Dict[str, t.Any], allow_modified: bool, action: str,
                words: t.List[str]) -> None:
    got, reasons, message = facts_script.decide(facts, allow_modified, ["kimi_k2", "deepseek_v3"])
    assert got == action, (message, reasons)
    text = message + " " + " ".join(reasons)
    for word in words:
        assert word in text


@pytest.mark.parametrize("model_types, values, missing", [
    (["kimi_k2", "deepseek_v3"], ["llama", "deepseek_v3", "kimi_k2"], []),
    (["kimi_k25"], ["kimi_k2"], []),  # vLLM's test is a substring test
    (["deepseek_v3"], ["llama", "qwen"], ["deepseek_v3"]),
])
def test_allow_list_coverage(model_types: t.List[str], values: t.List[str],
                             missing: t.List[str]) -> None:
    assert facts_script.covered(model_types, values) == missing


def test_file_states(tmp_path: Path) -> None:
    pkg = tmp_path / "vllm"
    pkg.mkdir()
    for name, data in {"a.py": b"A = 1\n", "b.py": b"B = 2  # patched\n",
                       "c.py": b"C = 3  # sed\n", "d.py": b"D = 4\n", "f.py": b"F = 9  # sed\n"
                       }.items():
        (pkg / name).write_bytes(data)

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    wheel = {"a.py": b"A = 1\n", "b.py": b"B = 2\n", "c.py": b"C = 3\n", "f.py": b"F = 9\n"}
    hashes = {str(pkg / name): sha(data) for name, data in wheel.items()}  # d.py: not in RECORD

    def record(name: str, original: bytes, written: bytes, json_path: str) -> pf.Record:
        return pf.Record(path=str(pkg / name), sha256_original=sha(original),
                         sha256_written=sha(written), edits=[], timestamp="", json_path=json_path,
                         orig_path=json_path + ".orig")

    records = {
        str(pkg / "b.py"): record("b.py", b"B = 2\n", b"B = 2  # patched\n", "r"),
        # python_patch wrote f.py, but over bytes that were not the wheel's: still foreign
        str(pkg / "f.py"): record("f.py", b"F = 8\n", b"F = 9  # sed\n", "r2"),
    }
    states = facts_script.file_states(str(pkg), ["a.py", "b.py", "c.py", "d.py", "e.py", "f.py"],
                                      hashes, records)
    assert {k: v["state"] for k, v in states.items()} == {
        "a.py": "pristine", "b.py": "patched", "c.py": "modified", "d.py": "unverified",
        "e.py": "missing", "f.py": "modified"}
    assert states["b.py"]["python_patch_record"] == "r"


def test_record_hex() -> None:
    digest = hashlib.sha256(b"x").digest()
    b64 = base64.urlsafe_b64encode(digest).decode().rstrip("=")
    assert facts_script.record_hex("sha256=" + b64) == digest.hex()
    assert facts_script.record_hex("md5=abc") is None


@pytest.mark.parametrize("text, expected", [
    ("0.17.1", (0, 17, 1)), ("0.18.0rc1.dev5+g1234", (0, 18, 0)), ("0.9", (0, 9, 0)),
    ("garbage", None), (None, None)])
def test_parse_version(text: str | None, expected: t.Any) -> None:
    assert facts_script.parse_version(text) == expected


@pytest.mark.parametrize("config, expected", [
    (None, ["kimi_k2", "deepseek_v3"]),  # no checkpoint config: the defaults
    ({"model_type": "kimi_k25", "text_config": {"model_type": "kimi_k2"}}, ["kimi_k2"]),
    ({"model_type": "kimi_k25", "text_config": {"hidden_size": 7168}}, ["deepseek_v3"]),
    ({"model_type": "kimi_k25"}, ["deepseek_v3"]),
    ({"hidden_size": 7168}, ["deepseek_v3"]),
    ({"model_type": "kimi_k2", "hidden_size": 7168}, ["kimi_k2"]),  # its own text config
])
def test_model_types(config: t.Any, expected: t.List[str]) -> None:
    assert facts_script.model_types(config, ["kimi_k2", "deepseek_v3"]) == expected


@pytest.mark.parametrize("config, words", [
    (["not", "a", "mapping"], "expected a JSON object, found list"),
    ({"text_config": {"model_type": None}}, "model_type must be a non-empty string, got None"),
    ({"model_type": ""}, "non-empty string"),
])
def test_model_types_bad_config(config: t.Any, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        facts_script.model_types(config, ["kimi_k2"])


def _site(tmp_path: Path, version: str) -> Path:
    """A site directory with the real wheel's dist-info and the patch set's files."""
    site = tmp_path / "site"
    for member in ("METADATA", "RECORD"):
        target = site / ("vllm-%s.dist-info" % version) / member
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(wheel_file(version, "vllm-%s.dist-info/%s" % (version, member)))
    for rel in ec.PATCHED_FILES:
        (site / "vllm" / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / "vllm" / rel).write_bytes(ec.wheel_source(version, rel))
    (site / "vllm" / "__init__.py").write_bytes(ec.wheel_source(version, "__init__.py"))
    return site


def _locate(site: Path | None, rels: t.Sequence[str]) -> t.Dict[str, t.Any]:
    """LOCATE_SCRIPT under a real interpreter, with `site` first on its path."""
    boot = "import sys; sys.path[:0] = %r; exec(compile(%r, 'locate', 'exec'))" % (
        [str(site)] if site else [], facts_script.LOCATE_SCRIPT)
    proc = subprocess.run([sys.executable, "-I", "-c", boot, *rels], capture_output=True,
                          text=True, check=True)
    return facts_script.parse_locate_output(proc.stdout)


def test_locate_and_gather_with_the_real_record(tmp_path: Path) -> None:
    site = _site(tmp_path, "0.17.0")
    spec = site / "vllm" / ec.SPECULATIVE
    spec.write_bytes(spec.read_bytes() + b"# hand edit\n")
    located = _locate(site, list(ec.PATCHED_FILES) + ["no/such.py"])
    assert located["installed"] and located["version"] == "0.17.0"
    assert located["package_dir"] == str((site / "vllm").resolve())
    assert set(located["record"]) == {str((site / "vllm" / rel).resolve()) for rel in ec.PATCHED_FILES}
    facts = facts_script.gather(located, list(ec.PATCHED_FILES) + ["no/such.py"], None)
    states = {rel: info["state"] for rel, info in facts["files"].items()}
    assert states == {ec.DEEPSEEK: "pristine", ec.KIMI: "pristine", ec.SPECULATIVE: "modified",
                      ec.EAGLE: "pristine", "no/such.py": "missing"}
    assert facts["shape"]["kimi_wrapper"] == "registered"


def test_locate_without_vllm(tmp_path: Path) -> None:
    located = _locate(tmp_path, [ec.KIMI])  # the test interpreter has no vllm distribution
    assert located["installed"] is False and located["record"] == {}
    facts = facts_script.gather(located, [ec.KIMI], None)
    assert facts["installed"] is False and facts["files"] == {}
    assert facts_script.decide(dict(facts, python="/x"), False, ["kimi_k2"])[0] == "refuse"


@pytest.mark.parametrize("text", ["", "Traceback...\n", "[1, 2]\n", '{"installed": true}\n'])
def test_parse_locate_output_refuses_other_output(text: str) -> None:
    with pytest.raises(ValueError):
        facts_script.parse_locate_output(text)


def test_records_are_read_through_patchfiles(tmp_path: Path) -> None:
    """A record python_patch's file layer wrote is found; a broken one counts as none."""
    state = tmp_path / "state"
    good, broken = str(tmp_path / "a.py"), str(tmp_path / "b.py")
    pf.save_record(str(state), good, b"A = 1\n", b"A = 2\n", [{"id": "x", "kind": "replace"}])
    pf.save_record(str(state), broken, b"B = 1\n", b"B = 2\n", [])
    Path(pf.record_paths(str(state), broken)[0]).write_text("{not json")
    found = facts_script.records(str(state), [good, broken, str(tmp_path / "c.py")])
    assert list(found) == [good]
    assert found[good].sha256_written == hashlib.sha256(b"A = 2\n").hexdigest()
    assert facts_script.records(None, [good]) == {}
