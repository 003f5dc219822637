# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node's vLLM was started with, and whether a site.yml run holds the fleet: the "differs
from the fleet's" signal, for node_exporter's textfile collector.

Installed by gpuserve.vllm.monitoring on the GPU nodes and on the run lock's host, and run from a
systemd timer:

    gpuserve_serving_state.py /etc/gpuserve/serving-state.json /var/lib/prometheus/node-exporter/gpuserve_serving.prom

The JSON file: {"node": name, "start_record": path or "", "lock": path or ""}. The start record is
the one vllm.service writes at each start (gpuserve.vllm's vllm_start_record.py, root's): what the
running server loaded, not what is on disk now. From it:

    gpuserve_vllm_serving_info{node,vllm_version,env,model,drafter} 1

(`env` the env directory's name, content-addressed by ml_env; `model` and `drafter` the revision
directory's name and the first 12 hex of its manifest's digest or of the commits `hf download`
recorded, or "unreadable" where the start could not read them), and the start's time. No record: no info series (no server ever started); a record
that cannot be read: no info series and gpuserve_vllm_serving_read_success 0 (unknown, not
"nothing served").

On the run lock's host (site.yml's gpuserve_lock_host), from the lock file: gpuserve_fleet_run_locked
1 while a run holds it, 0 when there is none, and the holder's last heartbeat; a lock file that
cannot be read writes neither, and gpuserve_fleet_run_lock_read_success 0. The file is replaced
atomically. It runs under the system python and imports only gpuserve_textfile.py, installed beside it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import typing as t

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # gpuserve_textfile, installed beside it
from gpuserve_textfile import label as _label, write_atomic  # noqa: E402

INFO = "gpuserve_vllm_serving_info"
STARTED = "gpuserve_vllm_serving_started_timestamp_seconds"
SUCCESS = "gpuserve_vllm_serving_read_success"
LOCKED = "gpuserve_fleet_run_locked"
HEARTBEAT = "gpuserve_fleet_run_heartbeat_timestamp_seconds"
LOCK_SUCCESS = "gpuserve_fleet_run_lock_read_success"
TIMESTAMP = "gpuserve_serving_state_timestamp_seconds"
UNREADABLE = object()


def revision(identity: t.Any) -> str:
    """A start record's checkpoint identity ("<real path> manifest sha256:<hex>", "<real path>
    commits sha256:<hex>", "<real path>", "absent" or "unreadable: <why>") without the path's
    directories, which may differ between nodes holding the same revision: "<commit dir>
    manifest <12 hex>"; a refused read is "unreadable", without its why."""
    text = str(identity or "absent")
    if text in ("absent", "unreadable") or text.startswith("unreadable:"):
        return text.split(":", 1)[0]
    for marker in (" manifest ", " commits "):
        path, found, rest = text.partition(marker)
        if found:
            return f"{os.path.basename(path.rstrip('/'))}{marker}{rest.split(':', 1)[-1][:12]}"
    return os.path.basename(text.rstrip("/"))


def read_record(path: str, key: str) -> t.Any:
    """The JSON mapping at path holding `key`; None when there is no file; UNREADABLE otherwise."""
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"{path}: cannot be read ({exc})\n")
        return UNREADABLE
    if not isinstance(record, dict) or not record.get(key):
        sys.stderr.write(f"{path}: not a record with {key}\n")
        return UNREADABLE
    return record


def serving_lines(node: str, record: t.Any) -> list[str]:
    """The serving series of one node from its start record (None: none; UNREADABLE: unknown)."""
    lines = [f"# HELP {SUCCESS} 1 when the start record was read or there is none, 0 when it could not be read.",
             f"# TYPE {SUCCESS} gauge", f'{SUCCESS}{{node="{_label(node)}"}} {0 if record is UNREADABLE else 1}']
    fingerprint = record.get("fingerprint") if isinstance(record, dict) else None
    if not isinstance(fingerprint, dict):
        return lines
    env = os.path.basename(str(record.get("env") or "").rstrip("/")) or "absent"
    labels = (f'node="{_label(node)}",vllm_version="{_label(record.get("vllm_version") or "unknown")}",'
              f'env="{_label(env)}",model="{_label(revision(fingerprint.get("model")))}",'
              f'drafter="{_label(revision(fingerprint.get("drafter")))}"')
    lines += [f"# HELP {INFO} What the node's vLLM loaded at its last start (its start record).",
              f"# TYPE {INFO} gauge", f"{INFO}{{{labels}}} 1"]
    if isinstance(record.get("at"), (int, float)):
        lines += [f"# HELP {STARTED} When the node's vLLM last started (its start record).",
                  f"# TYPE {STARTED} gauge", f'{STARTED}{{node="{_label(node)}"}} {float(record["at"]):.3f}']
    return lines


def lock_lines(record: t.Any) -> list[str]:
    """The run lock's series from its file (None: no run holds it; UNREADABLE: unknown)."""
    lines = [f"# HELP {LOCK_SUCCESS} 1 when site.yml's run lock file was read or there is none, 0 when not.",
             f"# TYPE {LOCK_SUCCESS} gauge", f"{LOCK_SUCCESS} {0 if record is UNREADABLE else 1}"]
    if record is UNREADABLE:
        return lines
    lines += [f"# HELP {LOCKED} 1 while a site.yml run holds the fleet's run lock, 0 when none does.",
              f"# TYPE {LOCKED} gauge", f"{LOCKED} {0 if record is None else 1}"]
    beat = (record.get("heartbeat") or record.get("started")) if isinstance(record, dict) else None
    if isinstance(beat, (int, float)):
        lines += [f"# HELP {HEARTBEAT} The lock holder's last heartbeat (each play of site.yml renews it).",
                  f"# TYPE {HEARTBEAT} gauge", f"{HEARTBEAT} {float(beat):.3f}"]
    return lines


def render(config: t.Mapping[str, t.Any], record: t.Any, lock: t.Any, now: float) -> str:
    """The textfile: the serving series where the config names a start record, the lock's where it names a lock."""
    lines = [f"# HELP {TIMESTAMP} When gpuserve_serving_state.py last wrote this file (a stale value: its timer stopped).",
             f"# TYPE {TIMESTAMP} gauge", f"{TIMESTAMP} {now:.3f}"]
    if config.get("start_record"):
        lines += serving_lines(str(config.get("node") or ""), record)
    if config.get("lock"):
        lines += lock_lines(lock)
    return "\n".join(lines) + "\n"


def main(argv: t.Sequence[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: gpuserve_serving_state.py <config.json> <textfile.prom>\n")
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        config = json.load(handle)
    record = read_record(str(config["start_record"]), "fingerprint") if config.get("start_record") else None
    lock = read_record(str(config["lock"]), "run_id") if config.get("lock") else None
    write_atomic(argv[1], render(config, record, lock, time.time()))
    return 1 if record is UNREADABLE or lock is UNREADABLE else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
