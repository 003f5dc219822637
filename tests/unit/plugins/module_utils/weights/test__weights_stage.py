"""Staging one revision on one host (plugins/module_utils/_weights/_stage.py), with the real rsync
(local mirror transfers, as on the staging host) and the Hub TEST DOUBLE (tests/doubles/fake_hub.py).
The same engine between hosts over SSH runs in tests/integration/roles/vllm_weights."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _hub as hub
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _layout as wl
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _manifest as wm
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _publish as wp
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _stage as ws
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _transfer as wt

TESTS = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(TESTS / "support"))
sys.path.insert(0, str(TESTS / "doubles"))
import tiny_checkpoint as tc  # noqa: E402
from fake_hub import FakeHub  # noqa: E402  (TEST DOUBLE)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHARD2 = "model-00002-of-00003.safetensors"
needs_rsync = pytest.mark.skipif(shutil.which("rsync") is None,
                                 reason="needs rsync (bash tests/containers/setup-host.sh installs it)")


class Node:
    def __init__(self, tmp: Path) -> None:
        self.mirror = tmp / "mirror"
        tc.make_checkpoint(self.mirror, shards=3, shard_bytes=64 << 10, seed=7)
        self.manifest = wm.from_hub_tree(tc.hub_tree(self.mirror), "o/tiny", COMMIT)
        self.lay = wl.layout(str(tmp / "srv"), str(tmp / "srv" / ".gpuserve-weights"), "tiny", COMMIT)
        self.cache = str(tmp / "state" / "tiny" / "c.json")

    def stage(self, source: wt.Source | None = None, **kw) -> ws.Outcome:
        return ws.stage(self.lay, self.manifest, source or wt.RsyncSource(str(self.mirror)), wt.Owner.me(),
                        self.cache, **kw)

    def same_as_mirror(self) -> bool:
        return all((Path(self.lay.link) / f.path).read_bytes() == (self.mirror / f.path).read_bytes()
                   for f in self.manifest.files)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_layout_and_link_target() -> None:
    lay = wl.layout("/srv/models", "/srv/models/.gpuserve-weights", "Kimi-K2.5", COMMIT)
    assert (lay.link, lay.final, lay.partial, lay.link_target) == (
        "/srv/models/Kimi-K2.5", f"/srv/models/.gpuserve-weights/Kimi-K2.5/{COMMIT}",
        f"/srv/models/.gpuserve-weights/Kimi-K2.5/{COMMIT}.partial", f".gpuserve-weights/Kimi-K2.5/{COMMIT}")
    for bad in ("", "a/b", ".hidden"):
        with pytest.raises(ws.StageError, match="plain directory name"):
            wl.layout("/srv", "/srv/s", bad, COMMIT)


@pytest.mark.parametrize("count, text", [
    (0, "0 bytes"), (1023, "1023 bytes"), (1024, "1.0 KiB (1024 bytes)"),
    (595 * 10**9, "554.1 GiB (595000000000 bytes)"), (5 * 2**40, "5.0 TiB (5497558138880 bytes)"),
])
def test_human(count: int, text: str) -> None:
    assert ws.human(count) == text


@needs_rsync
def test_fresh_stage_publishes_a_verified_copy(node: Node) -> None:
    out = node.stage()
    assert out.changed and out.switched
    assert os.readlink(node.lay.link) == node.lay.link_target and node.same_as_mirror()
    assert not os.path.exists(node.lay.partial)
    assert wm.load(os.path.join(node.lay.final, wl.META_MANIFEST)) == node.manifest
    (transfer,) = out.transfers
    assert transfer["bytes"] == node.manifest.total_bytes and transfer["files"] == 5
    again = node.stage()
    assert not again.changed and again.transfers == [] and again.report.summary()["hashed_files"] == 0


@needs_rsync
def test_short_file_is_continued_not_resent(node: Node) -> None:
    node.stage()
    shard = Path(node.lay.final) / SHARD2
    size = shard.stat().st_size
    os.truncate(shard, 10000)
    out = node.stage()
    assert [t["paths"] for t in out.transfers] == [[SHARD2]]
    assert out.transfers[0]["bytes"] == size - 10000 and out.deleted == [] and not out.switched
    assert node.same_as_mirror()
    assert out.actions[0].startswith(f"moved the broken copy {node.lay.final} to {node.lay.partial}")


@needs_rsync
def test_flipped_byte_sends_that_file_alone(node: Node) -> None:
    node.stage()
    shard = Path(node.lay.final) / SHARD2
    data = bytearray(shard.read_bytes())
    data[30000] ^= 1
    shard.write_bytes(bytes(data))
    out = node.stage()
    assert out.deleted == [SHARD2] and [t["paths"] for t in out.transfers] == [[SHARD2]]
    assert out.transfers[0]["bytes"] == len(data) and node.same_as_mirror()


@needs_rsync
def test_a_bad_mirror_file_fails_after_the_attempts_and_keeps_the_partial(node: Node) -> None:
    data = bytearray((node.mirror / SHARD2).read_bytes())
    data[30000] ^= 1
    (node.mirror / SHARD2).write_bytes(bytes(data))  # the mirror itself disagrees with the Hub's hash
    with pytest.raises(ws.StageError) as err:
        node.stage(attempts=2)
    assert "still broken after 2 attempt(s)" in str(err.value) and SHARD2 in str(err.value)
    assert not os.path.lexists(node.lay.link) and not os.path.exists(node.lay.final)
    assert sorted(os.listdir(node.lay.partial)) == sorted(f.path for f in node.manifest.files)


@needs_rsync
def test_an_old_download_at_the_link_is_adopted(node: Node) -> None:
    shutil.copytree(node.mirror, node.lay.link)  # what a per-node `hf download --local-dir` left
    os.truncate(Path(node.lay.link) / SHARD2, 5000)
    kept = os.stat(Path(node.lay.link) / "config.json").st_ino
    out = node.stage()
    assert out.actions[0].startswith(f"adopting the directory {node.lay.link}: 4 good file(s) linked")
    assert [t["paths"] for t in out.transfers] == [[SHARD2]] and os.path.islink(node.lay.link)
    assert node.same_as_mirror()
    assert os.stat(Path(node.lay.final) / "config.json").st_ino == kept  # linked, not copied
    assert sorted(os.listdir(os.path.dirname(node.lay.link))) == [".gpuserve-weights", "tiny"]  # no leftovers


@needs_rsync
def test_a_run_killed_right_after_the_adoptions_swap_is_cleaned_up_by_the_next(node: Node) -> None:
    """Killed between the swap and the removal: the link serves the published copy, the old
    directory waits beside it (in the kernel's swap, under the temporary link's name). The next
    run, with nothing left to fetch, removes it; check mode only says so."""
    shutil.copytree(node.mirror, node.lay.link)
    node.stage()
    leftover = os.path.join(os.path.dirname(node.lay.link), ".tiny.switching")
    shutil.copytree(node.mirror, leftover)
    said = node.stage(check_mode=True)
    assert said.actions == [f"removed {leftover}, the directory a run killed right after adopting {node.lay.link} left"]
    assert os.path.isdir(leftover)
    out = node.stage()
    assert out.actions == said.actions and out.transfers == [] and not os.path.exists(leftover)
    assert sorted(os.listdir(os.path.dirname(node.lay.link))) == [".gpuserve-weights", "tiny"]
    assert node.stage().actions == []


@needs_rsync
def test_adoption_that_fails_leaves_the_directory_vllm_reads_as_it_was(node: Node) -> None:
    """The path vLLM reads never goes missing: a staging that fails leaves it untouched."""
    shutil.copytree(node.mirror, node.lay.link)
    os.truncate(Path(node.lay.link) / SHARD2, 5000)
    before = {p.name: p.read_bytes() for p in Path(node.lay.link).iterdir()}
    data = bytearray((node.mirror / SHARD2).read_bytes())
    data[30000] ^= 1
    (node.mirror / SHARD2).write_bytes(bytes(data))  # the source is bad: staging fails
    with pytest.raises(ws.StageError, match="still broken"):
        node.stage(attempts=1)
    assert not os.path.islink(node.lay.link)
    assert {p.name: p.read_bytes() for p in Path(node.lay.link).iterdir()} == before
    assert os.path.isdir(node.lay.partial)  # kept for the next run to continue


def test_the_swap_is_one_step_or_two_renames(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """renameat2(RENAME_EXCHANGE) where the kernel has it; two renames where it says EINVAL."""
    for number, exchange in enumerate((wp._exchange, lambda a, b: False)):  # pylint: disable=protected-access
        root = tmp_path / str(number)
        lay = wl.layout(str(root), str(root / ".gpuserve-weights"), "tiny", COMMIT)
        os.makedirs(lay.final)
        Path(lay.final, "f").write_text("new")
        os.makedirs(lay.link)
        Path(lay.link, "f").write_text("old")
        monkeypatch.setattr(wp, "_exchange", exchange)
        os.makedirs(os.path.join(root, ".tiny.switching", "old"))  # what a run killed after a swap leaves
        wp._replace_dir_with_link(lay)  # pylint: disable=protected-access
        assert os.readlink(lay.link) == lay.link_target and Path(lay.link, "f").read_text() == "new"
        assert sorted(os.listdir(root)) == [".gpuserve-weights", "tiny"]


def test_not_enough_space_writes_nothing(node: Node) -> None:
    state = ws.inspect(node.lay, node.manifest, node.cache)
    state.free_bytes = 1000  # the figure statvfs would give on a full disk
    problem = state.space_problem(node.manifest, reserve=4096)
    assert problem == (
        f"{node.lay.final}: not enough disk space for o/tiny@{COMMIT}: it needs "
        f"{ws.human(node.manifest.total_bytes)} more plus 4.0 KiB (4096 bytes) kept free "
        f"(vllm_weights_reserve_bytes), and {state.measured} has 1000 bytes free. Nothing was "
        f"written. Free space there or point vllm_weights_root / vllm_weights_store_dir at a larger filesystem")
    assert state.measured == os.path.dirname(os.path.dirname(node.lay.link))  # nearest existing directory
    with pytest.raises(ws.SpaceError):
        node.stage(reserve=state.free_bytes + 10**15)
    assert not os.path.exists(os.path.dirname(node.lay.final))


@needs_rsync
def test_check_mode_changes_nothing(node: Node) -> None:
    out = node.stage(check_mode=True)
    assert out.changed and out.actions[0].startswith(f"fetch {ws.human(node.manifest.total_bytes)}")
    assert not os.path.exists(os.path.dirname(node.lay.link)) and not os.path.exists(node.cache)


@needs_rsync
def test_rsync_stats_of_the_real_rsync(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"x" * 5000)
    argv = wt.rsync_argv("rsync", f"{src}/", str(tmp_path / "dst"))
    out = subprocess.run(argv, input=b"a\0", capture_output=True, check=True).stdout.decode()
    stats = wt.parse_rsync_stats(out)
    assert (stats.files, stats.bytes) == (1, 5000) and stats.wire_bytes > 0


def test_rsync_argv_and_ssh() -> None:
    ssh = wt.ssh_command("/home/k/id", "/home/k/kh", 2222)
    assert ssh.startswith("ssh -i /home/k/id -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes "
                          "-o UserKnownHostsFile=/home/k/kh") and ssh.endswith("-p 2222")
    source = wt.RsyncSource("Kimi/c", "fd00::1", "gw", ssh, extra=("--bwlimit=10M",))
    assert source.location() == "gw@[fd00::1]:Kimi/c/"
    argv = wt.rsync_argv("rsync", source.location(), "/dst", ssh, 60, source.extra)
    assert argv[:5] == ["rsync", "--recursive", "--times", "--inplace", "--append-verify"]
    assert argv[-4:] == ["-e", ssh, "gw@[fd00::1]:Kimi/c/", "/dst/"] and "--bwlimit=10M" in argv
    with pytest.raises(ws.StageError, match="must not be empty or hold quotes"):
        wt.ssh_command("/home/k/my key", "/kh", 22)


def test_stage_over_http_resumes_a_broken_download(node: Node) -> None:
    fake = FakeHub("o/tiny", COMMIT, node.mirror, tc.hub_tree(node.mirror))
    try:
        base = hub.resolve_url(fake.endpoint, "o/tiny", COMMIT, "").rstrip("/")
        fake.cut_after[SHARD2] = 30000
        with pytest.raises(ws.StageError, match=f"1 file\\(s\\) failed from {base}.*broke off after 30000"):
            node.stage(wt.HttpSource(base, "hf_x", workers=2), attempts=1)
        out = node.stage(wt.HttpSource(base, "hf_x", workers=2))
        assert [t["paths"] for t in out.transfers] == [[SHARD2]]
        assert fake.served[SHARD2] == (node.mirror / SHARD2).stat().st_size  # every byte sent once
        assert node.same_as_mirror() and out.switched
    finally:
        fake.close()


def _write(path: str) -> str:
    Path(path).write_text("x")
    return path


@pytest.fixture
def open_dir() -> t.Iterator[Path]:
    """A directory other users can traverse (pytest's tmp_path is under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="gpuserve-owner-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")
def test_owner_steps_run_without_root(open_dir: Path) -> None:
    nobody = wt.Owner.named("nobody")
    mine = open_dir / "store"
    mine.mkdir()
    os.chown(mine, nobody.uid, nobody.gid)
    assert nobody.call(_write, str(mine / "f")) == str(mine / "f")
    assert ((mine / "f").stat().st_uid, (mine / "f").stat().st_gid) == (nobody.uid, nobody.gid)
    (open_dir / "roots").mkdir(mode=0o755)
    with pytest.raises(ws.StageError, match="PermissionError"):
        nobody.call(_write, str(open_dir / "roots" / "f"))
    assert not (open_dir / "roots" / "f").exists()


@needs_rsync
def test_a_new_revision_that_fails_to_stage_leaves_the_link_on_the_old_one(node: Node, tmp_path: Path) -> None:
    """Staging killed or failing mid-transfer: the path vLLM reads still names the revision it had."""
    node.stage()
    old_final = node.lay.final
    newer = wl.layout(os.path.dirname(node.lay.link), os.path.dirname(os.path.dirname(old_final)), "tiny", "f" * 40)
    data = bytearray((node.mirror / SHARD2).read_bytes())
    data[30000] ^= 1
    (node.mirror / SHARD2).write_bytes(bytes(data))
    with pytest.raises(ws.StageError, match="still broken"):
        ws.stage(newer, node.manifest, wt.RsyncSource(str(node.mirror)), wt.Owner.me(), str(tmp_path / "c2.json"),
                 attempts=1)
    assert os.path.realpath(node.lay.link) == os.path.realpath(old_final)
    assert os.path.isdir(newer.partial) and not os.path.exists(newer.final)
