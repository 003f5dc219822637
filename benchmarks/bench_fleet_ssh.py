"""The no-change re-run of the real playbooks/site.yml over SSH, on 1 node and on N nodes: what dominates?

Fleets are reached over SSH. This builds (once) a systemd + sshd image of the test image family
(localhost/gpuserve-debian12-systemd + openssh-server), converges ONE node with the real
playbooks/site.yml and the rehearsal configuration (inventories/rehearsal/group_vars: no GPU, the
real vLLM wheel with --no-deps from the host's wheel cache, EAGLE-3 patches applied, unit rendered,
vLLM not started), checks that its second run changes nothing, and commits it as an image
(reused while roles/, playbooks/, plugins/ and the rehearsal inventory are unchanged). Converging
site.yml on every node would install a vLLM wheel per node, more than a shared 2-core machine
takes; N containers of the committed image share its layers and are converged nodes already.

Then it times the no-change re-run of site.yml on 1 node and on N nodes (sshd on 127.0.0.1 only,
one port each) under the settings that matter: pipelining, forks, gather_subset (the play keyword,
[min] in site.yml; "all facts" runs a copy of site.yml with [all]: ansible-core 2.19 ignores the
ansible.cfg setting), strategy, ControlPersist. Each run starts with cold SSH connections (its own ControlPath directory), as a
re-run of a fleet after a while does. Printed per run: wall time, changed= of every node, load
average, CPU seconds of the controller (ansible-playbook and its ssh) and of the whole machine,
and from ansible.posix.profile_roles / profile_tasks the slowest roles and tasks. No timed
asserts: figures only. The containers are removed at the end unless --keep.

Usage: source tests/env.sh && python3 benchmarks/bench_fleet_ssh.py [--nodes 1 16] [--only NAME ...] [--keep]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASE = "localhost/gpuserve-debian12-systemd:latest"
IMAGE = "localhost/gpuserve-bench-ssh-systemd:latest"
CONVERGED = "localhost/gpuserve-bench-ssh-converged:latest"
PREFIX = "gpuserve-bench-ssh"
SEED = f"{PREFIX}-seed"
PORT0 = 42200
CACHE = Path(os.environ.get("GPUSERVE_CACHE", Path.home() / ".cache" / "gpuserve")) / "bench-fleet-ssh"
WHEELS = Path(os.environ.get("GPUSERVE_WHEEL_CACHE", Path.home() / ".cache" / "gpuserve" / "wheels"))
# What the converged image depends on: a change to any of these converges a fresh seed.
CONVERGE_INPUTS = ("roles", "playbooks", "plugins", "inventories/rehearsal", "meta")
COLD_SSH = "-C -o ControlMaster=auto -o ControlPersist=60s"  # ansible-core's default ssh_args

# Each setting adds to the one before it (the last one takes one back out, to show its worth).
SETTINGS: list[tuple[str, dict[str, str]]] = [
    ("ansible-core defaults: no pipelining, forks 5, all facts", {"ANSIBLE_PIPELINING": "0", "ANSIBLE_FORKS": "5", "subset": "all"}),
    ("+ pipelining", {"ANSIBLE_PIPELINING": "1", "ANSIBLE_FORKS": "5", "subset": "all"}),
    ("+ forks 16", {"ANSIBLE_PIPELINING": "1", "ANSIBLE_FORKS": "16", "subset": "all"}),
    ("+ gather_subset [min]", {"ANSIBLE_PIPELINING": "1", "ANSIBLE_FORKS": "16", "subset": "min"}),
    ("+ strategy free", {"ANSIBLE_PIPELINING": "1", "ANSIBLE_FORKS": "16", "subset": "min", "ANSIBLE_STRATEGY": "free"}),
    ("(pipelining, forks 16, [min]) without ControlPersist",
     {"ANSIBLE_PIPELINING": "1", "ANSIBLE_FORKS": "16", "subset": "min", "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=no"}),
]


def sh(*argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, text=True, capture_output=True, **kw)


def inputs_hash() -> str:
    """Hash of every file the converged node depends on (paths and bytes)."""
    digest = hashlib.sha256()
    for top in CONVERGE_INPUTS:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def label(image: str) -> str:
    done = sh("podman", "image", "inspect", "--format", '{{ index .Labels "io.gpuserve.bench" }}', image, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def build_image() -> None:
    """The systemd test image with sshd enabled and root's .ssh ready for a mounted key."""
    if label(IMAGE) == "sshd-1":
        return
    print(f"building {IMAGE} (once) ...", flush=True)
    recipe = (f"FROM {BASE}\nRUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
              "--no-install-recommends openssh-server && rm -rf /var/lib/apt/lists/* && systemctl enable ssh "
              "&& mkdir -m 700 -p /root/.ssh\nLABEL io.gpuserve.bench=sshd-1\n")
    subprocess.run(["podman", "build", "-q", "-t", IMAGE, "-f", "-"], input=recipe, text=True, check=True)


