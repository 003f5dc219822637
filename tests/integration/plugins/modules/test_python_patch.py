"""gpuserve.vllm.python_patch run through ansible-playbook against temporary files.

The lifecycle follows ansible.posix's patch tests: check mode (changed, nothing written) ->
apply (changed) -> apply again (not changed) -> byte-compare -> absent in check mode -> absent
(original bytes back) -> absent again (not changed). Then every failure case of issue 2, each
asserting that every file stays byte-identical. Needs `source tests/env.sh`.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import stat
import sys
import typing as t
import venv
from pathlib import Path

import pytest

from patch_playbook import run_playbook, task

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")

ORIGINAL = '''"""Sample module patched by the tests."""
import os
from typing import Optional  # keep me


class Mixin:
    pass


class Base:
    pass


class Model(Base):
    """Doc."""

    def forward(self, x):
        # comment stays
        y = x + 1
        return y


SUPPORTED = ["a", "b"]
'''

EDITS: t.List[t.Dict[str, t.Any]] = [
    {"id": "imp", "import": {"module": "typing", "names": ["Any"]}},
    {"id": "base", "base": {"class": "Model", "names": ["Mixin"]}},
    {"id": "mem", "member": {"class": "Model",
                             "source": "def extra(self) -> Any:\n    return os.sep\n"}},
    {"id": "rep", "replace": {"scope": "Model.forward", "old": "y = x + 1", "new": "y = x + 2"}},
    {"id": "el", "element": {"name": "SUPPORTED", "values": ["c"]}},
]

EXPECTED = '''"""Sample module patched by the tests."""
import os
from typing import Optional, Any  # keep me


class Mixin:
    pass


class Base:
    pass


class Model(Base, Mixin):
    """Doc."""

    def forward(self, x):
        # comment stays
        y = x + 2
        return y

    def extra(self) -> Any:
        return os.sep


SUPPORTED = ["a", "b", "c"]
'''


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Env:
    """A temp dir with a state_dir and the files of one test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "state"
        self.src = root / "src"
        self.src.mkdir()
        self.runs = root / "runs"

    def file(self, name: str, text: str | bytes) -> Path:
        path = self.src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, str):
            path.write_text(text)
        else:
            path.write_bytes(text)
        return path

    def args(self, **args: t.Any) -> t.Dict[str, t.Any]:
        return {"state_dir": str(self.state), **args}

    def play(self, *tasks: t.Mapping[str, t.Any], **kw: t.Any) -> t.Any:
        return run_playbook(self.runs, tasks, **kw)

    def snapshot(self) -> t.Dict[str, bytes]:
        """Every file under src/ (pycache included) and state/ records, as bytes."""
        out = {}
        for base in (self.src, self.state / "records"):
            if base.exists():
                for path in sorted(base.rglob("*")):
                    if path.is_file():
                        out[str(path)] = path.read_bytes()
        return out


@pytest.fixture(name="env")
def fixture_env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def statuses(result: t.Mapping[str, t.Any], index: int = 0) -> t.List[str]:
    return [e["status"] for e in result["files"][index]["edits"]]


