# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Parse what an NVIDIA GPU node says about itself, and judge it against expectations.

The gpu_preflight module is a thin wrapper around this file. Everything here is a pure
function over text (nvidia-smi CSV, ``nvidia-smi topo -m``, /proc/driver/nvidia/version,
modinfo, /proc/cmdline, ``lspci -vvv``) so that recorded outputs of a real box drive the unit
tests table by table. ``collect`` takes the three side effects (find a binary, run a command,
read a file) as arguments for the same reason.

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
)
# The keys the parsed rows use for those fields.
_FIELD_KEYS: tuple[str, ...] = (
    "index",
    "name",
    "bus_id",
    "uuid",
    "driver_version",
    "compute_capability",
    "memory_total_mib",
    "persistence_mode",
)

DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
CMDLINE_FILE = "/proc/cmdline"

FLAVOR_OPEN = "open"
FLAVOR_PROPRIETARY = "proprietary"
FLAVOR_UNKNOWN = "unknown"

ACS_CHOICES = ("warn", "fail", "ignore")

# ACSCtl flags as lspci prints them, in its order.
ACS_FLAGS: tuple[str, ...] = (
    "SrcValid",
    "TransBlk",
    "ReqRedir",
    "CmpltRedir",
    "UpstreamFwd",
    "EgressCtrl",
    "DirectTrans",
)
# The flags that send peer-to-peer requests/completions up to the root complex.
ACS_REDIRECT_FLAGS: tuple[str, ...] = ("ReqRedir", "CmpltRedir", "EgressCtrl")

# Link types of ``nvidia-smi topo -m`` (NV# is matched separately).
PCIE_LINKS: tuple[str, ...] = ("X", "SYS", "NODE", "PHB", "PXB", "PIX")
_NVLINK_RE = re.compile(r"^NV\d+$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NA_VALUES = frozenset(("", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]"))
_VERSION_RE = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?$")
_LSPCI_HEADER_RE = re.compile(
    r"^(?P<address>(?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<description>.*)$"
)

Runner = t.Callable[[t.List[str]], t.Tuple[int, str, str]]
Reader = t.Callable[[str], t.Optional[str]]
Finder = t.Callable[[str], t.Optional[str]]


class GpuFactsError(Exception):
    """Output that does not look like what the tool prints; the message names tool and line."""


def _na(value: str) -> str | None:
    """nvidia-smi's placeholders ([N/A], [Not Supported]) become None."""
    value = value.strip()
    return None if value.lower() in _NA_VALUES else value


def driver_branch(version: str | None) -> int | None:
    """The branch of a driver version ('580.95.05' -> 580); None when it is not a version."""
    if not version:
        return None
    match = _VERSION_RE.match(version.strip())
    return int(match.group(1)) if match else None


def query_argv(nvidia_smi: str) -> list[str]:
    """The nvidia-smi command line whose output parse_query_csv reads."""
    return [
        nvidia_smi,
        "--query-gpu=" + ",".join(QUERY_FIELDS),
        "--format=csv,noheader,nounits",
    ]


def parse_query_csv(text: str) -> list[dict[str, t.Any]]:
    """Rows of ``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits``."""
    gpus: list[dict[str, t.Any]] = []
    for lineno, row in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), 1):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(QUERY_FIELDS):
            raise GpuFactsError(
                "nvidia-smi --query-gpu line %d has %d fields, expected %d (%s): %r"
                % (lineno, len(row), len(QUERY_FIELDS), ",".join(QUERY_FIELDS), ",".join(row))
            )
        gpu: dict[str, t.Any] = dict(zip(_FIELD_KEYS, (_na(cell) for cell in row)))
        try:
            gpu["index"] = int(gpu["index"])
        except (TypeError, ValueError):
            raise GpuFactsError(
                "nvidia-smi --query-gpu line %d: index %r is not a number" % (lineno, row[0])
            ) from None
        memory = gpu["memory_total_mib"]
        gpu["memory_total_mib"] = int(memory) if memory and memory.isdigit() else None
        mode = (gpu["persistence_mode"] or "").lower()
        gpu["persistence_mode"] = True if mode == "enabled" else False if mode == "disabled" else None
        gpus.append(gpu)
    return gpus


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
                % (name, len(values), len(columns))
            )
        row_links = dict(zip(columns, values[: len(columns)]))
        for peer, link in row_links.items():
            if link not in PCIE_LINKS and not _NVLINK_RE.match(link):
                raise GpuFactsError(
                    "nvidia-smi topo -m: unknown link type %r between %s and %s" % (link, name, peer)
                )
        links[name] = row_links
        meta_values = [value for value in values[len(columns):] if value != ""]
        affinity[name] = {key: _na(value) for key, value in zip(meta_columns, meta_values)}
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


