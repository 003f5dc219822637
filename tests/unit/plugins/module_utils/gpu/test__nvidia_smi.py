"""Tables for plugins/module_utils/_gpu/_nvidia_smi.py over recorded nvidia-smi outputs.

The recordings live in tests/fixtures/gpu_node (test doubles; their sources are in its README).
"""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_smi as smi

from gpu_node_recordings import fixture


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
    gpus = smi.parse_query_csv(fixture(name))
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
    ("0, NVIDIA GeForce GT 710, 00000000:01:00.0, GPU-1, 470.256.02, [N/A], 2048, Disabled, P8, [N/A], [N/A]\n",
     "compute_capability", None),
    ("0, Tesla K80, 00000000:01:00.0, GPU-1, 470.256.02, 3.7, [N/A], [Not Supported], P0, [N/A], [N/A]\n",
     "memory_total_mib", None),
    ("0, Tesla K80, 00000000:01:00.0, GPU-1, 470.256.02, 3.7, 11441, [Not Supported], P0, [N/A], [N/A]\n",
     "persistence_mode", None),
    ("\n\n0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, GPU-2, 570.133.20, 9.0, 81559, Enabled, P0, Disabled, Disabled\n\n",
     "name", "NVIDIA H100 80GB HBM3"),
])
def test_parse_query_csv_placeholders(text: str, key: str, expected: t.Any) -> None:
    (gpu,) = smi.parse_query_csv(text)
    assert gpu[key] == expected


@pytest.mark.parametrize("text, fragment", [
    ("0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:03:00.0\n", "has 3 fields, expected 11"),
    ("x, a, b, c, d, e, f, g, h, i, j\n", "index 'x' is not a number"),
])
def test_parse_query_csv_rejects_foreign_output(text: str, fragment: str) -> None:
    with pytest.raises(smi.GpuFactsError, match=fragment):
        smi.parse_query_csv(text)


def test_parse_query_csv_empty_output_lists_no_gpu() -> None:
    assert smi.parse_query_csv("") == []


@pytest.mark.parametrize("version, branch", [
    ("580.95.05", 580), ("575.57.08", 575), ("590.44", 590), ("1000", 1000),
    ("", None), (None, None), ("N/A", None), ("580.95.05-beta", None),
])
def test_driver_branch(version: str | None, branch: int | None) -> None:
    assert smi.driver_branch(version) == branch


def test_query_argv_asks_for_every_parsed_field() -> None:
    argv = smi.query_argv("/usr/bin/nvidia-smi")
    assert argv[0] == "/usr/bin/nvidia-smi"
    assert argv[1] == ("--query-gpu=index,name,pci.bus_id,uuid,driver_version,compute_cap,memory.total,"
                       "persistence_mode,pstate,mig.mode.current,mig.mode.pending")
    assert argv[2] == "--format=csv,noheader,nounits"


@pytest.mark.parametrize("name, index, errors", [
    ("nvidia-smi-query-8gpu-gpu5-requires-reset.csv", 5, {"pstate": "[GPU requires reset]"}),
    ("nvidia-smi-query-8gpu-gpu2-unknown-error.csv", 2, {"compute_cap": "[Unknown Error]", "pstate": "[Unknown Error]"}),
])
def test_error_states_are_named_per_gpu_and_field(name: str, index: int, errors: dict[str, str]) -> None:
    gpus = smi.parse_query_csv(fixture(name))
    assert {gpu["index"]: gpu["errors"] for gpu in gpus if gpu["errors"]} == {index: errors}
    broken = gpus[index]
    # A field in an error state is not a value: [Unknown Error] must not read as "no compute capability".
    assert broken["pstate"] is None
    assert gpus[0]["pstate"] == "P0"


@pytest.mark.parametrize("value, error", [
    ("ERR!", True), ("[GPU requires reset]", True), ("[Unknown Error]", True), ("[GPU is lost]", True),
    ("[N/A]", False), ("[Not Supported]", False), ("P0", False), ("", False), (None, False),
])
def test_is_error_value(value: str | None, error: bool) -> None:
    assert smi.is_error_value(value) is error


def test_mig_mode_per_gpu() -> None:
    enabled = smi.parse_query_csv(fixture("nvidia-smi-query-8gpu-mig-enabled.csv"))
    assert [(gpu["mig_enabled"], gpu["mig_pending"]) for gpu in enabled] == [(True, True)] * 8
    disabled = smi.parse_query_csv(fixture("nvidia-smi-query-8gpu.csv"))
    assert {(gpu["mig_enabled"], gpu["mig_pending"]) for gpu in disabled} == {(False, False)}
    # Consumer GPUs print [N/A] (Syllo/nvtop#470): no MIG at all, neither enabled nor disabled.
    (gpu,) = smi.parse_query_csv("0, NVIDIA GeForce RTX 3080, 00000000:01:00.0, GPU-1, 610.43.03, 8.6, 10240, "
                                 "Disabled, P8, [N/A], [N/A]\n")
    assert (gpu["mig_enabled"], gpu["mig_pending"]) == (None, None)


def test_a_partly_readable_listing_keeps_the_rows_and_names_the_lost_gpu() -> None:
    parsed = smi.parse_query_output(fixture("nvidia-smi-query-7gpu-1-lost.txt"))
    assert len(parsed["gpus"]) == 7
    assert parsed["unreadable"] == [{"bus_id": "0000:84:00.0",
                                     "reason": "GPU is lost. Reboot the system to recover this GPU"}]
    assert parsed["messages"] == []
    with pytest.raises(smi.GpuFactsError, match="more than rows"):
        smi.parse_query_csv(fixture("nvidia-smi-query-7gpu-1-lost.txt"))


@pytest.mark.parametrize("name, messages", [
    ("nvidia-smi-no-devices.txt", ["No devices were found"]),
    ("nvidia-smi-failed-no-driver.txt", [fixture("nvidia-smi-failed-no-driver.txt").strip()]),
])
def test_messages_instead_of_rows(name: str, messages: list[str]) -> None:
    assert smi.parse_query_output(fixture(name)) == {"gpus": [], "unreadable": [], "messages": messages}


def test_sixteen_gpus() -> None:
    gpus = smi.parse_query_csv(fixture("nvidia-smi-query-16gpu.csv"))
    assert [gpu["index"] for gpu in gpus] == list(range(16))
    assert len({gpu["bus_id"] for gpu in gpus}) == 16 and len({gpu["uuid"] for gpu in gpus}) == 16


# --- nvidia-smi topo -m -------------------------------------------------------------------------

def test_parse_topology_pcie_only_recording() -> None:
    topo = smi.parse_topology(fixture("nvidia-smi-topo-m-8gpu-pcie.txt"))
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
    topo = smi.parse_topology(text)
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
    with pytest.raises(smi.GpuFactsError, match=fragment):
        smi.parse_topology(text)