def test_lifecycle_check_apply_reapply_absent(env: Env) -> None:
    target = env.file("sample.py", ORIGINAL)
    args = env.args(path=str(target), edits=EDITS)

    # check mode (with diff): predicts the change and writes nothing, not even a lock or pyc.
    [check] = env.play(task(args, check_mode=True, diff=True))
    assert check["changed"] is True and not check.get("failed")
    assert statuses(check) == ["applied"] * 5
    assert target.read_text() == ORIGINAL
    assert not (env.src / "__pycache__").exists()
    assert not env.state.exists()
    assert check["files"][0]["sha256_after"] == sha(EXPECTED.encode())
    prepared = check["diff"][0]["prepared"]
    assert "-        y = x + 1" in prepared and "+        y = x + 2" in prepared

    # apply, apply again: changed then not changed; bytes are exactly the expected ones.
    applied, again = env.play(task(args), task(args))
    assert applied["changed"] is True and not applied.get("failed"), applied
    assert statuses(applied) == ["applied"] * 5
    assert again["changed"] is False and not again.get("failed"), again
    assert statuses(again) == ["already"] * 5
    assert target.read_text() == EXPECTED
    info = applied["files"][0]
    assert info["sha256_before"] == sha(ORIGINAL.encode())
    assert info["sha256_after"] == sha(EXPECTED.encode())
    assert info["backup_file"] is None
    # The record an operator finds: path, hashes, edits, and the original bytes next to it.
    record = json.loads(Path(info["record"]).read_text())
    assert Path(info["record"]).parent == env.state / "records"
    assert record["path"] == os.path.realpath(target)
    assert record["sha256_written"] == sha(EXPECTED.encode())
    assert record["sha256_original"] == sha(ORIGINAL.encode())
    assert [e["id"] for e in record["edits"]] == ["imp", "base", "mem", "rep", "el"]
    assert (Path(info["record"]).parent / record["original"]).read_text() == ORIGINAL
    assert again["files"][0]["record"] == info["record"]

    # absent in check mode: predicted, nothing written.
    before = env.snapshot()
    [absent_check] = env.play(task(env.args(path=str(target), state="absent"), check_mode=True))
    assert absent_check["changed"] is True
    assert statuses(absent_check) == ["reverted"] * 5
    assert env.snapshot() == before

    # absent, absent again: original bytes back, record gone, then nothing to do.
    absent, absent_again = env.play(task(env.args(path=str(target), edits=EDITS, state="absent")),
                                    task(env.args(path=str(target), edits=EDITS, state="absent")))
    assert absent["changed"] is True and not absent.get("failed"), absent
    assert statuses(absent) == ["reverted"] * 5
    assert target.read_bytes() == ORIGINAL.encode()
    assert not Path(info["record"]).exists()
    assert absent_again["changed"] is False and not absent_again.get("failed")
    assert statuses(absent_again) == ["already"] * 5


def test_refuses_unparsable_file(env: Env) -> None:
    # What a sed edit leaves behind: an import split over two lines without parentheses.
    broken = "from .interfaces import SupportsPP,\n    SupportsEagle3\n\nclass Model:\n    pass\n"
    target = env.file("broken.py", broken)
    [res] = env.play(task(env.args(path=str(target), edits=EDITS[1:2])))
    assert res["failed"] is True and res["changed"] is False
    assert str(target) in res["msg"] and "does not parse" in res["msg"]
    assert res["file"] == str(target)
    assert res["syntax_error"]["lineno"] == 1
    assert "from .interfaces import SupportsPP," in res["msg"]
    assert target.read_text() == broken
    assert not (env.state / "records").exists()


def test_result_must_compile_with_python(env: Env, tmp_path: Path) -> None:
    # `continue` outside a loop parses with ast but does not compile: only the compile check
    # with the target interpreter can catch it.
    target = env.file("sample.py", ORIGINAL)
    edit = {"id": "bad-continue",
            "replace": {"scope": "Model.forward", "old": "y = x + 1", "new": "continue"}}
    missing_python = str(tmp_path / "no-such-python")
    res, nopy = env.play(task(env.args(path=str(target), edits=[edit])),
                         task(env.args(path=str(target), edits=EDITS, python=missing_python)))
    assert res["failed"] is True
    assert "does not compile" in res["msg"] and "bad-continue" in res["msg"]
    assert str(target) in res["msg"] and "not properly in loop" in res["msg"]
    assert nopy["failed"] is True and missing_python in nopy["msg"]
    assert target.read_text() == ORIGINAL
    assert not (env.state / "records").exists()
    assert not (env.src / "__pycache__").exists()