def parse_driver_version_file(text: str) -> dict[str, t.Any]:
    """/proc/driver/nvidia/version: the loaded module's version and open/proprietary flavour."""
    for line in text.splitlines():
        match = re.match(r"^NVRM version:\s*(?P<kind>.*?)\s+(?P<version>\d+\.\d+(?:\.\d+)?)(?:\s|$)", line)
        if match:
            kind = match.group("kind").strip()
            flavor = FLAVOR_OPEN if "open kernel module" in kind.lower() else FLAVOR_PROPRIETARY
            return {"version": match.group("version"), "flavor": flavor, "description": kind}
    raise GpuFactsError("%s: no 'NVRM version:' line found" % DRIVER_VERSION_FILE)


def license_flavor(license_text: str | None) -> str:
    """modinfo's licence of nvidia.ko: 'Dual MIT/GPL' is the open module, 'NVIDIA' proprietary."""
    value = (license_text or "").strip()
    if value == "Dual MIT/GPL":
        return FLAVOR_OPEN
    if value == "NVIDIA":
        return FLAVOR_PROPRIETARY
    return FLAVOR_UNKNOWN


def parse_cmdline(text: str) -> dict[str, t.Any]:
    """The kernel command line's IOMMU and ACS switches (arguments after '--' go to init)."""
    tokens: list[str] = []
    for token in text.split():
        if token == "--":
            break
        tokens.append(token)
    passthrough = disabled = enabled = noacs = False
    relevant: list[str] = []
    for token in tokens:
        key, _sep, value = token.partition("=")
        options = [option.strip().lower() for option in value.split(",")]
        if key == "iommu":
            relevant.append(token)
            passthrough = passthrough or "pt" in options
            disabled = disabled or "off" in options
            enabled = enabled or "force" in options or "on" in options
        elif key == "iommu.passthrough":
            relevant.append(token)
            passthrough = passthrough or options[0] in ("1", "y", "on")
        elif key in ("intel_iommu", "amd_iommu"):
            relevant.append(token)
            disabled = disabled or "off" in options
            enabled = enabled or "on" in options or "force" in options
        elif key == "pci":
            if "noacs" in options:
                relevant.append(token)
                noacs = True
    return {
        "raw": text.strip(),
        "iommu_args": relevant,
        "iommu_passthrough": passthrough,
        "iommu_disabled": disabled,
        "iommu_enabled": enabled,
        "pci_noacs": noacs,
        # Any of these keeps GPU peer-to-peer traffic off the IOMMU/ACS redirect path.
        "p2p_safe": passthrough or disabled or noacs,
    }


def _parse_acs_flags(text: str) -> dict[str, bool]:
    flags: dict[str, bool] = {}
    for match in re.finditer(r"([A-Za-z]+)([+-])", text):
        flags[match.group(1)] = match.group(2) == "+"
    return flags


