"""_converged: every kind of change a run could repair shows in its artefact's digest, and only
there; reading changes nothing; unknown is never the same; a record is not taken racily.

Model-based: a node of three artefacts (a tree, a single file, a link), then a random sequence of
changes of every kind an operator or a failure makes; after each, exactly the touched artefact's
part differs from the record, and undoing nothing makes a read equal again.
"""

from __future__ import annotations

import json
import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpuserve.vllm.plugins.module_utils._node import _converged as nc


def _node(root):
    env = root / "env"
    (env / "lib" / "vllm").mkdir(parents=True)
    (env / "lib" / "vllm" / "config.py").write_text("x = 1\n")
    (env / "bin").mkdir()
    (env / "lib" / "vllm" / "model.py").write_text("y = 2\n")
    for name in ("python", "hf", "uv", "vllm"):
        (env / "bin" / name).write_text("#!/bin/sh\n")
    os.symlink("python", env / "bin" / "python3")
    (root / "nccl.conf").write_text("NCCL_DEBUG=WARN\n")
    (root / "link-target").mkdir()
    os.symlink(root / "link-target", root / "link")
    return [{"kind": "tree", "path": str(env)},
            {"kind": "path", "path": str(root / "nccl.conf")},
            {"kind": "path", "path": str(root / "link")}]


def _same_size_rewrite(path):
    data = path.read_bytes()
    path.write_bytes(bytes([data[0] ^ 1]) + data[1:])


def _rewrite_setting_mtime_back(path):
    """Same inode, same size, the old modification time: only the status-change time moves."""
    info = path.stat()
    _same_size_rewrite(path)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def _relink(link, target):
    os.unlink(link)
    os.symlink(target, link)


def _replace_keeping_times(path):
    """A new file (new inode) with the old bytes and times: what `cp -p` over it leaves."""
    info = path.stat()
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(path.read_bytes())
    os.utime(tmp, ns=(info.st_atime_ns, info.st_mtime_ns))
    os.replace(tmp, path)


# Each change: (the artefact it touches, what it does). All are repairs a prepare role makes.
CHANGES = {
    "patched file reverted (same size)": ("tree", lambda r: _same_size_rewrite(r / "env" / "lib" / "vllm" / "config.py")),
    "file rewritten, mtime set back": ("tree", lambda r: _rewrite_setting_mtime_back(r / "env" / "bin" / "vllm")),
    "file made group-writable": ("tree", lambda r: os.chmod(r / "env" / "lib" / "vllm" / "model.py", 0o664)),
    "file given away": ("tree", lambda r: os.chown(r / "env" / "bin" / "python", 1000, -1)),
    "folder made world-writable": ("tree", lambda r: os.chmod(r / "env" / "lib", 0o777)),
    "file deleted": ("tree", lambda r: os.unlink(r / "env" / "bin" / "hf")),
    "file added": ("tree", lambda r: (r / "env" / "lib" / "vllm" / "evil.pth").write_text("import os\n")),
    "link retargeted": ("tree", lambda r: _relink(r / "env" / "bin" / "python3", "/bin/sh")),
    "file replaced, times kept": ("tree", lambda r: _replace_keeping_times(r / "env" / "bin" / "uv")),
    "config edited": ("path", lambda r: (r / "nccl.conf").write_text("NCCL_DEBUG=INFO\n")),
    "config removed": ("path", lambda r: os.unlink(r / "nccl.conf")),
    "link's target chmod": ("link", lambda r: os.chmod(os.path.realpath(r / "link"), 0o777)),
    "link's target swapped": ("link", lambda r: ((r / "other").mkdir(exist_ok=True), _relink(r / "link", r / "other"))),
}
_PART_OF = {"tree": 0, "path": 1, "link": 2}


def _digests(artefacts):
    return {name: part.digest for name, part in nc.read(artefacts).items()}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root (CI runs as root)")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.sampled_from(sorted(CHANGES)), min_size=1, max_size=4, unique=True))
def test_each_change_shows_in_its_artefact_alone(tmp_path_factory, steps):
    root = tmp_path_factory.mktemp("node")
    artefacts = _node(root)
    names = [nc.part_name(a) for a in artefacts]
    before = _digests(artefacts)
    assert _digests(artefacts) == before, "a read changed what it reads"
    for step in steps:
        touched, change = CHANGES[step]
        change(root)
        after = _digests(artefacts)
        changed = {name for name in names if after[name] != before[name]}
        assert changed == {names[_PART_OF[touched]]}, f"{step}: changed {changed}"
        verdict = nc.compare(nc.record_for("in", nc.read(artefacts)) | {"parts": before}, "in", nc.read(artefacts))
        assert not verdict.converged and verdict.reasons == [f"{names[_PART_OF[touched]]}: changed"], step
        before = after


def test_a_folder_whose_times_move_reads_the_same(tmp_path):
    """Python dropping and removing a cache file in a folder is no change (its entries are read)."""
    artefacts = _node(tmp_path)
    before = _digests(artefacts)
    cache = tmp_path / "env" / "lib" / "vllm" / "tmp-cache"
    cache.write_text("x")
    cache.unlink()
    assert _digests(artefacts) == before


