"""Tables for plugins/module_utils/_gpu/_nvidia_driver.py: driver version, flavour and CUDA version.

Recordings in tests/fixtures/gpu_node (test doubles; sources in its README). The 610-branch node
prints "CUDA UMD Version" in its banner (sgl-project/sglang#27487); nothing here reads banners.
"""

from __future__ import annotations

import ctypes
import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_driver as drv
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_smi as smi

from gpu_node_recordings import Node, fixture


@pytest.mark.parametrize("name, version, flavor", [
    ("proc-driver-nvidia-version-580-open.txt", "580.95.05", "open"),
    ("proc-driver-nvidia-version-580-proprietary.txt", "580.95.05", "proprietary"),
    ("proc-driver-nvidia-version-575-open.txt", "575.57.08", "open"),
    ("proc-driver-nvidia-version-610-open.txt", "610.43.02", "open"),
])
def test_parse_driver_version_file(name: str, version: str, flavor: str) -> None:
    parsed = drv.parse_driver_version_file(fixture(name))
    assert (parsed["version"], parsed["flavor"]) == (version, flavor)


def test_parse_driver_version_file_rejects_other_text() -> None:
    with pytest.raises(smi.GpuFactsError, match="no 'NVRM version:' line"):
        drv.parse_driver_version_file("GCC version: 13\n")


@pytest.mark.parametrize("text, flavor", [
    (fixture("modinfo-license-open.txt"), "open"),
    (fixture("modinfo-license-proprietary.txt"), "proprietary"),
    ("GPL\n", "unknown"),
    ("", "unknown"),
    (None, "unknown"),
])
def test_license_flavor(text: str | None, flavor: str) -> None:
    assert drv.license_flavor(text) == flavor


@pytest.mark.parametrize("version, cuda", [
    ("610.43.02", "13.0"), ("580.95.05", "13.0"), ("580.65.06", "13.0"), ("580.65.05", "12.9"),
    ("575.57.08", "12.9"), ("570.26", "12.8"), ("570.133.20", "12.8"), ("550.54.15", "12.4"),
    ("550.54.14", "12.4"), ("550.40.07", "12.3"), ("525.60.13", "12.0"), ("470.256.02", None),
    ("", None), (None, None), ("N/A", None),
])
def test_cuda_from_driver(version: str | None, cuda: str | None) -> None:
    assert drv.cuda_from_driver(version) == cuda


@pytest.mark.parametrize("value, cuda", [(13030, "13.3"), (12080, "12.8"), (12090, "12.9"), (0, None), (None, None)])
def test_cuda_from_int(value: int | None, cuda: str | None) -> None:
    assert drv.cuda_from_int(value) == cuda


class FakeLibcuda:
    """Stands in for libcuda.so.1: cuDriverGetVersion writes through the pointer it is given."""

    def __init__(self, version: int, status: int = 0) -> None:
        self.version, self.status = version, status

    def cuDriverGetVersion(self, pointer: t.Any) -> int:  # noqa: N802 - the C symbol's name
        ctypes.cast(pointer, ctypes.POINTER(ctypes.c_int)).contents.value = self.version
        return self.status


def _missing(_name: str) -> t.Any:
    raise OSError("libcuda.so.1: cannot open shared object file: No such file or directory")


@pytest.mark.parametrize("loader, value", [
    (lambda name: FakeLibcuda(13030), 13030),
    (lambda name: FakeLibcuda(12080, status=3), None),  # CUDA_ERROR_NOT_INITIALIZED-like failure
    (_missing, None),
])
def test_libcuda_version(loader: t.Callable[[str], t.Any], value: int | None) -> None:
    assert drv.libcuda_version(loader) == value


def test_libcuda_version_on_this_machine_has_no_driver() -> None:
    # No GPU and no NVIDIA driver on the development/CI machines: the real ctypes path says None.
    assert drv.libcuda_version() is None


@pytest.mark.parametrize("text, version", [
    (fixture("nvidia-smi-driver-version-610.txt"), "610.43.02"),
    (fixture("nvidia-smi-banner-610.txt"), None),
    ("", None),
])
def test_smi_driver_version(text: str, version: str | None) -> None:
    assert drv.smi_driver_version(text) == version


