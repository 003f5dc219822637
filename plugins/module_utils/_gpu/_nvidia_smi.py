# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Read what ``nvidia-smi`` prints: the per-GPU query CSV and the ``topo -m`` matrix.

Pure functions over text, so that recorded outputs of real nodes drive the unit tests. The CSV
is read even when nvidia-smi exits non-zero: with one GPU lost it still lists the others and
prints ``Unable to determine the device handle for GPU <bus id>: <reason>`` for the lost one.
Stdlib only, Python 3.9+, no Ansible imports: it runs on the managed node.
"""

from __future__ import annotations

import csv
import re
import typing as t

# Fields asked from ``nvidia-smi --query-gpu``; the CSV columns come back in this order.
QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "pci.bus_id",
    "uuid",
    "driver_version",
    "compute_cap",
    "memory.total",
    "persistence_mode",
    "pstate",
    "mig.mode.current",
    "mig.mode.pending",
)
# The keys the parsed rows use for those fields.
FIELD_KEYS: tuple[str, ...] = (
    "index",
    "name",
    "bus_id",
    "uuid",
    "driver_version",
    "compute_capability",
    "memory_total_mib",
    "persistence_mode",
    "pstate",
    "mig_mode",
    "mig_mode_pending",
)

# Placeholders for "this GPU has no such value" (consumer GPUs have no MIG, old ones no compute_cap).
_NA_VALUES = frozenset(("", "[n/a]", "n/a", "[not supported]", "not supported"))
# What nvidia-smi prints in a field whose NVML call failed: the GPU is in an error state.
# The table view prints ERR!; the CSV prints the NVML error in brackets, e.g. [GPU requires reset],
# [Unknown Error], [GPU is lost]. Any other bracketed value that is not a placeholder counts too.
_ERROR_RE = re.compile(r"^(ERR!|\[.*\])$")
_HANDLE_RE = re.compile(
    r"^Unable to determine the device handle for GPU\s*(?P<bus_id>[0-9A-Fa-f:.]+):\s*(?P<reason>.*)$")
_ROW_START_RE = re.compile(r"^\s*\d+\s*,")
_VERSION_RE = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?$")

PCIE_LINKS: tuple[str, ...] = ("X", "SYS", "NODE", "PHB", "PXB", "PIX")
_NVLINK_RE = re.compile(r"^NV\d+$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class GpuFactsError(Exception):
    """Output that does not look like what the tool prints; the message names tool and line."""


def na(value: str) -> str | None:
    """nvidia-smi's placeholders ([N/A], [Not Supported]) become None."""
    value = value.strip()
    return None if value.lower() in _NA_VALUES else value


def is_error_value(value: str | None) -> bool:
    """Whether a field reads an error state (ERR!, [GPU requires reset], [Unknown Error], ...)."""
    if not value or na(value) is None:
        return False
    return bool(_ERROR_RE.match(value.strip()))


def driver_branch(version: str | None) -> int | None:
    """The branch of a driver version ('580.95.05' -> 580); None when it is not a version."""
    if not version:
        return None
    match = _VERSION_RE.match(version.strip())
    return int(match.group(1)) if match else None


def query_argv(nvidia_smi: str) -> list[str]:
    """The nvidia-smi command line whose output parse_query_output reads."""
    return [
        nvidia_smi,
        "--query-gpu=" + ",".join(QUERY_FIELDS),
        "--format=csv,noheader,nounits",
    ]


def _mode(value: str | None) -> bool | None:
    text = (value or "").lower()
    return True if text == "enabled" else False if text == "disabled" else None


def _parse_row(lineno: int, row: list[str]) -> dict[str, t.Any]:
    if len(row) != len(QUERY_FIELDS):
        raise GpuFactsError(
            "nvidia-smi --query-gpu line %d has %d fields, expected %d (%s): %r"
            % (lineno, len(row), len(QUERY_FIELDS), ",".join(QUERY_FIELDS), ",".join(row)))
    cells = [cell.strip() for cell in row]
    errors = {field: cell for field, cell in zip(QUERY_FIELDS, cells) if is_error_value(cell)}
    gpu: dict[str, t.Any] = {
        key: (None if field in errors else na(cell))
        for key, field, cell in zip(FIELD_KEYS, QUERY_FIELDS, cells)
    }
    try:
        gpu["index"] = int(cells[0])
    except ValueError:
        raise GpuFactsError(
            "nvidia-smi --query-gpu line %d: index %r is not a number" % (lineno, row[0])) from None
    memory = gpu["memory_total_mib"]
    gpu["memory_total_mib"] = int(memory) if memory and memory.isdigit() else None
    gpu["persistence_mode"] = _mode(gpu["persistence_mode"])
    gpu["mig_enabled"] = _mode(gpu.pop("mig_mode"))
    gpu["mig_pending"] = _mode(gpu.pop("mig_mode_pending"))
    gpu["errors"] = errors
    return gpu


def parse_query_output(text: str) -> dict[str, t.Any]:
    """Output of ``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits``.

    Returns ``gpus`` (the CSV rows), ``unreadable`` (GPUs nvidia-smi could not open, with its
    reason) and ``messages`` (any other line, e.g. "No devices were found").
    """
    gpus: list[dict[str, t.Any]] = []
    unreadable: list[dict[str, str]] = []
    messages: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        handle = _HANDLE_RE.match(stripped)
        if handle:
            unreadable.append({"bus_id": handle.group("bus_id"),
                               "reason": re.sub(r"\s+", " ", handle.group("reason")).strip()})
        elif _ROW_START_RE.match(stripped) or stripped.count(",") >= len(QUERY_FIELDS) - 1:
            (row,) = list(csv.reader([stripped], skipinitialspace=True))
            gpus.append(_parse_row(lineno, row))
        else:
            messages.append(stripped)
    return {"gpus": gpus, "unreadable": unreadable, "messages": messages}


