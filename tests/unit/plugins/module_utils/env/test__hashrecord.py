"""_hashrecord: the record vouches only for files it may, and only where nobody but root wrote it."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _hashrecord

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the record is root's: run as root (CI does)")


@pytest.fixture()
def folder(tmp_path):
    house = tmp_path / "wh"
    house.mkdir(mode=0o755)
    for name, text in (("a.whl", b"alpha" * 1000), ("b.whl", b"beta" * 1000)):
        (house / name).write_bytes(text)
    return house


def _digests(folder, *names):
    record = _hashrecord.HashRecord(str(folder))
    found = {name: record.sha256(str(folder / name)) for name in names}
    record.save()
    return found, record.hashed


def test_hashes_once_then_reads_the_record(folder):
    found, hashed = _digests(folder, "a.whl", "b.whl")
    assert found == {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in ("a.whl", "b.whl")}
    assert hashed == ["a.whl", "b.whl"]
    assert _digests(folder, "a.whl", "b.whl") == (found, [])


def test_a_caller_asking_about_some_files_keeps_the_others_entries(folder):
    _digests(folder, "a.whl", "b.whl")
    _digests(folder, "a.whl")  # ml_env's check asks about its own wheels only
    assert _digests(folder, "b.whl")[1] == []


def test_a_replaced_file_is_hashed_again(folder):
    _digests(folder, "a.whl")
    (folder / "new").write_bytes(b"omega" * 1000)  # same size
    os.replace(folder / "new", folder / "a.whl")
    found, hashed = _digests(folder, "a.whl")
    assert hashed == ["a.whl"] and found["a.whl"] == hashlib.sha256(b"omega" * 1000).hexdigest()


def test_entries_of_removed_files_are_dropped(folder):
    _digests(folder, "a.whl", "b.whl")
    (folder / "b.whl").unlink()
    _digests(folder, "a.whl")
    assert set(json.loads((folder / _hashrecord.RECORD).read_text())["files"]) == {"a.whl"}


def test_a_folder_another_user_may_write_gets_no_record(folder):
    folder.chmod(0o777)
    assert _digests(folder, "a.whl")[1] == ["a.whl"]
    assert not (folder / _hashrecord.RECORD).exists()
    assert _digests(folder, "a.whl")[1] == ["a.whl"]


@pytest.mark.parametrize("harm", ["group_writable", "other_owner", "garbage", "link"])
def test_a_record_root_did_not_write_alone_vouches_for_nothing_and_is_replaced(folder, tmp_path, harm):
    _digests(folder, "a.whl")
    record = folder / _hashrecord.RECORD
    if harm == "group_writable":
        record.chmod(0o664)
    elif harm == "other_owner":
        os.chown(record, 65534, 65534)
    elif harm == "garbage":
        record.write_text("{not json")
    else:
        target = tmp_path / "elsewhere.json"
        target.write_text(record.read_text())
        record.unlink()
        record.symlink_to(target)
    assert _digests(folder, "a.whl")[1] == ["a.whl"]
    info = os.lstat(record)
    assert (info.st_uid, oct(info.st_mode & 0o777), os.path.islink(record)) == (0, "0o644", False)
    assert _digests(folder, "a.whl")[1] == []


def test_a_file_that_changes_while_it_is_read_is_not_recorded(folder, monkeypatch):
    real = _hashrecord.sha256_file

    def hash_then_append(path):
        digest = real(path)
        with open(path, "ab") as handle:
            handle.write(b"late")
        return digest

    monkeypatch.setattr(_hashrecord, "sha256_file", hash_then_append)
    _digests(folder, "a.whl")
    monkeypatch.setattr(_hashrecord, "sha256_file", real)
    assert _digests(folder, "a.whl")[1] == ["a.whl"]
