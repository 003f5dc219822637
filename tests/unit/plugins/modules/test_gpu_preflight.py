"""gpuserve.vllm.gpu_preflight end to end: real subprocesses, with the fake nvidia-smi/modinfo/lspci.

The fakes (tests/fixtures/gpu_node/doubles, test doubles) go first on PATH; /proc files are
replaced by recordings through the module's reader. What is checked is the module's contract:
the JSON it returns, that it never reports a change, and when it fails.
"""

from __future__ import annotations

import json
import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _facts
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_driver
from ansible_collections.gpuserve.vllm.plugins.modules import gpu_preflight

from module_runner import run_module_main

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "gpu_node"
DOUBLES = FIXTURES / "doubles"

RTX_PRO_6000 = {
    "expected_gpu_count": 8,
    "expected_gpu_name": "RTX PRO 6000",
    "expected_compute_capability": "12.0",
    "min_driver_branch": 580,
    "require_open_kernel_modules": True,
}


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> t.Callable[..., dict[str, t.Any]]:
    """Run the module against a recorded node; keyword arguments pick the recordings."""

    def run(args: dict[str, t.Any], *, doubles: bool = True, proc_version: str | None = None,
            cmdline: str = "proc-cmdline-ubuntu-default.txt", **env: str) -> dict[str, t.Any]:
        empty = tmp_path / "empty-bin"
        empty.mkdir(exist_ok=True)
        # The doubles first on PATH (they need cat), or nothing at all for "no driver installed".
        monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % DOUBLES if doubles else str(empty))
        monkeypatch.setenv("GPU_NODE_DOUBLE_FIXTURES", str(FIXTURES))
        for key, value in env.items():
            monkeypatch.setenv("GPU_NODE_DOUBLE_" + key.upper(), value)
        files = {_facts.CMDLINE_FILE: cmdline, _nvidia_driver.DRIVER_VERSION_FILE: proc_version}

        def reader(path: str) -> str | None:
            name = files.get(path)
            return (FIXTURES / name).read_text(encoding="utf-8") if name else None

        monkeypatch.setattr(gpu_preflight, "_reader", reader)
        return run_module_main(gpu_preflight, args, monkeypatch)

    return run


def test_healthy_node_passes(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node(RTX_PRO_6000, proc_version="proc-driver-nvidia-version-580-open.txt")
    assert result["failed"] is False
    assert result["changed"] is False
    assert result["gpu_count"] == 8
    assert result["driver_branch"] == 580
    assert result["kernel_module"]["flavor"] == "open"
    assert result["topology"]["gpu_pair_links"] == {"NODE": 8, "PIX": 4, "SYS": 16}
    assert result["acs"]["checked"] is True
    assert result["problems"] == [] and result["advisories"] == []
    assert result["rehearsal"] is False
    assert result["kernel_log"]["source"] == "journalctl -k -b --no-pager -q"
    assert (result["cuda_version"], result["cuda_version_exact"]) == ("13.0", False)  # no libcuda here
    json.dumps(result)  # what Ansible sends back must be JSON


def test_seven_gpus_fail_with_an_actionable_message(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node(RTX_PRO_6000, query="nvidia-smi-query-7gpu.csv")
    assert result["failed"] is True
    assert result["msg"].startswith("this node is not what the inventory says:\n- expected 8 NVIDIA GPUs, nvidia-smi lists 7")
    assert [p["option"] for p in result["problems"]] == ["expected_gpu_count"]


def test_problems_are_returned_without_failing_when_asked(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node(dict(RTX_PRO_6000, fail_on_problems=False), license="modinfo-license-proprietary.txt")
    assert result["failed"] is False
    assert [p["code"] for p in result["problems"]] == ["kernel_module"]


def test_no_gpu_is_a_problem_unless_rehearsing(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node(RTX_PRO_6000, doubles=False)
    assert result["failed"] is True
    assert "no NVIDIA GPU found: nvidia-smi is not installed" in result["msg"]
    result = node(dict(RTX_PRO_6000, require_gpu=False), doubles=False)
    assert result["failed"] is False
    assert result["rehearsal"] is True
    assert result["gpu_present"] is False
    assert result["problems"] == []


def test_failing_nvidia_smi_is_reported(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node(dict(RTX_PRO_6000, require_gpu=False), smi_fail="nvidia-smi-failed-no-driver.txt")
    assert result["rehearsal"] is True
    assert result["no_gpu_reason"].startswith("nvidia-smi failed (rc=9): NVIDIA-SMI has failed")


@pytest.mark.parametrize("acs, failed, advisories", [("warn", False, 1), ("fail", True, 0), ("ignore", False, 0)])
def test_acs_modes(node: t.Callable[..., dict[str, t.Any]], acs: str, failed: bool, advisories: int) -> None:
    result = node(dict(RTX_PRO_6000, acs=acs), lspci="lspci-vvv-acs-enabled.txt")
    assert result["failed"] is failed
    assert result["acs_p2p_risk"] is True
    assert len(result["advisories"]) == advisories


def test_kernel_command_line_clears_the_acs_risk(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node(dict(RTX_PRO_6000, acs="fail"), lspci="lspci-vvv-acs-enabled.txt",
                  cmdline="proc-cmdline-iommu-pt.txt")
    assert result["failed"] is False
    assert result["acs_p2p_risk"] is False


def test_mig_on_all_gpus_is_refused_until_allowed(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node(RTX_PRO_6000, query="nvidia-smi-query-8gpu-mig-enabled.csv")
    assert result["failed"] is True
    assert [p["option"] for p in result["problems"]] == ["allow_mig"]
    assert result["mig_enabled_gpus"] == list(range(8))
    assert node(dict(RTX_PRO_6000, allow_mig=True), query="nvidia-smi-query-8gpu-mig-enabled.csv")["failed"] is False


def test_proprietary_module_behind_no_devices(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node(dict(RTX_PRO_6000, require_gpu=False), smi_fail="nvidia-smi-no-devices.txt", smi_rc="6",
                  license="modinfo-license-proprietary.txt", journal="kernel-log-dmesg-open-required.txt")
    assert result["failed"] is True  # not a silent rehearsal
    assert [p["code"] for p in result["problems"]] == ["kernel_module"]
    assert "requires use of the NVIDIA open kernel modules" in result["msg"]
    assert len(result["pci_nvidia_gpus"]) == 8


def test_xid79_in_this_boot_is_refused(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node(RTX_PRO_6000, query="nvidia-smi-query-7gpu.csv", journal="journal-k-xid79-gpu-84.txt")
    assert [p["code"] for p in result["problems"]] == ["gpu_count", "xid"]
    (event,) = result["kernel_log"]["xid_events"]
    assert (event["xid"], event["bus_id"], event["fatal"]) == (79, "0000:84:00", True)


def test_journal_without_kernel_messages_falls_back_to_dmesg(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node(RTX_PRO_6000, journal="journal-k-no-entries.txt", dmesg="kernel-log-xid79-line.txt")
    assert result["kernel_log"]["source"] == "dmesg"
    assert [p["code"] for p in result["problems"]] == ["xid"]


def test_one_gpu_in_an_error_state(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node(RTX_PRO_6000, query="nvidia-smi-query-8gpu-gpu5-requires-reset.csv")
    assert "GPU5 (00000000:84:00.0) is in an error state: nvidia-smi reads pstate=[GPU requires reset]" in result["msg"]
    assert result["gpus"][5]["errors"] == {"pstate": "[GPU requires reset]"}