def test_the_same_read_and_inputs_are_converged_anything_else_is_named(tmp_path):
    artefacts = _node(tmp_path)
    record = nc.record_for("inputs-1", nc.read(artefacts))
    assert nc.compare(record, "inputs-1", nc.read(artefacts)) == nc.Verdict(True, [])
    assert nc.compare(None, "inputs-1", nc.read(artefacts)).reasons == ["no record of a converged run on this node"]
    other = nc.compare(record, "inputs-2", nc.read(artefacts))
    assert not other.converged and other.reasons[0].startswith("the run's inputs changed")
    fewer = nc.compare(record, "inputs-1", nc.read(artefacts[:2]))
    assert fewer.reasons == [f"{nc.part_name(artefacts[2])}: recorded but no longer read"]
    more = artefacts + [{"kind": "path", "path": str(tmp_path / "new")}]
    assert nc.compare(record, "inputs-1", nc.read(more)).reasons == [f"path:{tmp_path / 'new'}: not recorded"]


def test_a_missing_artefact_is_an_observation_an_unreadable_one_is_unknown(tmp_path):
    missing = nc.read_part({"kind": "tree", "path": str(tmp_path / "nothing")})
    assert missing.digest is not None
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "f").write_text("x")
    os.chmod(tmp_path / "locked", 0)
    try:
        if os.geteuid() == 0:  # root reads through a mode of 0: make the folder a file's child instead
            unreadable = nc.read_part({"kind": "tree", "path": str(tmp_path / "locked" / "f" / "x")})
            assert unreadable.digest is None and "Not a directory" in unreadable.why
        else:
            unreadable = nc.read_part({"kind": "tree", "path": str(tmp_path / "locked")})
            assert unreadable.digest is None and "Permission denied" in unreadable.why
    finally:
        os.chmod(tmp_path / "locked", 0o755)
    parts = {unreadable.name: unreadable}
    record = {"format": nc.FORMAT, "inputs": "i", "parts": {unreadable.name: None}}
    verdict = nc.compare(record, "i", parts)
    assert not verdict.converged and verdict.reasons[0].startswith(f"{unreadable.name}: unreadable (")
    with pytest.raises(nc.ConvergedError, match="not recorded, unreadable"):
        nc.record_for("i", parts)


def test_a_unit_that_cannot_be_read_is_unknown(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    part = nc.read_part({"kind": "unit", "name": "nvidia-persistenced.service"})
    assert part.digest is None and "systemctl show nvidia-persistenced.service" in part.why


def test_proc_files_are_read_by_content_and_folders_by_listing(tmp_path):
    version = tmp_path / "version"
    version.write_text("NVRM version: 580.95.05\n")
    gpus = tmp_path / "gpus"
    (gpus / "0000:01:00.0").mkdir(parents=True)
    artefacts = [{"kind": "content", "path": str(version)}, {"kind": "listing", "path": str(gpus)}]
    before = _digests(artefacts)
    os.utime(version, ns=(1, 1))
    assert _digests(artefacts) == before
    version.write_text("NVRM version: 580.95.06\n")
    (gpus / "0000:01:00.0").rename(gpus / "0000:02:00.0")
    after = _digests(artefacts)
    assert all(after[name] != before[name] for name in before)


def test_a_record_waits_out_the_racy_window_once(tmp_path):
    artefacts = _node(tmp_path)
    newest = max(part.newest_ns for part in nc.read(artefacts).values())
    now = [newest + 1]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += int(seconds * 1e9)

    parts = nc.settled_read(artefacts, clock=lambda: now[0], sleep=sleep)
    assert len(slept) == 1 and slept[0] >= nc.RACY_NS / 1e9 - 1e-6
    assert set(parts) == {nc.part_name(a) for a in artefacts}

    def keeps_changing(seconds):
        (tmp_path / "nccl.conf").write_text(f"NCCL_DEBUG=WARN # {seconds}\n")

    with pytest.raises(nc.ConvergedError, match="changed while it was read: path:"):
        nc.settled_read(artefacts, sleep=keeps_changing)


def test_a_folder_entry_is_not_followed(tmp_path):
    """A link in a tree is an entry (its target's name), never a way out of the tree."""
    (tmp_path / "tree").mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "tree" / "escape")
    before = nc.read_part({"kind": "tree", "path": str(tmp_path / "tree")})
    (tmp_path / "outside" / "new").write_text("x")
    assert nc.read_part({"kind": "tree", "path": str(tmp_path / "tree")}) == before
    assert stat.S_ISLNK(os.lstat(tmp_path / "tree" / "escape").st_mode)


@pytest.mark.parametrize("artefact, message", [
    ({"kind": "file", "path": "/etc/x"}, "kind must be one of"),
    ({"kind": "tree", "path": "relative"}, "needs an absolute path"),
    ({"kind": "unit"}, "needs a unit name"),
])
def test_a_bad_artefact_is_named(artefact, message):
    with pytest.raises(nc.ConvergedError, match=message):
        nc.part_name(artefact)


def test_a_record_round_trips_and_a_foreign_file_is_refused(tmp_path):
    path = tmp_path / "converged.json"
    assert nc.load(str(path)) is None
    record = nc.record_for("i", nc.read(_node(tmp_path)))
    path.write_text(nc.dumps(record))
    assert nc.load(str(path)) == record
    without_handoff = {k: v for k, v in record.items() if k != "handoff"}
    for foreign in ({"format": 99}, without_handoff):
        path.write_text(json.dumps(foreign))
        with pytest.raises(nc.ConvergedError, match="not a gpuserve.vllm converged-run record"):
            nc.load(str(path))
    path.write_text("{")
    with pytest.raises(nc.ConvergedError, match="cannot be read as a converged-run record"):
        nc.load(str(path))
