"""Tables for plugins/module_utils/_gpu_facts.py over recorded outputs of an 8x RTX PRO 6000 box.

The recordings live in tests/fixtures/gpu_node (test doubles, see its README).
"""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _gpu_facts as gf

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "gpu_node"

EXPECT_RTX_PRO_6000: dict[str, t.Any] = {
    "require_gpu": True,
    "expected_gpu_count": 8,
    "expected_gpu_name": "RTX PRO 6000",
    "expected_compute_capability": "12.0",
    "min_driver_branch": 580,
    "require_open_kernel_modules": True,
    "acs": "warn",
}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# --- nvidia-smi --query-gpu ---------------------------------------------------------------------

@pytest.mark.parametrize("name, count, driver, bus_ids, persistence", [
    ("nvidia-smi-query-8gpu.csv", 8, "580.95.05",
     ["00000000:03:00.0", "00000000:04:00.0", "00000000:43:00.0", "00000000:44:00.0",
      "00000000:83:00.0", "00000000:84:00.0", "00000000:C3:00.0", "00000000:C4:00.0"], True),
    ("nvidia-smi-query-7gpu.csv", 7, "580.95.05",
     ["00000000:03:00.0", "00000000:04:00.0", "00000000:43:00.0", "00000000:44:00.0",
      "00000000:83:00.0", "00000000:C3:00.0", "00000000:C4:00.0"], True),
    ("nvidia-smi-query-8gpu-driver-575.csv", 8, "575.57.08", None, True),
    ("nvidia-smi-query-8gpu-persistence-off.csv", 8, "580.95.05", None, False),
])
def test_parse_query_csv_recordings(name: str, count: int, driver: str,
                                    bus_ids: list[str] | None, persistence: bool) -> None:
    gpus = gf.parse_query_csv(fixture(name))
    assert len(gpus) == count
    assert [gpu["index"] for gpu in gpus] == list(range(count))
    assert {gpu["name"] for gpu in gpus} == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    assert {gpu["driver_version"] for gpu in gpus} == {driver}
    assert {gpu["compute_capability"] for gpu in gpus} == {"12.0"}
    assert {gpu["memory_total_mib"] for gpu in gpus} == {97887}
    assert {gpu["persistence_mode"] for gpu in gpus} == {persistence}
    assert all(gpu["uuid"].startswith("GPU-") for gpu in gpus)
    if bus_ids is not None:
        assert [gpu["bus_id"] for gpu in gpus] == bus_ids


@pytest.mark.parametrize("text, key, expected", [
    ("0, NVIDIA GeForce GT 710, 00000000:01:00.0, GPU-1, 470.256.02, [N/A], 2048, Disabled\n",
     "compute_capability", None),
    ("0, Tesla K80, 00000000:01:00.0, GPU-1, 470.256.02, 3.7, [N/A], [Not Supported]\n",
     "memory_total_mib", None),
    ("0, Tesla K80, 00000000:01:00.0, GPU-1, 470.256.02, 3.7, 11441, [Not Supported]\n",
     "persistence_mode", None),
    ("\n\n0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, GPU-2, 570.133.20, 9.0, 81559, Enabled\n\n",
     "name", "NVIDIA H100 80GB HBM3"),
])
def test_parse_query_csv_placeholders(text: str, key: str, expected: t.Any) -> None:
    (gpu,) = gf.parse_query_csv(text)
    assert gpu[key] == expected


@pytest.mark.parametrize("text, fragment", [
    ("0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:03:00.0\n", "has 3 fields, expected 8"),
    ("x, a, b, c, d, e, f, g\n", "index 'x' is not a number"),
])
def test_parse_query_csv_rejects_foreign_output(text: str, fragment: str) -> None:
    with pytest.raises(gf.GpuFactsError, match=fragment):
        gf.parse_query_csv(text)


def test_parse_query_csv_empty_output_lists_no_gpu() -> None:
    assert gf.parse_query_csv("") == []


