# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The PCI side of a GPU node: ``lspci -vvv`` (ACS state, NVIDIA GPUs on the bus), /proc/cmdline.

lspci sees a GPU whether or not the NVIDIA driver can drive it, so it tells "no GPU here" apart
from "GPUs the driver does not serve" (wrong kernel module flavour, a GPU lost from the driver).
Pure functions over text; stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

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

_LSPCI_HEADER_RE = re.compile(
    r"^(?P<address>(?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<description>.*)$"
)
# GPU classes (VGA 0300, 3D 0302, display 0380) of vendor NVIDIA; not its audio or bridge functions.
_NVIDIA_GPU_RE = re.compile(
    r"^(VGA compatible controller|3D controller|Display controller)(?: \[03[0-9a-f]{2}\])?: NVIDIA Corporation")
_PCI_KEY_RE = re.compile(
    r"^(?:PCI:)?(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})(?:\.[0-7])?$")


def pci_key(address: str | None) -> str | None:
    """One spelling for a PCI device: '00000000:84:00.0', '84:00.0', 'PCI:0000:84:00' -> '0000:84:00'."""
    match = _PCI_KEY_RE.match((address or "").strip())
    if not match:
        return None
    domain = int(match.group("domain") or "0", 16)
    return "%04x:%s:%s" % (domain, match.group("bus").lower(), match.group("device").lower())


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


def parse_lspci(text: str) -> dict[str, t.Any]:
    """ACS state of every PCI function with the capability, and the NVIDIA GPUs, from ``lspci -vvv``."""
    devices: list[dict[str, t.Any]] = []
    nvidia_gpus: list[dict[str, str]] = []
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
                if _NVIDIA_GPU_RE.match(current["description"]):
                    nvidia_gpus.append(dict(current))
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
        "nvidia_gpus": nvidia_gpus,
    }
