# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU metrics for node_exporter's textfile collector, from nvidia-smi's query CSV (no dcgm-exporter).

Installed by gpuserve.vllm.monitoring on GPU nodes without NVIDIA's repository and run by root
from a systemd timer:

    gpuserve_gpu_metrics.py /var/lib/prometheus/node-exporter/gpuserve_gpu.prom

It asks `nvidia-smi --query-gpu=<FIELDS> --format=csv,noheader,nounits` (the machine-readable
query, never the banner) and writes the file atomically (a temporary file renamed over it), so
node_exporter never reads half of it. The metric names are dcgm-exporter's, with its labels
(gpu, UUID, device, modelName), so the fleet's rules read these GPUs as they read dcgm-exporter's:

    DCGM_FI_DEV_GPU_TEMP           temperature.gpu                          C
    DCGM_FI_DEV_POWER_USAGE        power.draw                               W
    DCGM_FI_DEV_GPU_UTIL           utilization.gpu                          %
    DCGM_FI_DEV_FB_USED            memory.used                              MiB
    DCGM_FI_DEV_FB_FREE            memory.free                              MiB
    DCGM_FI_DEV_ECC_DBE_VOL_TOTAL  ecc.errors.uncorrected.volatile.total    count (uncorrectable, since the driver loaded)

and gpuserve_gpu_query_success (1 when nvidia-smi answered, 0 when not: the file is still written,
so a dead driver shows as 0, not as stale values). A field a GPU does not support ([N/A],
[Not Supported]) or reads in error ([GPU requires reset], ERR!) leaves that sample out.
nvidia-smi has no query field for the Xid, PCIe replay, row-remap and throttle counters: their
alerts need dcgm-exporter (docs/monitoring.md).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import typing as t

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # gpuserve_textfile, installed beside it
from gpuserve_textfile import label as _label, write_atomic  # noqa: E402

FIELDS: tuple[str, ...] = ("index", "uuid", "name", "pci.bus_id", "temperature.gpu", "power.draw",
                           "utilization.gpu", "memory.used", "memory.free", "ecc.errors.uncorrected.volatile.total")
# query field -> (metric, type, help)
METRICS: dict[str, tuple[str, str, str]] = {
    "temperature.gpu": ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C), from nvidia-smi."),
    "power.draw": ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W), from nvidia-smi."),
    "utilization.gpu": ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %), from nvidia-smi."),
    "memory.used": ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB), from nvidia-smi."),
    "memory.free": ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB), from nvidia-smi."),
    "ecc.errors.uncorrected.volatile.total": ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
                                              "Uncorrectable (double-bit) volatile ECC errors, from nvidia-smi."),
}
SUCCESS = "gpuserve_gpu_query_success"


def query_argv(nvidia_smi: str = "nvidia-smi") -> list[str]:
    return [nvidia_smi, f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits"]


def _number(value: str) -> float | None:
    try:
        return float(value.strip())
    except ValueError:  # [N/A], [Not Supported], [GPU requires reset], ERR!
        return None


def render(csv_text: str, ok: bool) -> str:
    """The textfile for nvidia-smi's CSV (rows of FIELDS); `ok` is whether nvidia-smi succeeded."""
    samples: dict[str, list[str]] = {metric: [] for metric, _kind, _help in METRICS.values()}
    rows = [row for row in csv.reader(csv_text.splitlines(), skipinitialspace=True) if len(row) == len(FIELDS)]
    for row in rows:
        values = dict(zip(FIELDS, row))
        if not values["index"].strip().isdigit():
            continue
        labels = (f'gpu="{_label(values["index"])}",UUID="{_label(values["uuid"])}",'
                  f'device="nvidia{_label(values["index"])}",modelName="{_label(values["name"])}",'
                  f'pci_bus_id="{_label(values["pci.bus_id"])}"')
        for field, (metric, _kind, _help) in METRICS.items():
            number = _number(values[field])
            if number is not None:
                samples[metric].append(f"{metric}{{{labels}}} {number:g}")
    lines = [f"# HELP {SUCCESS} 1 when nvidia-smi answered the GPU query, 0 when not.", f"# TYPE {SUCCESS} gauge",
             f"{SUCCESS} {1 if ok and rows else 0}"]
    for metric, kind, help_text in METRICS.values():
        if samples[metric]:
            lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}", *samples[metric]]
    return "\n".join(lines) + "\n"


def main(argv: t.Sequence[str]) -> int:
    if len(argv) not in (1, 2):
        sys.stderr.write("usage: gpuserve_gpu_metrics.py <textfile.prom> [nvidia-smi]\n")
        return 2
    nvidia_smi = argv[1] if len(argv) == 2 else "nvidia-smi"
    try:
        result = subprocess.run(query_argv(nvidia_smi), capture_output=True, text=True, timeout=30, check=False)
        text, ok = result.stdout, result.returncode == 0
        if not ok:
            sys.stderr.write(f"nvidia-smi exited {result.returncode}: {result.stderr.strip()}\n")
    except (OSError, subprocess.TimeoutExpired) as exc:
        sys.stderr.write(f"nvidia-smi did not answer: {exc}\n")
        text, ok = "", False
    write_atomic(argv[0], render(text, ok))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
