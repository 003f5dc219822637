"""Tables for the run-or-skip decision of node acceptance: the key of what was accepted, and plan()."""

from __future__ import annotations

import copy
import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _acceptance_key as acckey

BUSES = ("03", "04", "43", "44", "83", "84", "c3", "c4")  # tests/fixtures/gpu_node/nvidia-smi-query-8gpu.csv
NCCL = {"NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1", "NCCL_P2P_DISABLE": "0", "NCCL_SHM_DISABLE": "0"}


def links(width: dict[str, int] | None = None) -> list[dict[str, t.Any]]:
    return [{"gpu": "GPU%d" % i, "bus_id": "00000000:%s:00.0" % bus.upper(), "rate_gts": 32.0,
             "width": (width or {}).get(bus, 16), "current_rate_gts": 2.5, "current_width": 16}
            for i, bus in enumerate(BUSES)]


def key(**changes: t.Any) -> dict[str, t.Any]:
    args: dict[str, t.Any] = {"driver_versions": ["580.95.05"] * 8, "kernel_release": "6.8.0-60-generic",
                              "links": links(), "iommu_args": ["iommu=pt"], "nccl_env": NCCL}
    args.update(changes)
    return acckey.acceptance_key(**args)


def record(verdict: str = "pass", **changes: t.Any) -> dict[str, t.Any]:
    return {"verdict": verdict, "time": "2025-06-01T10:00:00+00:00", "key": key(**changes),
            "busbw": {"busbw": 40.1}}


def test_the_key_is_stable_and_keeps_only_the_maximum_link() -> None:
    shuffled = list(reversed(links()))
    for link in shuffled:
        link["current_width"] = 8
    assert key(links=shuffled, nccl_env=dict(reversed(list(NCCL.items())))) == key()
    assert key() == {
        "version": 1, "driver": "580.95.05", "kernel": "6.8.0-60-generic",
        "gpus": [{"bus_id": "0000:%s:00" % bus, "rate_gts": 32.0, "width": 16} for bus in BUSES],
        "iommu_args": ["iommu=pt"], "nccl_env": NCCL}
    assert key(driver_versions=["580.95.05", None, "580.82.07"])["driver"] == "580.82.07,580.95.05"
    assert key(driver_versions=[], kernel_release="")["driver"] is None
    assert key(nccl_env={"NCCL_BUFFSIZE": 4194304})["nccl_env"] == {"NCCL_BUFFSIZE": "4194304"}


def test_the_summary_reads_in_one_line() -> None:
    assert acckey.key_summary(key()) == (
        "driver 580.95.05, kernel 6.8.0-60-generic, 8 GPU(s) (8 x 32 GT/s x16), IOMMU/ACS args iommu=pt, "
        "NCCL NCCL_DEBUG=WARN NCCL_IB_DISABLE=1 NCCL_P2P_DISABLE=0 NCCL_SHM_DISABLE=0")
    unknown = key(links=[dict(link, rate_gts=None, width=None) for link in links()][:2], iommu_args=[], nccl_env={},
                  driver_versions=[], kernel_release=None)
    assert acckey.key_summary(unknown) == ("driver unknown, kernel unknown, 2 GPU(s) (2 x link unknown), "
                                           "IOMMU/ACS args none, NCCL from /etc/nccl.conf")


