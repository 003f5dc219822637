"""The vllm_weights role on a staging host and three nodes in podman, with real files and rsync.

A small real checkpoint (three safetensors shards, the index, config.json, written by
tests/support/tiny_checkpoint.py) and a one-file drafter sit in mirror directories on the
staging host; the target's Hub tree listing (the recorded format, values computed from the
files) is given as hub_tree_file, so it is verified against Hub-style hashes (sha256 and git
blob ids), the drafter against the hashes of its mirror. Each test is one step of the same
fleet's life, in order:

1. fresh fan-out: the staging host copies from the mirror, then the nodes copy from the hosts
   that hold a verified copy (a tree: n1 from the staging host, then n2 from the staging host
   and n3 from n1);
2. the same run again changes nothing and hashes nothing (stat cache);
3. a truncated shard on n1 is found by its safetensors header alone (vllm_weights_check
   headers=true, no hashing), a flipped byte on n2 is not (same size); --check then names what
   n1 and n2 would fetch and changes nothing;
4. the next run sends n1 only the missing tail of that shard and n2 only the shard with the
   flipped byte (found by its sha256), while n3, whose copy was removed, gets the whole
   checkpoint - until its rsync is killed (SIGKILL) half-way;
5. the run after that continues n3's transfer: the bytes already on n3 are not sent again;
6. a full disk (a 4 MiB tmpfs on n3) is refused before the first byte, with the path, the space
   needed and the space free, and nothing appears at the final path.

Figures (durations, bytes) are printed (pytest -s) and asserted only where they are exact.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "tests" / "support"))
import tiny_checkpoint as tc  # noqa: E402
import weights_fleet as wf  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")

HERE = Path(__file__).resolve().parent
PREFIX = "gpuserve-weights-it"
NAMES = ["stage", "n1", "n2", "n3"]
TARGET, DRAFTER = "tiny", "tiny-eagle3"
TARGET_COMMIT = hashlib.sha1(b"tiny-model test commit").hexdigest()
DRAFTER_COMMIT = hashlib.sha1(b"tiny-eagle3 test commit").hexdigest()
SHARD_BYTES = 4 << 20
SMALL_DISK = "4m"


def host(name: str) -> str:
    return f"{PREFIX}-{name}"


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, seconds: float) -> None:
        self.rc, self.seconds = proc.returncode, seconds
        self.stdout, self.stderr = proc.stdout, proc.stderr
        self.results = wf.task_results(proc.stdout)
        self.stats = wf.recap(proc.stdout)

    def syncs(self, name: str) -> list[dict[str, t.Any]]:
        """The vllm_weights_sync results of a host (one per checkpoint it staged)."""
        return [r for task, r in self.results.get(host(name), [])
                if task.startswith("Stage - ") and not r.get("skipped") and "transfers" in r]

    def failure(self, name: str) -> str:
        return " | ".join(r.get("msg", "") for _task, r in self.results.get(host(name), []) if r.get("failed"))

    def explain(self) -> str:
        failed = {h: [(task, r.get("msg", ""), r.get("stderr", "")[-500:]) for task, r in items if r.get("failed")]
                  for h, items in self.results.items()}
        return f"rc={self.rc} failed tasks: {json.dumps({h: f for h, f in failed.items() if f}, indent=1)}\n" \
               f"stderr: {self.stderr[-3000:]}"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> t.Iterator[dict[str, t.Any]]:
    if shutil.which("podman") is None:
        pytest.fail("needs podman (bash tests/containers/setup-host.sh)")
    work = tmp_path_factory.mktemp("weights")
    mirror = work / "mirror"
    tc.make_checkpoint(mirror / TARGET, shards=3, shard_bytes=SHARD_BYTES, seed=22)
    tc.make_single_file(mirror / DRAFTER, size=256 << 10, seed=23)
    (mirror / f"{TARGET}.tree.json").write_text(json.dumps(tc.hub_tree(mirror / TARGET), indent=1))
    fleet = wf.Fleet(PREFIX, NAMES, work)
    started = time.monotonic()
    fleet.create({"n3": ["--tmpfs", f"/srv/small:size={SMALL_DISK}"]})
    fleet.copy_in(host("stage"), mirror, "/srv/mirror")
    fleet.exec(host("stage"), "chmod -R a+rX /srv/mirror")
    checkpoints = [
        {"name": TARGET, "repo": "gpuserve-test/tiny-model", "revision": TARGET_COMMIT,
         "source": "mirror", "mirror_dir": f"/srv/mirror/{TARGET}",
         "hub_tree_file": f"/srv/mirror/{TARGET}.tree.json"},
        {"name": DRAFTER, "repo": "gpuserve-test/tiny-eagle3", "revision": DRAFTER_COMMIT,
         "source": "mirror", "mirror_dir": f"/srv/mirror/{DRAFTER}"},
    ]
    # n3's vllm_weights_root moves to its small tmpfs when the full-disk test asks for it.
    small = {"vllm_weights_root": "{{ '/srv/small' if weights_test_small_disk | default(false) | bool else '/srv/models' }}"}
    inventory = fleet.inventory(work / "inventory.json", hostvars={"n3": small}, group_vars={
        "vllm_weights_checkpoints": checkpoints, "vllm_weights_staging_host": host("stage"),
        "vllm_weights_reserve_bytes": 0})
    print(f"\n[weights] fleet of {len(NAMES)} containers ready in {time.monotonic() - started:.1f} s")
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (mirror / TARGET).iterdir()}
    yield {"fleet": fleet, "inventory": inventory, "mirror": mirror, "files": files, "work": work}
    fleet.destroy()


def play(ctx: dict[str, t.Any], playbook: str = "stage.yml", *extra: str) -> Run:
    started = time.monotonic()
    proc = subprocess.run(wf.playbook_argv(ctx["inventory"], HERE / playbook, *extra), capture_output=True,
                          text=True, env=wf.ansible_env(), timeout=600, check=False)
    run = Run(proc, time.monotonic() - started)
    print(f"[weights] {playbook} {' '.join(extra)}: rc={run.rc} in {run.seconds:.1f} s")
    return run


def sums(ctx: dict[str, t.Any], name: str, path: str = f"/srv/models/{TARGET}") -> dict[str, str]:
    out = ctx["fleet"].exec(host(name), f"cd {path}/ && sha256sum -- *").stdout
    return {line.split(None, 1)[1].strip(): line.split()[0] for line in out.splitlines()}


def partial_dir(root: str = "/srv/models") -> str:
    return f"{root}/.gpuserve-weights/{TARGET}/{TARGET_COMMIT}.partial"


def test_fresh_fanout_tree(fleet: dict[str, t.Any]) -> None:
    started = time.time()  # the containers share this kernel's clock
    run = play(fleet)
    assert run.rc == 0, run.explain()
    sources = {n: [(s["commit"][:7], s["transfers"][0]["source"]) for s in run.syncs(n)] for n in NAMES}
    print(f"[weights] who copied from whom: {sources}")
    target_sources = {n: dict(sources[n]).get(TARGET_COMMIT[:7]) for n in NAMES}
    peer = {n: f"gpuserve-weights@{fleet['fleet'].addresses[host(n)]}:{TARGET}/{TARGET_COMMIT}" for n in NAMES}
    assert target_sources == {"stage": f"/srv/mirror/{TARGET}", "n1": peer["stage"], "n2": peer["stage"],
                              "n3": peer["n1"]}
    for name in NAMES:
        assert sums(fleet, name) == fleet["files"], name
        script = f"readlink /srv/models/{TARGET}; stat -c %U /srv/models/{TARGET}/; ls -d {partial_dir()} 2>&1 || true"
        link = fleet["fleet"].exec(host(name), script).stdout.split("\n")
        assert link[0] == f".gpuserve-weights/{TARGET}/{TARGET_COMMIT}" and link[1] == "gpuserve-weights"
        assert "No such file" in link[2]
        meta = json.loads(fleet["fleet"].exec(host(name), f"cat /srv/models/{TARGET}/.gpuserve/manifest.json").stdout)
        assert (meta["commit"], meta["source"], meta["file_count"]) == (TARGET_COMMIT, "hub", 5)
        drafter = json.loads(fleet["fleet"].exec(host(name), f"cat /srv/models/{DRAFTER}/.gpuserve/manifest.json").stdout)
        assert (drafter["commit"], drafter["source"]) == (DRAFTER_COMMIT, "mirror")
        # The links' own times are what vllm_server's plan compares with a server's start (no
        # marker, no handler): switched by this run, so a server started before it owes a restart.
        switched = fleet["fleet"].exec(host(name), f"stat -c %Y /srv/models/{TARGET} /srv/models/{DRAFTER}").stdout
        assert all(int(when) >= int(started) for when in switched.split()), (name, switched, started)


def test_second_run_changes_and_hashes_nothing(fleet: dict[str, t.Any]) -> None:
    run = play(fleet)
    assert run.rc == 0, run.explain()
    assert {h: s["changed"] for h, s in run.stats.items()} == {host(n): 0 for n in NAMES}
    verified = [r["verify"] for h in NAMES for task, r in run.results[host(h)] if task.startswith("Verify each host's copy")]
    assert len(verified) == 2 * len(NAMES)
    assert all(v["hashed_files"] == 0 and v["cached_files"] == v["files"] for v in verified), verified


SHARD2, SHARD3 = "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"


def size_of(ctx: dict[str, t.Any], name: str) -> int:
    return (ctx["mirror"] / TARGET / name).stat().st_size


def test_truncated_shard_is_found_by_its_header(fleet: dict[str, t.Any]) -> None:
    """n1: shard 3 cut in half; n2: one byte of shard 2 flipped (same size: only a hash finds it)."""
    f = fleet["fleet"]
    f.exec(host("n2"), f"cd /srv/models/{TARGET} && python3 -c \"import sys; h=open(sys.argv[1],'r+b'); "
                       f"h.seek(3000000); b=h.read(1); h.seek(3000000); h.write(bytes([b[0] ^ 1]))\" {SHARD2}")
    f.exec(host("n1"), f"truncate -s {size_of(fleet, SHARD3) // 2} /srv/models/{TARGET}/{SHARD3}")
    check = play(fleet, "check.yml")
    assert check.rc == 0, check.explain()
    found = {n: [r for task, r in check.results[host(n)] if task == "Check headers"][0]["problems"] for n in NAMES}
    print(f"[weights] header check: {check.seconds:.1f} s for the whole playbook on 4 hosts: {found}")
    assert found["n2"] == [] and found["stage"] == [] and found["n3"] == []
    assert found["n1"] == [f"/srv/models/{TARGET}/{SHARD3}: truncated: its header says {size_of(fleet, SHARD3)} "
                           f"bytes, the file has {size_of(fleet, SHARD3) // 2} "
                           f"({size_of(fleet, SHARD3) - size_of(fleet, SHARD3) // 2} missing)"]


def test_check_mode_says_what_it_would_fetch_and_changes_nothing(fleet: dict[str, t.Any]) -> None:
    run = play(fleet, "stage.yml", "--check")
    assert run.rc == 0, run.explain()
    would = {n: [a for s in run.syncs(n) for a in s["actions"]] for n in NAMES}
    print(f"[weights] --check: {would}")
    assert [n for n in NAMES if would[n]] == ["n1", "n2"]
    assert all(actions[0].startswith("fetch ") for actions in (would["n1"], would["n2"]))
    assert sums(fleet, "n2")[SHARD2] != fleet["files"][SHARD2]
    assert fleet["fleet"].exec(host("n1"), f"stat -c %s /srv/models/{TARGET}/{SHARD3}").stdout.strip() == \
        str(size_of(fleet, SHARD3) // 2)


def test_broken_copies_repaired_alone_and_a_transfer_killed_halfway(fleet: dict[str, t.Any]) -> None:
    """One run repairs n1 and n2 (only the broken file, only its missing bytes) while n3, whose
    copy was removed, receives the whole checkpoint - until its rsync is killed (SIGKILL) half-way."""
    f = fleet["fleet"]
    f.exec(host("n3"), f"rm -rf /srv/models/{TARGET} /srv/models/.gpuserve-weights/{TARGET}")
    total = sum(size_of(fleet, n) for n in fleet["files"])
    started = time.monotonic()
    proc = subprocess.Popen(wf.playbook_argv(fleet["inventory"], HERE / "stage.yml", "-e",
                                             json.dumps({"vllm_weights_rsync_extra_args": ["--bwlimit=2000"]})),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=wf.ansible_env())
    # The watcher runs inside n3, so the kill follows the size check within a tenth of a second.
    threshold = total // 2
    watcher = subprocess.run(
        ["podman", "exec", host("n3"), "bash", "-c",
         f"for i in $(seq 3000); do size=$(du -sb --apparent-size {partial_dir()} 2>/dev/null | cut -f1); "
         f"if [ \"${{size:-0}}\" -ge {threshold} ] && pids=$(pgrep -x rsync); then kill -9 $pids; "
         f"echo \"$size $pids\"; exit 0; fi; sleep 0.1; done; exit 1"],
        capture_output=True, text=True, timeout=400, check=False)
    on_disk, killed = (int(watcher.stdout.split()[0]), watcher.stdout.split()[1:]) if watcher.returncode == 0 else (0, [])
    stdout, stderr = proc.communicate(timeout=300)
    run = Run(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), time.monotonic() - started)
    print(f"[weights] stage.yml with a kill: rc={run.rc} in {run.seconds:.1f} s")
    assert killed, f"the transfer never reached half of {total} bytes on n3: {watcher.stderr}\n" + run.explain()
    assert run.rc != 0 and "was killed by signal 9" in run.failure("n3"), run.explain()
    assert f.exec(host("n3"), f"test -e /srv/models/{TARGET}", check=False).returncode != 0, \
        "a half-staged checkpoint is visible at the final path"

    (n2,) = [s for s in run.syncs("n2") if s["commit"] == TARGET_COMMIT]
    (n1,) = [s for s in run.syncs("n1") if s["commit"] == TARGET_COMMIT]
    print(f"[weights] n2 (flipped byte): deleted {n2['deleted']}, fetched {n2['files_fetched']} "
          f"{n2['bytes_fetched']} bytes; n1 (truncated): fetched {n1['files_fetched']} {n1['bytes_fetched']} bytes")
    assert n2["deleted"] == [SHARD2] and n2["files_fetched"] == [SHARD2] and n2["bytes_fetched"] == size_of(fleet, SHARD2)
    half = size_of(fleet, SHARD3) // 2
    assert n1["deleted"] == [] and n1["files_fetched"] == [SHARD3] and n1["bytes_fetched"] == size_of(fleet, SHARD3) - half
    assert not run.syncs("stage")
    for name in ("stage", "n1", "n2"):
        assert sums(fleet, name) == fleet["files"], name
    kept = f.exec(host("n3"), f"cd {partial_dir()} && stat -c '%s %n' -- *").stdout
    fleet["kept"] = {line.split(" ", 1)[1]: int(line.split()[0]) for line in kept.splitlines()}
    fleet["killed_at"] = on_disk


def test_killed_transfer_resumes_without_sending_bytes_again(fleet: dict[str, t.Any]) -> None:
    total = sum(size_of(fleet, n) for n in fleet["files"])
    kept_bytes = sum(fleet["kept"].values())
    run = play(fleet)
    assert run.rc == 0, run.explain()
    (sync,) = [s for s in run.syncs("n3") if s["commit"] == TARGET_COMMIT]
    resent = sync["bytes_fetched"] - (total - kept_bytes)
    print(f"[weights] n3 killed at {fleet['killed_at']} of {total} bytes; kept {fleet['kept']}; the next run "
          f"fetched {sync['bytes_fetched']} bytes ({sync['wire_bytes']} on the wire) for the {total - kept_bytes} "
          f"missing: {resent} bytes sent again")
    assert resent == 0
    assert [s for n in ("stage", "n1", "n2") for s in run.syncs(n)] == []
    assert sums(fleet, "n3") == fleet["files"]


def test_full_disk_refused_before_the_first_byte(fleet: dict[str, t.Any]) -> None:
    f = fleet["fleet"]
    run = play(fleet, "stage.yml", "--limit", f"{host('stage')},{host('n3')}", "-e", "weights_test_small_disk=true")
    message = run.failure("n3")
    print(f"[weights] n3 with a {SMALL_DISK} disk: {message}")
    assert run.rc != 0 and run.stats[host("stage")]["failures"] == 0 and not run.syncs("stage")
    final = f"/srv/small/.gpuserve-weights/{TARGET}/{TARGET_COMMIT}"
    total = sum(size_of(fleet, n) for n in fleet["files"])
    assert message.startswith(f"{final}: not enough disk space for gpuserve-test/tiny-model@{TARGET_COMMIT}: "
                              f"it needs 12.0 MiB ({total} bytes) more, and /srv/small/.gpuserve-weights has ")
    free = int(message.split(" has ")[1].split("(")[1].split(" bytes")[0])
    assert 0 < free <= 4 << 20 and f"({free} bytes) free. Nothing was written." in message
    left = f.exec(host("n3"), "ls -A /srv/small /srv/small/.gpuserve-weights").stdout.split()
    assert left == ["/srv/small:", ".gpuserve-weights", "/srv/small/.gpuserve-weights:"], left  # no link, no copy
