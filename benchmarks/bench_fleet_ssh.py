"""A no-change playbook over SSH against 1 and N podman nodes: which ansible.cfg settings matter?

Fleets are reached over SSH, not the podman connection. This starts N containers of the test
image family with sshd (localhost/gpuserve-debian12 + openssh-server, built once as
localhost/gpuserve-bench-sshd:latest), reachable on 127.0.0.1 only, converges a stand-in
playbook of --tasks idempotent tasks of the kinds the roles use (file, copy, lineinfile, stat,
command with changed_when: false) plus fact gathering, then times its no-change re-run under
several settings and prints the wall time, the per-task cost and what dominates (fact gathering,
the slowest task kinds, from ansible.posix.profile_tasks). No timed asserts: figures only.

The stand-in, not site.yml itself: converging site.yml on every container installs the ML env
and a vLLM wheel per node, which this shared 2-core machine cannot do for 16 nodes.

Usage: source tests/env.sh && python3 benchmarks/bench_fleet_ssh.py [--nodes 1 4] [--tasks 40] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

IMAGE = "localhost/gpuserve-bench-sshd:latest"
BASE = "localhost/gpuserve-debian12:latest"
PREFIX = "gpuserve-bench-ssh"
PORT0 = 42200
# ansible-core 2.19 removed the gather_subset setting of ansible.cfg (ANSIBLE_GATHER_SUBSET is
# ignored): the subset is the play keyword, set here through the extra var bench_gather_subset.
SETTINGS = {
    "defaults (no pipelining, all facts, forks 5)": {},
    "pipelining": {"ANSIBLE_PIPELINING": "1"},
    "pipelining + gather_subset: [min]": {"ANSIBLE_PIPELINING": "1", "BENCH_GATHER_SUBSET": "min"},
    "pipelining + min facts + forks 16 + free": {
        "ANSIBLE_PIPELINING": "1", "BENCH_GATHER_SUBSET": "min",
        "ANSIBLE_FORKS": "16", "ANSIBLE_STRATEGY": "free"},
}


def sh(*argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, text=True, capture_output=True, **kw)


def build_image() -> None:
    if sh("podman", "image", "exists", IMAGE, check=False).returncode == 0:
        return
    print(f"building {IMAGE} (once) ...", flush=True)
    recipe = f"FROM {BASE}\nRUN apt-get update -q && apt-get install -y -q --no-install-recommends openssh-server " \
             "&& rm -rf /var/lib/apt/lists/*\n"
    subprocess.run(["podman", "build", "-q", "-t", IMAGE, "-f", "-"], input=recipe, text=True, check=True)


def start_nodes(count: int, pubkey: str) -> list[tuple[str, int]]:
    nodes = []
    for i in range(count):
        name, port = f"{PREFIX}{i + 1:02d}", PORT0 + i
        sh("podman", "rm", "-f", name, check=False)
        script = (f"mkdir -p /run/sshd /root/.ssh && echo '{pubkey}' > /root/.ssh/authorized_keys "
                  "&& chmod 700 /root/.ssh && chmod 600 /root/.ssh/authorized_keys && exec /usr/sbin/sshd -D -e")
        sh("podman", "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:22", IMAGE, "bash", "-c", script)
        nodes.append((name, port))
    return nodes


def write_inputs(tmp: Path, nodes: list[tuple[str, int]], key: Path, tasks: int) -> tuple[Path, Path]:
    inventory = tmp / "hosts.ini"
    inventory.write_text("[fleet]\n" + "".join(
        f"{name} ansible_host=127.0.0.1 ansible_port={port}\n" for name, port in nodes)
        + f"[fleet:vars]\nansible_user=root\nansible_ssh_private_key_file={key}\n"
        "ansible_python_interpreter=/usr/bin/python3\n"
        "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'\n")
    kinds = [
        "ansible.builtin.file: {{path: /etc/bench/d{i}, state: directory, mode: '0755'}}",
        "ansible.builtin.copy: {{dest: /etc/bench/f{i}.conf, content: \"value {i}\\n\", mode: '0644'}}",
        "ansible.builtin.lineinfile: {{path: /etc/bench/l{i}.conf, line: 'key{i}=1', create: true, mode: '0644'}}",
        "ansible.builtin.stat: {{path: /etc/bench}}",
        "ansible.builtin.command: {{argv: [/usr/bin/python3, -c, 'print({i})']}}\n      changed_when: false",
    ]
    lines = ["---", "- name: Stand-in for a no-change site.yml re-run", "  hosts: fleet", "  gather_facts: true",
             "  gather_subset: \"{{ bench_gather_subset | default('all') }}\"",
             "  tasks:", "    - name: Base directory", "      ansible.builtin.file: {path: /etc/bench, state: directory, mode: '0755'}"]
    for i in range(tasks):
        kind = kinds[i % len(kinds)]
        lines += [f"    - name: Task {i} ({kind.split(':')[0].split('.')[-1]})", "      " + kind.format(i=i)]
    playbook = tmp / "play.yml"
    playbook.write_text("\n".join(lines) + "\n")
    return inventory, playbook


def run(inventory: Path, playbook: Path, env_extra: dict) -> tuple[float, str]:
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="0", ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
               ANSIBLE_FORCE_COLOR="0", PROFILE_TASKS_TASK_OUTPUT_LIMIT="all", **env_extra)
    start = time.monotonic()
    subset = env_extra.get("BENCH_GATHER_SUBSET", "all")
    done = subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbook), "-e", f"bench_gather_subset={subset}"],
                          env=env, text=True, capture_output=True, check=False)
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"ansible-playbook failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def breakdown(output: str) -> dict[str, float]:
    """Seconds per task kind from profile_tasks' summary lines."""
    kinds: dict[str, float] = {}
    for name, secs in re.findall(r"^(.+?) -+ (\d+\.\d+)s$", output, re.M):
        kind = "facts" if "Gathering Facts" in name else (re.search(r"\((\w+)\)", name) or [None, "other"])[1]
        kinds[kind] = kinds.get(kind, 0.0) + float(secs)
    return kinds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="leave the containers running")
    args = parser.parse_args()
    build_image()
    with tempfile.TemporaryDirectory(prefix="bench-fleet-ssh-") as tmpdir:
        tmp = Path(tmpdir)
        key = tmp / "id_ed25519"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        pubkey = (tmp / "id_ed25519.pub").read_text().strip()
        print(f"nproc {os.cpu_count()}, load {os.getloadavg()[0]:.1f}; {args.tasks} tasks + facts per node")
        try:
            for count in args.nodes:
                nodes = start_nodes(count, pubkey)
                inventory, playbook = write_inputs(tmp, nodes, key, args.tasks)
                time.sleep(1)
                first = run(inventory, playbook, SETTINGS["pipelining"])[0]
                print(f"\n{count} node(s): first (converging) run {first:.1f} s")
                for label, env in SETTINGS.items():
                    times, output = [], ""
                    for _run in range(args.runs):
                        elapsed, output = run(inventory, playbook, env)
                        times.append(elapsed)
                    changed = re.findall(r"changed=(\d+)", output)
                    kinds = breakdown(output)
                    top = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])[:3])
                    wall = statistics.median(times)
                    print(f"  {label:45s} {wall:6.1f} s  ({wall / (args.tasks + 2):.2f} s/task, "
                          f"changed={max(map(int, changed or ['0']))}); facts {kinds.get('facts', 0):.1f} s; "
                          f"largest: {top}", flush=True)
        finally:
            if not args.keep:
                for i in range(max(args.nodes)):
                    sh("podman", "rm", "-f", f"{PREFIX}{i + 1:02d}", check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
