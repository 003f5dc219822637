"""Tables for node acceptance: all_reduce_perf and dcgmi diag outputs recorded on real nodes, the floor, the verdict.

The recordings live in tests/fixtures/gpu_acceptance; each begins with '## fixture:' lines naming its
source, which are dropped here so that the parsers read what the tool printed.
"""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _acceptance as acc
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _dcgmi as dcgmi
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nccl_tests as nccl

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "gpu_acceptance"
P2P_OFF = "all_reduce_perf-8x-rtx4090-pcie4-p2p-off.txt"
P2P_ON = "all_reduce_perf-8x-rtx4090-pcie4-p2p-on.txt"
WRONG = "all_reduce_perf-2x-gh200-wrong-values.txt"
ALLTOALL = "alltoall_perf-1x-rtx5090.txt"
DCGM4_PCIE_FAIL = "dcgmi-diag-r2-dcgm441-8gpu-pcie-fail.txt"
DCGM3_GPU0_FAIL = "dcgmi-diag-r2-dcgm3-gpu0-memory-fail-excerpt.txt"
DCGM3_ERROR = "dcgmi-diag-dcgm3-deployment-error-excerpt.txt"

# The 8x RTX 4090 box of the blog post: bus bytes from its rank lines, Gen4 x16 everywhere
# (sysfs text as the kernel prints it, e.g. nokyan/resources#512: '16.0 GT/s PCIe', '16').
BUSES_4090 = ("01", "25", "41", "61", "81", "a1", "c1", "e1")
GPUS_4090 = [{"index": i, "bus_id": "00000000:%s:00.0" % bus.upper()} for i, bus in enumerate(BUSES_4090)]
GEN4_X16 = {"max_link_speed": "16.0 GT/s PCIe", "max_link_width": "16",
            "current_link_speed": "2.5 GT/s PCIe", "current_link_width": "16"}


def fixture(name: str) -> str:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("## fixture"))


def links_4090(**overrides: dict[str, str]) -> list[dict[str, t.Any]]:
    return [acc.gpu_link("GPU%d (%s)" % (gpu["index"], gpu["bus_id"]), overrides.get("gpu%d" % gpu["index"], GEN4_X16),
                         None) for gpu in GPUS_4090]


# --- all_reduce_perf -------------------------------------------------------------------------

@pytest.mark.parametrize("name, ranks, rows, oob, oob_ok, avg, version, busbw, size, side", [
    (P2P_OFF, 8, 25, 0, True, 4.85265, None, 14.45, 134217728, "out_of_place"),
    (P2P_ON, 8, 25, 0, True, 6.11168, None, 20.64, 134217728, "in_place"),
    (WRONG, 2, 25, 4, False, 4.79995, "2.17.8", 22.80, 134217728, "in_place"),
])
def test_all_reduce_figures(name: str, ranks: int, rows: int, oob: int, oob_ok: bool, avg: float,
                            version: str | None, busbw: float, size: int, side: str) -> None:
    parsed = nccl.parse_all_reduce(fixture(name))
    assert (len(parsed["ranks"]), len(parsed["rows"])) == (ranks, rows)
    assert (parsed["out_of_bounds"], parsed["out_of_bounds_ok"], parsed["avg_busbw"]) == (oob, oob_ok, avg)
    assert parsed["version"] == version
    figure = nccl.measure(parsed)
    assert (figure["busbw"], figure["size"], figure["side"]) == (busbw, size, side)


def test_a_row_is_read_column_by_column() -> None:
    """Exact figures of one row: a parse that shifts a column fails here."""
    row = nccl.parse_all_reduce(fixture(P2P_OFF))["rows"][-2]
    assert row == {"size": 67108864, "count": 16777216, "type": "float", "redop": "sum", "root": -1,
                   "out_of_place": {"time_us": 7907.1, "algbw": 8.49, "busbw": 14.85, "wrong": 0},
                   "in_place": {"time_us": 7905.3, "algbw": 8.49, "busbw": 14.86, "wrong": 0}}