def parse_query_csv(text: str) -> list[dict[str, t.Any]]:
    """Only the rows of parse_query_output; other lines are an error (recordings, tests)."""
    parsed = parse_query_output(text)
    if parsed["unreadable"] or parsed["messages"]:
        raise GpuFactsError("nvidia-smi --query-gpu printed more than rows: %r"
                            % (parsed["messages"] + [u["bus_id"] for u in parsed["unreadable"]]))
    return parsed["gpus"]


def _split_topology_line(line: str, tabbed: bool) -> list[str]:
    if tabbed:
        return [cell.strip() for cell in line.split("\t")]
    return line.split()


def parse_topology(text: str) -> dict[str, t.Any]:
    """The matrix of ``nvidia-smi topo -m``: links between GPUs/NICs, affinities, NIC names."""
    lines = [_ANSI_RE.sub("", line.rstrip("\r\n")) for line in text.splitlines()]
    header_index = None
    for number, line in enumerate(lines):
        # The header is the first line that starts with blanks and names GPU0; rows start with it.
        if line[:1].isspace() and re.search(r"(^|\s)GPU0(\s|$)", line):
            header_index = number
            break
    if header_index is None:
        raise GpuFactsError("nvidia-smi topo -m: no header line with GPU0 found")
    header_line = lines[header_index]
    tabbed = "\t" in header_line
    if tabbed:
        header = [cell for cell in _split_topology_line(header_line, True) if cell]
    else:
        header = [cell for cell in re.split(r"\s{2,}", header_line.strip()) if cell]
    columns = [cell for cell in header if re.match(r"^(GPU|NIC)\d+$", cell)]
    meta_columns = [
        re.sub(r"\W+", "_", cell.strip().lower()).strip("_") for cell in header[len(columns):]
    ]
    if not columns or header[: len(columns)] != columns:
        raise GpuFactsError("nvidia-smi topo -m: unexpected header %r" % header_line)

    links: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict[str, str | None]] = {}
    nic_names: dict[str, str] = {}
    row_re = re.compile(r"^(GPU|NIC)\d+$")
    for line in lines[header_index + 1:]:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("Legend"):
            break
        cells = _split_topology_line(line, tabbed)
        name = cells[0]
        if not row_re.match(name):
            raise GpuFactsError("nvidia-smi topo -m: unexpected row %r" % line)
        values = cells[1:]
        if len(values) < len(columns):
            raise GpuFactsError(
                "nvidia-smi topo -m: row %s has %d link cells, expected %d"
                % (name, len(values), len(columns)))
        row_links = dict(zip(columns, values[: len(columns)]))
        for peer, link in row_links.items():
            if link not in PCIE_LINKS and not _NVLINK_RE.match(link):
                raise GpuFactsError(
                    "nvidia-smi topo -m: unknown link type %r between %s and %s" % (link, name, peer))
        links[name] = row_links
        meta_values = [value for value in values[len(columns):] if value != ""]
        affinity[name] = {key: na(value) for key, value in zip(meta_columns, meta_values)}
    for line in lines:
        match = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if match:
            nic_names[match.group(1)] = match.group(2)

    gpus = [name for name in columns if name.startswith("GPU")]
    pair_links: dict[str, int] = {}
    for position, first in enumerate(gpus):
        for second in gpus[position + 1:]:
            link = links.get(first, {}).get(second)
            if link is not None:
                pair_links[link] = pair_links.get(link, 0) + 1
    nvlink = any(_NVLINK_RE.match(link) for link in pair_links)
    return {
        "gpus": gpus,
        "nics": [name for name in columns if name.startswith("NIC")],
        "nic_names": nic_names,
        "links": {name: row for name, row in links.items() if name.startswith("GPU")},
        "affinity": {name: row for name, row in affinity.items() if name.startswith("GPU")},
        "gpu_pair_links": dict(sorted(pair_links.items())),
        "nvlink": nvlink,
        "pcie_only": bool(gpus) and not nvlink,
    }


MEMORY_QUERY_FIELDS: tuple[str, ...] = ("index", "memory.total", "memory.free")


def memory_query_argv(nvidia_smi: str) -> list[str]:
    """The nvidia-smi command line whose output parse_memory_csv reads."""
    return [nvidia_smi, "--query-gpu=" + ",".join(MEMORY_QUERY_FIELDS), "--format=csv,noheader,nounits"]


def parse_memory_csv(text: str) -> list[dict[str, t.Any]]:
    """`index, memory.total, memory.free` rows (MiB) as [{index, total_mib, free_mib}].

    A row whose values are not numbers (a GPU in an error state prints [Unknown Error] there)
    is left out, so that a caller sizing something by the free memory never guesses.
    """
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(MEMORY_QUERY_FIELDS) or not all(cell.isdigit() for cell in cells):
            continue
        rows.append({"index": int(cells[0]), "total_mib": int(cells[1]), "free_mib": int(cells[2])})
    return rows