def test_validate_runs_on_temp_copy_and_blocks_the_write(env: Env) -> None:
    target = env.file("sample.py", ORIGINAL)
    # Fails when the new content contains "x + 2" (what the edit writes), and records the path
    # it was given so we can check it was a temp copy.
    seen = env.root / "validated"
    refuse = ("%s -c 'import sys; open(%s, \"a\").write(sys.argv[1] + \"\\n\"); "
              "sys.exit(\"x + 2\" in open(sys.argv[1]).read())' %%s"
              % (sys.executable, json.dumps(str(seen))))
    ok = "%s -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' %%s" % sys.executable
    res_check, res, good = env.play(
        task(env.args(path=str(target), edits=EDITS, validate=refuse), check_mode=True),
        task(env.args(path=str(target), edits=EDITS, validate=refuse)),
        task(env.args(path=str(target), edits=EDITS, validate=ok, backup=True)))
    for failed in (res_check, res):
        assert failed["failed"] is True and "validate" in failed["msg"]
        assert str(target) in failed["msg"]
    validated = seen.read_text().split()
    assert len(validated) == 2 and str(target) not in validated
    assert not validated[0].startswith(str(env.src))  # check mode: private tempdir
    assert validated[1].startswith(str(env.src))  # real run: temp next to the target
    assert sorted(p.name for p in env.src.iterdir()) == sorted(
        ["sample.py", Path(good["files"][0]["backup_file"]).name])
    assert good["changed"] is True and target.read_text() == EXPECTED


def _package(env: Env) -> t.Tuple[Path, Path]:
    a = env.file("pkg/a.py", "X = 1\n")
    b = env.file("pkg/b.py", "Y = 1\n")
    env.file("pkg/__init__.py", "")
    return a, b


def _venv_seeing(folder: Path, where: Path) -> str:
    """A venv whose sys.path has folder (a .pth file): import_check runs its python with -I, so
    PYTHONPATH would not reach it."""
    venv.create(where, symlinks=True)
    site = glob.glob(str(where / "lib" / "python*" / "site-packages"))[0]
    Path(site, "src.pth").write_text(str(folder) + "\n")
    return str(where / "bin" / "python")


def test_import_check_failure_restores_every_file(env: Env) -> None:
    a, b = _package(env)
    files = [
        {"path": str(a), "edits": [{"id": "x2", "replace": {"old": "X = 1", "new": "X = 2"}}]},
        {"path": str(b), "edits": [{"id": "boom", "replace": {"old": "Y = 1", "new": "Y = 1 / 0"}}]},
    ]
    before = env.snapshot()
    python = _venv_seeing(env.src, env.root / "venv")
    [res] = env.play(task(env.args(files=files, import_check=["pkg.a", "pkg.b"], backup=True,
                                   python=python)))
    assert res["failed"] is True
    assert "import_check" in res["msg"] and "ZeroDivisionError" in res["msg"]
    assert "put back" in res["msg"]
    # a.py was written and imported fine, then put back with b.py; no records, no backups,
    # no bytecode.
    assert env.snapshot() == before
    # and a passing import_check keeps the change
    [good] = env.play(task(env.args(files=files[:1], import_check=["pkg.a"], python=python)))
    assert good["changed"] is True and not good.get("failed"), good
    assert a.read_text() == "X = 2\n"


def test_missing_target_lists_what_exists_and_skip(env: Env) -> None:
    target = env.file("sample.py", ORIGINAL)
    missing = {"id": "no-class", "base": {"class": "Nope", "names": ["Mixin"]}}
    res, skipped = env.play(
        task(env.args(path=str(target), edits=[missing])),
        task(env.args(path=str(target), edits=[dict(missing, when_missing="skip"), EDITS[3]])))
    assert res["failed"] is True
    for word in (str(target), "no-class", "Nope", "Model", "Mixin", "Base"):
        assert word in res["msg"], word
    assert skipped["changed"] is True and not skipped.get("failed"), skipped
    assert statuses(skipped) == ["skipped", "applied"]
    assert "y = x + 2" in target.read_text()


