# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The NVIDIA driver's version, kernel module flavour and the CUDA version it supports.

One place for what both gpu_node (preflight) and vllm_install (CUDA check) need, read from
sources that stay the same across driver branches - never from the nvidia-smi banner, whose
``CUDA Version:`` became ``CUDA UMD Version:`` in the 610 branch:

- driver version: /proc/driver/nvidia/version (the loaded module), else
  ``nvidia-smi --query-gpu=driver_version``;
- CUDA version: the driver's own ``cuDriverGetVersion`` (libcuda.so.1, exact), else the driver
  version against NVIDIA's table of minimum drivers per CUDA release (a lower bound);
- flavour: /proc/driver/nvidia/version ("Open Kernel Module"), else ``modinfo -F license nvidia``.

Stdlib only, Python 3.9+, no Ansible imports; side effects come in as arguments.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_smi as smi

DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
LIBCUDA = "libcuda.so.1"

FLAVOR_OPEN = "open"
FLAVOR_PROPRIETARY = "proprietary"
FLAVOR_UNKNOWN = "unknown"

# Minimum Linux x86_64 driver of each CUDA release (CUDA Toolkit release notes, "CUDA Toolkit and
# Corresponding Driver Versions"), newest first. A driver newer than the first row supports at
# least that CUDA; libcuda gives the exact answer when it can be loaded.
CUDA_MIN_DRIVER: tuple[tuple[str, str], ...] = (
    ("13.0", "580.65.06"),
    ("12.9", "575.51.03"),
    ("12.8", "570.26"),
    ("12.6", "560.28.03"),
    ("12.5", "555.42.02"),
    ("12.4", "550.54.14"),
    ("12.3", "545.23.06"),
    ("12.2", "535.54.03"),
    ("12.1", "530.30.02"),
    ("12.0", "525.60.13"),
)

Runner = t.Callable[[t.List[str]], t.Tuple[int, str, str]]
Reader = t.Callable[[str], t.Optional[str]]
Finder = t.Callable[[str], t.Optional[str]]
CudaQuery = t.Callable[[], t.Optional[int]]


def parse_driver_version_file(text: str) -> dict[str, t.Any]:
    """/proc/driver/nvidia/version: the loaded module's version and open/proprietary flavour."""
    for line in text.splitlines():
        match = re.match(r"^NVRM version:\s*(?P<kind>.*?)\s+(?P<version>\d+\.\d+(?:\.\d+)?)(?:\s|$)", line)
        if match:
            kind = match.group("kind").strip()
            flavor = FLAVOR_OPEN if "open kernel module" in kind.lower() else FLAVOR_PROPRIETARY
            return {"version": match.group("version"), "flavor": flavor, "description": kind}
    raise smi.GpuFactsError("%s: no 'NVRM version:' line found" % DRIVER_VERSION_FILE)


def license_flavor(license_text: str | None) -> str:
    """modinfo's licence of nvidia.ko: 'Dual MIT/GPL' is the open module, 'NVIDIA' proprietary."""
    value = (license_text or "").strip()
    if value == "Dual MIT/GPL":
        return FLAVOR_OPEN
    if value == "NVIDIA":
        return FLAVOR_PROPRIETARY
    return FLAVOR_UNKNOWN


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def cuda_from_driver(version: str | None) -> str | None:
    """The newest CUDA release whose minimum driver this driver meets; None when older than all."""
    if not version or smi.driver_branch(version) is None:
        return None
    have = _version_tuple(version)
    for cuda, minimum in CUDA_MIN_DRIVER:
        if have >= _version_tuple(minimum):
            return cuda
    return None


def cuda_from_int(value: int | None) -> str | None:
    """cuDriverGetVersion's integer (12080) as CUDA's major.minor ('12.8')."""
    if not value or value <= 0:
        return None
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def libcuda_version(loader: t.Callable[[str], t.Any] | None = None) -> int | None:
    """Ask libcuda.so.1 (the driver's user-mode part) for the CUDA version it supports.

    cuDriverGetVersion needs no GPU and no cuInit; None when the library is missing or fails.
    """
    import ctypes

    try:
        library = (loader or ctypes.CDLL)(LIBCUDA)
        value = ctypes.c_int(0)
        status = library.cuDriverGetVersion(ctypes.byref(value))
    except (OSError, AttributeError):
        return None
    return value.value if status == 0 and value.value > 0 else None


