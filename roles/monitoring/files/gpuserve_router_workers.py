# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The workers a vllm-router lists, for node_exporter's textfile collector: the "unrouted" signal.

Installed by gpuserve.vllm.monitoring on the router hosts and run from a systemd timer:

    gpuserve_router_workers.py /etc/gpuserve/router-workers.json /var/lib/prometheus/node-exporter/gpuserve_router.prom

The router's own exporter keeps a removed worker's vllm_router_worker_health series, so Prometheus
cannot tell from it that a node left the router. This script reads the router's `/workers` (the
list the serve plays add to and remove from) and writes, for each worker the inventory expects
(the JSON file: {"router": URL, "workers": {worker URL: node name}}):

    gpuserve_router_worker_listed{node="gpu01",worker="http://gpu01:8000"}  1 listed, 0 not listed

and a listed worker the inventory does not know with no node label -- unless its host is one
node's (that node under its old port, during a drained port move: labelled with that node). When `/workers` does not
answer, no gpuserve_router_worker_listed is written at all (unknown, not "unlisted") and
gpuserve_router_workers_read_success is 0. gpuserve_router_workers_timestamp_seconds is when the
file was written, so a stopped timer shows as a stale file. The file is replaced atomically.
It runs under the system python and imports only gpuserve_textfile.py, installed beside it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import typing as t
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # gpuserve_textfile, installed beside it
from gpuserve_textfile import label as _label, write_atomic  # noqa: E402

SUCCESS = "gpuserve_router_workers_read_success"
BODY_LIMIT = 4 * 1024 * 1024
TIMESTAMP = "gpuserve_router_workers_timestamp_seconds"
LISTED = "gpuserve_router_worker_listed"


def listed_urls(body: t.Any) -> list[str] | None:
    """The worker URLs of a /workers answer ({"workers": [{"url": ...}, ...]}); None for anything else."""
    if not isinstance(body, dict) or not isinstance(body.get("workers"), list):
        return None
    urls = [str(w.get("url", "")).rstrip("/") for w in body["workers"] if isinstance(w, dict)]
    return [url for url in urls if url]


def render(expected: t.Mapping[str, str], listed: t.Sequence[str] | None, now: float) -> str:
    """The textfile: `listed` None = the router did not answer (no listed series, success 0)."""
    lines = [f"# HELP {SUCCESS} 1 when the router's /workers answered, 0 when not (then no {LISTED} is written).",
             f"# TYPE {SUCCESS} gauge", f"{SUCCESS} {0 if listed is None else 1}",
             f"# HELP {TIMESTAMP} When gpuserve_router_workers.py last wrote this file (a stale value: its timer stopped).",
             f"# TYPE {TIMESTAMP} gauge", f"{TIMESTAMP} {now:.3f}"]
    if listed is not None:
        present = set(listed)
        lines += [f"# HELP {LISTED} 1 when the router lists the worker, 0 when the inventory expects it and the router does not.",
                  f"# TYPE {LISTED} gauge"]
        for url in sorted(expected):
            lines.append(f'{LISTED}{{node="{_label(expected[url])}",worker="{_label(url)}"}} {1 if url in present else 0}')
        for url in sorted(present - set(expected)):
            node = _owner(url, expected)
            lines.append(f'{LISTED}{{node="{_label(node)}",worker="{_label(url)}"}} 1' if node
                         else f'{LISTED}{{worker="{_label(url)}"}} 1')
    return "\n".join(lines) + "\n"


def _host(url: str) -> str:
    try:
        return (urllib.parse.urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def _owner(url: str, expected: t.Mapping[str, str]) -> str:
    """The fleet node a listed URL the inventory does not name belongs to: the one node whose
    expected URL has its host (its old port, during a drained port move); "" for a host no node
    or two nodes have (a stranger: VllmRouterUnknownWorker)."""
    nodes = {node for known, node in expected.items() if _host(known) and _host(known) == _host(url)}
    return nodes.pop() if len(nodes) == 1 else ""


def read_workers(router: str, timeout: float = 10.0) -> list[str] | None:
    try:
        with urllib.request.urlopen(f"{router.rstrip('/')}/workers", timeout=timeout) as response:
            body = response.read(BODY_LIMIT + 1)  # root runs this: the answer's size is capped
        if len(body) > BODY_LIMIT:
            raise ValueError(f"the answer is over {BODY_LIMIT} bytes: not read")
        return listed_urls(json.loads(body))
    except (OSError, ValueError) as exc:  # refused, timed out, HTTP error, not JSON
        sys.stderr.write(f"{router}/workers did not answer: {exc}\n")
        return None


def main(argv: t.Sequence[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: gpuserve_router_workers.py <config.json> <textfile.prom>\n")
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        config = json.load(handle)
    expected = {str(url).rstrip("/"): str(node) for url, node in dict(config.get("workers") or {}).items()}
    listed = read_workers(str(config["router"]))
    write_atomic(argv[1], render(expected, listed, time.time()))
    return 0 if listed is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
