"""Tables for plugins/module_utils/_gpu/_pci.py over recorded lspci -vvv and /proc/cmdline.

The recordings live in tests/fixtures/gpu_node (test doubles; their sources are in its README).
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _pci as pci

from gpu_node_recordings import fixture


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
    parsed = pci.parse_cmdline(text)
    assert (parsed["iommu_passthrough"], parsed["iommu_disabled"], parsed["iommu_enabled"],
            parsed["pci_noacs"], parsed["p2p_safe"]) == (passthrough, disabled, enabled, noacs, safe)


def test_parse_cmdline_lists_the_relevant_arguments() -> None:
    assert pci.parse_cmdline(fixture("proc-cmdline-iommu-pt.txt"))["iommu_args"] == ["amd_iommu=on", "iommu=pt"]
    assert pci.parse_cmdline(fixture("proc-cmdline-pci-noacs.txt"))["iommu_args"] == ["pci=noacs,realloc"]


# --- lspci -vvv ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, with_acs, enabled, denied", [
    ("lspci-vvv-acs-enabled.txt", 16, 16, False),
    ("lspci-vvv-acs-disabled.txt", 16, 0, False),
    ("lspci-vvv-not-root.txt", 0, 0, True),
])
def test_parse_lspci_acs(name: str, with_acs: int, enabled: int, denied: bool) -> None:
    acs = pci.parse_lspci(fixture(name))
    assert len(acs["devices"]) == with_acs
    assert len(acs["enabled_devices"]) == enabled
    assert acs["access_denied"] is denied


def test_parse_lspci_acs_device_details() -> None:
    acs = pci.parse_lspci(fixture("lspci-vvv-acs-enabled.txt"))
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
    (device,) = pci.parse_lspci(text)["devices"]
    assert device["address"] == "0000:40:01.1"
    assert (device["enabled"], device["redirect"]) == (enabled, redirect)


def test_parse_lspci_lists_the_nvidia_gpus_even_without_root() -> None:
    gpus = pci.parse_lspci(fixture("lspci-vvv-acs-disabled.txt"))["nvidia_gpus"]
    assert [gpu["address"] for gpu in gpus] == ["03:00.0", "04:00.0", "43:00.0", "44:00.0",
                                                "83:00.0", "84:00.0", "c3:00.0", "c4:00.0"]
    assert all("RTX PRO 6000 Blackwell" in gpu["description"] for gpu in gpus)


@pytest.mark.parametrize("text, gpus", [
    # lspci -nn as printed in the QuangMDoan/autonomy notes (Blackwell laptop, proprietary module)
    ("02:00.0 VGA compatible controller [0300]: NVIDIA Corporation Device [10de:2c58] (rev a1)\n"
     "02:00.1 Audio device [0403]: NVIDIA Corporation Device [10de:22e9] (rev a1)\n"
     "00:02.0 VGA compatible controller [0300]: Intel Corporation Arrow Lake-U [Intel Graphics] [8086:7d67] (rev 06)\n",
     ["02:00.0"]),
    ("0000:c1:00.0 3D controller: NVIDIA Corporation GH100 [H100 PCIe] (rev a1)\n", ["0000:c1:00.0"]),
    ("00:01.0 PCI bridge: NVIDIA Corporation Device 1ad0\n", []),
])
def test_nvidia_gpu_classes(text: str, gpus: list[str]) -> None:
    assert [gpu["address"] for gpu in pci.parse_lspci(text)["nvidia_gpus"]] == gpus


@pytest.mark.parametrize("address, key", [
    ("00000000:84:00.0", "0000:84:00"), ("84:00.0", "0000:84:00"), ("PCI:0000:84:00", "0000:84:00"),
    ("0000:C4:00.0", "0000:c4:00"), ("000f:01:00", "000f:01:00"), ("GPU0", None), (None, None),
])
def test_pci_key(address: str | None, key: str | None) -> None:
    assert pci.pci_key(address) == key
