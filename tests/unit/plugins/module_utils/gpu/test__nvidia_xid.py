"""Tables for plugins/module_utils/_gpu/_nvidia_xid.py over kernel logs recorded on real nodes.

Each fixture names its source (public issue threads) in tests/fixtures/gpu_node/README.md.
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_xid as xid

from gpu_node_recordings import fixture


def test_xid79_line() -> None:
    (event,) = xid.parse_kernel_log(fixture("kernel-log-xid79-line.txt"))["xid_events"]
    assert (event["bus_id"], event["xid"], event["fatal"], event["count"]) == ("0000:44:00", 79, True, 1)
    assert event["meaning"] == "GPU has fallen off the bus"
    assert event["detail"] == "GPU has fallen off the bus"


def test_xid79_in_the_journal_format() -> None:
    (event,) = xid.parse_kernel_log(fixture("journal-k-xid79-gpu-84.txt"))["xid_events"]
    assert (event["bus_id"], event["xid"], event["fatal"]) == ("0000:84:00", 79, True)


def test_fallen_off_the_bus_without_an_xid_multi_line() -> None:
    parsed = xid.parse_kernel_log(fixture("kernel-log-dmesg-fallen-off-bus.txt"))
    assert parsed["xid_events"] == []
    assert parsed["fallen_off_bus"] == ["0000:b3:00.0"]
    assert parsed["open_module_required"] == []


def test_proprietary_module_refusing_a_blackwell_gpu() -> None:
    parsed = xid.parse_kernel_log(fixture("kernel-log-dmesg-open-required.txt"))
    assert parsed["open_module_required"] == ["0000:02:00.0"]
    assert parsed["xid_events"] == [] and parsed["fallen_off_bus"] == []


def test_mixed_xids_are_counted_and_classified() -> None:
    events = xid.parse_kernel_log(fixture("kernel-log-xid-mixed.txt"))["xid_events"]
    summary = {(event["bus_id"], event["xid"]): (event["count"], event["fatal"]) for event in events}
    assert summary == {
        ("0000:cb:00", 13): (3, False),
        ("0000:cb:00", 109): (1, False),
        ("0000:9b:00", 94): (1, False),
        ("0000:dc:00", 45): (1, False),
        ("000f:01:00", 169): (1, False),
    }
    unknown = next(event for event in events if event["xid"] == 169)
    assert "not in this collection's table" in unknown["meaning"]
    assert next(event for event in events if event["xid"] == 109)["detail"].startswith("Ch 00000008")


@pytest.mark.parametrize("number, fatal", [
    (79, True), (48, True), (95, True), (119, True), (120, True), (94, False), (13, False), (31, False), (999, False),
])
def test_describe(number: int, fatal: bool) -> None:
    described = xid.describe(number)
    assert described["fatal"] is fatal
    assert described["meaning"] and described["action"]


def test_clean_log() -> None:
    parsed = xid.parse_kernel_log(fixture("kernel-log-clean.txt"))
    assert (parsed["xid_events"], parsed["open_module_required"], parsed["nvrm_lines"]) == ([], [], 1)


@pytest.mark.parametrize("text, empty", [
    (fixture("journal-k-no-entries.txt"), True), ("", True), ("\n", True), (fixture("kernel-log-clean.txt"), False),
])
def test_is_empty_journal(text: str, empty: bool) -> None:
    assert xid.is_empty_journal(text) is empty
