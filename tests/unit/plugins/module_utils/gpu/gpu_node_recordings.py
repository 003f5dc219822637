"""A recorded GPU node for the tables of module_utils/_gpu: which tools exist and what they print.

The recordings live in tests/fixtures/gpu_node (test doubles; sources in its README).
"""

from __future__ import annotations

import typing as t
from pathlib import Path

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _facts as gf
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_driver as drv
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_smi as smi

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "gpu_node"

EXPECT_RTX_PRO_6000: dict[str, t.Any] = {
    "require_gpu": True,
    "expected_gpu_count": 8,
    "expected_gpu_name": "RTX PRO 6000",
    "expected_compute_capability": "12.0",
    "min_driver_branch": 580,
    "require_open_kernel_modules": True,
    "acs": "warn",
    "allow_mig": False,
    "health_action": "fail",
    "ignore_xids": [],
}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


class Node:
    """A recorded node: which binaries exist, what they print (and exit with), which files exist."""

    def __init__(self, *, smi: bool = True, query: str = "nvidia-smi-query-8gpu.csv", query_rc: int = 0,
                 smi_fail: str | None = None, smi_rc: int = 9, topo: str = "nvidia-smi-topo-m-8gpu-pcie.txt",
                 driver_version: str = "nvidia-smi-driver-version-580.txt",
                 proc_version: str | None = "proc-driver-nvidia-version-580-open.txt",
                 modinfo: bool = True, license: str = "modinfo-license-open.txt",
                 modversion: str = "modinfo-version-580.txt", lspci: str | None = "lspci-vvv-acs-disabled.txt",
                 cmdline: str = "proc-cmdline-ubuntu-default.txt", journal: str | None = "kernel-log-clean.txt",
                 dmesg: str | None = "kernel-log-clean.txt", dmesg_rc: int = 0,
                 libcuda: int | None = None) -> None:
        self.bins = {"nvidia-smi": smi, "modinfo": modinfo, "lspci": lspci is not None,
                     "journalctl": journal is not None, "dmesg": dmesg is not None}
        self.query, self.query_rc, self.smi_fail, self.smi_rc = query, query_rc, smi_fail, smi_rc
        self.topo, self.driver_version = topo, driver_version
        self.license, self.modversion, self.lspci = license, modversion, lspci
        self.journal, self.dmesg, self.dmesg_rc, self.libcuda = journal, dmesg, dmesg_rc, libcuda
        self.files = {gf.CMDLINE_FILE: cmdline, drv.DRIVER_VERSION_FILE: proc_version}
        self.calls: list[list[str]] = []

    def find(self, name: str) -> str | None:
        return "/usr/bin/" + name if self.bins.get(name) else None

    def read(self, path: str) -> str | None:
        name = self.files.get(path)
        return fixture(name) if name else None

    def cuda_query(self) -> int | None:
        return self.libcuda

    def run(self, argv: list[str]) -> tuple[int, str, str]:  # noqa: C901 - one branch per recorded command
        self.calls.append(argv)
        tool, args = argv[0].rsplit("/", 1)[1], argv[1:]
        if tool == "nvidia-smi":
            if self.smi_fail:
                return self.smi_rc, fixture(self.smi_fail), ""
            if args == smi.query_argv("x")[1:]:
                return self.query_rc, fixture(self.query), ""
            if args == ["topo", "-m"]:
                return 0, fixture(self.topo), ""
            if args == ["--query-gpu=driver_version", "--format=csv,noheader"]:
                return 0, fixture(self.driver_version), ""
        if tool == "modinfo" and args == ["-F", "license", "nvidia"]:
            return 0, fixture(self.license), ""
        if tool == "modinfo" and args == ["-F", "version", "nvidia"]:
            return 0, fixture(self.modversion), ""
        if tool == "lspci" and args == ["-vvv"] and self.lspci:
            return 0, fixture(self.lspci), ""
        if tool == "journalctl" and args == gf.JOURNAL_ARGS and self.journal:
            return 0, fixture(self.journal), ""
        if tool == "dmesg" and args == [] and self.dmesg:
            return (0, fixture(self.dmesg), "") if self.dmesg_rc == 0 else (self.dmesg_rc, "", fixture(self.dmesg))
        return 2, "", "no recording for %r" % argv

    def collect(self) -> dict[str, t.Any]:
        return gf.collect(self.find, self.run, self.read, self.cuda_query)
