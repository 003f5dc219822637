"""Tables for plugins/module_utils/_gpu/_verdicts.py: which recorded node is refused, and why.

Recordings in tests/fixtures/gpu_node (test doubles; sources in its README).
"""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _verdicts as gv
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_smi as smi

from gpu_node_recordings import EXPECT_RTX_PRO_6000, Node

NVLINK_TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\t0-55,112-167\t0\t\tN/A\n"
    "GPU1\tNV18\t X \t0-55,112-167\t0\t\tN/A\n"
)
PROPRIETARY_NO_DEVICES = dict(smi_fail="nvidia-smi-no-devices.txt", smi_rc=6,
                              proc_version="proc-driver-nvidia-version-580-proprietary.txt",
                              license="modinfo-license-proprietary.txt")


@pytest.mark.parametrize("node, overrides, codes, fragments", [
    # count, both directions
    (Node(query="nvidia-smi-query-7gpu.csv"), {}, ["gpu_count"],
     ["expected 8 NVIDIA GPUs, nvidia-smi lists 7", "missing from nvidia-smi: 84:00.0", "Xid 79",
      "lower the expected count to 7"]),
    (Node(query="nvidia-smi-query-7gpu.csv", journal="journal-k-xid79-gpu-84.txt"), {}, ["gpu_count", "xid"],
     ["Xid 79 (GPU has fallen off the bus) on the GPU at PCI 0000:84:00", "reseat the GPU"]),
    (Node(query="nvidia-smi-query-7gpu.csv"), {"expected_gpu_count": 7}, [], []),
    (Node(query="nvidia-smi-query-16gpu.csv"), {}, ["gpu_count"],
     ["nvidia-smi lists 16", "more GPUs than the inventory says", "raise the expected count to 16"]),
    (Node(query="nvidia-smi-query-16gpu.csv"), {"expected_gpu_count": 16}, [], []),
    # driver and kernel module
    (Node(query="nvidia-smi-query-8gpu-driver-575.csv", proc_version="proc-driver-nvidia-version-575-open.txt",
          modversion="modinfo-version-575.txt"), {}, ["driver_branch"],
     ["NVIDIA driver 575.57.08 is branch 575, below the required branch 580", "nvidia-driver-580-server-open"]),
    (Node(proc_version="proc-driver-nvidia-version-580-proprietary.txt", license="modinfo-license-proprietary.txt"),
     {}, ["kernel_module"], ["proprietary", "open kernel modules", "nvidia-driver-580-server-open"]),
    (Node(proc_version="proc-driver-nvidia-version-580-proprietary.txt"), {"require_open_kernel_modules": False}, [], []),
    (Node(proc_version=None, modinfo=False), {}, ["kernel_module"], ["could not tell whether"]),
    # the proprietary module on Blackwell: "No devices were found", GPUs still on the bus
    (Node(**PROPRIETARY_NO_DEVICES), {}, ["kernel_module"],
     ["lspci sees 8 NVIDIA GPU(s)", "No devices were found", "proprietary", "nvidia-driver-580-server-open",
      "gpu_node_driver_install: true"]),
    (Node(**PROPRIETARY_NO_DEVICES, journal="kernel-log-dmesg-open-required.txt"), {"require_gpu": False},
     ["kernel_module"], ["says GPU 0000:02:00.0 requires use of the NVIDIA open kernel modules"]),
    (Node(**PROPRIETARY_NO_DEVICES), {"require_open_kernel_modules": False}, ["gpus_not_served"],
     ["lspci sees 8 NVIDIA GPU(s)", "does not serve its GPUs", "journalctl -k -b | grep NVRM"]),
    (Node(smi_fail="nvidia-smi-failed-no-driver.txt", proc_version=None), {}, ["gpus_not_served"],
     ["NVIDIA-SMI has failed"]),
    # identity
    (Node(), {"expected_gpu_name": "H100"}, ["gpu_name"], ["GPU0 is 'NVIDIA RTX PRO 6000 Blackwell Server Edition'"]),
    (Node(), {"expected_compute_capability": "10.0"}, ["compute_capability"], ["expected compute capability 10.0"]),
    (Node(), {"expected_gpu_name": "rtx pro 6000 blackwell"}, [], []),
    # health: error states, lost GPU, MIG
    (Node(query="nvidia-smi-query-8gpu-gpu5-requires-reset.csv"), {}, ["gpu_error"],
     ["GPU5 (00000000:84:00.0) is in an error state: nvidia-smi reads pstate=[GPU requires reset]", "nvidia-smi -r -i 5"]),
    (Node(query="nvidia-smi-query-8gpu-gpu2-unknown-error.csv"), {}, ["gpu_error"],
     ["GPU2 (00000000:43:00.0)", "compute_cap=[Unknown Error], pstate=[Unknown Error]"]),
    (Node(query="nvidia-smi-query-8gpu-gpu5-requires-reset.csv"), {"health_action": "warn"}, [], []),
    (Node(query="nvidia-smi-query-7gpu-1-lost.txt", query_rc=15), {}, ["gpu_unreadable"],
     ["nvidia-smi cannot open the GPU at 0000:84:00.0: GPU is lost"]),
    (Node(query="nvidia-smi-query-8gpu-mig-enabled.csv"), {}, ["mig"],
     ["MIG mode is enabled on GPU 0, 1, 2, 3, 4, 5, 6, 7", "nvidia-smi -i 0,1,2,3,4,5,6,7 -mig 0"]),
    (Node(query="nvidia-smi-query-8gpu-mig-enabled.csv"), {"allow_mig": True}, [], []),
    # Xid: fatal refused, ignored ones warned, non-fatal warned
    (Node(journal="kernel-log-xid79-line.txt"), {}, ["xid"], ["Xid 79 (GPU has fallen off the bus) on GPU3 (00000000:44:00.0)"]),
    (Node(journal="kernel-log-xid79-line.txt"), {"ignore_xids": [79]}, [], []),
    (Node(journal="kernel-log-dmesg-fallen-off-bus.txt"), {}, ["xid"], ["GPU 0000:b3:00.0 has fallen off the bus"]),
    (Node(journal="kernel-log-xid-mixed.txt"), {}, [], []),
    # no GPU at all
    (Node(smi=False, proc_version=None, modinfo=False, lspci=None), {}, ["no_gpu"],
     ["no NVIDIA GPU found", "rehearsal"]),
    (Node(smi=False, proc_version=None, modinfo=False, lspci=None), {"require_gpu": False}, [], []),
    (Node(smi_fail="nvidia-smi-failed-no-driver.txt", proc_version=None, lspci="lspci-vvv-no-nvidia.txt"), {},
     ["no_gpu"], ["no NVIDIA GPU found: nvidia-smi failed (rc=9)", "lspci sees no NVIDIA GPU either"]),
    # ACS
    (Node(lspci="lspci-vvv-acs-enabled.txt"), {"acs": "fail"}, ["acs"],
     ["PCIe ACS is enabled on 16 bridge(s)", "iommu=pt", "NCCL_P2P_DISABLE=1"]),
    (Node(lspci="lspci-vvv-acs-enabled.txt", cmdline="proc-cmdline-iommu-pt.txt"), {"acs": "fail"}, [], []),
    (Node(lspci="lspci-vvv-acs-enabled.txt", cmdline="proc-cmdline-pci-noacs.txt"), {"acs": "fail"}, [], []),
    (Node(lspci="lspci-vvv-acs-enabled.txt", cmdline="proc-cmdline-intel-iommu-on.txt"), {"acs": "fail"}, ["acs"], []),
    (Node(lspci="lspci-vvv-acs-enabled.txt"), {"acs": "ignore"}, [], []),
])
def test_evaluate_problems(node: Node, overrides: dict[str, t.Any], codes: list[str], fragments: list[str]) -> None:
    expect = dict(EXPECT_RTX_PRO_6000, **overrides)
    problems, _advisories = gv.evaluate(node.collect(), expect)
    assert [problem["code"] for problem in problems] == codes
    text = "\n".join(problem["message"] for problem in problems)
    for fragment in fragments:
        assert fragment in text
    assert "require_gpu: false" not in text or codes == ["no_gpu"]


