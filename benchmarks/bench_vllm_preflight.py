"""How long does the vLLM serve preflight take with vLLM imported?  (target: < 20 s on the node)

Renders the example inventory's `vllm serve` argv with the vllm_server role's own variables
(ansible-playbook), points the model and drafter at the config.json fixtures of tests/vllm_full,
and runs the real gpuserve.vllm.vllm_serve_preflight module through ansible-playbook against a
real vLLM env built by tests/support/vllm_full_env.py (all dependencies, torch included).
This machine has no GPU: compute capability 12.0 is given. It prints:

- cold (--cold): the first run after the env's files were dropped from the page cache
  (posix_fadvise DONTNEED on the env's files only; nothing else on the machine is touched);
- warm: judged runs (no verdict cache), the module's wall time and the probe's stages
  (import vllm, parser, configs, attention backends);
- cached: a run that stores the verdict, then unchanged re-runs answered from the verdict cache
  (an accepted verdict with every check run is needed: 0.18.0, 0.33.0 (the CUDA stub libcuda it
  ships stands in for the driver), or 0.17.0 with --pythonpath to a patched overlay);
- before/after (--before REV): the probe of git revision REV and the working tree's probe run
  directly (no Ansible) on the same request, alternately, wall and CPU seconds each.

Usage: source tests/env.sh && python3 benchmarks/bench_vllm_preflight.py [--version 0.18.0]
       [--runs 3] [--cached-runs 3] [--cold] [--before 24a56a3] [--pythonpath DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
PROBE = "plugins/module_utils/_vllm/_preflight_probe.py"
# The probe's stages: files it imports by name from its own directory.
STAGES = ("plugins/module_utils/_vllm/_preflight_backends.py", "plugins/module_utils/_vllm/_preflight_stub.py")


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


def evict(root: Path) -> int:
    """Drop root's files from the page cache (only them); the number of files."""
    count = 0
    for base, _dirs, files in os.walk(root):
        for name in files:
            try:
                fd = os.open(os.path.join(base, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                count += 1
            finally:
                os.close(fd)
    return count


def module_run(label: str, python: Path, argv: list, work: Path, env: dict,
               cache_dir: str = "") -> float:
    start = time.monotonic()
    result = playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "gpuserve.vllm.vllm_serve_preflight": {
            "python": str(python), "argv": argv, "compute_capability": "12.0",
            "fail_on_problems": False, "cache_dir": cache_dir}}]}], work, env)
    wall = time.monotonic() - start
    verdict = "accepted" if not result.get("problems") else \
        f"{len(result['problems'])} problem(s): {result['problems'][0]['check']}"
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in (result.get("timings") or {}).items())
    cache = f"; cache: {result['cache'][:60]}" if result.get("cache") else ""
    print(f"{label}: {wall:.1f} s wall (ansible-playbook), module {result.get('seconds')} s "
          f"[{stages}] -> {verdict}{cache}", flush=True)
    return wall


def sources(revision: str) -> dict[str, str]:
    """The probe and its stages at a git revision ("": the working tree), by file name; a stage
    that revision does not have is left out (the probe was one file before)."""
    found = {}
    for path in (PROBE, *STAGES):
        if not revision:
            found[Path(path).name] = (REPO / path).read_text()
            continue
        shown = subprocess.run(["git", "-C", str(REPO), "show", f"{revision}:{path}"],
                               capture_output=True, text=True, check=path == PROBE)
        if shown.returncode == 0:
            found[Path(path).name] = shown.stdout
    return found


def direct(files: dict[str, str], python: Path, argv: list, work: Path, env: dict) -> tuple[float, float]:
    """Wall and CPU seconds of one probe process run on the request, as the module runs it."""
    request = {"argv": argv, "compute_capability": "12.0", "variables": {},
               "result_path": str(work / "direct.json")}
    (work / "direct-request.json").write_text(json.dumps(request))
    for name, text in files.items():  # files, as the module writes them (the probe may re-run)
        (work / name).write_text(text)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run([str(python), str(work / Path(PROBE).name), str(work / "direct-request.json")],
                   env=dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", PYTHONDONTWRITEBYTECODE="1",
                            **env), cwd=work, capture_output=True, check=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="0.18.0")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cached-runs", type=int, default=3)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--before", default="", help="git revision whose probe to compare")
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
    if opts.cold:
        files = evict(vllm_full_env.env_dir(opts.version))
        module_run(f"cold ({files} env files dropped from the page cache)", python, argv, work, env)
    walls = [module_run(f"warm {n}", python, argv, work, env) for n in range(1, opts.runs + 1)]
    print(f"warm: median {statistics.median(walls):.1f} s over {len(walls)} judged runs")
    cache_dir = str(work / "verdict-cache")
    module_run("cached 0 (judges, stores)", python, argv, work, env, cache_dir)
    hits = [module_run(f"cached {n}", python, argv, work, env, cache_dir)
            for n in range(1, opts.cached_runs + 1)]
    if hits:
        print(f"cached: median {statistics.median(hits):.2f} s over {len(hits)} runs "
              "(ansible-playbook included)")
    if opts.before:
        trees = {opts.before: sources(opts.before), "working tree": sources("")}
        rows: dict[str, list] = {label: [] for label in trees}
        for number in range(max(1, opts.runs)):
            for position, (label, files) in enumerate(trees.items()):
                run_dir = work / f"direct-{number}-{position}"  # one revision's files only
                run_dir.mkdir()
                rows[label].append(direct(files, python, argv, run_dir, env))
        for label, runs in rows.items():
            walls, cpus = [w for w, _c in runs], [c for _w, c in runs]
            print(f"probe of {label}: median {statistics.median(walls):.1f} s wall, "
                  f"{statistics.median(cpus):.1f} s CPU over {len(runs)} runs "
                  f"(walls {', '.join(f'{w:.1f}' for w in walls)})")
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} (shared; "
          "the target < 20 s is for a node)")


if __name__ == "__main__":
    main()
