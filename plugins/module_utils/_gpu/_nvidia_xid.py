# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What the NVIDIA driver wrote into this boot's kernel log: Xid events and refused GPUs.

Reads ``journalctl -k -b`` or ``dmesg`` text (any prefix: dmesg timestamps, journal host and
``kernel:``). Lines look like ``NVRM: Xid (PCI:0000:44:00): 79, pid=..., GPU has fallen off the
bus.``; multi-line messages (``NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:2c58)`` /
``NVRM: installed in this system requires use of the NVIDIA open kernel modules.``) are joined.
Pure functions over text; stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

# Xid -> (meaning, fatal, what to do). Meanings follow NVIDIA's Xid catalog
# (docs.nvidia.com/deploy/xid-errors). Fatal: the GPU cannot be trusted to serve until it is reset
# or the node is rebooted/serviced. The rest are application-level or recoverable: warnings.
_RESET = "drain the node, reset the GPU (nvidia-smi -r -i <index>) or reboot, and run the GPU diagnostics if it repeats"
_SERVICE = "reseat the GPU and check its power and PCIe link (or power-cycle the node), then reboot"
XID_CATALOG: dict[int, tuple[str, bool, str]] = {
    13: ("graphics engine exception (usually an application fault)", False, "check the application; repeated on one GPU, run the diagnostics"),
    31: ("GPU memory page fault (usually an application fault)", False, "check the application"),
    43: ("GPU stopped processing (an application was stopped)", False, "check the application"),
    45: ("preemptive cleanup after a previous error", False, "look at the Xid logged before it"),
    48: ("double-bit ECC error (uncorrectable memory error)", True, _RESET),
    61: ("internal micro-controller breakpoint/warning", False, "watch for repeats; report with nvidia-bug-report.sh"),
    62: ("internal micro-controller halt", True, _RESET),
    63: ("ECC page retirement or row remapping event", False, "reset the GPU when convenient so the remap takes effect"),
    64: ("ECC page retirement or row remapping failure", True, _RESET),
    68: ("video processor exception", False, "check the application"),
    69: ("graphics engine class error", False, "check the application"),
    74: ("NVLink error", True, _RESET),
    79: ("GPU has fallen off the bus", True, _SERVICE),
    92: ("high single-bit ECC error rate", False, "watch the ECC counters; service the GPU if they keep rising"),
    94: ("contained ECC error (the affected application was stopped)", False, "reset the GPU when convenient; service it if it repeats"),
    95: ("uncontained ECC error", True, _RESET),
    109: ("context switch timeout", False, "check the application; repeated, reset the GPU"),
    119: ("GSP RPC timeout (GPU firmware not responding)", True, _RESET),
    120: ("GSP error (GPU firmware fault)", True, _RESET),
    121: ("C2C link corrected error", False, "watch for repeats"),
    140: ("unrecovered ECC error", True, _RESET),
    154: ("GPU recovery action changed (reset or reboot required)", True, _RESET),
}

_XID_RE = re.compile(r"Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f:.]+)\):\s*(?P<xid>\d+)\s*,?\s*(?P<detail>.*)$")
_GPU_NOTICE_RE = re.compile(
    r"The NVIDIA GPU (?P<bus>[0-9A-Fa-f:.]+)\s*(?:\(PCI ID: (?P<pci_id>[0-9A-Fa-f:]+)\))?\s*"
    r"installed in this system (?:has )?(?P<what>requires use of the NVIDIA open kernel modules|"
    r"fallen off the bus)", re.IGNORECASE)
_DETAIL_NOISE_RE = re.compile(r"^(?:pid=[^,]*,\s*)?(?:name=[^,]*,\s*)?")


def _nvrm_segments(text: str) -> list[str]:
    """The text after ``NVRM:`` of every line that has it, prefixes dropped, in order."""
    segments = []
    for line in text.splitlines():
        position = line.find("NVRM:")
        if position >= 0:
            segments.append(line[position + len("NVRM:"):].strip())
    return segments


def describe(xid: int) -> dict[str, t.Any]:
    """Meaning, fatality and advice for an Xid; unknown numbers are warnings that say so."""
    meaning, fatal, action = XID_CATALOG.get(
        xid, ("not in this collection's table", False, "look it up in NVIDIA's Xid catalog"))
    return {"meaning": meaning, "fatal": fatal, "action": action}


def parse_kernel_log(text: str) -> dict[str, t.Any]:
    """Xid events (one per GPU and Xid, counted) and GPUs the driver refused or lost."""
    events: dict[tuple[str, int], dict[str, t.Any]] = {}
    segments = _nvrm_segments(text)
    for segment in segments:
        match = _XID_RE.match(segment)
        if not match:
            continue
        xid = int(match.group("xid"))
        key = (match.group("bus").lower(), xid)
        if key not in events:
            detail = _DETAIL_NOISE_RE.sub("", match.group("detail").strip()).strip().rstrip(".")
            events[key] = dict(describe(xid), bus_id=key[0], xid=xid, detail=detail, count=0)
        events[key]["count"] += 1
    # Multi-line notices: the GPU and the verdict come on consecutive NVRM lines.
    joined = " ".join(re.sub(r"^NVRM:\s*", "", segment) for segment in segments)
    open_required: list[str] = []
    fallen: list[str] = []
    for match in _GPU_NOTICE_RE.finditer(joined):
        target = open_required if "open kernel" in match.group("what").lower() else fallen
        bus = match.group("bus").lower()
        if bus not in target:
            target.append(bus)
    return {
        "xid_events": sorted(events.values(), key=lambda event: (not event["fatal"], event["bus_id"], event["xid"])),
        "open_module_required": open_required,
        "fallen_off_bus": fallen,
        "nvrm_lines": len(segments),
    }


def is_empty_journal(text: str) -> bool:
    """journalctl's answer when it holds no kernel messages (containers, kernel log not collected)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return not lines or lines == ["-- No entries --"]
