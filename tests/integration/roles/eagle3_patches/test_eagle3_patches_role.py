"""Role gpuserve.vllm.eagle3_patches through ansible-playbook against real vLLM installs.

Each release is a throwaway venv with the real wheel installed by `pip install --no-deps` (no
torch: eagle3_patches_import_check is off except where its failure is the point). Venvs are made
once per module and put back to the wheel's bytes before each test (like `pip install
--force-reinstall`); the upgrade path has its own venv. Needs tests/env.sh (ansible-playbook and
ANSIBLE_COLLECTIONS_PATH).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._nodestate import code_mtime

from tests.support.vllm_wheels import vllm_wheel

from tests.support import eagle3_checks as ec

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")

SUPPORTED_WORDS = ("0.16.x/0.17.x", ">= 0.18")


class Venv(t.NamedTuple):
    root: Path
    python: Path
    version: str

    @property
    def pkg(self) -> Path:
        found = list(self.root.glob("lib/python3*/site-packages/vllm"))
        assert len(found) == 1, found
        return found[0]

    def read(self, rel: str) -> bytes:
        return (self.pkg / rel).read_bytes()

    def sources(self) -> t.Dict[str, bytes]:
        return {rel: self.read(rel) for rel in ec.PATCHED_FILES}


def pip_install(python: Path, version: str) -> None:
    """pip install --no-deps of the cached real wheel into the venv of `python`."""
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-compile", "--disable-pip-version-check",
                    str(vllm_wheel(version))], check=True)


def make_venv(root: Path, version: str) -> Venv:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    pip_install(python, version)
    return Venv(root, python, version)


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> t.Callable[[str], Venv]:
    """version -> a venv with that wheel, reset to the wheel's bytes for the patched files."""
    made: t.Dict[str, Venv] = {}

    def get(version: str) -> Venv:
        if version not in made:
            made[version] = make_venv(tmp_path_factory.mktemp("venv-%s" % version), version)
        venv = made[version]
        for rel in ec.PATCHED_FILES:
            try:
                data = ec.wheel_source(version, rel)
            except KeyError:
                continue
            (venv.pkg / rel).write_bytes(data)
        return venv
    return get


class Run(t.NamedTuple):
    rc: int
    stdout: str
    report: t.Dict[str, t.Any] | None
    failure: str | None
    # What vllm_node_state would see: the env's code changed, so a server that started before
    # this run owes a restart (observed by the serve plan, no handler).
    code_changed: bool


def run_role(workdir: Path, venv: Venv, *, check: bool = False, diff: bool = False,
             **role_vars: t.Any) -> Run:
    """One ansible-playbook run of the role on localhost; the play never aborts so the report,
    the failure message and the env's code time can all be read back."""
    workdir.mkdir(parents=True, exist_ok=True)
    number = len(list(workdir.glob("play-*.json")))
    report, failure = (workdir / ("%s-%d.json" % (n, number)) for n in ("report", "failure"))
    code_before = code_mtime(str(venv.root))
    include = {"ansible.builtin.include_role": {"name": "gpuserve.vllm.eagle3_patches"}}
    keep_failure = {"ansible.builtin.copy": {"content": "{{ ansible_failed_result.msg }}",
                                             "dest": str(failure)},
                    "check_mode": False, "diff": False}
    keep_report = {"ansible.builtin.copy": {
        "content": "{{ eagle3_patches_report | default(None) | to_json }}", "dest": str(report)},
        "check_mode": False, "diff": False}
    play = [{"hosts": "localhost", "gather_facts": False,
             "tasks": [{"block": [include], "rescue": [keep_failure], "always": [keep_report]}]}]
    playbook = workdir / ("play-%d.json" % number)
    playbook.write_text(json.dumps(play, indent=1))
    extra = {"eagle3_patches_python": str(venv.python),
             "eagle3_patches_state_dir": str(workdir / "state"),
             "eagle3_patches_import_check": False}
    extra.update(role_vars)
    extra_file = workdir / ("vars-%d.json" % number)
    extra_file.write_text(json.dumps(extra))
    cmd = ["ansible-playbook", "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "@%s" % extra_file,
           str(playbook)]
    cmd += ["--check"] if check else []
    cmd += ["--diff"] if diff else []
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise AssertionError("ansible-playbook rc=%s\n%s\n%s" % (proc.returncode,
                                                                 proc.stdout[-8000:],
                                                                 proc.stderr[-3000:]))
    return Run(proc.returncode, proc.stdout,
               json.loads(report.read_text()) if report.exists() else None,
               failure.read_text() if failure.exists() else None, code_mtime(str(venv.root)) != code_before)


def statuses(report: t.Mapping[str, t.Any]) -> t.Dict[str, str]:
    return {e["id"]: e["status"] for e in report["edits"]}