@pytest.mark.parametrize("min_bytes, busbw, size, used", [
    (None, 14.45, 134217728, 1),
    (16777216, 14.45, 134217728, 4),    # the lowest of 16, 32, 64, 128 MiB
    (8388608, 14.09, 8388608, 5),
    (8, 0.0, 8, 25),                   # everything: latency-bound sizes read 0.00
])
def test_measure_takes_the_lowest_busbw_at_large_sizes(min_bytes: int | None, busbw: float, size: int, used: int) -> None:
    figure = nccl.measure(nccl.parse_all_reduce(fixture(P2P_OFF)), min_bytes)
    assert (figure["busbw"], figure["size"], figure["rows"]) == (busbw, size, used)


def test_measure_refuses_a_threshold_above_every_size() -> None:
    with pytest.raises(nccl.NcclTestsError, match="no all_reduce_perf result row has a size of 268435456"):
        nccl.measure(nccl.parse_all_reduce(fixture(P2P_OFF)), 268435456)


def test_ranks_name_their_devices() -> None:
    off = nccl.parse_all_reduce(fixture(P2P_OFF))["ranks"]
    assert [rank["pci_key"] for rank in off] == ["0000:%s:00" % bus for bus in BUSES_4090]
    assert off[7] == {"rank": 7, "host": "<REDACTED>", "device": 7, "bus": "0xe1", "pci_key": "0000:e1:00",
                      "name": "NVIDIA GeForce RTX 4090"}
    gh = nccl.parse_all_reduce(fixture(WRONG))["ranks"]
    assert [(rank["host"], rank["pci_key"]) for rank in gh] == [("gpu-1-1", "0009:01:00"), ("gpu-1-7", "0009:01:00")]


def test_wrong_values_and_failures_are_found() -> None:
    parsed = nccl.parse_all_reduce(fixture(WRONG))
    wrong = nccl.wrong_rows(parsed)
    assert [(row["size"], row["out_of_place"]["wrong"], row["in_place"]["wrong"]) for row in wrong] == [(1048576, 96, 32)]
    assert parsed["failures"] == [".. gpu-1-1 pid 662195: Test failure common.cu:1189",
                                  ".. gpu-1-7 pid 2448661: Test failure common.cu:1189"]
    assert parsed["collective"] == "all_reduce_perf" and parsed["validation"] is True


@pytest.mark.parametrize("text, message", [
    (fixture(ALLTOALL), "found a table whose redop column reads none"),
    (fixture(WRONG).replace("starting: all_reduce_perf", "starting: all_gather_perf"),
     "expected the output of all_reduce_perf, found the output of all_gather_perf"),
    (fixture(DCGM4_PCIE_FAIL), "found no rank and no result line; it begins: '\\+---"),
    ("", "found no rank and no result line"),
    (fixture(P2P_OFF).split("#       size", maxsplit=1)[0], "listed 8 rank\\(s\\) but printed no result row \\(it stopped"),
], ids=["alltoall_perf", "all_gather_perf", "dcgmi", "empty", "no-rows"])
def test_output_of_something_else_is_refused(text: str, message: str) -> None:
    with pytest.raises(nccl.NcclTestsError, match=message):
        nccl.parse_all_reduce(text)


@pytest.mark.parametrize("row, wrong", [
    ("    33554432       8388608     float    none      -1    19.56  1715.44    0.00      0     0.78  43046.10    0.00    N/A", None),
    ("     1048576        262144     float     sum      -1   477.32    2.20    2.20      96   492.81    2.13    2.13      32", 32),
])
def test_wrong_column_reads_na_as_unchecked(row: str, wrong: int | None) -> None:
    """-c 0 prints N/A in #wrong: that is 'not checked' (None), never 0."""
    match = nccl._ROW_RE.match(row)  # pylint: disable=protected-access
    assert match is not None
    assert nccl._row(match)["in_place"]["wrong"] == wrong  # pylint: disable=protected-access


