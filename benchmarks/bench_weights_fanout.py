"""Fan-out of a checkpoint to N nodes: the vllm_weights tree against N copies from one source.

A staging host and N nodes in podman (tests/support/weights_fleet.py), each host's uplink limited
with `tc tbf` to the same rate (the shape of a cluster where every host has one NIC of that
speed; on plain loopback the only limit would be this machine's CPU). A checkpoint of --gib GiB
(real safetensors shards) sits in a mirror directory on the staging host, which stages it first
(not timed). Then, through the role (gpuserve.vllm.vllm_weights, stage.yml of its integration test):

  star  every node copies from the staging host at once (vllm_weights_fanout=star): the staging
        host's uplink carries N copies;
  tree  the role's default: each holder sends to one more host per round (ceil(log2(N+1)) rounds);
  noop  the same run again with every copy in place: Ansible's own cost plus the stat checks.

It prints the times and the projection for 595 GB to 16 nodes. Disk: the mirror and the staging
copy (2 x --gib) plus one copy per node, all removed at the end (--keep leaves the containers).
Run after `source tests/env.sh`, as root (podman), on a machine with the test images.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))
import weights_fleet as wf  # noqa: E402

PLAYBOOK = REPO / "tests/integration/roles/vllm_weights/stage.yml"
COMMIT = "b" * 40


def rate_bytes(rate: str) -> float:
    units = {"kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}
    for unit, factor in units.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * factor
    raise SystemExit(f"--rate {rate}: use kbit, mbit or gbit (tc's units)")


def play(inventory: Path, *extra: str) -> tuple[float, float]:
    """(wall seconds of the run, seconds spent in its staging tasks: the rounds' transfers+verification)."""
    started = time.monotonic()
    proc = subprocess.run(wf.playbook_argv(inventory, PLAYBOOK, *extra), capture_output=True, text=True,
                          env=wf.ansible_env(), timeout=3600, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"playbook failed ({' '.join(extra)}): {proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    staging = 0.0
    for played in json.loads(proc.stdout[proc.stdout.index("{"):])["plays"]:
        for task in played["tasks"]:
            ran = [r for r in task["hosts"].values() if not r.get("skipped")]
            if task["task"]["name"].split(" : ")[-1].startswith("Stage - ") and ran:
                span = task["task"]["duration"]
                staging += (datetime.datetime.fromisoformat(span["end"].replace("Z", "+00:00"))
                            - datetime.datetime.fromisoformat(span["start"].replace("Z", "+00:00"))).total_seconds()
    return seconds, staging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gib", type=float, default=2.0, help="checkpoint size (GiB)")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rate", default="800mbit", help="every host's uplink (tc rate)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="leave the containers running")
    args = parser.parse_args()
    names = ["stage"] + [f"n{i}" for i in range(1, args.nodes + 1)]
    work = Path(tempfile.mkdtemp(prefix="gpuserve-weights-bench-"))
    fleet = wf.Fleet("gpuserve-weights-bench", names, work)
    size = int(args.gib * 2**30)
    try:
        fleet.create({n: ["--cap-add", "NET_ADMIN"] for n in names})
        for host in fleet.hosts:
            done = fleet.exec(host, f"tc qdisc replace dev eth0 root tbf rate {args.rate} burst 1mbit latency 400ms",
                              check=False)
            if done.returncode != 0:
                raise SystemExit(f"{host}: tc tbf is not available here ({done.stderr.strip()}); cannot shape the links")
        stage = fleet.host("stage")
        fleet.copy_in(stage, REPO / "tests/support/tiny_checkpoint.py", "/tmp/tiny_checkpoint.py")
        started = time.monotonic()
        fleet.exec(stage, f"python3 /tmp/tiny_checkpoint.py /srv/mirror/bench --shards {args.shards} "
                          f"--shard-bytes {size // args.shards} --seed -1 && chmod -R a+rX /srv/mirror", timeout=1800)
        print(f"checkpoint of {args.gib} GiB in {args.shards} shards written in {time.monotonic() - started:.0f} s")
        inventory = fleet.inventory(work / "inventory.json", group_vars={
            "vllm_weights_checkpoints": [{"name": "bench", "repo": "gpuserve-bench/model", "revision": COMMIT,
                                          "source": "mirror", "mirror_dir": "/srv/mirror/bench"}],
            "vllm_weights_staging_host": stage, "vllm_weights_reserve_bytes": 0, "vllm_weights_workers": 2})
        warm, _staging = play(inventory, "--limit", stage)
        print(f"staging host: manifest (hashing the mirror) and its own copy in {warm:.0f} s (not counted)")
        star = play(inventory, "-e", "vllm_weights_fanout=star")
        for host in fleet.hosts[1:]:
            fleet.exec(host, "rm -rf /srv/models/bench /srv/models/.gpuserve-weights/bench /var/lib/gpuserve/weights/bench/*.verified.json")
        tree = play(inventory)
        noop, _staging = play(inventory)
    finally:
        if not args.keep:
            fleet.destroy()
            shutil.rmtree(work)
    one = size / rate_bytes(args.rate)
    rounds = math.ceil(math.log2(args.nodes + 1))
    print(f"\n{args.gib} GiB to {args.nodes} nodes, every uplink {args.rate} (one copy = {one:.0f} s at line rate):")
    print("  (whole run; in brackets the staging tasks alone: transfers and verification, no Ansible between rounds)")
    print(f"  star (N copies from the staging host): {star[0]:6.0f} s [{star[1]:6.0f} s]   ideal {args.nodes * one:6.0f} s")
    print(f"  tree (vllm_weights, {rounds} rounds):       {tree[0]:6.0f} s [{tree[1]:6.0f} s]   ideal {rounds * one:6.0f} s")
    print(f"  nothing to copy (Ansible + stat checks): {noop:6.0f} s")
    print(f"  tree / star: {tree[0] / star[0]:.2f} whole runs, {tree[1] / star[1]:.2f} staging tasks "
          f"(ideal {rounds / args.nodes:.2f})")
    print("\nProjection, 595 GB to 16 nodes (tree: 5 rounds; star: 16 copies through one uplink), transfer only:")
    for gbit in (10, 25, 100):
        per_copy = 595e9 / (gbit * 1e9 / 8)
        print(f"  {gbit:3d} Gbit/s per host: one copy {per_copy / 60:5.1f} min, star {16 * per_copy / 3600:5.2f} h, "
              f"tree {5 * per_copy / 3600:5.2f} h")
    print("  plus on every node one full sha256 pass (in parallel on all nodes): 595 GB at the node's "
          "read rate, e.g. ~2.5 min at 4 GB/s (4 hashing workers)")
    print(json.dumps({"gib": args.gib, "nodes": args.nodes, "rate": args.rate, "star_s": round(star[0], 1),
                      "star_staging_s": round(star[1], 1), "tree_s": round(tree[0], 1),
                      "tree_staging_s": round(tree[1], 1), "noop_s": round(noop, 1), "one_copy_s": round(one, 1),
                      "load_average": open("/proc/loadavg").read().split()[:3]}))


if __name__ == "__main__":
    main()