def start_node(name: str, port: int, image: str, pubkey: Path) -> None:
    sh("podman", "rm", "-f", name, check=False)
    sh("podman", "run", "-d", "--name", name, "--hostname", name, "--systemd", "always",
       "-p", f"127.0.0.1:{port}:22", "-v", f"{pubkey}:/root/.ssh/authorized_keys:ro",
       "-v", f"{WHEELS}:/var/cache/gpuserve/wheels:ro", image, "/sbin/init")


def wait_ssh(nodes: list[tuple[str, int]], key: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    for name, port in nodes:
        while sh("ssh", "-q", "-i", str(key), "-p", str(port), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                 "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=2", "root@127.0.0.1", "true",
                 check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: sshd on 127.0.0.1:{port} not answering after {timeout:.0f} s "
                                 f"(podman logs {name})")
            time.sleep(1)


def write_inventory(tmp: Path, nodes: list[tuple[str, int]], key: Path) -> Path:
    """The rehearsal configuration (its group_vars) with the nodes reached over SSH."""
    inv = tmp / f"inventory-{len(nodes)}"
    inv.mkdir(exist_ok=True)
    (inv / "group_vars").unlink(missing_ok=True)
    (inv / "group_vars").symlink_to(REPO / "inventories" / "rehearsal" / "group_vars")
    hosts = "".join(f"        {name}: {{ansible_host: 127.0.0.1, ansible_port: {port}}}\n" for name, port in nodes)
    (inv / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_user: root\n    ansible_connection: ansible.builtin.ssh\n"
        f"    ansible_ssh_private_key_file: {key}\n    ansible_python_interpreter: /usr/bin/python3\n"
        "    ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null\n"
        f"  children:\n    gpu_nodes:\n      hosts:\n{hosts}")
    return inv


def cpu_busy() -> float:
    """Seconds of CPU the whole machine has spent busy (all cores, every process) since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def nodes_cpu(names: list[str]) -> float:
    """CPU seconds the containers have used (sshd, the modules' Python), from their cgroups (v1 or v2)."""
    total = 0.0
    for name in names:
        cgroup = sh("podman", "inspect", "-f", "{{.State.CgroupPath}}", name, check=False).stdout.strip()
        v1, v2 = Path(f"/sys/fs/cgroup/cpuacct{cgroup}/cpuacct.usage"), Path(f"/sys/fs/cgroup{cgroup}/cpu.stat")
        if cgroup and v1.is_file():
            total += int(v1.read_text()) / 1e9
        elif cgroup and v2.is_file():
            total += int(re.search(r"usage_usec (\d+)", v2.read_text())[1]) / 1e6
    return total


def site_playbook(tmp: Path, subset: str) -> Path:
    """playbooks/site.yml, or a copy of it gathering another fact subset (its roles resolve by FQCN)."""
    site = REPO / "playbooks" / "site.yml"
    if subset == "min":
        return site
    text = site.read_text()
    if text.count("gather_subset: [min]") != 1:
        raise SystemExit(f"{site}: expected one 'gather_subset: [min]' play keyword to replace with [{subset}]")
    copy = tmp / f"site-{subset}.yml"
    copy.write_text(text.replace("gather_subset: [min]", f"gather_subset: [{subset}]"))
    return copy


def playbook(inventory: Path, setting: dict[str, str], tmp: Path, names: list[str]) -> dict:
    """One ansible-playbook run of site.yml: wall time, CPU, load, recap and profile output."""
    control = Path(tempfile.mkdtemp(prefix="cp-", dir=tmp))  # cold SSH connections for every run
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_roles,ansible.posix.profile_tasks",
               PROFILE_TASKS_TASK_OUTPUT_LIMIT="all", ANSIBLE_SSH_CONTROL_PATH_DIR=str(control),
               ANSIBLE_SSH_ARGS=COLD_SSH)
    env.update({k: v for k, v in setting.items() if k.startswith("ANSIBLE_")})
    nodes0 = nodes_cpu(names)
    before, load0, busy0 = resource.getrusage(resource.RUSAGE_CHILDREN), os.getloadavg()[0], cpu_busy()
    start = time.monotonic()
    done = subprocess.run(["ansible-playbook", "-i", str(inventory), str(site_playbook(tmp, setting.get("subset", "min")))],
                          env=env, text=True, capture_output=True, check=False, cwd=REPO)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # ControlPersist masters outlive the run; end them (only ours: they live in our ControlPath dir).
    for sock in control.iterdir():
        sh("ssh", "-O", "exit", "-o", f"ControlPath={sock}", "x", check=False)
    shutil.rmtree(control, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"ansible-playbook failed:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    recap = {h: (int(ok), int(ch)) for h, ok, ch in re.findall(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)", done.stdout, re.M)}
    return {"wall": wall, "load": (load0, os.getloadavg()[0]), "out": done.stdout, "recap": recap,
            "ctl_cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "all_cpu": cpu_busy() - busy0, "nodes_cpu": nodes_cpu(names) - nodes0}


def profile(out: str) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(roles, tasks) with their seconds, slowest first, from profile_roles and profile_tasks."""
    rows = re.findall(r"^(.+?) -{2,} (\d+\.\d+)s\s*$", out, re.M)
    roles, tasks = [], []
    for name, secs in rows:
        (tasks if " : " in name or "Gathering Facts" in name or " " in name.strip() else roles).append(
            (name.strip(), float(secs)))
    roles = [r for r in roles if r[0] != "total"]
    return sorted(roles, key=lambda r: -r[1]), sorted(tasks, key=lambda t: -t[1])


def report(label_: str, nodes: int, run: dict, cores: int, detail: bool = True) -> bool:
    """Print one run; True when every node reported changed=0."""
    recap = run["recap"]
    changed = {h: c for h, (_ok, c) in recap.items() if c}
    tasks_per_node = max((ok for ok, _c in recap.values()), default=0)
    clean = not changed and len(recap) == nodes
    verdict = f"changed=0 on {len(recap)}/{nodes} nodes" if clean else f"NOT idempotent: {changed or 'recap missing'}"
    print(f"  {label_:52s} {run['wall']:6.1f} s  {verdict}; {tasks_per_node} ok/node; "
          f"load {run['load'][0]:.1f}->{run['load'][1]:.1f}; CPU s: controller {run['ctl_cpu']:.1f}, "
          f"nodes {run['nodes_cpu']:.0f}, machine {run['all_cpu']:.0f} of {run['wall'] * cores:.0f}", flush=True)
    if detail:
        roles, tasks = profile(run["out"])
        print("      roles: " + ", ".join(f"{n} {s:.1f}" for n, s in roles[:6]))
        print("      tasks: " + "; ".join(f"{n} {s:.1f}" for n, s in tasks[:5]))
    return clean


def converge_seed(tmp: Path, key: Path, pubkey: Path, keep: bool) -> None:
    """Converge one node with site.yml, check its re-run, commit it as CONVERGED."""
    wanted = inputs_hash()
    if label(CONVERGED) == wanted:
        print(f"reusing {CONVERGED} (converged with these roles, playbooks and plugins)")
        return
    print(f"converging {SEED} with playbooks/site.yml (rehearsal configuration, over SSH) ...", flush=True)
    start_node(SEED, PORT0 - 1, IMAGE, pubkey)
    try:
        wait_ssh([(SEED, PORT0 - 1)], key)
        inventory = write_inventory(tmp, [(SEED, PORT0 - 1)], key)
        setting = dict(SETTINGS[3][1])
        first = playbook(inventory, setting, tmp, [SEED])
        print(f"  converging run {first['wall']:.1f} s, changed={sum(c for _o, c in first['recap'].values())}")
        second = playbook(inventory, setting, tmp, [SEED])
        report("second run (must change nothing)", 1, second, os.cpu_count() or 1)
        if any(c for _o, c in second["recap"].values()):
            raise SystemExit(f"{SEED}: the second run of site.yml changed something; not committing it")
        stale = sh("podman", "image", "inspect", "--format", "{{.Id}}", CONVERGED, check=False).stdout.strip()
        sh("podman", "commit", "-q", "--change", f"LABEL io.gpuserve.bench={wanted}", SEED, CONVERGED)
        if stale:  # the image of older roles (2-3 GB): only this benchmark's, nothing else uses it
            sh("podman", "rmi", stale, check=False)
        print(f"  committed {SEED} as {CONVERGED}")
    finally:
        if not keep:
            sh("podman", "rm", "-f", SEED, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--only", nargs="+", metavar="N", type=int,
                        help=f"run only these settings (0-{len(SETTINGS) - 1}, in the order printed)")
    parser.add_argument("--runs", type=int, default=1, help="runs of each setting (median and min printed)")
    parser.add_argument("--keep", action="store_true", help="leave the containers running")
    parser.add_argument("--logs", type=Path, help="write each run's full output (every task's time) here")
    args = parser.parse_args()
    if not any(WHEELS.glob("vllm-*.whl")):
        raise SystemExit(f"no vLLM wheel in {WHEELS}: python3 tests/support/vllm_wheels.py 0.17.0")
    CACHE.mkdir(parents=True, exist_ok=True)
    key = CACHE / "id_ed25519"
    if not key.exists():
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuserve-bench-fleet-ssh", "-f", str(key))
    pubkey = key.with_suffix(".pub")
    cores = os.cpu_count() or 1
    build_image()
    started: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-ssh-") as tmpdir:
        tmp = Path(tmpdir)
        try:
            converge_seed(tmp, key, pubkey, args.keep)
            print(f"\n{cores} cores, load {os.getloadavg()[0]:.1f}; no-change site.yml (rehearsal configuration) over SSH")
            for count in args.nodes:
                nodes = [(f"{PREFIX}{i + 1:02d}", PORT0 + i) for i in range(count)]
                for name, port in nodes:
                    if name not in started:
                        start_node(name, port, CONVERGED, pubkey)
                        started.append(name)
                wait_ssh(nodes, key)
                inventory = write_inventory(tmp, nodes, key)
                print(f"\n{count} node(s):")
                # A new container need not read as the seed recorded it (site.yml's fast path):
                # where it does not, its first run prepares in full and records it. Seen at 16
                # nodes: some took the fast path at once, some not. The timed runs are re-runs.
                settle = playbook(inventory, SETTINGS[3][1], tmp, [n for n, _p in nodes])
                print(f"  (first run on the new containers, not timed: {settle['wall']:.1f} s, "
                      f"ok= {sorted({ok for ok, _ch in settle['recap'].values()})})")
                chosen = [i for i in range(len(SETTINGS)) if args.only is None or i in args.only]
                runs: dict[int, list[dict]] = {i: [] for i in chosen}
                for repeat in range(args.runs):  # settings interleaved: the machine's noise falls on each alike
                    for index in chosen:
                        run = playbook(inventory, SETTINGS[index][1], tmp, [n for n, _p in nodes])
                        runs[index].append(run)
                        report(f"[{index}] {SETTINGS[index][0]}", count, run, cores, detail=args.runs == 1)
                        if args.logs:
                            args.logs.mkdir(parents=True, exist_ok=True)
                            (args.logs / f"nodes{count}-setting{index}-run{repeat}.log").write_text(run["out"])
                if args.runs > 1:
                    print(f"  {count} node(s), median (min) of {args.runs} runs; profile of the median run:")
                    for index in chosen:
                        ordered = sorted(runs[index], key=lambda r: r["wall"])
                        median = ordered[len(ordered) // 2]
                        loads = statistics.median(r["load"][0] for r in ordered)
                        print(f"  [{index}] {SETTINGS[index][0]:48s} {median['wall']:6.1f} s ({ordered[0]['wall']:.1f} s), "
                              f"load {loads:.1f}")
                        report("      median run:", count, median, cores)
        finally:
            if not args.keep:
                for name in started:
                    sh("podman", "rm", "-f", name, check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