@pytest.mark.parametrize("previous, record_error, observed, force, run, reason", [
    pytest.param(None, None, key(), False, True, "never run on this node (no /r.json)", id="no record"),
    pytest.param(record(), None, key(), False, False,
                 "accepted at 2025-06-01T10:00:00+00:00 for driver 580.95.05, kernel 6.8.0-60-generic, 8 GPU(s)",
                 id="record pass, same key: skip"),
    pytest.param(record("fail"), None, key(), False, True,
                 "the acceptance at 2025-06-01T10:00:00+00:00 for this node as it is now ended fail, not pass",
                 id="record fail, same key: runs again"),
    pytest.param(record("unknown"), None, key(), False, True, "ended unknown, not pass", id="record unknown: runs again"),
    pytest.param({"key": key(), "time": "t"}, None, key(), False, True, "ended without a verdict, not pass",
                 id="record without verdict"),
    pytest.param(record(), None, key(), True, True, "asked for (gpu_node_acceptance_force or --tags acceptance)",
                 id="forced by tag or variable"),
    pytest.param(None, "not JSON: Expecting value: line 1 column 1 (char 0)", key(), False, True,
                 "/r.json cannot be read (not JSON: Expecting value", id="record unreadable: runs"),
    pytest.param(record(), "PermissionError: Permission denied", key(), False, True,
                 "/r.json cannot be read (PermissionError", id="unreadable wins over a stale content"),
    pytest.param({"verdict": "pass", "time": "t"}, None, key(), False, True,
                 "/r.json holds no key of what it accepted", id="record without key (module before the wiring)"),
    pytest.param(["pass"], None, key(), False, True, "holds no key", id="record not an object"),
    pytest.param(dict(record(), key=dict(key(), version=0)), None, key(), False, True,
                 "/r.json has key version 0, this collection writes 1", id="older key version"),
    pytest.param(record(), None, key(driver_versions=["580.105.08"] * 8), False, True,
                 "changed since the acceptance at 2025-06-01T10:00:00+00:00: driver 580.95.05 -> 580.105.08",
                 id="driver changed"),
    pytest.param(record(), None, key(kernel_release="6.8.0-71-generic"), False, True,
                 "kernel 6.8.0-60-generic -> 6.8.0-71-generic", id="kernel changed"),
    pytest.param(record(), None, key(links=links({"84": 8})), False, True,
                 "GPUs and PCIe links: 0000:84:00 1 x 32 GT/s x16 -> 1 x 32 GT/s x8", id="a link trained narrower"),
    pytest.param(record(), None, key(links=links()[:7]), False, True, "GPUs and PCIe links: 0000:c4:00 gone",
                 id="a GPU gone"),
    pytest.param(record(links=links()[:7]), None, key(), False, True, "GPUs and PCIe links: 0000:c4:00 new",
                 id="a GPU new"),
    pytest.param(record(), None, key(iommu_args=[]), False, True, "IOMMU/ACS kernel arguments iommu=pt -> none",
                 id="kernel arguments changed"),
    pytest.param(record(), None, key(nccl_env=dict(NCCL, NCCL_P2P_DISABLE="1", NCCL_P2P_LEVEL="PHB")), False, True,
                 "NCCL settings: NCCL_P2P_DISABLE 0 -> 1, NCCL_P2P_LEVEL unset -> PHB", id="NCCL settings changed"),
    pytest.param(record("fail"), None, key(kernel_release="6.8.0-71-generic"), False, True,
                 "changed since the acceptance at", id="failed and changed: the change is named"),
    pytest.param(record(), None, key(kernel_release="6.8.0-71-generic", nccl_env={}), False, True,
                 "kernel 6.8.0-60-generic -> 6.8.0-71-generic; NCCL settings: NCCL_DEBUG WARN -> unset",
                 id="two changes"),
])
def test_plan(previous: t.Any, record_error: str | None, observed: dict[str, t.Any], force: bool, run: bool,
              reason: str) -> None:
    before = copy.deepcopy(previous)
    decided = acckey.plan(previous=previous, record_error=record_error, key=observed, force=force, record="/r.json")
    assert decided["run"] is run
    assert reason in decided["reason"]
    assert decided["summary"] == acckey.key_summary(observed)
    assert previous == before


@pytest.mark.parametrize("previous, force, serving, marker, here, where", [
    # not due: nowhere, whatever the server does
    pytest.param(record(), False, "active", True, False, "", id="accepted, serving"),
    # due on a node that serves nothing: here and now, as always
    pytest.param(None, False, "inactive", True, False, "now", id="never run, idle"),
    pytest.param(record("fail"), False, "inactive", True, False, "now", id="rejected and stopped: not under load"),
    # due on a node whose server runs: the serve play, drained (unknown is not idle)
    pytest.param(None, False, "active", True, False, "serve_play", id="never run, serving"),
    pytest.param(record(), True, "active", True, False, "serve_play", id="--tags acceptance, serving"),
    pytest.param(record(kernel_release="6.8.0-71-generic"), False, "unknown", True, False, "serve_play",
                 id="changed, state unknown"),
    # no serve play to take it (the role alone): here, as before
    pytest.param(None, False, "active", False, False, "now", id="no marker"),
    # the serve play's own step: the node is out, drained and stopped already
    pytest.param(record(), True, "active", True, True, "now", id="the serve play's step"),
])
def test_plan_where(previous: t.Any, force: bool, serving: str, marker: bool, here: bool, where: str) -> None:
    decided = acckey.plan(previous=previous, record_error=None, key=key(), force=force, record="/r.json",
                          serving=serving, marker=marker, here=here)
    assert decided["where"] == where
    assert decided["run"] is bool(where)
    assert ("the serve play runs it out of its routers, drained and stopped" in decided["reason"]) is (where == "serve_play")