def test_ambiguous_target_names_lines(env: Env) -> None:
    text = "def f(a):\n    if a:\n        x = 1\n    else:\n        x = 1\n    return x\n"
    target = env.file("amb.py", text)
    [res] = env.play(task(env.args(path=str(target), edits=[
        {"id": "twice", "replace": {"scope": "f", "old": "x = 1", "new": "x = 2"}}])))
    assert res["failed"] is True and "twice" in res["msg"]
    assert "lines 3, 5" in res["msg"]
    assert target.read_text() == text


def test_member_on_conflict(env: Env) -> None:
    text = "class C:\n    def f(self):\n        return 1\n"
    target = env.file("conf.py", text)
    member = {"class": "C", "source": "def f(self):\n    return 2\n"}
    fail, keep, replace, again = env.play(
        task(env.args(path=str(target), edits=[{"id": "m", "member": member}])),
        task(env.args(path=str(target), edits=[{"id": "m", "member": dict(member, on_conflict="keep")}])),
        task(env.args(path=str(target), edits=[{"id": "m", "member": dict(member, on_conflict="replace")}])),
        task(env.args(path=str(target), edits=[{"id": "m", "member": member}])))
    assert fail["failed"] is True and "'m'" in fail["msg"] and str(target) in fail["msg"]
    assert keep["changed"] is False and statuses(keep) == ["already"]
    assert replace["changed"] is True and statuses(replace) == ["applied"]
    assert again["changed"] is False and statuses(again) == ["already"]
    assert target.read_text() == "class C:\n    def f(self):\n        return 2\n"


def test_multi_file_is_all_or_nothing(env: Env) -> None:
    a, b = _package(env)
    before = env.snapshot()
    [res] = env.play(task(env.args(files=[
        {"path": str(a), "edits": [{"id": "fine", "replace": {"old": "X = 1", "new": "X = 2"}}]},
        {"path": str(b), "edits": [{"id": "missing", "base": {"class": "Nope", "names": ["object"]}}]},
    ])))
    assert res["failed"] is True and str(b) in res["msg"] and "missing" in res["msg"]
    assert env.snapshot() == before  # a.py untouched although its edit was fine


def test_upgrade_replaces_the_file(env: Env) -> None:
    target = env.file("sample.py", ORIGINAL)
    args = env.args(path=str(target), edits=EDITS)
    [applied] = env.play(task(args))
    assert applied["changed"] is True
    # A package upgrade ships a new release of the file (different bytes, edits not present).
    upgraded = ORIGINAL.replace('"""Doc."""', '"""Doc, release 2."""')
    target.write_text(upgraded)
    absent, present = env.play(task(dict(args, state="absent")), task(args))
    # absent leaves the replaced file alone, says so, and does not fail.
    assert absent["changed"] is False and not absent.get("failed"), absent
    assert absent["files"][0]["replaced_since"] is True
    assert statuses(absent) == ["skipped"] * 5
    assert any("changed since" in w and ".orig" in w for w in absent.get("warnings", []))
    # present treats the new file as the original and rewrites the record.
    assert present["changed"] is True and statuses(present) == ["applied"] * 5
    assert present["files"][0]["replaced_since"] is True
    record = json.loads(Path(present["files"][0]["record"]).read_text())
    assert record["sha256_original"] == sha(upgraded.encode())
    assert record["sha256_written"] == sha(target.read_bytes())
    # The first original is not lost: the old record was kept as a superseded copy.
    [old] = (env.state / "records").glob("*.superseded-*.orig")
    assert old.read_text() == ORIGINAL
    # so absent now restores the upgraded bytes, not the first original.
    [absent2] = env.play(task(dict(args, state="absent")))
    assert absent2["changed"] is True and statuses(absent2) == ["reverted"] * 5
    assert target.read_text() == upgraded


