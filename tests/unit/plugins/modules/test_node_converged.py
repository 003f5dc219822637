"""node_converged in-process on real files: record, read, what makes a read differ, check mode,
a reboot request, a record nobody but root may vouch for."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.modules import node_converged

from module_runner import run_module_main

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the record is root's: run as root (CI does)")


@pytest.fixture(name="node")
def fixture_node(tmp_path: Path) -> Path:
    os.chmod(tmp_path, 0o755)
    (tmp_path / "env" / "bin").mkdir(parents=True)
    (tmp_path / "env" / "bin" / "python").write_text("#!/bin/sh\n")
    (tmp_path / "nccl.conf").write_text("NCCL_DEBUG=WARN\n")
    (tmp_path / "state").mkdir(mode=0o755)
    return tmp_path


def run(node: Path, monkeypatch: pytest.MonkeyPatch, state: str, check: bool = False, **args: object) -> dict:
    base = {"state": state, "path": str(node / "state" / "converged.json"), "inputs": "digest-1",
            "artefacts": [{"kind": "tree", "path": str(node / "env")},
                          {"kind": "path", "path": str(node / "nccl.conf")}],
            "_ansible_check_mode": check}
    return run_module_main(node_converged, {**base, **args}, monkeypatch)


def test_record_then_read_is_converged_and_recording_again_writes_nothing(node, monkeypatch):
    first = run(node, monkeypatch, "read")
    assert not first["converged"] and first["reasons"] == ["no record of a converged run on this node"]
    recorded = run(node, monkeypatch, "record")
    assert recorded["changed"] and recorded["recorded"]
    record = node / "state" / "converged.json"
    assert oct(record.stat().st_mode & 0o777) == "0o644" and record.stat().st_uid == 0
    assert json.loads(record.read_text())["inputs"] == "digest-1"
    before = record.stat().st_mtime_ns
    again = run(node, monkeypatch, "record")
    assert not again["changed"] and again["recorded"] and record.stat().st_mtime_ns == before
    read = run(node, monkeypatch, "read")
    assert read["converged"] and read["reasons"] == [] and "nothing to prepare" in read["msg"]


def test_a_converged_read_hands_back_what_the_record_was_given(node, monkeypatch):
    run(node, monkeypatch, "record", handoff={"ml_env_build_dir": "/opt/ml-env.d/py3.11-a"})
    assert run(node, monkeypatch, "read")["handoff"] == {"ml_env_build_dir": "/opt/ml-env.d/py3.11-a"}
    (node / "nccl.conf").write_text("NCCL_DEBUG=INFO\n")
    changed = run(node, monkeypatch, "read")
    assert not changed["converged"] and changed["handoff"] == {}


def test_a_change_or_other_inputs_is_named(node, monkeypatch):
    run(node, monkeypatch, "record")
    assert run(node, monkeypatch, "read", inputs="digest-2")["reasons"][0].startswith("the run's inputs changed")
    os.chmod(node / "env" / "bin" / "python", 0o777)
    read = run(node, monkeypatch, "read")
    assert not read["converged"] and read["reasons"] == [f"tree:{node / 'env'}: changed"]
    assert read["msg"] == f"to prepare: tree:{node / 'env'}: changed"


def test_check_mode_records_nothing(node, monkeypatch):
    result = run(node, monkeypatch, "record", check=True)
    assert result["changed"] and not result["recorded"]
    assert not (node / "state" / "converged.json").exists()


def test_a_reboot_request_is_never_converged_and_removes_the_record(node, monkeypatch):
    run(node, monkeypatch, "record")
    marker = node / "state" / "reboot-pending"
    marker.write_text("driver\n")
    read = run(node, monkeypatch, "read", unless_exists=[str(marker)])
    assert not read["converged"] and read["reasons"][0] == f"{marker} exists"
    result = run(node, monkeypatch, "record", unless_exists=[str(marker)])
    assert result["changed"] and not result["recorded"] and result["reasons"] == [f"not recorded: {marker} exists"]
    assert not (node / "state" / "converged.json").exists()


def test_an_unreadable_artefact_removes_the_record(node, monkeypatch):
    run(node, monkeypatch, "record")
    result = run(node, monkeypatch, "record", artefacts=[{"kind": "tree", "path": str(node / "nccl.conf" / "x")}])
    assert not result["recorded"] and result["reasons"][0].startswith("not recorded, unreadable:")
    assert not (node / "state" / "converged.json").exists()


def test_a_record_another_user_could_write_is_not_trusted(node, monkeypatch):
    run(node, monkeypatch, "record")
    os.chmod(node / "state", 0o777)
    read = run(node, monkeypatch, "read")
    assert not read["converged"] and "not trusted" in read["reasons"][0]


def test_a_bad_artefact_fails_naming_it(node, monkeypatch):
    result = run(node, monkeypatch, "read", artefacts=[{"kind": "tree", "path": "relative/env"}])
    assert result["failed"] and "needs an absolute path" in result["msg"]