@pytest.mark.parametrize("node, overrides, fragments", [
    (Node(lspci="lspci-vvv-acs-enabled.txt"), {}, ["PCIe ACS is enabled on 16 bridge(s) (00:01.1, 01:00.0,", "and 8 more"]),
    (Node(query="nvidia-smi-query-8gpu-persistence-off.csv"), {}, ["persistence mode is off on GPU 0, 1, 2, 3, 4, 5, 6, 7"]),
    (Node(modversion="modinfo-version-575.txt"), {}, ["loaded NVIDIA kernel module is 580.95.05 but 575.57.08 is installed"]),
    (Node(topo="nvidia-smi-failed-no-driver.txt"), {}, ["GPU topology unknown"]),
    (Node(journal="kernel-log-xid79-line.txt"), {"ignore_xids": [79]}, ["Xid 79", "ignored as asked"]),
    (Node(query="nvidia-smi-query-8gpu-gpu5-requires-reset.csv"), {"health_action": "warn"}, ["pstate=[GPU requires reset]"]),
    (Node(journal="journal-k-no-entries.txt", dmesg="dmesg-not-permitted.txt", dmesg_rc=1), {},
     ["could not read this boot's kernel log", "Operation not permitted", "become: true"]),
    (Node(**PROPRIETARY_NO_DEVICES), {"require_open_kernel_modules": False, "require_gpu": False},
     ["rehearsal on a node where lspci sees 8 NVIDIA GPU(s)"]),
])
def test_evaluate_advisories(node: Node, overrides: dict[str, t.Any], fragments: list[str]) -> None:
    problems, advisories = gv.evaluate(node.collect(), dict(EXPECT_RTX_PRO_6000, **overrides))
    assert problems == []
    assert len(advisories) == 1
    for fragment in fragments:
        assert fragment in advisories[0]