def test_upgrade_to_a_release_with_the_change_built_in(env: Env) -> None:
    target = env.file("sample.py", ORIGINAL)
    args = env.args(path=str(target), edits=EDITS)
    [applied] = env.play(task(args))
    record = Path(applied["files"][0]["record"])
    assert record.exists()
    # The new release ships the change itself (other bytes than ours, edits all present).
    native = EXPECTED.replace('"""Doc."""', '"""Doc, release 3."""')
    target.write_text(native)
    kept = record.read_bytes()
    present, absent = env.play(task(args), task(dict(args, state="absent")))
    assert present["changed"] is False and statuses(present) == ["already"] * 5
    # The record is kept as it was (it holds the only copy of the first original), with a
    # warning saying so; absent then refuses to put those bytes over the new release.
    assert record.read_bytes() == kept
    assert any("record is kept" in w for w in present.get("warnings", []))
    assert absent["changed"] is False and not absent.get("failed")
    assert statuses(absent) == ["skipped"] * 5
    assert any("refusing" in w and ".orig" in w for w in absent.get("warnings", []))
    assert target.read_text() == native


def test_hand_edit_then_present_then_absent_keeps_the_pristine_bytes(env: Env) -> None:
    target = env.file("sample.py", ORIGINAL)
    args = env.args(path=str(target), edits=EDITS)
    [applied] = env.play(task(args))
    orig = Path(applied["files"][0]["record"]).with_suffix(".orig")
    # A hand edit that keeps the edits (a comment), then one that undoes one of them.
    target.write_text(EXPECTED + "# tuned by hand\n")
    present, absent = env.play(task(args), task(dict(args, state="absent")))
    assert present["changed"] is False and not present.get("failed"), present
    assert orig.read_text() == ORIGINAL
    assert absent["changed"] is False and absent["files"][0]["replaced_since"] is True
    assert any(str(orig) in w and "refusing" in w for w in absent["warnings"]), absent
    assert target.read_text() == EXPECTED + "# tuned by hand\n"
    hand = EXPECTED.replace("y = x + 2", "y = x + 1") + "# tuned by hand\n"
    target.write_text(hand)
    present, absent = env.play(task(args), task(dict(args, state="absent")))
    assert present["changed"] is True and statuses(present)[3] == "applied"
    # The first original is kept in a superseded copy; absent undoes only the last change.
    [old_json] = list((env.state / "records").glob("*.superseded-*.json"))
    old = json.loads(old_json.read_text())
    assert (old_json.parent / old["original"]).read_text() == ORIGINAL
    assert old["sha256_original"] == sha(ORIGINAL.encode())
    assert absent["changed"] is True and target.read_text() == hand
    assert (old_json.parent / old["original"]).read_text() == ORIGINAL
    assert any(str(old_json.parent / old["original"]) in w for w in absent["warnings"]), absent


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another owner needs root")
def test_mode_owner_crlf_backup_and_stale_bytecode(env: Env) -> None:
    crlf = ORIGINAL.replace("\n", "\r\n").encode()
    target = env.file("sample.py", crlf)
    os.chmod(target, 0o640)
    os.chown(target, 1234, 4321)
    cache = env.src / "__pycache__"
    cache.mkdir()
    for name in ("sample.cpython-311.pyc", "sample.cpython-312.opt-1.pyc", "other.cpython-311.pyc"):
        (cache / name).write_bytes(b"stale")
    backups = env.root / "backups"
    [res] = env.play(task(env.args(path=str(target), edits=EDITS, backup=True,
                                   backup_dir=str(backups))))
    assert res["changed"] is True, res
    assert target.read_bytes() == EXPECTED.replace("\n", "\r\n").encode()
    st = os.stat(target)
    assert stat.S_IMODE(st.st_mode) == 0o640 and (st.st_uid, st.st_gid) == (1234, 4321)
    assert sorted(p.name for p in cache.iterdir()) == ["other.cpython-311.pyc"]
    backup = Path(res["files"][0]["backup_file"])
    assert backup.is_relative_to(backups) and backup.read_bytes() == crlf
    assert [p.name for p in env.src.iterdir() if p.is_file()] == ["sample.py"]  # no temp left
    (cache / "sample.cpython-311.pyc").write_bytes(b"patched")
    [gone] = env.play(task(env.args(path=str(target), state="absent")))
    assert gone["changed"] is True and target.read_bytes() == crlf
    st = os.stat(target)
    assert stat.S_IMODE(st.st_mode) == 0o640 and (st.st_uid, st.st_gid) == (1234, 4321)
    assert sorted(p.name for p in cache.iterdir()) == ["other.cpython-311.pyc"]


