"""Kill site.yml's serve play at every step of an upgrade and of a rollback, then re-run (tests only).

Run by molecule/fleet's verify_kill_cycles.yml on the controller, against the scenario's podman fleet:

    fleet_kill_cycles.py --inventory INV [...] --router ROUTER --node NODE=ENV_A,ENV_B [...] --out FILE

For each node (one thread each, so the cycles of several nodes overlap), against its two built
envs A and B (real paths in the node's env store):

* upgrade: a reference run switches the node to the other env with the kill seam only tracing
  (tests/support/callback_plugins/gpuserve_kill.py): its N changed task results are the
  boundaries. Then for each boundary k given to this node: a run towards the other env is
  SIGKILLed at the start of the task after its k-th change, and a plain re-run must converge --
  the node serves that env (its /version, the link), `.previous` names the env before, the
  router lists it healthy, no journal is left.
* rollback: the same with `vllm_server_rollback=true`: the re-run (with the flag on odd
  boundaries, without it on even ones) must finish the rollback -- never flip forward -- and
  leave the hold. Between cycles the hold is removed by hand, which is the state a node is in
  after an ordinary upgrade to the env it now serves.

--sample N kills at N boundaries per plan, spread evenly over them and rotated by --seed; 0 kills
at every one. --plans upgrade, rollback or both (the default). The chapter's defaults:
GPUSERVE_FLEET_KILL_SAMPLE=2, GPUSERVE_FLEET_KILL_PLANS = upgrade on even days and rollback on odd
ones (CI's time: both take about 10 minutes on its cores), GPUSERVE_FLEET_KILL_SEED = half the
day's number, so that successive days' runs cover every boundary of both plans; a failure is
replayed with the plan and seed it printed.

Every run is `site.yml --tags vllm_server --limit NODE` as an operator re-runs a killed play;
the target env is handed in an inventory file, as the prepare play hands its build dir. The
nodes' cycles overlap, so each node's runs take a run lock of their own (gpuserve_lock_path
site-NODE.lock on the router host): a killed run leaves its lock, and every re-run must say it
took it over. A rollback undoes the node's last forward switch on record (its switch record,
vllm_server.switch.json); since the cycles roll back again and again between two envs, each
rollback run is preceded by a record saying the last rollout took the node from the other env to
the one it serves, as an upgrade would have written. The
summary (per cycle: the task killed before, the re-run's seconds, the state found) goes to
--out as JSON and to stdout; the exit status is 1 when any cycle did not converge.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SEAM = REPO / "tests" / "support" / "callback_plugins"
STATE = ("systemctl show vllm.service -p MainPID --value; readlink -f /opt/ml-env; "
         "readlink -f /opt/ml-env.previous || echo none; "
         "python3 -c \"import urllib.request; print(urllib.request.urlopen("
         "'http://127.0.0.1:8000/version', timeout=5).read().decode())\" || echo '{}'; "
         "test -e /var/lib/gpuserve/vllm_server.plan.json && echo journal || echo no-journal; "
         "test -e /var/lib/gpuserve/vllm_server.rollback.json && echo hold || echo no-hold")


SWITCH_RECORD = "/var/lib/gpuserve/vllm_server.switch.json"


def podman(container: str, script: str) -> str:
    return subprocess.run(["podman", "exec", container, "/bin/sh", "-c", script], check=False,
                          capture_output=True, text=True, timeout=60).stdout


def node_state(node: str) -> dict:
    lines = podman(node, STATE).splitlines() + [""] * 6
    try:
        version = json.loads(lines[3]).get("version", "none")
    except ValueError:
        version = "none"
    return {"pid": lines[0], "link": lines[1], "previous": lines[2], "version": version,
            "journal": lines[4] == "journal", "hold": lines[5] == "hold"}


def router_healthy(router: str, url: str) -> bool:
    out = podman(router, "python3 -c \"import urllib.request; print(urllib.request.urlopen("
                         "'http://127.0.0.1:30000/workers', timeout=5).read().decode())\"")
    try:
        workers = json.loads(out)["workers"]
    except (ValueError, KeyError):
        return False
    return any(w.get("url") == url and w.get("is_healthy") for w in workers)


class Runner:
    """ansible-playbook site.yml --tags vllm_server --limit NODE, with or without the seam."""

    def __init__(self, inventories: list[str], node: str, workdir: Path) -> None:
        self.inventories, self.node, self.workdir = inventories, node, workdir
        self.stdout = ""

    def run(self, target: str | None, extra: list[str], kill_at: int = 0) -> tuple[int, float, list[str]]:
        trace = self.workdir / f"trace-{time.monotonic_ns()}.txt"
        inventory = self.workdir / f"target-{self.node}.yml"
        hosts = {self.node: {"__gpuserve_env_target": target}} if target else {}
        inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
        env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=str(SEAM),
                   ANSIBLE_CALLBACKS_ENABLED="gpuserve_kill", GPUSERVE_KILL_TRACE=str(trace),
                   GPUSERVE_KILL_AT=str(kill_at) if kill_at else "", ANSIBLE_FORCE_COLOR="0")
        argv = (["ansible-playbook", str(REPO / "playbooks" / "site.yml"), "--tags", "vllm_server",
                 "--limit", self.node, "--extra-vars", "vllm_router_min_healthy_workers=0",
                 "--extra-vars", f"gpuserve_lock_path=/var/lib/gpuserve/site-{self.node}.lock"]
                + [f"--inventory={i}" for i in self.inventories + [str(inventory)]] + extra)
        started = time.monotonic()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
        lines = trace.read_text().splitlines() if trace.exists() else []
        log = self.workdir / f"run-{self.node}-{time.monotonic_ns()}.log"
        log.write_text(proc.stdout + proc.stderr)
        self.stdout = proc.stdout + proc.stderr  # warnings (a lock taken over) go to stderr
        return proc.returncode, round(time.monotonic() - started, 1), lines


def took_over(runner: Runner) -> bool:
    """The re-run after a kill took over the lock the killed run left (and said so)."""
    return "ended without releasing it" in runner.stdout and "was taken over" in runner.stdout


def chosen(boundaries: int, sample: int, index: int, count: int, seed: int = 0) -> list[int]:
    """This node's share of the boundaries to kill at: all of them (sample 0), or `sample` spread
    evenly over them, the first at 1 + seed (mod boundaries); dealt out over the nodes in turn."""
    every = list(range(1, boundaries + 1))
    if 0 < sample < boundaries:
        every = sorted({1 + (seed + i * boundaries // sample) % boundaries for i in range(sample)})
    return every[index::count]


def cycles(args: argparse.Namespace, spec: str, index: int, count: int, results: list, lock) -> None:
    node, envs = spec.split("=", 1)
    env_a, env_b = envs.split(",")
    runner = Runner(args.inventory, node, Path(args.workdir))
    url = f"http://{node}:8000"
    version = {env_a: args.version_a, env_b: args.version_b}

    def record(kind: str, k: int, killed: str, rc_kill: int, rc: int, seconds: float, want: str,
               before: str, state: dict, extra_ok: bool) -> None:
        ok = (rc_kill == -9 and rc == 0 and state["link"] == want and state["previous"] == before
              and state["version"] == version[want] and not state["journal"]
              and router_healthy(args.router, url) and extra_ok)
        # A run that made fewer changes than the reference was never killed: the cycle proves
        # nothing about boundary k (a driver fault, said as such, not a plan's).
        why = "" if rc_kill == -9 else f"not killed: the run exited {rc_kill} before change {k}"
        with lock:
            results.append({"node": node, "plan": kind, "boundary": k, "killed_before": killed,
                            "kill_rc": rc_kill, "rerun_rc": rc, "rerun_seconds": seconds,
                            "state": state, "converged": ok, "why": why})

    # Upgrades: start from whatever the node serves, switch to the other env each time. A hold
    # left by an earlier rollback chapter is lifted first: the reference run would lift it (one
    # change more), and its boundaries must be those of every cycle after it.
    podman(node, "rm -f /var/lib/gpuserve/vllm_server.rollback.json")
    state = node_state(node)
    current = state["link"]
    other = env_b if current == env_a else env_a
    if "upgrade" in args.plans:
        rc, _secs, trace = runner.run(other, ["--extra-vars", "vllm_server_rollforward=true"])
        boundaries = sum(1 for line in trace if line.startswith("changed"))
        with lock:
            results.append({"node": node, "plan": "upgrade", "boundary": 0, "reference_rc": rc,
                            "changes": boundaries})
        current, other = other, current
        for k in chosen(boundaries, args.sample, index, count, args.seed):
            rc_kill, _s, trace = runner.run(other, ["--extra-vars", "vllm_server_rollforward=true"], kill_at=k)
            killed = next((line.split("\t", 1)[1] for line in trace if line.startswith("killed")), "")
            rc, secs, _t = runner.run(other, ["--extra-vars", "vllm_server_rollforward=true"])
            record("upgrade", k, killed, rc_kill, rc, secs, other, current, node_state(node), took_over(runner))
            current, other = other, current

    # Rollbacks: the node serves `current`, `.previous` names `other`; no hold; the last rollout
    # on record took it from `other` to `current` (steps/switch.yml's record, at the controller's time).
    def rollback(serving: str) -> list[str]:
        entry = {"from": other, "to": serving, "at": time.time(), "rollback": False}
        podman(node, f"umask 077 && printf '%s' {shlex.quote(json.dumps({'version': 1, 'switches': [entry]}))} "
                     f"> {SWITCH_RECORD}")
        return ["--extra-vars", "vllm_server_rollback=true"]

    if "rollback" not in args.plans:
        return
    podman(node, "rm -f /var/lib/gpuserve/vllm_server.rollback.json")
    rc, _secs, trace = runner.run(None, rollback(current))
    boundaries = sum(1 for line in trace if line.startswith("changed"))
    with lock:
        results.append({"node": node, "plan": "rollback", "boundary": 0, "reference_rc": rc,
                        "changes": boundaries})
    current, other = other, current
    for k in chosen(boundaries, args.sample, index, count, args.seed):
        podman(node, "rm -f /var/lib/gpuserve/vllm_server.rollback.json")
        rc_kill, _s, trace = runner.run(None, rollback(current), kill_at=k)
        killed = next((line.split("\t", 1)[1] for line in trace if line.startswith("killed")), "")
        again = rollback(current) if k % 2 else []
        rc, secs, _t = runner.run(None, again)
        state = node_state(node)
        record("rollback", k, killed, rc_kill, rc, secs, other, current, state,
               state["hold"] and took_over(runner))
        current, other = other, current


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", action="append", required=True)
    parser.add_argument("--router", required=True)
    parser.add_argument("--node", action="append", required=True, help="NODE=ENV_A,ENV_B")
    parser.add_argument("--version-a", required=True, help="what /version says for ENV_A")
    parser.add_argument("--version-b", required=True, help="what /version says for ENV_B")
    parser.add_argument("--out", required=True)
    parser.add_argument("--workdir", default="")
    parser.add_argument("--sample", type=int, default=0,
                        help="kill at this many boundaries per plan, spread evenly (0: every one)")
    parser.add_argument("--seed", type=int, default=0, help="rotate the sampled boundaries by this many")
    parser.add_argument("--plans", default="upgrade,rollback",
                        help="which plans' steps to kill at: upgrade, rollback or both (comma-separated)")
    args = parser.parse_args()
    args.plans = args.plans.split(",")
    if not args.plans or set(args.plans) - {"upgrade", "rollback"}:
        parser.error(f"--plans: upgrade, rollback or both, not {','.join(args.plans)!r}")
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="gpuserve-kill-")
    results: list[dict] = []
    lock = threading.Lock()
    started = time.monotonic()
    threads = [threading.Thread(target=cycles, args=(args, spec, i, len(args.node), results, lock))
               for i, spec in enumerate(args.node)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cycles_run = [r for r in results if r.get("boundary")]
    # A reference run that changed nothing (a node the serve plays do not target) gives no
    # boundary to kill at: said as a failure, never counted as a node that converged.
    idle = [r for r in results if not r.get("boundary") and not r.get("changes")]
    summary = {"seconds": round(time.monotonic() - started, 1), "cycles": len(cycles_run),
               "failed": [r for r in cycles_run if not r["converged"]] + idle,
               "references": [r for r in results if not r.get("boundary")], "results": results,
               "logs": args.workdir}
    Path(args.out).write_text(json.dumps(summary, indent=1))
    for r in sorted(cycles_run, key=lambda r: (r["plan"], r["boundary"])):
        print(f"{r['plan']:8} boundary {r['boundary']:2} on {r['node']}: killed before "
              f"{r['killed_before']!r}; re-run rc {r['rerun_rc']} in {r['rerun_seconds']} s; "
              f"{'converged' if r['converged'] else 'NOT CONVERGED ' + r['why'] + ' ' + json.dumps(r['state'])}")
    for r in idle:
        print(f"{r['plan']:8} reference on {r['node']}: rc {r['reference_rc']}, no change: nothing to kill")
    print(f"{len(cycles_run)} kill cycles in {summary['seconds']} s (--sample {args.sample} --seed {args.seed} "
          f"--plans {','.join(args.plans)}), "
          f"{len(summary['failed'])} did not converge{' or had nothing to kill' if idle else ''}")
    return 1 if summary["failed"] or not cycles_run else 0


if __name__ == "__main__":
    sys.exit(main())
