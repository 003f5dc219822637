"""Tables for plugins/module_utils/_gpu/_facts.py: collect over recorded nodes (side effects replaced).

Recordings in tests/fixtures/gpu_node (test doubles; sources in its README).
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _verdicts as gv

from gpu_node_recordings import EXPECT_RTX_PRO_6000, Node


def test_collect_healthy_box() -> None:
    facts = Node().collect()
    assert facts["gpu_present"] is True
    assert facts["no_gpu_reason"] is None
    assert facts["gpu_count"] == 8
    assert (facts["driver_version"], facts["driver_branch"]) == ("580.95.05", 580)
    assert (facts["cuda_version"], facts["cuda_version_exact"]) == ("13.0", False)
    assert facts["kernel_module"]["flavor"] == "open"
    assert facts["kernel_module"]["source"] == "/proc/driver/nvidia/version"
    assert facts["kernel_module"]["license"] == "Dual MIT/GPL"
    assert facts["topology"]["pcie_only"] is True
    assert facts["acs"]["checked"] is True and facts["acs"]["enabled_devices"] == []
    assert len(facts["pci_nvidia_gpus"]) == 8
    assert facts["kernel_log"]["source"] == "journalctl -k -b --no-pager -q"
    assert facts["kernel_log"]["xid_events"] == []
    assert facts["mig_enabled_gpus"] == [] and facts["unreadable_gpus"] == []
    assert facts["cmdline"]["p2p_safe"] is False
    assert gv.evaluate(facts, EXPECT_RTX_PRO_6000) == ([], [])


def test_collect_asks_libcuda_first() -> None:
    facts = Node(libcuda=13000).collect()
    assert (facts["cuda_version"], facts["cuda_version_exact"]) == ("13.0", True)
    assert facts["cuda_version_source"] == "cuDriverGetVersion (libcuda.so.1)"


@pytest.mark.parametrize("node, reason", [
    (Node(smi=False, proc_version=None, modinfo=False), "nvidia-smi is not installed"),
    (Node(smi_fail="nvidia-smi-failed-no-driver.txt", proc_version=None),
     "nvidia-smi failed (rc=9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
    (Node(smi_fail="nvidia-smi-no-devices.txt", smi_rc=6), "nvidia-smi failed (rc=6): No devices were found"),
])
def test_collect_without_gpu(node: Node, reason: str) -> None:
    facts = node.collect()
    assert facts["gpu_present"] is False
    assert facts["no_gpu_reason"].startswith(reason)
    assert facts["topology"] is None
    assert not any(call[1:] == ["topo", "-m"] for call in node.calls)


def test_collect_a_partly_readable_listing_is_not_no_gpu() -> None:
    facts = Node(query="nvidia-smi-query-7gpu-1-lost.txt", query_rc=15).collect()
    assert facts["gpu_present"] is True and facts["no_gpu_reason"] is None
    assert (facts["gpu_count"], facts["smi_rc"]) == (7, 15)
    assert [gpu["bus_id"] for gpu in facts["unreadable_gpus"]] == ["0000:84:00.0"]


def test_collect_reads_the_flavor_from_modinfo_when_no_module_is_loaded() -> None:
    facts = Node(proc_version=None, license="modinfo-license-proprietary.txt").collect()
    module = facts["kernel_module"]
    assert (module["flavor"], module["license"], module["source"]) == ("proprietary", "NVIDIA", "modinfo nvidia")


@pytest.mark.parametrize("node, source, reason", [
    (Node(journal="journal-k-no-entries.txt", dmesg="kernel-log-xid-mixed.txt"), "dmesg", None),
    (Node(journal=None, dmesg="kernel-log-xid79-line.txt"), "dmesg", None),
    (Node(journal="journal-k-no-entries.txt", dmesg="dmesg-not-permitted.txt", dmesg_rc=1), None,
     "journalctl -k -b has no kernel messages; dmesg failed (rc=1): dmesg: read kernel buffer failed: "
     "Operation not permitted"),
    (Node(journal=None, dmesg=None), None, "dmesg is not installed"),
])
def test_collect_kernel_log_journal_else_dmesg(node: Node, source: str | None, reason: str | None) -> None:
    log = node.collect()["kernel_log"]
    assert (log["source"], log["reason"]) == (source, reason)
    if source:
        assert log["xid_events"]


@pytest.mark.parametrize("node, reason", [
    (Node(lspci=None), "lspci is not installed (package pciutils)"),
    (Node(lspci="lspci-vvv-not-root.txt"), "lspci could not read capabilities (run as root: become: true)"),
])
def test_collect_acs_unknown(node: Node, reason: str) -> None:
    facts = node.collect()
    assert facts["acs"]["checked"] is False
    assert facts["acs"]["reason"] == reason
    _problems, advisories = gv.evaluate(facts, EXPECT_RTX_PRO_6000)
    assert advisories == ["PCIe ACS state unknown: %s." % reason]


def test_collect_keeps_going_when_topology_is_unreadable() -> None:
    facts = Node(topo="nvidia-smi-failed-no-driver.txt").collect()
    assert facts["gpu_present"] is True
    assert facts["topology"] is None
    assert "no header line" in facts["topology_error"]