@pytest.mark.parametrize("version, branch", [
    ("580.95.05", 580), ("575.57.08", 575), ("590.44", 590), ("1000", 1000),
    ("", None), (None, None), ("N/A", None), ("580.95.05-beta", None),
])
def test_driver_branch(version: str | None, branch: int | None) -> None:
    assert gf.driver_branch(version) == branch


def test_query_argv_asks_for_every_parsed_field() -> None:
    argv = gf.query_argv("/usr/bin/nvidia-smi")
    assert argv[0] == "/usr/bin/nvidia-smi"
    assert argv[1] == "--query-gpu=index,name,pci.bus_id,uuid,driver_version,compute_cap,memory.total,persistence_mode"
    assert argv[2] == "--format=csv,noheader,nounits"


# --- nvidia-smi topo -m -------------------------------------------------------------------------

def test_parse_topology_pcie_only_recording() -> None:
    topo = gf.parse_topology(fixture("nvidia-smi-topo-m-8gpu-pcie.txt"))
    assert topo["gpus"] == ["GPU%d" % i for i in range(8)]
    assert topo["nics"] == ["NIC0", "NIC1"]
    assert topo["nic_names"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    # 28 GPU pairs: 4 inside a switch, 8 inside a socket, 16 across sockets.
    assert topo["gpu_pair_links"] == {"NODE": 8, "PIX": 4, "SYS": 16}
    assert topo["nvlink"] is False
    assert topo["pcie_only"] is True
    assert topo["links"]["GPU0"]["GPU1"] == "PIX"
    assert topo["links"]["GPU0"]["GPU7"] == "SYS"
    assert topo["links"]["GPU5"]["NIC1"] == "PIX"
    assert topo["links"]["GPU3"]["GPU3"] == "X"
    assert topo["affinity"]["GPU0"] == {"cpu_affinity": "0-63,128-191", "numa_affinity": "0",
                                        "gpu_numa_id": None}
    assert topo["affinity"]["GPU6"]["numa_affinity"] == "1"
    assert "NIC0" not in topo["links"]


NVLINK_TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\tNV18\tNV18\t0-55,112-167\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tNV18\tNV18\t0-55,112-167\t0\t\tN/A\n"
    "GPU2\tNV18\tNV18\t X \tNV18\t56-111,168-223\t1\t\tN/A\n"
    "GPU3\tNV18\tNV18\tNV18\t X \t56-111,168-223\t1\t\tN/A\n"
    "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
)
# As pasted into web pages: tabs turned into runs of spaces.
SPACED_TOPO = (
    "        GPU0    GPU1    GPU2    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
    "GPU0     X      SYS     SYS     8-15,24-31      1               N/A\n"
    "GPU1    SYS      X      PHB     0-7,16-23       0               N/A\n"
    "GPU2    SYS     PHB      X      0-7,16-23       0               N/A\n"
    "\nLegend:\n"
)


@pytest.mark.parametrize("text, gpus, pair_links, nvlink, cpu_affinity_gpu1", [
    (NVLINK_TOPO, 4, {"NV18": 6}, True, "0-55,112-167"),
    (SPACED_TOPO, 3, {"PHB": 1, "SYS": 2}, False, "0-7,16-23"),
])
def test_parse_topology_variants(text: str, gpus: int, pair_links: dict[str, int], nvlink: bool,
                                 cpu_affinity_gpu1: str) -> None:
    topo = gf.parse_topology(text)
    assert len(topo["gpus"]) == gpus
    assert topo["gpu_pair_links"] == pair_links
    assert topo["nvlink"] is nvlink
    assert topo["pcie_only"] is (not nvlink)
    assert topo["affinity"]["GPU1"]["cpu_affinity"] == cpu_affinity_gpu1


@pytest.mark.parametrize("text, fragment", [
    ("No devices were found\n", "no header line"),
    ("\tGPU0\tGPU1\nGPU0\t X \tQPI\nGPU1\tQPI\t X \n", "unknown link type 'QPI'"),
    ("\tGPU0\tGPU1\nGPU0\t X \n", "row GPU0 has 1 link cells, expected 2"),
    ("\tGPU0\tGPU1\nCPU0\t X \tSYS\n", "unexpected row"),
])
def test_parse_topology_rejects_foreign_output(text: str, fragment: str) -> None:
    with pytest.raises(gf.GpuFactsError, match=fragment):
        gf.parse_topology(text)