def test_non_fatal_xids_are_advisories_naming_bus_xid_and_meaning() -> None:
    problems, advisories = gv.evaluate(Node(journal="kernel-log-xid-mixed.txt").collect(), EXPECT_RTX_PRO_6000)
    assert problems == []
    assert len(advisories) == 5
    assert any(text.startswith("Xid 13 (graphics engine exception") and "PCI 0000:cb:00, 3 time(s)" in text
               for text in advisories)


def test_mig_pending_is_an_advisory() -> None:
    facts = Node().collect()
    facts["gpus"][3]["mig_pending"] = True
    problems, advisories = gv.evaluate(facts, EXPECT_RTX_PRO_6000)
    assert problems == [] and advisories == [
        "MIG mode will be enabled on GPU 3 at the next GPU reset or reboot (pending): run "
        "`nvidia-smi -i <index> -mig 0` to cancel it."]


def test_each_problem_names_the_option_that_relaxes_it() -> None:
    node = Node(query="nvidia-smi-query-7gpu.csv", proc_version="proc-driver-nvidia-version-575-open.txt",
                lspci="lspci-vvv-acs-enabled.txt", journal="kernel-log-xid79-line.txt")
    expect = dict(EXPECT_RTX_PRO_6000, acs="fail", expected_gpu_name="H100", expected_compute_capability="9.0")
    facts = node.collect()
    facts["driver_branch"], facts["driver_version"] = 575, "575.57.08"
    facts["gpus"][0]["errors"] = {"pstate": "ERR!"}
    facts["gpus"][1]["mig_enabled"] = True
    facts["mig_enabled_gpus"] = [1]
    problems, _advisories = gv.evaluate(facts, expect)
    assert {problem["code"]: problem["option"] for problem in problems} == {
        "gpu_count": "expected_gpu_count",
        "gpu_name": "expected_gpu_name",
        "compute_capability": "expected_compute_capability",
        "driver_branch": "min_driver_branch",
        "gpu_error": "health_action",
        "xid": "ignore_xids",
        "mig": "allow_mig",
        "acs": "acs",
    }


def test_no_acs_risk_with_nvlink_or_a_single_gpu() -> None:
    facts = Node(lspci="lspci-vvv-acs-enabled.txt").collect()
    assert gv.acs_p2p_risk(facts) is True
    facts["topology"] = smi.parse_topology(NVLINK_TOPO)
    assert gv.acs_p2p_risk(facts) is False
    facts = Node(lspci="lspci-vvv-acs-enabled.txt").collect()
    facts["gpu_count"] = 1
    assert gv.acs_p2p_risk(facts) is False


# A new driver on disk that this run does not reboot into (gpu_node's driver plan: checks deferred).
MISMATCH = dict(smi_fail="nvidia-smi-driver-library-mismatch-580.txt", smi_rc=18, proc_version=None)


@pytest.mark.parametrize("node, overrides, codes, fragments", [
    # the module on disk is judged: fine, the GPU checks wait for the reboot
    (Node(**MISMATCH), {}, [], []),
    (Node(**MISMATCH, modversion="modinfo-version-575.txt"), {}, ["driver_branch"],
     ["575.57.08 is branch 575, below the required branch 580"]),
    (Node(**MISMATCH, license="modinfo-license-proprietary.txt"), {}, ["kernel_module"], ["proprietary"]),
    # the packages built no module for this kernel: a problem, not a reboot into nothing
    (Node(**MISMATCH, modinfo=False), {}, ["driver_pending"], ["finds no NVIDIA kernel module on disk", "DKMS"]),
])
def test_a_pending_driver_is_judged_on_disk(node: Node, overrides: dict[str, t.Any], codes: list[str],
                                            fragments: list[str]) -> None:
    facts = node.collect()
    assert not facts["gpu_present"]
    problems, advisories = gv.evaluate(facts, dict(EXPECT_RTX_PRO_6000, reboot_pending=True, **overrides))
    assert [problem["code"] for problem in problems] == codes
    for fragment in fragments:
        assert fragment in " ".join(problem["message"] for problem in problems)
    if not codes:
        assert any("on disk is not loaded yet" in advisory and "Driver/library version mismatch" in advisory
                   for advisory in advisories), advisories


def test_without_a_pending_reboot_the_same_node_is_refused() -> None:
    problems, _advisories = gv.evaluate(Node(**MISMATCH).collect(), EXPECT_RTX_PRO_6000)
    assert [problem["code"] for problem in problems] == ["gpus_not_served"]