def assert_wheel_bytes(venv: Venv, version: str | None = None) -> None:
    for rel in ec.PATCHED_FILES:
        assert venv.read(rel) == ec.wheel_source(version or venv.version, rel), rel


def assert_applied(report: t.Mapping[str, t.Any], skipped: str) -> None:
    got = statuses(report)
    assert got.pop(skipped) == "skipped"
    assert len(got) == 13 and set(got.values()) == {"applied"}, got


OTHER_LIST = {"0.16.0": "allowlist-aux-hidden-states-supported",
              "0.17.0": "allowlist-eagle3-target-supported",
              "0.17.1": "allowlist-eagle3-target-supported"}


@pytest.mark.parametrize("version", ["0.16.0", "0.17.0"])
def test_patch_cycle(venvs: t.Callable[[str], Venv], tmp_path: Path, version: str) -> None:
    """check -> apply -> re-apply unchanged -> absent restores the wheel's bytes."""
    venv = venvs(version)

    checked = run_role(tmp_path, venv, check=True, diff=True)
    assert checked.report["action"] == "patch" and checked.report["changed"] is True
    assert checked.report["check_mode"] is True
    assert_applied(checked.report, OTHER_LIST[version])
    assert "+            \"kimi_k2\"," in checked.stdout  # diff mode shows the change
    assert_wheel_bytes(venv)  # check mode wrote nothing
    assert not (tmp_path / "state").exists()

    first = run_role(tmp_path, venv)
    assert first.failure is None
    assert first.report["vllm_version"] == version
    assert first.report["action"] == "patch" and first.report["changed"] is True
    assert_applied(first.report, OTHER_LIST[version])
    assert first.code_changed
    assert "PATCH: 13 edits applied" in first.stdout
    patched = venv.sources()
    ec.assert_patched(patched)

    second = run_role(tmp_path, venv)
    assert second.report["action"] == "patch" and second.report["changed"] is False
    assert set(statuses(second.report).values()) == {"already", "skipped"}
    assert not second.code_changed
    assert venv.sources() == patched
    assert {f["state"] for f in second.report["files"].values()} == {"patched"}

    removed = run_role(tmp_path, venv, eagle3_patches_state="absent")
    assert removed.report["action"] == "restore" and removed.report["changed"] is True
    assert removed.code_changed
    assert_wheel_bytes(venv)
    again = run_role(tmp_path, venv, eagle3_patches_state="absent")
    assert again.report["changed"] is False and not again.code_changed
    assert_wheel_bytes(venv)


def test_release_in_no_table_is_decided_from_its_source(venvs: t.Callable[[str], Venv],
                                                        tmp_path: Path) -> None:
    """0.17.1 appears in no list of the role: its source shape alone makes it patchable."""
    venv = venvs("0.17.1")
    run = run_role(tmp_path, venv)
    assert run.report["action"] == "patch" and run.report["changed"] is True
    assert_applied(run.report, OTHER_LIST["0.17.1"])
    ec.assert_patched(venv.sources())


@pytest.mark.parametrize("version", ["0.18.0", "0.22.0", "0.33.0"])
def test_native_releases_are_not_touched(venvs: t.Callable[[str], Venv], tmp_path: Path,
                                         version: str) -> None:
    venv = venvs(version)
    for attempt in range(2):
        run = run_role(tmp_path, venv)
        assert run.failure is None, run.failure
        assert run.report["action"] == "native", run.report
        assert run.report["changed"] is False and not run.code_changed
        assert set(run.report["markers"].values()) == {True}
        assert set(statuses(run.report).values()) == {"native"}
        assert "NATIVE" in run.stdout
        assert_wheel_bytes(venv)
    assert not (tmp_path / "state").exists()  # python_patch never ran
    if version != "0.18.0":
        assert run.report["allow_list"] is None
    if version == "0.33.0":
        removed = run_role(tmp_path, venv, eagle3_patches_state="absent")
        assert removed.report["changed"] is False
        assert_wheel_bytes(venv)


@pytest.mark.parametrize("version, words", [
    ("0.15.1", ["not safely patchable", "bare DeepseekV2Model"]),
    ("0.14.1", ["cannot serve Kimi-K2.5", "no kimi_k25.py"]),
])
def test_refused_releases(venvs: t.Callable[[str], Venv], tmp_path: Path, version: str,
                          words: t.List[str]) -> None:
    venv = venvs(version)
    run = run_role(tmp_path, venv)
    assert run.failure is not None
    for word in [version, *SUPPORTED_WORDS, *words]:
        assert word in run.failure, run.failure
    assert run.report["action"] == "refuse" and run.report["vllm_version"] == version
    assert not run.code_changed
    for rel in ec.PATCHED_FILES:
        if rel != ec.KIMI or version != "0.14.1":
            assert venv.read(rel) == ec.wheel_source(version, rel)