def parse_lspci_acs(text: str) -> dict[str, t.Any]:
    """ACS state of every PCI function that has the capability, from ``lspci -vvv``."""
    devices: list[dict[str, t.Any]] = []
    current: dict[str, t.Any] | None = None
    functions = 0
    access_denied = False
    for line in text.splitlines():
        if line and not line[0].isspace():
            match = _LSPCI_HEADER_RE.match(line)
            if match:
                functions += 1
                current = {
                    "address": match.group("address"),
                    "description": match.group("description").strip(),
                }
            continue
        stripped = line.strip()
        if stripped.startswith("Capabilities: <access denied>"):
            access_denied = True
        elif stripped.startswith("ACSCtl:") and current is not None:
            control = _parse_acs_flags(stripped[len("ACSCtl:"):])
            enabled = [flag for flag in ACS_FLAGS if control.get(flag)]
            devices.append({
                "address": current["address"],
                "description": current["description"],
                "control": control,
                "enabled_flags": enabled,
                "enabled": bool(enabled),
                "redirect": any(control.get(flag) for flag in ACS_REDIRECT_FLAGS),
            })
    return {
        "functions": functions,
        "access_denied": access_denied,
        "devices": devices,
        "enabled_devices": [device["address"] for device in devices if device["enabled"]],
    }


def _first_line(*texts: str) -> str:
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return ""


def collect(find: Finder, run: Runner, read: Reader) -> dict[str, t.Any]:
    """Gather every fact the preflight needs; never raises for a missing tool, says why instead."""
    facts: dict[str, t.Any] = {
        "gpu_present": False,
        "no_gpu_reason": None,
        "gpus": [],
        "gpu_count": 0,
        "driver_version": None,
        "driver_branch": None,
        "topology": None,
        "topology_error": None,
        "kernel_module": {"flavor": FLAVOR_UNKNOWN, "version": None, "license": None,
                          "source": None, "installed_version": None},
        "cmdline": parse_cmdline(read(CMDLINE_FILE) or ""),
        "acs": {"checked": False, "reason": None, "functions": 0, "access_denied": False,
                "devices": [], "enabled_devices": []},
    }

    nvidia_smi = find("nvidia-smi")
    if nvidia_smi is None:
        facts["no_gpu_reason"] = "nvidia-smi is not installed (not on PATH)"
    else:
        rc, out, err = run(query_argv(nvidia_smi))
        if rc != 0:
            facts["no_gpu_reason"] = "nvidia-smi failed (rc=%d): %s" % (rc, _first_line(err, out) or "no output")
        else:
            gpus = parse_query_csv(out)
            if not gpus:
                facts["no_gpu_reason"] = "nvidia-smi lists no GPU"
            facts["gpus"] = gpus
            facts["gpu_count"] = len(gpus)
            facts["gpu_present"] = bool(gpus)
            versions = sorted({gpu["driver_version"] for gpu in gpus if gpu["driver_version"]})
            if versions:
                facts["driver_version"] = versions[0]
                facts["driver_branch"] = driver_branch(versions[0])
    if facts["gpu_present"]:
        rc, out, err = run([nvidia_smi, "topo", "-m"])  # type: ignore[list-item]
        if rc == 0:
            try:
                facts["topology"] = parse_topology(out)
            except GpuFactsError as exc:
                facts["topology_error"] = str(exc)
        else:
            facts["topology_error"] = "nvidia-smi topo -m failed (rc=%d): %s" % (rc, _first_line(err, out))

    module = facts["kernel_module"]
    version_text = read(DRIVER_VERSION_FILE)
    if version_text:
        try:
            loaded = parse_driver_version_file(version_text)
        except GpuFactsError:
            loaded = None
        if loaded:
            module.update(flavor=loaded["flavor"], version=loaded["version"], source=DRIVER_VERSION_FILE)
    modinfo = find("modinfo")
    if modinfo is not None:
        rc, out, _err = run([modinfo, "-F", "license", "nvidia"])
        if rc == 0 and out.strip():
            module["license"] = out.strip().splitlines()[0]
            rc, out, _err = run([modinfo, "-F", "version", "nvidia"])
            if rc == 0 and out.strip():
                module["installed_version"] = out.strip().splitlines()[0]
            if module["source"] is None:
                module.update(flavor=license_flavor(module["license"]),
                              version=module["installed_version"], source="modinfo nvidia")
    if facts["driver_version"] is None and module["version"]:
        facts["driver_version"] = module["version"]
        facts["driver_branch"] = driver_branch(module["version"])

    acs = facts["acs"]
    lspci = find("lspci")
    if lspci is None:
        acs["reason"] = "lspci is not installed (package pciutils)"
    else:
        rc, out, err = run([lspci, "-vvv"])
        if rc != 0:
            acs["reason"] = "lspci -vvv failed (rc=%d): %s" % (rc, _first_line(err, out))
        else:
            acs.update(parse_lspci_acs(out))
            if acs["access_denied"]:
                acs["reason"] = "lspci could not read capabilities (run as root: become: true)"
            else:
                acs["checked"] = True
    return facts


