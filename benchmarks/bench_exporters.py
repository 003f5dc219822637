"""The monitoring exporters play with nothing to change, this checkout against another revision.

site.yml's exporters play (gpuserve.vllm.monitoring, tasks_from exporters) on ONE node reached
over SSH with pipelining (bench_fleet_ssh.py's systemd + sshd image), the node in gpu_nodes and
vllm_routers and the run lock's host, so it gets every root script on a timer: the nvidia-smi
metrics, the router's workers, the serving state. Each variant has its own node, converged once
(Debian's prometheus-node-exporter from the package mirror); then the variants' runs with nothing
to change alternate, REPEAT times each. Printed per no-change run: wall time, changed=, task lines,
CPU seconds of the controller (ansible-playbook and its ssh) and of the node's container. The
other revision is a git worktree (removed at the end), its collection on ANSIBLE_COLLECTIONS_PATH
in place of this one. No timed asserts: figures only.

Usage: source tests/env.sh && python3 benchmarks/bench_exporters.py [--baseline REV] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fleet_ssh as fleet  # noqa: E402  (its image and SSH helpers)

REPO = fleet.REPO
NODE = "gpuserve-bench-exporters"
PORT = fleet.PORT0 + 90
PLAY = """- name: The exporters, as site.yml's monitoring play runs them
  hosts: gpu_nodes
  become: true
  gather_facts: false
  tasks:
    - name: Install and start the exporters
      ansible.builtin.include_role:
        name: gpuserve.vllm.monitoring
        tasks_from: exporters
      vars:
        monitoring_gpu_nodes_group: gpu_nodes
        monitoring_routers_group: vllm_routers
"""


def collections_path(checkout: Path, tmp: Path, name: str) -> str:
    """ANSIBLE_COLLECTIONS_PATH with checkout as gpuserve.vllm, the other entries as tests/env.sh set them."""
    root = tmp / name
    (root / "ansible_collections" / "gpuserve").mkdir(parents=True)
    (root / "ansible_collections" / "gpuserve" / "vllm").symlink_to(checkout)
    rest = [p for p in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(":") if p and not p.startswith(str(REPO))]
    return ":".join([str(root)] + rest)


def run(inventory: Path, playbook: Path, colls: str, node: str) -> dict:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=colls, ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_NOCOLOR="1",
               ANSIBLE_PIPELINING="1")
    cpu0, node0, start = resource.getrusage(resource.RUSAGE_CHILDREN), fleet.nodes_cpu([node]), time.monotonic()
    done = subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbook)], env=env, text=True,
                          capture_output=True, check=False, cwd=REPO)
    wall, cpu1 = time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"ansible-playbook failed:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    recap = re.search(r"ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=\d+\s+skipped=(\d+)", done.stdout)
    return {"wall": wall, "ok": int(recap[1]), "changed": int(recap[2]), "skipped": int(recap[3]),
            "ctl": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
            "node": fleet.nodes_cpu([node]) - node0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--baseline", default="HEAD~1", help="the other revision (default HEAD~1)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("No GPU here: the GPU node is a container; nvidia-smi's script is installed, not run for real.")
    tmp = Path(tempfile.mkdtemp(prefix="bench-exporters-"))
    worktree = tmp / "baseline"
    try:
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(worktree), args.baseline],
                       check=True)
        variants = {f"baseline {args.baseline}": collections_path(worktree, tmp, "a"),
                    "this checkout": collections_path(REPO, tmp, "b")}
        fleet.build_image()
        key = tmp / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        playbook = tmp / "exporters.yml"
        playbook.write_text(PLAY)
        nodes = {name: (f"{NODE}-{index}", PORT + index) for index, name in enumerate(variants)}
        inventories = {}
        for name, (node, port) in nodes.items():
            fleet.start_node(node, port, fleet.IMAGE, key.with_suffix(".pub"))
            inventories[name] = tmp / f"hosts-{port}.yml"
            inventories[name].write_text(
                "all:\n  vars:\n    ansible_user: root\n    ansible_connection: ansible.builtin.ssh\n"
                f"    ansible_ssh_private_key_file: {key}\n    ansible_python_interpreter: /usr/bin/python3\n"
                "    ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null\n"
                f"  children:\n    gpu_nodes:\n      hosts:\n        {node}: {{ansible_host: 127.0.0.1, ansible_port: {port}}}\n"
                f"    vllm_routers:\n      hosts:\n        {node}: {{}}\n")
        fleet.wait_ssh(list(nodes.values()), key)
        for name, colls in variants.items():
            first = run(inventories[name], playbook, colls, nodes[name][0])
            print(f"{name}: first run {first['wall']:.1f} s, changed={first['changed']}", flush=True)
        results: dict[str, list[dict]] = {name: [] for name in variants}
        for _round in range(args.repeat):
            for name, colls in variants.items():
                results[name].append(run(inventories[name], playbook, colls, nodes[name][0]))
                last = results[name][-1]
                print(f"  {name:32s} no change: {last['wall']:5.1f} s  changed={last['changed']}  ok={last['ok']} "
                      f"skipped={last['skipped']}  CPU s: controller {last['ctl']:.2f}, node {last['node']:.2f}",
                      flush=True)
        print("medians (no-change runs):")
        for name, runs in results.items():
            print(f"  {name:32s} wall {statistics.median(r['wall'] for r in runs):5.1f} s, "
                  f"task lines {runs[0]['ok'] + runs[0]['skipped']}, controller CPU "
                  f"{statistics.median(r['ctl'] for r in runs):.2f} s, node CPU {statistics.median(r['node'] for r in runs):.2f} s")
    finally:
        for index in range(2):
            fleet.sh("podman", "rm", "-f", "-t", "0", f"{NODE}-{index}", check=False)
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