# --- kernel module ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, version, flavor", [
    ("proc-driver-nvidia-version-580-open.txt", "580.95.05", "open"),
    ("proc-driver-nvidia-version-580-proprietary.txt", "580.95.05", "proprietary"),
    ("proc-driver-nvidia-version-575-open.txt", "575.57.08", "open"),
])
def test_parse_driver_version_file(name: str, version: str, flavor: str) -> None:
    parsed = gf.parse_driver_version_file(fixture(name))
    assert (parsed["version"], parsed["flavor"]) == (version, flavor)


def test_parse_driver_version_file_rejects_other_text() -> None:
    with pytest.raises(gf.GpuFactsError, match="no 'NVRM version:' line"):
        gf.parse_driver_version_file("GCC version: 13\n")


@pytest.mark.parametrize("text, flavor", [
    (fixture("modinfo-license-open.txt"), "open"),
    (fixture("modinfo-license-proprietary.txt"), "proprietary"),
    ("GPL\n", "unknown"),
    ("", "unknown"),
    (None, "unknown"),
])
def test_license_flavor(text: str | None, flavor: str) -> None:
    assert gf.license_flavor(text) == flavor


# --- /proc/cmdline ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, passthrough, disabled, enabled, noacs, safe", [
    (fixture("proc-cmdline-ubuntu-default.txt"), False, False, False, False, False),
    (fixture("proc-cmdline-iommu-pt.txt"), True, False, True, False, True),
    (fixture("proc-cmdline-pci-noacs.txt"), False, False, False, True, True),
    (fixture("proc-cmdline-intel-iommu-on.txt"), False, False, True, False, False),
    ("ro quiet iommu=off", False, True, False, False, True),
    ("ro amd_iommu=off", False, True, False, False, True),
    ("ro iommu.passthrough=1", True, False, False, False, True),
    ("ro iommu.passthrough=0", False, False, False, False, False),
    ("ro pci=realloc", False, False, False, False, False),
    ("ro quiet -- iommu=pt pci=noacs", False, False, False, False, False),
    ("", False, False, False, False, False),
])
def test_parse_cmdline(text: str, passthrough: bool, disabled: bool, enabled: bool, noacs: bool,
                       safe: bool) -> None:
    parsed = gf.parse_cmdline(text)
    assert (parsed["iommu_passthrough"], parsed["iommu_disabled"], parsed["iommu_enabled"],
            parsed["pci_noacs"], parsed["p2p_safe"]) == (passthrough, disabled, enabled, noacs, safe)


def test_parse_cmdline_lists_the_relevant_arguments() -> None:
    assert gf.parse_cmdline(fixture("proc-cmdline-iommu-pt.txt"))["iommu_args"] == ["amd_iommu=on", "iommu=pt"]
    assert gf.parse_cmdline(fixture("proc-cmdline-pci-noacs.txt"))["iommu_args"] == ["pci=noacs,realloc"]


# --- lspci -vvv ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, with_acs, enabled, denied", [
    ("lspci-vvv-acs-enabled.txt", 16, 16, False),
    ("lspci-vvv-acs-disabled.txt", 16, 0, False),
    ("lspci-vvv-not-root.txt", 0, 0, True),
])
def test_parse_lspci_acs(name: str, with_acs: int, enabled: int, denied: bool) -> None:
    acs = gf.parse_lspci_acs(fixture(name))
    assert len(acs["devices"]) == with_acs
    assert len(acs["enabled_devices"]) == enabled
    assert acs["access_denied"] is denied


