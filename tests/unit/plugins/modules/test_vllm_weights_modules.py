"""vllm_weights_manifest, vllm_weights_verify and vllm_weights_sync, run through their main().

The files are real (tests/support/tiny_checkpoint.py); the Hub is the TEST DOUBLE
tests/doubles/fake_hub.py; transfers from a mirror use the real rsync.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.modules import (
    vllm_weights_check,
    vllm_weights_manifest,
    vllm_weights_sync,
    vllm_weights_verify,
)

from module_runner import run_module_main

TESTS = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(TESTS / "support"))
sys.path.insert(0, str(TESTS / "doubles"))
import tiny_checkpoint as tc  # noqa: E402
from fake_hub import FakeHub  # noqa: E402  (TEST DOUBLE)

REPO, COMMIT = "gpuserve-test/tiny-model", "0123456789abcdef0123456789abcdef01234567"
ME = __import__("pwd").getpwuid(os.getuid()).pw_name


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    tc.make_checkpoint(tmp_path / "mirror", shards=3, shard_bytes=32 << 10)
    return tmp_path / "mirror"


@pytest.fixture
def fake(mirror: Path):
    double = FakeHub(REPO, COMMIT, mirror, tc.hub_tree(mirror))
    yield double
    double.close()


def manifest_args(tmp_path: Path, **kw) -> dict:
    return {"repo": REPO, "revision": COMMIT, "dest_dir": str(tmp_path / "state" / "tiny"), **kw}


def test_manifest_from_the_hub_then_reused(tmp_path: Path, fake: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    args = manifest_args(tmp_path, revision="main", endpoint=fake.endpoint, token="hf_x")
    first = run_module_main(vllm_weights_manifest, args, monkeypatch)
    assert first["changed"] and first["commit"] == COMMIT and first["resolved_from"] == "main"
    assert first["file_count"] == 5 and Path(first["path"]).read_text() == first["manifest_text"]
    requests = len(fake.requests)
    again = run_module_main(vllm_weights_manifest, args, monkeypatch)
    assert not again["changed"] and again["manifest_text"] == first["manifest_text"]
    assert len(fake.requests) == requests + 1  # only the branch was resolved again, no tree listing


def test_manifest_in_check_mode_writes_nothing(tmp_path: Path, fake: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    args = manifest_args(tmp_path, endpoint=fake.endpoint, _ansible_check_mode=True)
    result = run_module_main(vllm_weights_manifest, args, monkeypatch)
    assert result["changed"] and not Path(result["path"]).exists()


def test_manifest_of_a_mirror_needs_a_commit(tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = manifest_args(tmp_path, revision="main", source="mirror", mirror_dir=str(mirror))
    bad = run_module_main(vllm_weights_manifest, args, monkeypatch)
    assert bad["failed"] and "'main' is not a 40-hex commit" in bad["msg"]
    good = run_module_main(vllm_weights_manifest, manifest_args(tmp_path, source="mirror", mirror_dir=str(mirror)),
                           monkeypatch)
    assert good["changed"] and good["manifest"]["source"] == "mirror"


def test_manifest_from_a_saved_listing(tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = tmp_path / "tree.json"
    saved.write_text(json.dumps(tc.hub_tree(mirror)))
    args = manifest_args(tmp_path, source="mirror", mirror_dir=str(mirror), hub_tree_file=str(saved), exclude=["*.json"])
    result = run_module_main(vllm_weights_manifest, args, monkeypatch)
    assert result["manifest"]["source"] == "hub" and result["file_count"] == 3
    saved.write_text("[{")
    shutil.rmtree(tmp_path / "state")
    args = manifest_args(tmp_path, source="mirror", mirror_dir=str(mirror), hub_tree_file=str(saved))
    bad = run_module_main(vllm_weights_manifest, args, monkeypatch)
    assert bad["failed"] and bad["msg"].startswith(f"hub_tree_file: {saved} is not JSON")


def test_sync_verify_and_check_end_to_end(tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("rsync") is None:
        pytest.fail("needs rsync (bash tests/containers/setup-host.sh installs it)")
    made = run_module_main(vllm_weights_manifest, manifest_args(tmp_path, source="mirror", mirror_dir=str(mirror)),
                           monkeypatch)
    common = {"name": "tiny", "root": str(tmp_path / "srv"), "manifest": made["path"]}
    before = run_module_main(vllm_weights_verify, common, monkeypatch)
    assert not before["holder"] and before["needed_bytes"] == made["total_bytes"] and before["where"] == ""
    assert before["problems"] == [f"{tmp_path / 'srv' / 'tiny'}: no copy of {REPO}@{COMMIT} on this host"]

    synced = run_module_main(vllm_weights_sync, dict(common, owner=ME, source="mirror", mirror_dir=str(mirror)),
                             monkeypatch)
    assert synced["changed"] and synced["switched"] and synced["bytes_fetched"] == made["total_bytes"]
    assert synced["link"] == str(tmp_path / "srv" / "tiny") and os.path.realpath(synced["link"]) == synced["path"]
    assert "fetched 5 file(s)" in synced["msg"]

    after = run_module_main(vllm_weights_verify, common, monkeypatch)
    assert after["holder"] and after["current"] and after["verify"]["hashed_files"] == 0
    again = run_module_main(vllm_weights_sync, dict(common, owner=ME, source="mirror", mirror_dir=str(mirror)),
                            monkeypatch)
    assert not again["changed"] and again["msg"].endswith("verified, nothing to do")

    shard = Path(synced["path"]) / "model-00001-of-00003.safetensors"
    os.truncate(shard, 5000)
    checked = run_module_main(vllm_weights_check, {"paths": [synced["link"]]}, monkeypatch)  # headers: the default
    assert checked["failed"] and "truncated: its header says" in checked["msg"]
    assert run_module_main(vllm_weights_check, {"paths": [synced["link"]], "headers": False}, monkeypatch)["complete"]
    failing = run_module_main(vllm_weights_verify, dict(common, fail_on_problems=True), monkeypatch)
    assert failing["failed"] and "short: 5000 of" in failing["msg"]


def test_verify_refuses_what_does_not_fit(tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = run_module_main(vllm_weights_manifest, manifest_args(tmp_path, source="mirror", mirror_dir=str(mirror)),
                           monkeypatch)
    args = {"name": "tiny", "root": str(tmp_path / "srv"), "manifest": made["path"], "reserve_bytes": 2**45}
    result = run_module_main(vllm_weights_verify, args, monkeypatch)
    assert result["failed"] and result["msg"] == result["space_problem"]
    assert "not enough disk space" in result["msg"] and "plus 32.0 TiB (35184372088832 bytes) kept free" in result["msg"]
    report = run_module_main(vllm_weights_verify, dict(args, fail_on_space=False), monkeypatch)
    assert not report["failed"] and report["space_problem"]


def test_sync_names_a_missing_owner(tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = run_module_main(vllm_weights_manifest, manifest_args(tmp_path, source="mirror", mirror_dir=str(mirror)),
                           monkeypatch)
    result = run_module_main(vllm_weights_sync, {"name": "tiny", "root": str(tmp_path / "srv"), "manifest": made["path"],
                                                 "owner": "no-such-user-x", "source": "mirror",
                                                 "mirror_dir": str(mirror)}, monkeypatch)
    assert result["failed"] and result["msg"] == "owner 'no-such-user-x' is not a user on this host"


def test_check_names_a_revision_the_directory_does_not_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm_server_download's guard: another commit in a directory vLLM reads is refused, naming
    both; a first download that completed no file yet has nothing to judge. Placeholder shards:
    headers false."""
    old, new = "1" * 40, "2" * 40
    model = tmp_path / "model"
    meta = model / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (model / name).write_text("x")
        # the format of huggingface_hub's _local_folder.write_download_metadata (0.36.2)
        (meta / f"{name}.metadata").write_text(f"{old}\n\"etag\"\n1796274797.0\n")
    refused = run_module_main(vllm_weights_check, {"paths": [str(model)], "headers": False, "revision": new}, monkeypatch)
    assert refused["failed"] and refused["revision_problems"] == [
        f"{model}: holds {old} (2 file(s)); the pin is {new}"]
    reported = run_module_main(vllm_weights_check, {"paths": [str(model)], "headers": False, "revision": new, "fail_on_problems": False},
                               monkeypatch)
    assert reported["complete"] and reported["directories"][0]["commits"] == {old: 2}
    assert run_module_main(vllm_weights_check, {"paths": [str(model)], "headers": False, "revision": old}, monkeypatch)["revision_problems"] == []

    started = tmp_path / "started"
    (started / ".cache" / "huggingface" / "download").mkdir(parents=True)  # stopped before any file completed
    fresh = run_module_main(vllm_weights_check, {"paths": [str(started)], "headers": False, "revision": new, "fail_on_problems": False},
                            monkeypatch)
    assert fresh["revision_problems"] == [] and not fresh["complete"]
