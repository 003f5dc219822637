"""How long does vllm_server's canary take with the test double?  (figures only; GPU target < 2 min)

The canary's argv is made the way the role makes it: the example inventory's unit argv rendered
by the vllm_server role's own variables (ansible-playbook), turned into the canary's by
_vllm._canary (the filter's engine) with the public Kimi-K2.5 and EAGLE-3 drafter config.json
(tests/vllm_full/fixtures). The fake vLLM server TEST DOUBLE (tests/doubles/fake_vllm_server.py,
told its canary port) runs it, with systemctl/journalctl test doubles following the process
(tests/doubles/fake_systemd.py), and the role's own modules judge it through ansible-playbook:
gpuserve.vllm.vllm_health_wait (the fail-fast wait) and gpuserve.vllm.vllm_server_check (one
completion, spec-decode counters). Printed per scenario: argv build, start -> healthy, the check,
the whole canary; and for a canary the double refuses (no --load-format dummy), start -> failed
task with its root cause.

What this does NOT measure: a real canary on GPUs (torch.compile and CUDA graph capture of the
7-layer dummy model, NCCL init on 8 GPUs). No GPU was at hand; the double's load time is a
setting (--load 0 / 5 s here), so the figures are the machinery's overhead on top of that.

Usage: source tests/env.sh && python3 benchmarks/bench_canary.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "doubles"))
sys.path.insert(0, str(REPO / "collections"))
from fake_systemd import make_fake_systemd  # noqa: E402  (test double helper)

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _canary as vc  # noqa: E402

FIXTURES = REPO / "tests" / "vllm_full" / "fixtures"
ROLE = REPO / "roles" / "vllm_server"
EXAMPLE = REPO / "inventories" / "example" / "group_vars" / "gpu_nodes" / "main.yml"
ENV = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
           ANSIBLE_INVENTORY_UNPARSED_WARNING="false")


def playbook(tasks: list[dict], env: dict[str, str], tmp: Path) -> list[dict]:
    """Run tasks on localhost; each task's result with its duration (s) in `_seconds`."""
    path = tmp / "play.json"
    path.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    out = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local",
                          "-e", f"ansible_python_interpreter={sys.executable}", str(path)],
                         capture_output=True, text=True, env=env, timeout=900, check=False)
    results = []
    for task in json.loads(out.stdout)["plays"][0]["tasks"]:
        result = task["hosts"]["localhost"]
        dur = task["task"]["duration"]
        result["_seconds"] = (datetime.fromisoformat(dur["end"].rstrip("Z"))
                              - datetime.fromisoformat(dur["start"].rstrip("Z"))).total_seconds()
        results.append(result)
    return results


def unit_argv(tmp: Path) -> list[str]:
    """The example inventory's unit argv, rendered by the role's own variables."""
    path = tmp / "render.json"
    path.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml"), str(EXAMPLE)],
        "tasks": [{"ansible.builtin.debug": {"var": "__vllm_server_argv"},
                   "vars": {"vllm_server_model_path": str(FIXTURES / "kimi-k2.5"),
                            "vllm_server_drafter_path": str(FIXTURES / "kimi-k2.5-eagle3"),
                            "vault_vllm_server_api_key": "bench-key"}}]}]))
    out = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(path)],
                         capture_output=True, text=True, env=ENV, timeout=300, check=True)
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["__vllm_server_argv"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_canary(argv: list[str], load: float, refuse: bool, tmp: Path) -> dict[str, float | str]:
    """Plan, start, wait, check, stop one canary; seconds per phase."""
    port = free_port()
    begin = time.monotonic()
    plan = vc.canary_plan(argv, "/opt/ml-env.d/vllm-bench", port, 2,
                          json.loads((FIXTURES / "kimi-k2.5" / "config.json").read_text()),
                          json.loads((FIXTURES / "kimi-k2.5-eagle3" / "config.json").read_text()), "eagle3")
    canary = vc.without_flags(plan["argv"], ("--load-format",)) if refuse else plan["argv"]
    planned = time.monotonic()
    log, pidfile = tmp / "double.log", tmp / "double.pid"
    env = dict(ENV, FAKE_SYSTEMD_PIDFILE=str(pidfile), FAKE_SYSTEMD_LOG=str(log),
               PATH=f"{make_fake_systemd(tmp / 'bin')}:{os.environ['PATH']}",
               FAKE_VLLM_CANARY_PORT=str(port), FAKE_VLLM_LOAD_SECONDS=str(load), VLLM_API_KEY="bench-key")
    with open(log, "wb") as handle:
        proc = subprocess.Popen([sys.executable, str(REPO / "tests/doubles/fake_vllm_server.py"), *canary[1:]],
                                stdout=handle, stderr=subprocess.STDOUT, env=env)
    pidfile.write_text(str(proc.pid))
    base = f"http://127.0.0.1:{port}"
    tasks = [{"gpuserve.vllm.vllm_health_wait": {"url": base + "/health", "unit": "vllm-canary.service",
                                                 "timeout": 300, "progress_interval": 30},
              "ignore_errors": True}]
    if not refuse:
        tasks.append({"gpuserve.vllm.vllm_server_check": {"base_url": base, "api_key": "bench-key",
                                                          "model": "kimi-k2.5"}})
    results = playbook(tasks, env, tmp)
    waited = time.monotonic()
    proc.terminate()
    proc.wait(timeout=30)
    end = time.monotonic()
    figures: dict[str, float | str] = {"plan": planned - begin, "wait": results[0]["_seconds"],
                                       "total": end - begin, "stop": end - waited}
    if refuse:
        figures["cause"] = (results[0].get("root_cause") or ["(no failure reported)"])[0]
    else:
        figures["check"] = results[1]["_seconds"]
        figures["summary"] = results[1].get("summary", "")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        argv = unit_argv(Path(tmp))
    print(f"canary with the TEST DOUBLE (no GPU here), {runs} run(s) each; the example inventory's argv "
          f"({len(argv)} words) -> canary argv with 7 layers in text_config, dummy weights")
    for name, load, refuse in (("canary passes, double loads 0 s", 0.0, False),
                               ("canary passes, double loads 5 s", 5.0, False),
                               ("canary refused (no --load-format dummy)", 0.0, True)):
        rows = []
        for _run in range(runs):
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(one_canary(argv, load, refuse, Path(tmp)))
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if not isinstance(rows[0][k], str)}
        line = (f"  {name:42s} total {med['total']:5.2f} s  (argv {med['plan'] * 1000:.1f} ms, "
                f"start->{'failed' if refuse else 'healthy'} {med['wait']:.2f} s")
        line += f", check {med['check']:.2f} s" if not refuse else ""
        print(line + f", stop {med['stop']:.2f} s; median of {runs})")
        print("      " + str(rows[-1].get("cause") or rows[-1].get("summary"))[:160])
    print("GPU canary (target < 2 min vs 25-35 min for the real load): NOT MEASURED, no GPU at hand")


if __name__ == "__main__":
    main()