@pytest.mark.parametrize("node, version, source, cuda, exact", [
    # 610 branch, open module, libcuda answers: exact, whatever the banner prints.
    (Node(proc_version="proc-driver-nvidia-version-610-open.txt", libcuda=13030),
     "610.43.02", "/proc/driver/nvidia/version", "13.3", True),
    # 610 branch without libcuda: a lower bound from the table, never "no CUDA".
    (Node(proc_version="proc-driver-nvidia-version-610-open.txt"), "610.43.02", "/proc/driver/nvidia/version", "13.0", False),
    # No module loaded: nvidia-smi's query interface (not its banner).
    (Node(proc_version=None, driver_version="nvidia-smi-driver-version-610.txt"),
     "610.43.02", "nvidia-smi --query-gpu", "13.0", False),
    (Node(proc_version="proc-driver-nvidia-version-575-open.txt"), "575.57.08", "/proc/driver/nvidia/version", "12.9", False),
])
def test_driver_facts(node: Node, version: str, source: str, cuda: str, exact: bool) -> None:
    facts = drv.driver_facts(node.find, node.run, node.read, node.cuda_query)
    assert (facts["driver_version"], facts["driver_version_source"]) == (version, source)
    assert (facts["cuda_version"], facts["cuda_version_exact"]) == (cuda, exact)
    assert facts["reason"] is None
    assert [] == [call for call in node.calls if call[0].endswith("nvidia-smi") and len(call) == 1]


@pytest.mark.parametrize("node, reason", [
    (Node(smi=False, proc_version=None, modinfo=False),
     "/proc/driver/nvidia/version is missing (no NVIDIA kernel module loaded); nvidia-smi is not installed"),
    (Node(proc_version=None, smi_fail="nvidia-smi-failed-no-driver.txt"),
     "`nvidia-smi --query-gpu=driver_version` failed (rc=9): NVIDIA-SMI has failed"),
    (Node(proc_version=None, driver_version="nvidia-smi-banner-610.txt"),
     "`nvidia-smi --query-gpu=driver_version` printed no driver version"),
])
def test_driver_facts_without_a_driver_says_why(node: Node, reason: str) -> None:
    facts = drv.driver_facts(node.find, node.run, node.read, node.cuda_query)
    assert facts["cuda_version"] is None
    assert reason in facts["reason"]


def test_kernel_module_prefers_the_loaded_module() -> None:
    node = Node(license="modinfo-license-proprietary.txt")
    module = drv.kernel_module(node.find, node.run, node.read)
    # /proc/driver/nvidia/version (the loaded module) wins over modinfo (what is installed).
    assert (module["flavor"], module["source"], module["license"], module["installed_version"]) == (
        "open", "/proc/driver/nvidia/version", "NVIDIA", "580.95.05")


def test_read_text_file_reads_or_says_none(tmp_path: t.Any) -> None:
    version = tmp_path / "version"
    version.write_bytes(b"NVRM version: NVIDIA UNIX Open Kernel Module  580.95.05\xff\n")
    assert drv.read_text_file(str(version)).startswith("NVRM version: NVIDIA UNIX Open")
    assert drv.read_text_file(str(tmp_path / "missing")) is None
    assert drv.read_text_file(str(tmp_path)) is None  # a directory: unreadable as text


def test_driver_facts_judge_the_module_on_disk_when_it_loads_at_the_next_reboot() -> None:
    node = Node(proc_version=None, smi_fail="nvidia-smi-driver-library-mismatch-580.txt", smi_rc=18)
    assert drv.driver_facts(node.find, node.run, node.read, node.cuda_query)["cuda_version"] is None
    node.calls.clear()
    facts = drv.driver_facts(node.find, node.run, node.read, node.cuda_query, next_boot=True)
    assert (facts["driver_version"], facts["driver_version_source"]) == ("580.95.05", drv.NEXT_BOOT_SOURCE)
    assert (facts["cuda_version"], facts["reason"]) == ("13.0", None)
    assert not [call for call in node.calls if call[0].endswith("nvidia-smi")]


def test_a_loaded_driver_wins_over_next_boot() -> None:
    node = Node(modversion="modinfo-version-575.txt")
    facts = drv.driver_facts(node.find, node.run, node.read, node.cuda_query, next_boot=True)
    assert (facts["driver_version"], facts["driver_version_source"]) == ("580.95.05", "/proc/driver/nvidia/version")