def test_concurrent_runs_apply_once(env: Env) -> None:
    target = env.file("sample.py", ORIGINAL)
    # Two inventory hosts, both local, run the same task in parallel forks on one file.
    results = env.play(task(env.args(path=str(target), edits=EDITS)), hosts=("node1", "node2"))
    both = [results["node1"][0], results["node2"][0]]
    assert not any(r.get("failed") for r in both), both
    assert sorted(r["changed"] for r in both) == [False, True]
    assert sorted(tuple(statuses(r)) for r in both) == [("already",) * 5, ("applied",) * 5]
    assert target.read_text() == EXPECTED
    assert len(list((env.state / "records").glob("*.json"))) == 1


def test_real_vllm_files_patch_and_restore(env: Env) -> None:
    """The EAGLE-3 edits on vLLM 0.17.0's own files: all-or-nothing, then the wheel's bytes back."""
    from tests.support.vllm_wheels import wheel_file  # pylint: disable=import-outside-toplevel

    members = {"deepseek_v2.py": "vllm/model_executor/models/deepseek_v2.py",
               "speculative.py": "vllm/config/speculative.py"}
    pristine = {name: wheel_file("0.17.0", member) for name, member in members.items()}
    paths = {name: env.file(name, data) for name, data in pristine.items()}
    files = [
        {"path": str(paths["deepseek_v2.py"]), "edits": [
            {"id": "import", "import": {"module": ".interfaces", "names": ["SupportsEagle3"]}},
            {"id": "base", "base": {"class": "DeepseekV2ForCausalLM", "names": ["SupportsEagle3"]}},
            {"id": "getter", "member": {"class": "DeepseekV2ForCausalLM", "source": (
                "def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n"
                "    num_layers = len(self.model.layers)\n"
                "    return (2, num_layers // 2, num_layers - 3)\n")}}]},
        {"path": str(paths["speculative.py"]), "edits": [
            {"id": "allow", "element": {"scope": "SpeculativeConfig._verify_args",
                                        "name": "aux_hidden_states_supported",
                                        "values": ["kimi_k2", "deepseek_v3"]}}]},
    ]
    args = env.args(files=files)
    applied, again, absent = env.play(task(args, diff=True), task(args),
                                      task(dict(args, state="absent")))
    assert applied["changed"] is True and not applied.get("failed"), applied
    assert [statuses(applied, i) for i in (0, 1)] == [["applied"] * 3, ["applied"]]
    assert len(applied["diff"]) == 2
    assert "SupportsEagle3" in applied["diff"][0]["prepared"]
    assert '"kimi_k2"' in applied["diff"][1]["prepared"]
    assert again["changed"] is False
    assert absent["changed"] is True
    for name, data in pristine.items():
        assert paths[name].read_bytes() == data


def test_bad_arguments_are_refused(env: Env) -> None:
    target = env.file("sample.py", ORIGINAL)
    two_kinds = {"id": "two", "base": {"class": "Model", "names": ["Mixin"]},
                 "element": {"name": "SUPPORTED", "values": ["c"]}}
    res_kinds, res_noedits, res_validate, res_dup = env.play(
        task(env.args(path=str(target), edits=[two_kinds])),
        task(env.args(path=str(target))),
        task(env.args(path=str(target), edits=EDITS, validate="true")),
        task(env.args(files=[{"path": str(target), "edits": EDITS},
                             {"path": str(target), "edits": EDITS}])))
    assert res_kinds["failed"] is True and "base" in res_kinds["msg"]
    assert res_noedits["failed"] is True and "edits" in res_noedits["msg"]
    assert res_validate["failed"] is True and "%s" in res_validate["msg"]
    assert res_dup["failed"] is True and "same file" in res_dup["msg"]
    assert target.read_text() == ORIGINAL