@pytest.mark.parametrize("bus, key", [("0x41", "0000:41:00"), ("0000:06:00", "0000:06:00"), ("0x", None)])
def test_rank_pci_key(bus: str, key: str | None) -> None:
    assert nccl.rank_pci_key(bus) == key


# --- links and floor -------------------------------------------------------------------------

@pytest.mark.parametrize("text, rate", [
    ("32.0 GT/s PCIe", 32.0), ("16.0 GT/s PCIe", 16.0), ("8 GT/s", 8.0), ("2.5 GT/s PCIe", 2.5),
    ("Unknown", None), ("", None), (None, None), ("12.0 GT/s", None),
])
def test_parse_speed(text: str | None, rate: float | None) -> None:
    assert acc.parse_speed(text) == rate


@pytest.mark.parametrize("rate, width, gbps", [
    (32.0, 16, 63.015), (16.0, 16, 31.508), (16.0, 8, 15.754), (8.0, 16, 15.754), (5.0, 16, 8.0), (64.0, 16, 121.0),
])
def test_link_bandwidth(rate: float, width: int, gbps: float) -> None:
    assert round(acc.link_bandwidth(rate, width), 3) == gbps


def test_gpu_link_takes_the_lower_of_gpu_and_upstream_port() -> None:
    gen5_gpu = {"max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16",
                "current_link_speed": "16.0 GT/s PCIe", "current_link_width": "8"}
    gen4_port = {"max_link_speed": "16.0 GT/s PCIe", "max_link_width": "16"}
    link = acc.gpu_link("GPU0", gen5_gpu, gen4_port)
    assert (link["generation"], link["width"], link["gbps"]) == (4, 16, 31.51)
    assert (link["current_rate_gts"], link["current_width"]) == (16.0, 8)
    assert acc.gpu_link("GPU0", gen5_gpu, None)["gbps"] == 63.02
    assert acc.gpu_link("GPU0", {"max_link_speed": "Unknown"}, gen4_port)["gbps"] is None


@pytest.mark.parametrize("p2p, override, floor, source", [
    (True, None, 17.33, "topology"),    # 0.55 x 31.51
    (False, None, 11.03, "topology"),   # 0.35 x 31.51
    (True, 40.0, 40.0, "override"),
])
def test_bus_floor(p2p: bool, override: float | None, floor: float, source: str) -> None:
    result = acc.bus_floor(links_4090(), p2p, override=override)
    assert (result["floor"], result["source"]) == (floor, source)


def test_floor_follows_the_slowest_link() -> None:
    x8 = dict(GEN4_X16, max_link_width="8")
    result = acc.bus_floor(links_4090(gpu3=x8), True)
    assert result["floor"] == 8.66 and result["slowest"]["gpu"] == "GPU3 (00000000:61:00.0)"
    assert result["formula"] == ("0.55 (P2P) x GPU3 (00000000:61:00.0), PCIe Gen4 x8 (16 GT/s x 8 lanes x 128/130 / 8 = "
                                 "15.8 GB/s per direction) = 8.66 GB/s")


def test_no_link_and_no_override_is_no_floor() -> None:
    result = acc.bus_floor([acc.gpu_link("GPU0", {}, None)], True)
    assert result["floor"] is None and result["unknown_links"] == ["GPU0"]


@pytest.mark.parametrize("env, p2p", [
    ({}, True), ({"NCCL_P2P_DISABLE": "1"}, False), ({"NCCL_P2P_DISABLE": "0"}, True),
    ({"NCCL_P2P_LEVEL": "LOC"}, False), ({"NCCL_P2P_LEVEL": "SYS"}, True), (None, True),
])
def test_p2p_from_env(env: dict[str, str] | None, p2p: bool) -> None:
    assert acc.p2p_from_env(env) is p2p


# --- dcgmi diag ------------------------------------------------------------------------------

