"""How long does the vLLM serve preflight take with vLLM imported?  (target: < 20 s on the node)

Renders the example inventory's `vllm serve` argv with the vllm_server role's own variables
(ansible-playbook), points the model and drafter at the config.json fixtures of tests/vllm_full,
and runs the real gpuserve.vllm.vllm_serve_preflight module through ansible-playbook against a
real vLLM env built by tests/support/vllm_full_env.py (all dependencies, torch included).
Prints, per run, the wall time of the module and the probe's own stages (import vllm, parser,
configs, attention backends). The first run pays for cold disk caches; later runs are what a
node sees on a re-run. This machine has no GPU: compute capability 12.0 is given.

Usage: source tests/env.sh && python3 benchmarks/bench_vllm_preflight.py [--version 0.18.0]
       [--runs 3] [--pythonpath DIR]   (DIR: an overlay with a patched vllm package, e.g. 0.17.0)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))
import vllm_full_env  # noqa: E402

FIXTURES = REPO / "tests" / "vllm_full" / "fixtures"
ROLE = REPO / "roles" / "vllm_server"
EXAMPLE = REPO / "inventories" / "example" / "group_vars" / "gpu_nodes" / "main.yml"


def playbook(play: list, work: Path, env: dict | None = None) -> dict:
    path = work / "play.json"
    path.write_text(json.dumps(play))
    environ = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false", **(env or {}))
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(path)],
                          capture_output=True, text=True, env=environ, check=False)
    try:
        return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        raise SystemExit(proc.stdout[-3000:] + proc.stderr[-2000:]) from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="0.18.0")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pythonpath", default="")
    opts = parser.parse_args()
    python = vllm_full_env.build(opts.version)
    work = Path(tempfile.mkdtemp(prefix="bench-preflight-"))
    argv = playbook([{
        "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml"),
                       str(EXAMPLE)],
        "tasks": [{"ansible.builtin.debug": {"var": "__vllm_server_argv"}, "vars": {
            "vllm_server_model_path": str(FIXTURES / "kimi-k2.5"),
            "vllm_server_drafter_path": str(FIXTURES / "kimi-k2.5-eagle3")}}],
    }], work)["__vllm_server_argv"]
    print(f"vLLM {opts.version} ({python}); argv: {' '.join(argv[1:])}")
    env = {"PYTHONPATH": opts.pythonpath} if opts.pythonpath else {}
    walls = []
    for run in range(1, opts.runs + 1):
        start = time.monotonic()
        result = playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [{
            "gpuserve.vllm.vllm_serve_preflight": {
                "python": str(python), "argv": argv, "compute_capability": "12.0",
                "fail_on_problems": False}}]}], work, env)
        wall = time.monotonic() - start
        walls.append(wall)
        verdict = "accepted" if not result.get("problems") else \
            f"{len(result['problems'])} problem(s): {result['problems'][0]['check']}"
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in (result.get("timings") or {}).items())
        print(f"run {run}: {wall:.1f} s wall (ansible-playbook), probe {result.get('seconds')} s "
              f"[{stages}] -> {verdict}")
    print(f"median {statistics.median(walls):.1f} s over {len(walls)} runs (target < 20 s on a "
          f"node; this machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