def test_hand_edited_files_are_refused_then_allowed(venvs: t.Callable[[str], Venv],
                                                    tmp_path: Path) -> None:
    venv = venvs("0.17.0")
    spec = venv.pkg / ec.SPECULATIVE
    hand = spec.read_bytes().replace(b'"nemotron_h",', b'"nemotron_h", "kimi_k2",', 1)
    spec.write_bytes(hand)  # what a sed one-liner does

    refused = run_role(tmp_path, venv)
    assert refused.failure is not None
    for word in (str(spec.resolve()), "pip install --force-reinstall --no-deps vllm==0.17.0",
                 "eagle3_patches_allow_modified"):
        assert word in refused.failure, refused.failure
    assert refused.report["files"][ec.SPECULATIVE]["state"] == "modified"
    assert spec.read_bytes() == hand
    for rel in (ec.DEEPSEEK, ec.KIMI, ec.EAGLE):
        assert venv.read(rel) == ec.wheel_source("0.17.0", rel)

    allowed = run_role(tmp_path, venv, eagle3_patches_allow_modified=True)
    assert allowed.report["action"] == "patch" and allowed.report["changed"] is True
    ec.assert_patched(venv.sources())  # kimi_k2 listed once, deepseek_v3 added

    # A re-run must not be allowed silently: the file still is not the wheel's.
    again = run_role(tmp_path, venv)
    assert again.failure is not None and str(spec.resolve()) in again.failure

    removed = run_role(tmp_path, venv, eagle3_patches_state="absent")
    assert removed.report["changed"] is True
    assert spec.read_bytes() == hand  # absent puts back what was there before the role


@pytest.mark.parametrize("config, expected", [
    ({"model_type": "kimi_k25", "text_config": {"model_type": "kimi_k2"}}, ["kimi_k2"]),
    ({"model_type": "kimi_k25", "text_config": {"hidden_size": 7168}}, ["deepseek_v3"]),
    ({"model_type": "kimi_k2", "hidden_size": 7168}, ["kimi_k2"]),  # its own text config
])
def test_allow_list_from_checkpoint_config(venvs: t.Callable[[str], Venv], tmp_path: Path,
                                           config: t.Dict[str, t.Any],
                                           expected: t.List[str]) -> None:
    venv = venvs("0.16.0")
    config_json = tmp_path / "config.json"
    config_json.write_text(json.dumps(config))
    run = run_role(tmp_path, venv, eagle3_patches_model_config=str(config_json))
    assert run.report["model_types"] == expected
    ec.assert_patched(venv.sources(), expected)
    name, values = ec.allow_list(ast.parse(venv.read(ec.SPECULATIVE)))
    assert name == "eagle3_target_supported"
    for other in {"kimi_k2", "deepseek_v3"} - set(expected):
        assert other not in values


def test_failed_import_check_puts_every_file_back(venvs: t.Callable[[str], Venv],
                                                  tmp_path: Path) -> None:
    """No torch in the venv: importing the patched modules fails, nothing stays changed."""
    venv = venvs("0.17.0")
    run = run_role(tmp_path, venv, eagle3_patches_import_check=True)
    assert run.failure is not None and "import" in run.failure.lower()
    assert not run.code_changed
    assert_wheel_bytes(venv)


def test_missing_interpreter_is_named(venvs: t.Callable[[str], Venv], tmp_path: Path) -> None:
    venv = venvs("0.17.0")
    missing = tmp_path / "no-env" / "bin" / "python"
    run = run_role(tmp_path, venv, eagle3_patches_python=str(missing))
    assert run.failure is not None and str(missing) in run.failure


def test_upgrade_path(tmp_path: Path) -> None:
    """0.16.0 patched -> pip upgrade to 0.17.0 -> re-run patches -> 0.18.0 -> native no-op."""
    venv = make_venv(tmp_path / "venv", "0.16.0")
    work = tmp_path / "runs"

    first = run_role(work, venv)
    assert first.report["action"] == "patch" and first.report["changed"] is True
    ec.assert_patched(venv.sources())

    pip_install(venv.python, "0.17.0")
    venv = venv._replace(version="0.17.0")
    assert_wheel_bytes(venv)  # the upgrade replaced the patched files
    second = run_role(work, venv)
    assert second.report["vllm_version"] == "0.17.0"
    assert second.report["action"] == "patch" and second.report["changed"] is True
    assert_applied(second.report, "allowlist-eagle3-target-supported")
    assert second.code_changed
    ec.assert_patched(venv.sources())

    pip_install(venv.python, "0.18.0")
    venv = venv._replace(version="0.18.0")
    third = run_role(work, venv)
    assert third.report["vllm_version"] == "0.18.0"
    assert third.report["action"] == "native" and third.report["changed"] is False
    assert not third.code_changed
    assert_wheel_bytes(venv)