def _problem(code: str, option: str, message: str) -> dict[str, str]:
    return {"code": code, "option": option, "message": message}


def acs_p2p_risk(facts: dict[str, t.Any]) -> bool:
    """True when GPU peer traffic on a PCIe-only box crosses ACS-enabled bridges unprotected."""
    topology = facts.get("topology") or {}
    if not facts.get("gpu_present") or topology.get("nvlink"):
        return False
    if facts["gpu_count"] < 2:
        return False
    return bool(facts["acs"]["enabled_devices"]) and not facts["cmdline"]["p2p_safe"]


def evaluate(facts: dict[str, t.Any], expect: dict[str, t.Any]) -> tuple[list[dict[str, str]], list[str]]:
    """Problems (refusals, each naming the option that lowers it) and advisories for the facts.

    ``expect`` keys: require_gpu, expected_gpu_count, expected_gpu_name,
    expected_compute_capability, min_driver_branch, require_open_kernel_modules, acs
    (warn|fail|ignore). A None expectation is not checked.
    """
    problems: list[dict[str, str]] = []
    advisories: list[str] = []
    if not facts["gpu_present"]:
        if expect.get("require_gpu", True):
            problems.append(_problem(
                "no_gpu", "require_gpu",
                "no NVIDIA GPU found: %s. On a GPU node, install the NVIDIA driver and check that "
                "`nvidia-smi` lists the GPUs; on a machine without GPUs (container, CI), run as a "
                "rehearsal that does not require a GPU." % facts["no_gpu_reason"]))
        return problems, advisories

    gpus = facts["gpus"]
    expected_count = expect.get("expected_gpu_count")
    if expected_count is not None and facts["gpu_count"] != expected_count:
        listed = ", ".join("GPU%s at %s" % (gpu["index"], gpu["bus_id"]) for gpu in gpus)
        problems.append(_problem(
            "gpu_count", "expected_gpu_count",
            "expected %d NVIDIA GPUs, nvidia-smi lists %d (%s). A GPU missing from the list has "
            "usually fallen off the bus: look for Xid 79 in `dmesg | grep -i xid`, compare with "
            "`lspci -d 10de:`, then reseat or power-cycle the node; if the node really has %d "
            "GPUs, lower the expected count." % (expected_count, facts["gpu_count"], listed,
                                                 facts["gpu_count"])))

    expected_name = expect.get("expected_gpu_name")
    if expected_name:
        wrong = [gpu for gpu in gpus if expected_name.lower() not in (gpu["name"] or "").lower()]
        if wrong:
            found = "; ".join("GPU%s is %r" % (gpu["index"], gpu["name"]) for gpu in wrong)
            problems.append(_problem(
                "gpu_name", "expected_gpu_name",
                "expected every GPU name to contain %r, but %s. Check that the inventory points at "
                "the right host, or change the expected name." % (expected_name, found)))

    expected_cc = expect.get("expected_compute_capability")
    if expected_cc:
        wrong = [gpu for gpu in gpus if gpu["compute_capability"] != str(expected_cc)]
        if wrong:
            found = "; ".join("GPU%s has %s" % (gpu["index"], gpu["compute_capability"] or "none reported")
                              for gpu in wrong)
            problems.append(_problem(
                "compute_capability", "expected_compute_capability",
                "expected compute capability %s (RTX PRO 6000 Blackwell is 12.0, sm_120), but %s. "
                "A driver too old to know the GPU reports none; otherwise this is a different GPU "
                "model than the inventory says." % (expected_cc, found)))

    min_branch = expect.get("min_driver_branch")
    if min_branch is not None:
        branch = facts["driver_branch"]
        if branch is None:
            problems.append(_problem(
                "driver_branch", "min_driver_branch",
                "could not read the NVIDIA driver version (nvidia-smi and %s say nothing usable); "
                "branch >= %d is required." % (DRIVER_VERSION_FILE, min_branch)))
        elif branch < min_branch:
            problems.append(_problem(
                "driver_branch", "min_driver_branch",
                "NVIDIA driver %s is branch %d, below the required branch %d (RTX PRO 6000 Blackwell "
                "needs the %d data-center branch or newer, with the open kernel modules). Install a "
                "newer driver (Ubuntu: nvidia-driver-%d-server-open) and reboot, or lower the "
                "minimum branch." % (facts["driver_version"], branch, min_branch, min_branch,
                                     min_branch)))

    module = facts["kernel_module"]
    if expect.get("require_open_kernel_modules"):
        if module["flavor"] == FLAVOR_PROPRIETARY:
            evidence = ("license %r" % module["license"]) if module["source"] == "modinfo nvidia" \
                else "%s says proprietary" % (module["source"] or "the kernel")
            problems.append(_problem(
                "kernel_module", "require_open_kernel_modules",
                "the NVIDIA kernel module is the proprietary one (%s), but Blackwell GPUs need the "
                "open kernel modules. Install the open package of the same branch (Ubuntu: "
                "nvidia-driver-%s-server-open; NVIDIA's CUDA repository: nvidia-open), remove the "
                "proprietary one, and reboot." % (evidence, facts["driver_branch"] or "<branch>")))
        elif module["flavor"] != FLAVOR_OPEN:
            problems.append(_problem(
                "kernel_module", "require_open_kernel_modules",
                "could not tell whether the NVIDIA kernel module is the open one: %s is missing "
                "and `modinfo -F license nvidia` gave nothing (the open module says 'Dual MIT/GPL'). "
                "Check that the nvidia module is loaded (`lsmod | grep nvidia`)." % DRIVER_VERSION_FILE))
    if module["version"] and module["installed_version"] and module["version"] != module["installed_version"]:
        advisories.append(
            "the loaded NVIDIA kernel module is %s but %s is installed: a reboot is pending before "
            "the new driver is used." % (module["version"], module["installed_version"]))

    if facts["topology"] is None:
        advisories.append("GPU topology unknown: %s" % facts["topology_error"])
    acs = facts["acs"]
    mode = expect.get("acs", "warn")
    if not acs["checked"]:
        if mode != "ignore":
            advisories.append("PCIe ACS state unknown: %s." % acs["reason"])
    elif acs_p2p_risk(facts) and mode != "ignore":
        enabled = acs["enabled_devices"]
        shown = ", ".join(enabled[:8]) + (" and %d more" % (len(enabled) - 8) if len(enabled) > 8 else "")
        message = (
            "PCIe ACS is enabled on %d bridge(s) (%s) of this PCIe-only GPU box and the kernel "
            "command line has neither iommu=pt nor pci=noacs: GPU peer-to-peer traffic is "
            "redirected through the root complex and NCCL can hang or crawl. Fix: add iommu=pt "
            "(or pci=noacs) to the kernel command line and reboot, or disable ACS/VT-d in the BIOS; "
            "fallback: NCCL_P2P_DISABLE=1 (slower, no hang)." % (len(enabled), shown))
        if mode == "fail":
            problems.append(_problem("acs", "acs", message))
        else:
            advisories.append(message)
    without_persistence = [str(gpu["index"]) for gpu in gpus if gpu["persistence_mode"] is False]
    if without_persistence:
        advisories.append(
            "persistence mode is off on GPU %s: enable nvidia-persistenced so the driver stays "
            "initialised between processes." % ", ".join(without_persistence))
    return problems, advisories
