"""What does a task that uses one gpuserve.vllm filter cost the controller?  (figures only)

ansible-core runs each task in a worker process forked for it, and finds a collection's filter
by loading every file of the collection's plugins/filter there (ansible.plugins.loader.
Jinja2Loader.get_with_context), at the worker's first use of any of them. So what those files
import at their top is paid again by every task that uses a gpuserve filter, whichever filter.

This runs `ansible-playbook -c local` on localhost with N `set_fact` tasks, each templating one
filter: ansible.builtin.urlsplit (the baseline), then gpuserve.vllm.vllm_is_loopback (its file
imports one small engine) and gpuserve.vllm.vllm_node_serving (the serve plays' own). The
playbooks run alternated (A, B, C, A, B, C, ...) so that the machine's drift falls on all of
them. Printed: the median CPU seconds of each playbook (ansible-playbook and its workers) and,
per task, what the gpuserve filter costs over the builtin one. No timed asserts.

Usage: source tests/env.sh && python3 benchmarks/bench_filter_load.py [--tasks 20] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FILTERS = {
    "ansible.builtin.urlsplit (baseline)": "'http://127.0.0.1:8000' | ansible.builtin.urlsplit",
    "gpuserve.vllm.vllm_is_loopback": "'http://127.0.0.1:8000' | gpuserve.vllm.vllm_is_loopback",
    "gpuserve.vllm.vllm_node_serving": "{} | gpuserve.vllm.vllm_node_serving",
}


def write_playbook(folder: Path, index: int, expression: str, tasks: int) -> Path:
    lines = ["- name: One filter per task", "  hosts: localhost", "  gather_facts: false", "  tasks:"]
    for n in range(tasks):
        lines += [f"    - name: Task {n}", "      ansible.builtin.set_fact:",
                  f"        bench_{n}: \"{{{{ {expression} }}}}\""]
    path = folder / f"playbook-{index}.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def cpu_of(playbook: Path) -> float:
    """CPU seconds (user + system) of one ansible-playbook run and its workers."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(playbook)], check=True,
                   capture_output=True, cwd=REPO, env=dict(os.environ, ANSIBLE_NOCOLOR="1"))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20, help="set_fact tasks in each playbook")
    parser.add_argument("--runs", type=int, default=5, help="runs of each playbook (alternated)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-filter-load-") as tmp:
        books = {name: write_playbook(Path(tmp), i, expr, args.tasks) for i, (name, expr) in enumerate(FILTERS.items())}
        for book in books.values():  # once untimed: compiled bytecode, page cache
            cpu_of(book)
        runs: dict[str, list[float]] = {name: [] for name in books}
        for _run in range(args.runs):
            for name, book in books.items():
                runs[name].append(cpu_of(book))
    baseline = next(iter(runs))
    base = statistics.median(runs[baseline])
    print(f"{args.tasks} set_fact tasks a playbook, {args.runs} runs each, alternated; "
          f"load average now {os.getloadavg()[0]:.1f}")
    for name, cpus in runs.items():
        median = statistics.median(cpus)
        extra = (median - base) / args.tasks * 1000
        print(f"  {name:40s} CPU {median:5.2f} s (min {min(cpus):.2f}, max {max(cpus):.2f})"
              + ("" if name == baseline else f"; {extra:+6.1f} ms a task over the baseline"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