def test_dcgm4_table_reads_tests_and_gpu_lines() -> None:
    parsed = dcgmi.parse_diag(fixture(DCGM4_PCIE_FAIL))
    assert parsed["metadata"]["DCGM Version"] == "4.4.1"
    assert [(test["category"], test["name"], test["result"]) for test in parsed["tests"]] == [
        ("Deployment", "software", "pass"), ("Hardware", "memory", "pass"), ("Integration", "pcie", "fail")]
    pcie = parsed["tests"][2]
    assert pcie["gpus"] == {index: "pass" for index in range(8)}
    assert pcie["messages"][0]["text"].startswith(
        "There was an internal error during the test: 'Output of child process (11167) couldn't be parsed:")
    assert pcie["messages"][0]["text"].endswith("Reset GPU. Restart DCGM. Rerun diagnostics.")


@pytest.mark.parametrize("name, failures, advisories", [
    (DCGM4_PCIE_FAIL, ["dcgmi diag: Integration test 'pcie' failed as a whole, naming no GPU (Warning: There was an "
                       "internal error during the test: 'Output of child process (11167) couldn't be parsed: '* Line 1, "
                       "Column 1 Syntax error: value, object or array expected. '' Check DCGM and system logs for errors. "
                       "Reset GPU. Restart DCGM. Rerun diagnostics.)"], []),
    (DCGM3_GPU0_FAIL, ["dcgmi diag: uncategorised test 'GPU Memory' failed on GPU0 (00000000:01:00.0) (Warning: GPU 0 "
                       "Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test for GPU 0 Verify that "
                       "the cooling on this machine is functional, including external, thermal material interface, fans, "
                       "and any other components.)"], []),
    (DCGM3_ERROR, ["dcgmi diag reports: GPU 3 has uncorrectable memory errors and row remappings are pending"], []),
])
def test_dcgmi_findings_name_the_test_and_the_gpu(name: str, failures: list[str], advisories: list[str]) -> None:
    labels = {0: "GPU0 (00000000:01:00.0)"}
    found = dcgmi.findings(dcgmi.parse_diag(fixture(name)), lambda index: labels.get(index, "GPU%d" % index))
    assert found == (failures, advisories)


def test_dcgm3_scope_lists_gpus() -> None:
    test = dcgmi.parse_diag(fixture(DCGM3_GPU0_FAIL))["tests"][0]
    assert test["result"] == "fail" and dcgmi.failing_gpus(test) == [0]
    assert sorted(index for index, status in test["gpus"].items() if status == "pass") == [1, 2, 3, 4, 5, 6, 7]


def test_non_table_output_is_refused() -> None:
    with pytest.raises(dcgmi.DcgmiError, match="found no table row; the output begins: '# nThread 1"):
        dcgmi.parse_diag(fixture(P2P_OFF))


# --- verdict ---------------------------------------------------------------------------------

def decide(name: str | None, *, p2p: bool = True, links: list[dict[str, t.Any]] | None = None, expected: int = 8,
           gpus: list[dict[str, t.Any]] | None = None, health: tuple[list[str], list[str]] | None = ([], []),
           override: float | None = None) -> dict[str, t.Any]:
    floor = acc.bus_floor(links_4090() if links is None else links, p2p, override=override)
    return acc.decide(nccl_text=fixture(name) if name else None, gpus=GPUS_4090 if gpus is None else gpus,
                      expected_gpus=expected, floor=floor, health=health, health_source="nvidia-smi")


@pytest.mark.parametrize("name, p2p, verdict", [
    (P2P_ON, True, acc.PASS),     # 20.64 >= 0.55 x 31.51 = 17.33
    (P2P_OFF, False, acc.PASS),   # 14.45 >= 0.35 x 31.51 = 11.03
    (P2P_OFF, True, acc.FAIL),    # 14.45 < 17.33: P2P expected but not delivered
])
def test_verdict_against_the_topology_floor(name: str, p2p: bool, verdict: str) -> None:
    assert decide(name, p2p=p2p)["verdict"] == verdict