def smi_driver_version(text: str) -> str | None:
    """The first version of ``nvidia-smi --query-gpu=driver_version --format=csv,noheader``."""
    for line in text.splitlines():
        value = line.strip()
        if smi.driver_branch(value) is not None:
            return value
    return None


def first_line(*texts: str) -> str:
    """The first non-blank line of the first text that has one (a command's error in one line)."""
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return ""


def read_text_file(path: str) -> str | None:
    """The Reader the modules use: a small text file, None when missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def kernel_module(find: Finder, run: Runner, read: Reader) -> dict[str, t.Any]:
    """The loaded (else installed) nvidia.ko: flavour, version, licence, and where it was read."""
    module: dict[str, t.Any] = {"flavor": FLAVOR_UNKNOWN, "version": None, "license": None,
                                "source": None, "installed_version": None}
    version_text = read(DRIVER_VERSION_FILE)
    if version_text:
        try:
            loaded = parse_driver_version_file(version_text)
        except smi.GpuFactsError:
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
    return module


NEXT_BOOT_SOURCE = "modinfo nvidia (on disk, loads at the next reboot)"


def driver_facts(find: Finder, run: Runner, read: Reader, cuda_query: CudaQuery,
                 nvidia_smi: str = "nvidia-smi", listed_version: str | None = None,
                 module: dict[str, t.Any] | None = None, next_boot: bool = False) -> dict[str, t.Any]:
    """Driver version and supported CUDA, each with its source; ``reason`` says why one is missing.

    ``listed_version`` is a driver version nvidia-smi already printed (the preflight's query);
    ``module`` the result of kernel_module when the caller has it. ``next_boot``: a new driver is
    on disk and loads at the next reboot; with no module loaded, the one on disk is judged.
    """
    module = module if module is not None else kernel_module(find, run, read)
    facts: dict[str, t.Any] = {"driver_version": None, "driver_version_source": None,
                               "cuda_version": None, "cuda_version_source": None,
                               "cuda_version_exact": False, "kernel_module": module, "reason": None}
    reasons: list[str] = []
    if module["source"] == DRIVER_VERSION_FILE:
        facts.update(driver_version=module["version"], driver_version_source=DRIVER_VERSION_FILE)
    else:
        reasons.append("%s is missing (no NVIDIA kernel module loaded)" % DRIVER_VERSION_FILE)
        if next_boot and module["installed_version"]:
            facts.update(driver_version=module["installed_version"], driver_version_source=NEXT_BOOT_SOURCE)
        elif listed_version:
            facts.update(driver_version=listed_version, driver_version_source="nvidia-smi --query-gpu")
        else:
            binary = find(nvidia_smi)
            if binary is None:
                reasons.append(("%s does not exist or is not executable" if "/" in nvidia_smi
                                else "%s is not installed (not on PATH)") % nvidia_smi)
            else:
                rc, out, err = run([binary, "--query-gpu=driver_version", "--format=csv,noheader"])
                version = smi_driver_version(out) if rc == 0 else None
                if version:
                    facts.update(driver_version=version, driver_version_source="nvidia-smi --query-gpu")
                else:
                    reasons.append("`%s --query-gpu=driver_version` %s" % (
                        nvidia_smi, ("failed (rc=%d): %s" % (rc, first_line(err, out) or "no output"))
                        if rc != 0 else "printed no driver version"))
    facts["driver_branch"] = smi.driver_branch(facts["driver_version"])

    exact = cuda_from_int(cuda_query())
    if exact:
        facts.update(cuda_version=exact, cuda_version_exact=True,
                     cuda_version_source="cuDriverGetVersion (%s)" % LIBCUDA)
    elif facts["driver_version"]:
        lower = cuda_from_driver(facts["driver_version"])
        if lower:
            facts.update(cuda_version=lower, cuda_version_source=(
                "driver %s from %s (>= %s, CUDA %s's minimum; %s could not be loaded)"
                % (facts["driver_version"], facts["driver_version_source"],
                   dict(CUDA_MIN_DRIVER)[lower], lower, LIBCUDA)))
        else:
            reasons.append("driver %s is older than any CUDA 12 release needs" % facts["driver_version"])
    if facts["cuda_version"] is None:
        facts["reason"] = "; ".join(reasons) or "%s could not be loaded" % LIBCUDA
    return facts