def test_parse_lspci_acs_device_details() -> None:
    acs = gf.parse_lspci_acs(fixture("lspci-vvv-acs-enabled.txt"))
    assert acs["functions"] == 1 + 4 * (1 + 1 + 2 + 2)  # host bridge; per quadrant root, up, 2 down, 2 GPUs
    root = acs["devices"][0]
    assert root["address"] == "00:01.1"
    assert "GPP Bridge" in root["description"]
    assert root["enabled_flags"] == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]
    assert root["redirect"] is True
    assert root["control"]["TransBlk"] is False
    assert "00:01.1" in acs["enabled_devices"] and "c2:01.0" in acs["enabled_devices"]


@pytest.mark.parametrize("line, enabled, redirect", [
    ("\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-", True, False),
    ("\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir+ UpstreamFwd- EgressCtrl- DirectTrans-", True, True),
    ("\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-", False, False),
])
def test_parse_lspci_acs_flags(line: str, enabled: bool, redirect: bool) -> None:
    text = "0000:40:01.1 PCI bridge: Some bridge\n\tCapabilities: [148 v1] Access Control Services\n" + line + "\n"
    (device,) = gf.parse_lspci_acs(text)["devices"]
    assert device["address"] == "0000:40:01.1"
    assert (device["enabled"], device["redirect"]) == (enabled, redirect)


# --- collect: the side effects replaced by recordings ------------------------------------------

class Node:
    """A recorded node: which binaries exist, what they print, which files exist."""

    def __init__(self, *, smi: bool = True, query: str = "nvidia-smi-query-8gpu.csv",
                 smi_fail: str | None = None, topo: str = "nvidia-smi-topo-m-8gpu-pcie.txt",
                 proc_version: str | None = "proc-driver-nvidia-version-580-open.txt",
                 modinfo: bool = True, license: str = "modinfo-license-open.txt",
                 modversion: str = "modinfo-version-580.txt", lspci: str | None = "lspci-vvv-acs-disabled.txt",
                 cmdline: str = "proc-cmdline-ubuntu-default.txt") -> None:
        self.bins = {"nvidia-smi": smi, "modinfo": modinfo, "lspci": lspci is not None}
        self.query, self.smi_fail, self.topo = query, smi_fail, topo
        self.license, self.modversion, self.lspci = license, modversion, lspci
        self.files = {gf.CMDLINE_FILE: cmdline, gf.DRIVER_VERSION_FILE: proc_version}
        self.calls: list[list[str]] = []

    def find(self, name: str) -> str | None:
        return "/usr/bin/" + name if self.bins.get(name) else None

    def read(self, path: str) -> str | None:
        name = self.files.get(path)
        return fixture(name) if name else None

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(argv)
        tool, args = argv[0].rsplit("/", 1)[1], argv[1:]
        if tool == "nvidia-smi":
            if self.smi_fail:
                return 9, fixture(self.smi_fail), ""
            if args == gf.query_argv("x")[1:]:
                return 0, fixture(self.query), ""
            if args == ["topo", "-m"]:
                return 0, fixture(self.topo), ""
        if tool == "modinfo" and args == ["-F", "license", "nvidia"]:
            return 0, fixture(self.license), ""
        if tool == "modinfo" and args == ["-F", "version", "nvidia"]:
            return 0, fixture(self.modversion), ""
        if tool == "lspci" and args == ["-vvv"] and self.lspci:
            return 0, fixture(self.lspci), ""
        return 2, "", "no recording for %r" % argv

    def collect(self) -> dict[str, t.Any]:
        return gf.collect(self.find, self.run, self.read)


def test_collect_healthy_box() -> None:
    facts = Node().collect()
    assert facts["gpu_present"] is True
    assert facts["no_gpu_reason"] is None
    assert facts["gpu_count"] == 8
    assert (facts["driver_version"], facts["driver_branch"]) == ("580.95.05", 580)
    assert facts["kernel_module"]["flavor"] == "open"
    assert facts["kernel_module"]["source"] == gf.DRIVER_VERSION_FILE
    assert facts["kernel_module"]["license"] == "Dual MIT/GPL"
    assert facts["topology"]["pcie_only"] is True
    assert facts["acs"]["checked"] is True and facts["acs"]["enabled_devices"] == []
    assert facts["cmdline"]["p2p_safe"] is False
    assert gf.evaluate(facts, EXPECT_RTX_PRO_6000) == ([], [])


