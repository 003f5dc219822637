"""Manifests from the Hub's tree listing and from mirror directories (_weights/_manifest.py).

The Hub's format is the recorded listing tests/fixtures/hub/tree-google-bert-bert-base-uncased.json;
tiny_checkpoint.hub_tree makes listings of test-made files in that shape, checked here against it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _manifest as wm

SUPPORT = Path(__file__).resolve().parents[4] / "support"
sys.path.insert(0, str(SUPPORT))
import tiny_checkpoint as tc  # noqa: E402

FIXTURE = json.loads((Path(__file__).resolve().parents[4] / "fixtures/hub/tree-google-bert-bert-base-uncased.json").read_text())
BERT = FIXTURE["response"]
COMMIT = "dd4bc8b21efa05ec961e3efc4ee5e3832a3679c7"


def test_manifest_from_the_recorded_tree() -> None:
    m = wm.from_hub_tree(BERT, "google-bert/bert-base-uncased", COMMIT)
    assert [f.path for f in m.files] == [".gitattributes", "config.json", "pytorch_model.bin", "tf_model.h5", "vocab.txt"]
    files = {f.path: f for f in m.files}
    assert files["pytorch_model.bin"] == wm.FileEntry(
        "pytorch_model.bin", 440473133, sha256="097417381d6c7230bd9e3557456d726de6e83245ec8b24f529f60198a67b203a")
    assert files["config.json"] == wm.FileEntry("config.json", 313, git_sha1="fca794a5f07ff8f963fe8b61e3694b0fb7f955df")
    assert m.total_bytes == 345 + 313 + 440473133 + 536063208 + 231508
    assert m.source == "hub" and m.commit == COMMIT


def test_exclude_patterns() -> None:
    m = wm.from_hub_tree(BERT, "r/x", COMMIT, exclude=["*.h5", ".git*"])
    assert [f.path for f in m.files] == ["config.json", "pytorch_model.bin", "vocab.txt"]
    assert m.exclude == ("*.h5", ".git*")


def test_made_listings_have_the_recorded_shape(tmp_path: Path) -> None:
    tc.make_checkpoint(tmp_path, shards=2, shard_bytes=2048)
    made = tc.hub_tree(tmp_path)
    recorded_lfs = next(e for e in BERT if "lfs" in e)
    recorded_git = next(e for e in BERT if "lfs" not in e)
    for entry in made:
        reference = recorded_lfs if "lfs" in entry else recorded_git
        assert set(entry) <= set(reference) and set(reference) - set(entry) <= {"xetHash"}
        if "lfs" in entry:
            assert set(entry["lfs"]) == set(reference["lfs"])


def test_lfs_oid_is_the_git_blob_of_the_pointer() -> None:
    """The recorded LFS entries: oid = git blob id of the git-lfs pointer, pointerSize its length."""
    for entry in (e for e in BERT if "lfs" in e):
        pointer = tc.lfs_pointer(entry["lfs"]["oid"], entry["size"])
        assert (len(pointer), tc.git_blob_sha1(pointer)) == (entry["lfs"]["pointerSize"], entry["oid"])


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_blob_ids_are_gits(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama"}\n')
    real = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()
    assert wm.hash_file(str(path), "git-sha1") == (real, path.stat().st_size)


def _broken(change) -> list:
    entries = copy.deepcopy(BERT)
    change(entries)
    return entries


@pytest.mark.parametrize("entries, fragment", [
    ({"not": "a list"}, "expected a JSON list of tree entries, found dict"),
    (_broken(lambda e: e[0].update(path="../etc/passwd")), "'../etc/passwd' is not a plain relative path"),
    (_broken(lambda e: e[0].update(path="/abs")), "'/abs' is not a plain relative path"),
    (_broken(lambda e: e[2]["lfs"].update(size=1)), "pytorch_model.bin has LFS metadata"),
    (_broken(lambda e: e[2]["lfs"].update(oid="sha256:xyz")), "expected a 64-hex oid"),
    (_broken(lambda e: e[1].update(oid="nope")), "config.json has oid 'nope'"),
    (_broken(lambda e: e[1].update(size="313")), "config.json has size '313'"),
    (_broken(lambda e: e.append(dict(e[1]))), "a path is listed twice"),
    (_broken(lambda e: e.append({"type": "weird"})), "entry 5 is not a tree entry"),
    ([{"type": "directory", "path": "onnx", "oid": "d03ec5ec179df58241d27d55f92a674f5f44197f", "size": 0}], "no files left"),
])
def test_bad_listings_are_refused(entries, fragment: str) -> None:
    with pytest.raises(wm.ManifestError) as err:
        wm.from_hub_tree(entries, "r/x", COMMIT, where="saved.json")
    assert str(err.value).startswith("saved.json: ") and fragment in str(err.value)


def test_folders_are_skipped() -> None:
    entries = BERT + [{"type": "directory", "oid": "d03ec5ec179df58241d27d55f92a674f5f44197f", "size": 0, "path": "onnx"}]
    assert len(wm.from_hub_tree(entries, "r/x", COMMIT).files) == 5


def test_commit_must_be_a_commit() -> None:
    with pytest.raises(wm.ManifestError, match="'main' is not a 40-hex commit id"):
        wm.from_hub_tree(BERT, "r/x", "main")


def test_manifest_of_a_mirror_agrees_with_the_hubs(tmp_path: Path) -> None:
    tc.make_checkpoint(tmp_path / "m", shards=3, shard_bytes=4096)
    hub = wm.from_hub_tree(tc.hub_tree(tmp_path / "m"), "r/x", COMMIT)
    (tmp_path / "m" / ".cache" / "huggingface").mkdir(parents=True)  # hf download --local-dir metadata
    (tmp_path / "m" / ".cache" / "huggingface" / "x.metadata").write_text("left out")
    mirror = wm.from_directory(str(tmp_path / "m"), "r/x", COMMIT)
    assert [f.path for f in mirror.files] == [f.path for f in hub.files]
    for a, b in zip(mirror.files, hub.files):
        data = (tmp_path / "m" / a.path).read_bytes()
        assert a.size == b.size == len(data) and a.sha256 == hashlib.sha256(data).hexdigest()
        assert b.sha256 == a.sha256 if b.path.endswith(".safetensors") else b.git_sha1 == tc.git_blob_sha1(data)
    assert (mirror.source, hub.source) == ("mirror", "hub")


def test_mirror_errors(tmp_path: Path) -> None:
    with pytest.raises(wm.ManifestError, match="mirror directory does not exist"):
        wm.from_directory(str(tmp_path / "none"), "r/x", COMMIT)
    (tmp_path / "empty").mkdir()
    with pytest.raises(wm.ManifestError, match="holds no files"):
        wm.from_directory(str(tmp_path / "empty"), "r/x", COMMIT)


def test_write_load_round_trip_is_byte_stable(tmp_path: Path) -> None:
    m = wm.from_hub_tree(BERT, "google-bert/bert-base-uncased", COMMIT, exclude=["*.h5"])
    wm.write(str(tmp_path / "m.json"), m)
    again = wm.load(str(tmp_path / "m.json"))
    assert again == m and again.dumps() == (tmp_path / "m.json").read_text()
    assert oct((tmp_path / "m.json").stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize("text, fragment", [
    ("{", "manifest is not JSON"),
    ('{"format": 2, "files": []}', "not a gpuserve weights manifest of format 1"),
    ('{"format": 1, "commit": "' + COMMIT + '", "files": [{"path": "a", "size": 1}]}', "'a' has no sha256 or git_sha1"),
    ('{"format": 1, "commit": "' + COMMIT + '", "files": [{"path": "../a", "size": 1, "git_sha1": "' + COMMIT + '"}]}',
     "is not a plain relative path"),
])
def test_bad_manifest_files(tmp_path: Path, text: str, fragment: str) -> None:
    (tmp_path / "m.json").write_text(text)
    with pytest.raises(wm.ManifestError) as err:
        wm.load(str(tmp_path / "m.json"))
    assert str(err.value).startswith(str(tmp_path / "m.json")) and fragment in str(err.value)
