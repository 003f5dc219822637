"""Verification against the manifest, and its stat cache (plugins/module_utils/_weights/_verify.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _manifest as wm
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _verify as wv

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "support"))
import tiny_checkpoint as tc  # noqa: E402

COMMIT = "a" * 40
SHARD = "model-00002-of-00003.safetensors"


@pytest.fixture
def ckpt(tmp_path: Path) -> tuple[Path, wm.Manifest]:
    root = tmp_path / "ckpt"
    tc.make_checkpoint(root, shards=3, shard_bytes=8192)
    return root, wm.from_hub_tree(tc.hub_tree(root), "r/x", COMMIT)


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 1]))


def statuses(report: wv.Report) -> dict[str, str]:
    return {c.path: c.status for c in report.checks if c.status != "ok"}


@pytest.mark.parametrize("damage, status, fragment", [
    (lambda p: p.unlink(), "missing", "missing"),
    (lambda p: os.truncate(p, 100), "short", "short: 100 of"),
    (lambda p: p.open("ab").write(b"x"), "long", "bytes, the manifest says"),
    (lambda p: flip(p, 5000), "corrupt", "sha256 "),
    (lambda p: flip(p, 0), "corrupt", "the manifest's size agrees with the file, so its bytes are wrong"),
])
def test_each_kind_of_damage(ckpt, damage, status: str, fragment: str) -> None:
    root, manifest = ckpt
    damage(root / SHARD)
    report = wv.verify(str(root), manifest)
    assert statuses(report) == {SHARD: status} and not report.ok
    (problem,) = report.problems()
    assert problem.startswith(f"{root / SHARD}: ") and fragment in problem


def test_git_sha1_files_are_checked_too(ckpt) -> None:
    root, manifest = ckpt
    (root / "config.json").write_text((root / "config.json").read_text().replace("llama", "LLAMA"))
    report = wv.verify(str(root), manifest)
    assert statuses(report) == {"config.json": "corrupt"} and "git-sha1 " in report.problems()[0]


def test_cache_makes_a_rerun_hash_nothing(ckpt, tmp_path: Path) -> None:
    root, manifest = ckpt
    cache = str(tmp_path / "state" / "c.json")
    first = wv.verify(str(root), manifest, cache)
    assert first.ok and first.summary()["hashed_files"] == 5 and first.hashed_bytes == manifest.total_bytes
    second = wv.verify(str(root), manifest, cache)
    assert second.ok and second.summary()["hashed_files"] == 0 and second.cached_files == 5
    forced = wv.verify(str(root), manifest, cache, full=True)
    assert forced.summary()["hashed_files"] == 5


def test_a_write_is_noticed_even_with_mtime_restored(ckpt, tmp_path: Path) -> None:
    root, manifest = ckpt
    cache = str(tmp_path / "c.json")
    wv.verify(str(root), manifest, cache)
    before = (root / SHARD).stat()
    flip(root / SHARD, 5000)
    os.utime(root / SHARD, ns=(before.st_atime_ns, before.st_mtime_ns))  # touch -r: mtime as it was
    report = wv.verify(str(root), manifest, cache)
    assert statuses(report) == {SHARD: "corrupt"}  # ctime moved, so the file was hashed again
    assert report.summary()["hashed_files"] == 1


def test_only_a_full_verify_finds_what_the_stat_cannot_show(ckpt, tmp_path: Path) -> None:
    """Bit rot below the filesystem keeps size, mtime, ctime and inode: the cache trusts them."""
    root, manifest = ckpt
    cache = tmp_path / "c.json"
    wv.verify(str(root), manifest, str(cache))
    flip(root / SHARD, 5000)
    data = json.loads(cache.read_text())
    stat = (root / SHARD).stat()
    data["files"][SHARD][:4] = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]
    cache.write_text(json.dumps(data))  # as if the corruption had not touched the inode
    assert wv.verify(str(root), manifest, str(cache)).ok
    assert statuses(wv.verify(str(root), manifest, str(cache), full=True)) == {SHARD: "corrupt"}


def test_cache_of_another_commit_or_format_is_ignored(ckpt, tmp_path: Path) -> None:
    root, manifest = ckpt
    cache = tmp_path / "c.json"
    wv.verify(str(root), manifest, str(cache))
    data = json.loads(cache.read_text())
    cache.write_text(json.dumps(dict(data, commit="b" * 40)))
    assert wv.verify(str(root), manifest, str(cache)).summary()["hashed_files"] == 5
    cache.write_text("not json")
    assert wv.verify(str(root), manifest, str(cache)).summary()["hashed_files"] == 5


def test_check_mode_reads_the_cache_but_never_writes_it(ckpt, tmp_path: Path) -> None:
    root, manifest = ckpt
    cache = tmp_path / "c.json"
    wv.verify(str(root), manifest, str(cache), save=False)
    assert not cache.exists()
    wv.verify(str(root), manifest, str(cache))
    text = cache.read_text()
    (root / "config.json").touch()
    assert wv.verify(str(root), manifest, str(cache), save=False).ok
    assert cache.read_text() == text


def test_cache_is_rewritten_only_when_it_changes(ckpt, tmp_path: Path) -> None:
    root, manifest = ckpt
    cache = tmp_path / "c.json"
    wv.verify(str(root), manifest, str(cache))
    mtime = cache.stat().st_mtime_ns
    wv.verify(str(root), manifest, str(cache))
    assert cache.stat().st_mtime_ns == mtime
    assert oct(cache.stat().st_mode & 0o777) == "0o644"