@pytest.mark.parametrize("node, reason", [
    (Node(smi=False, proc_version=None, modinfo=False), "nvidia-smi is not installed"),
    (Node(smi_fail="nvidia-smi-failed-no-driver.txt", proc_version=None),
     "nvidia-smi failed (rc=9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
])
def test_collect_without_gpu(node: Node, reason: str) -> None:
    facts = node.collect()
    assert facts["gpu_present"] is False
    assert facts["no_gpu_reason"].startswith(reason)
    assert facts["topology"] is None
    assert not any(call[1:] == ["topo", "-m"] for call in node.calls)


def test_collect_reads_the_flavor_from_modinfo_when_no_module_is_loaded() -> None:
    facts = Node(proc_version=None, license="modinfo-license-proprietary.txt").collect()
    module = facts["kernel_module"]
    assert (module["flavor"], module["license"], module["source"]) == ("proprietary", "NVIDIA", "modinfo nvidia")


@pytest.mark.parametrize("node, reason", [
    (Node(lspci=None), "lspci is not installed (package pciutils)"),
    (Node(lspci="lspci-vvv-not-root.txt"), "lspci could not read capabilities (run as root: become: true)"),
])
def test_collect_acs_unknown(node: Node, reason: str) -> None:
    facts = node.collect()
    assert facts["acs"]["checked"] is False
    assert facts["acs"]["reason"] == reason
    _problems, advisories = gf.evaluate(facts, EXPECT_RTX_PRO_6000)
    assert advisories == ["PCIe ACS state unknown: %s." % reason]


def test_collect_keeps_going_when_topology_is_unreadable() -> None:
    facts = Node(topo="nvidia-smi-failed-no-driver.txt").collect()
    assert facts["gpu_present"] is True
    assert facts["topology"] is None
    assert "no header line" in facts["topology_error"]


# --- evaluate: the refusals ---------------------------------------------------------------------

@pytest.mark.parametrize("node, overrides, codes, fragments", [
    (Node(query="nvidia-smi-query-7gpu.csv"), {}, ["gpu_count"],
     ["expected 8 NVIDIA GPUs, nvidia-smi lists 7", "Xid 79", "lower the expected count"]),
    (Node(query="nvidia-smi-query-7gpu.csv"), {"expected_gpu_count": 7}, [], []),
    (Node(query="nvidia-smi-query-8gpu-driver-575.csv", proc_version="proc-driver-nvidia-version-575-open.txt",
          modversion="modinfo-version-575.txt"), {}, ["driver_branch"],
     ["NVIDIA driver 575.57.08 is branch 575, below the required branch 580", "nvidia-driver-580-server-open"]),
    (Node(query="nvidia-smi-query-8gpu-driver-575.csv", proc_version="proc-driver-nvidia-version-575-open.txt",
          modversion="modinfo-version-575.txt"), {"min_driver_branch": 570}, [], []),
    (Node(proc_version="proc-driver-nvidia-version-580-proprietary.txt", license="modinfo-license-proprietary.txt"),
     {}, ["kernel_module"], ["proprietary", "open kernel modules", "nvidia-driver-580-server-open"]),
    (Node(proc_version="proc-driver-nvidia-version-580-proprietary.txt"),
     {"require_open_kernel_modules": False}, [], []),
    (Node(proc_version=None, modinfo=False), {}, ["kernel_module"], ["could not tell whether"]),
    (Node(), {"expected_gpu_name": "H100"}, ["gpu_name"], ["GPU0 is 'NVIDIA RTX PRO 6000 Blackwell Server Edition'"]),
    (Node(), {"expected_compute_capability": "10.0"}, ["compute_capability"], ["expected compute capability 10.0"]),
    (Node(), {"expected_gpu_name": "rtx pro 6000 blackwell"}, [], []),
    (Node(query="nvidia-smi-query-7gpu.csv", proc_version="proc-driver-nvidia-version-580-proprietary.txt"), {},
     ["gpu_count", "kernel_module"], []),
    (Node(smi=False, proc_version=None, modinfo=False), {}, ["no_gpu"], ["no NVIDIA GPU found", "rehearsal"]),
    (Node(smi=False, proc_version=None, modinfo=False), {"require_gpu": False}, [], []),
    (Node(lspci="lspci-vvv-acs-enabled.txt"), {"acs": "fail"}, ["acs"],
     ["PCIe ACS is enabled on 16 bridge(s)", "iommu=pt", "NCCL_P2P_DISABLE=1"]),
    (Node(lspci="lspci-vvv-acs-enabled.txt", cmdline="proc-cmdline-iommu-pt.txt"), {"acs": "fail"}, [], []),
    (Node(lspci="lspci-vvv-acs-enabled.txt", cmdline="proc-cmdline-pci-noacs.txt"), {"acs": "fail"}, [], []),
    (Node(lspci="lspci-vvv-acs-enabled.txt", cmdline="proc-cmdline-intel-iommu-on.txt"), {"acs": "fail"},
     ["acs"], []),
    (Node(lspci="lspci-vvv-acs-enabled.txt"), {"acs": "ignore"}, [], []),
])
def test_evaluate_problems(node: Node, overrides: dict[str, t.Any], codes: list[str],
                           fragments: list[str]) -> None:
    expect = dict(EXPECT_RTX_PRO_6000, **overrides)
    problems, _advisories = gf.evaluate(node.collect(), expect)
    assert [problem["code"] for problem in problems] == codes
    text = "\n".join(problem["message"] for problem in problems)
    for fragment in fragments:
        assert fragment in text


@pytest.mark.parametrize("node, fragments", [
    (Node(lspci="lspci-vvv-acs-enabled.txt"), ["PCIe ACS is enabled on 16 bridge(s) (00:01.1, 01:00.0,", "and 8 more"]),
    (Node(query="nvidia-smi-query-8gpu-persistence-off.csv"), ["persistence mode is off on GPU 0, 1, 2, 3, 4, 5, 6, 7"]),
    (Node(modversion="modinfo-version-575.txt"), ["loaded NVIDIA kernel module is 580.95.05 but 575.57.08 is installed"]),
    (Node(topo="nvidia-smi-failed-no-driver.txt"), ["GPU topology unknown"]),
])
def test_evaluate_advisories(node: Node, fragments: list[str]) -> None:
    problems, advisories = gf.evaluate(node.collect(), EXPECT_RTX_PRO_6000)
    assert problems == []
    assert len(advisories) == 1
    for fragment in fragments:
        assert fragment in "\n".join(advisories)


def test_each_problem_names_the_option_that_relaxes_it() -> None:
    node = Node(query="nvidia-smi-query-7gpu.csv", proc_version="proc-driver-nvidia-version-575-open.txt",
                lspci="lspci-vvv-acs-enabled.txt")
    expect = dict(EXPECT_RTX_PRO_6000, acs="fail", expected_gpu_name="H100", expected_compute_capability="9.0")
    facts = node.collect()
    facts["driver_branch"], facts["driver_version"] = 575, "575.57.08"
    problems, _advisories = gf.evaluate(facts, expect)
    assert {problem["code"]: problem["option"] for problem in problems} == {
        "gpu_count": "expected_gpu_count",
        "gpu_name": "expected_gpu_name",
        "compute_capability": "expected_compute_capability",
        "driver_branch": "min_driver_branch",
        "acs": "acs",
    }


def test_no_acs_risk_with_nvlink_or_a_single_gpu() -> None:
    facts = Node(lspci="lspci-vvv-acs-enabled.txt").collect()
    assert gf.acs_p2p_risk(facts) is True
    facts["topology"] = gf.parse_topology(NVLINK_TOPO)
    assert gf.acs_p2p_risk(facts) is False
    facts = Node(lspci="lspci-vvv-acs-enabled.txt").collect()
    facts["gpu_count"] = 1
    assert gf.acs_p2p_risk(facts) is False