def test_a_low_figure_names_the_figure_the_floor_and_the_link() -> None:
    x8_now = dict(GEN4_X16, current_link_width="8")
    result = decide(P2P_OFF, links=links_4090(gpu5=x8_now))
    assert result["problems"] == [
        "all_reduce_perf bus bandwidth 14.45 GB/s at 134217728 bytes (out-of-place) is below the floor 17.33 GB/s "
        "[0.55 (P2P) x GPU0 (00000000:01:00.0), PCIe Gen4 x16 (16 GT/s x 16 lanes x 128/130 / 8 = 31.5 GB/s per "
        "direction) = 17.33 GB/s]; links narrower than they can be: GPU5 (00000000:A1:00.0) at x8 of x16"]
    assert result["message"].startswith("node rejected:\n- all_reduce_perf bus bandwidth 14.45 GB/s")
    assert result["busbw"]["busbw"] == 14.45 and result["avg_busbw"] == 4.85265


def test_the_override_wins_over_the_topology() -> None:
    assert decide(P2P_ON, override=25.0)["verdict"] == acc.FAIL
    assert decide(P2P_OFF, override=14.0)["verdict"] == acc.PASS


def test_fewer_ranks_than_gpus_fails_and_names_the_absent_gpu() -> None:
    gpus = GPUS_4090 + [{"index": 8, "bus_id": "00000000:F1:00.0"}]
    result = decide(P2P_ON, expected=9, gpus=gpus)
    assert result["verdict"] == acc.FAIL
    assert result["problems"] == ["all_reduce_perf ran on 8 rank(s), the node has 9 GPUs (absent: GPU8 "
                                  "(00000000:F1:00.0)): the all-reduce did not span the node"]


def test_wrong_values_fail_whatever_the_bandwidth() -> None:
    result = decide(WRONG, expected=2, gpus=[], override=1.0)
    assert result["verdict"] == acc.FAIL
    assert result["problems"][:2] == [
        "all_reduce_perf found wrong values at 1048576 bytes (96 out-of-place, 32 in-place): the GPUs or the links "
        "between them corrupt data; run dcgmi diag -r 3 and check the kernel log for Xid errors",
        "all_reduce_perf reports 4 out-of-bounds value(s) (FAILED)"]
    assert result["problems"][2] == "all_reduce_perf reported: .. gpu-1-1 pid 662195: Test failure common.cu:1189"


@pytest.mark.parametrize("name, health, links, unknown", [
    (None, ([], []), None, "all_reduce_perf did not run"),
    (P2P_ON, None, None, "no GPU health check ran"),
    (P2P_ON, ([], []), [acc.gpu_link("GPU0 (00000000:01:00.0)", {}, None)],
     "no bus-bandwidth floor: the PCIe links of GPU0 (00000000:01:00.0) could not be read and none was set "
     "explicitly; measured 20.64 GB/s at 134217728 bytes cannot be judged"),
])
def test_unknown_is_not_pass(name: str | None, health: tuple[list[str], list[str]] | None,
                             links: list[dict[str, t.Any]] | None, unknown: str) -> None:
    result = decide(name, health=health, links=links)
    assert result["verdict"] == acc.UNKNOWN
    assert result["unknowns"] == [unknown] and result["problems"] == []
    assert result["message"].startswith("node not accepted: acceptance could not be decided")


def test_a_failed_health_check_fails_a_good_all_reduce() -> None:
    failures, advisories = dcgmi.findings(dcgmi.parse_diag(fixture(DCGM3_GPU0_FAIL)))
    result = decide(P2P_ON, health=(failures, advisories))
    assert result["verdict"] == acc.FAIL
    assert result["problems"][0].startswith("dcgmi diag: uncategorised test 'GPU Memory' failed on GPU0")


def test_another_binary_output_fails_naming_what_was_found() -> None:
    result = decide(ALLTOALL)
    assert result["verdict"] == acc.FAIL
    assert "found a table whose redop column reads none" in result["problems"][0]
