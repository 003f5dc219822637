"""The air-gapped fleet's wheelhouse: its size and build time for the example's pins, and what an
upgrade fetches.

Runs the real playbooks/build_wheelhouse.yml against inventories/example (every GPU node's and
router's install sets, from the inventory's own pins) with the nodes' platform given
(--python/--glibc; the example's hosts are not contacted), from the package index:

  first    vLLM --from with all its dependencies (torch, the CUDA wheels), uv, ml_env's pins,
           vllm-router, into an empty folder;
  upgrade  the same folder, vLLM --to: only what differs is fetched, what no set needs is removed;
  again    the same build once more: nothing fetched.

Prints files, sizes and seconds of each. Needs the index (downloads several GB once) and
`source tests/env.sh`; the folder is removed at the end (--keep leaves it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build(house: Path, version: str, args: argparse.Namespace) -> tuple[dict, float]:
    extra = {"gpuserve_wheelhouse_dir": str(house), "vllm_install_version": version,
             "vllm_install_companions": args.companions, "vllm_install_no_deps": False,
             "gpuserve_wheelhouse_platform": {"python": args.python, "glibc": args.glibc, "machine": "x86_64"}}
    started = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "-i", str(REPO / "inventories/example"),
                           str(REPO / "playbooks/build_wheelhouse.yml"), "-e", json.dumps(extra)],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "json"})
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"build of vllm=={version} failed (rc {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    data = json.loads(proc.stdout[proc.stdout.index("{"):])
    for play in data["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].startswith("Build the wheelhouse"):
                return next(iter(task["hosts"].values())), seconds
    sys.exit("no build task in the playbook's output")


def size(house: Path, names: list[str]) -> int:
    return sum((house / name).stat().st_size for name in names if (house / name).exists())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="old", default="0.17.0")
    parser.add_argument("--to", dest="new", default="0.18.0")
    parser.add_argument("--python", default="3.12", help="the nodes' Python (Ubuntu 24.04: 3.12)")
    parser.add_argument("--glibc", default="2.39", help="the nodes' glibc (Ubuntu 24.04: 2.39)")
    parser.add_argument("--companions", nargs="*", default=[], help="vllm_install_companions")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    house = Path(tempfile.mkdtemp(prefix="gpuserve-wheelhouse-bench-"))
    print(f"wheelhouse of inventories/example for Python {args.python}, glibc {args.glibc}, x86_64, in {house}")
    try:
        rows = []
        for label, version in (("first", args.old), ("upgrade", args.new), ("again", args.new)):
            result, seconds = build(house, version, args)
            fetched = result["fetched"]
            rows.append((label, version, result["files"], result["size_bytes"], len(fetched), size(house, fetched),
                         len(result["removed"]), seconds))
        print(f"{'build':8} {'vllm':8} {'files':>6} {'GiB':>7} {'fetched':>8} {'GiB':>7} {'removed':>8} {'s':>7}")
        for label, version, files, total, n_fetched, fetched_bytes, removed, seconds in rows:
            print(f"{label:8} {version:8} {files:6d} {total / 2**30:7.2f} {n_fetched:8d} {fetched_bytes / 2**30:7.2f} "
                  f"{removed:8d} {seconds:7.1f}")
        print("sets:", ", ".join(sorted(s["key"] for s in result["sets"])))
    finally:
        if not args.keep:
            shutil.rmtree(house, ignore_errors=True)


if __name__ == "__main__":
    main()
