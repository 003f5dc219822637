"""gpuserve.vllm.gpu_node_acceptance end to end: real subprocesses with test doubles that replay recordings.

all_reduce_perf and dcgmi doubles (tests/fixtures/gpu_acceptance/doubles) replay real outputs; nvidia-smi,
lspci, modinfo, journalctl come from tests/fixtures/gpu_node/doubles (the fixture box). sysfs is a
temporary tree: each GPU a device directory under its upstream port, Gen4 x16 unless a test says otherwise.
"""

from __future__ import annotations

import json
import os
import stat
import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _facts
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_driver
from ansible_collections.gpuserve.vllm.plugins.modules import gpu_node_acceptance

from module_runner import run_module_main

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
ACCEPTANCE = FIXTURES / "gpu_acceptance"
NODE = FIXTURES / "gpu_node"
BOX_BUSES = ("03", "04", "43", "44", "83", "84", "c3", "c4")  # nvidia-smi-query-8gpu.csv


def make_sysfs(root: Path, width: dict[str, str]) -> Path:
    devices = root / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    for number, bus in enumerate(BOX_BUSES):
        port = root / "devices" / "pci0000:00" / ("0000:00:%02x.0" % (number + 1))
        gpu = port / ("0000:%s:00.0" % bus)
        gpu.mkdir(parents=True)
        for folder, lanes in ((port, "16"), (gpu, width.get(bus, "16"))):
            (folder / "max_link_speed").write_text("16.0 GT/s PCIe\n")
            (folder / "max_link_width").write_text(lanes + "\n")
            (folder / "current_link_speed").write_text("16.0 GT/s PCIe\n")
            (folder / "current_link_width").write_text(lanes + "\n")
        os.symlink(gpu, devices / gpu.name)
    return devices


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> t.Callable[..., dict[str, t.Any]]:
    """Run the module; keyword arguments pick the recordings, dcgmi=False leaves dcgmi off PATH."""

    def run(args: dict[str, t.Any], *, dcgmi: bool = False, width: dict[str, str] | None = None,
            **env: str) -> dict[str, t.Any]:
        bindir = tmp_path / "bin"
        bindir.mkdir()
        for name in ("all_reduce_perf",) + (("dcgmi",) if dcgmi else ()):
            os.symlink(ACCEPTANCE / "doubles" / name, bindir / name)
        monkeypatch.setenv("PATH", "%s:%s:/usr/bin:/bin" % (bindir, NODE / "doubles"))
        monkeypatch.setenv("GPU_NODE_DOUBLE_FIXTURES", str(NODE))
        monkeypatch.setenv("GPU_ACCEPTANCE_DOUBLE_FIXTURES", str(ACCEPTANCE))
        monkeypatch.setenv("GPU_ACCEPTANCE_DOUBLE_LOG", str(tmp_path / "double.log"))
        for key, value in env.items():
            monkeypatch.setenv("GPU_ACCEPTANCE_DOUBLE_" + key.upper(), value)
        files = {_facts.CMDLINE_FILE: NODE / "proc-cmdline-ubuntu-default.txt",
                 _nvidia_driver.DRIVER_VERSION_FILE: NODE / "proc-driver-nvidia-version-580-open.txt"}

        def reader(path: str) -> str | None:
            if path in files:
                return files[path].read_text(encoding="utf-8")
            return _nvidia_driver.read_text_file(path) if path.startswith(str(tmp_path)) else None

        monkeypatch.setattr(gpu_node_acceptance, "_reader", reader)
        monkeypatch.setattr(gpu_node_acceptance, "_SYSFS_PCI", str(make_sysfs(tmp_path / "sys", width or {})))
        return run_module_main(gpu_node_acceptance, dict({"record": str(tmp_path / "rec" / "acceptance.json")}, **args),
                               monkeypatch)

    return run


def record(result: dict[str, t.Any]) -> dict[str, t.Any]:
    return json.loads(Path(result["record"]).read_text(encoding="utf-8"))


def test_a_good_node_passes_and_is_recorded(node: t.Callable[..., dict[str, t.Any]], tmp_path: Path) -> None:
    result = node({"expected_gpu_count": 8, "nccl_env": {"NCCL_DEBUG": "WARN"}})
    assert result["failed"] is False and result["changed"] is True
    assert result["verdict"] == "pass" and result["health_source"] == "nvidia-smi"
    assert result["busbw"]["busbw"] == 20.64 and result["floor"]["floor"] == 17.33
    assert result["argv"][1:] == ["-b", "128M", "-e", "4G", "-f", "2", "-g", "8", "-c", "1"]
    assert (tmp_path / "double.log").read_text().splitlines() == [
        "argv: -b 128M -e 4G -f 2 -g 8 -c 1", "NCCL_DEBUG=WARN"]
    saved = record(result)
    assert saved["verdict"] == "pass" and saved["nccl_env"] == {"NCCL_DEBUG": "WARN"}
    assert [gpu["bus_id"] for gpu in saved["gpus"]][:2] == ["00000000:03:00.0", "00000000:04:00.0"]
    assert stat.S_IMODE(os.stat(result["record"]).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(os.path.dirname(result["record"])).st_mode) == 0o755
    assert not [name for name in os.listdir(os.path.dirname(result["record"])) if name.endswith(".tmp")]


def test_a_low_figure_fails_against_the_link_floor(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node({"expected_gpu_count": 8}, nccl="all_reduce_perf-8x-rtx4090-pcie4-p2p-off.txt")
    assert result["failed"] is True and result["verdict"] == "fail"
    assert result["msg"].startswith("node rejected:\n- all_reduce_perf bus bandwidth 14.45 GB/s at 134217728 bytes")
    assert record(result)["verdict"] == "fail"  # rejected nodes are recorded too


def test_p2p_disabled_in_the_environment_uses_the_lower_fraction(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node({"nccl_env": {"NCCL_P2P_DISABLE": "1"}}, nccl="all_reduce_perf-8x-rtx4090-pcie4-p2p-off.txt")
    assert result["verdict"] == "pass" and result["floor"]["p2p"] is False and result["floor"]["floor"] == 11.03


def test_dcgmi_failure_rejects_and_names_the_test(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node({"fail_on_reject": False, "dcgm_level": 2}, dcgmi=True)
    assert result["failed"] is False and result["verdict"] == "fail"
    assert result["health_source"] == "dcgmi diag -r 2"
    assert result["problems"][0].startswith("dcgmi diag -r 2: Integration test 'pcie' failed as a whole, naming no GPU")


def test_wrong_values_and_a_nonzero_exit_reject(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node({"expected_gpu_count": 2, "min_busbw": 1.0, "fail_on_reject": False},
                  nccl="all_reduce_perf-2x-gh200-wrong-values.txt", nccl_rc="1")
    assert result["verdict"] == "fail"
    assert result["problems"][0] == "all_reduce_perf exited with status 1"
    assert "wrong values at 1048576 bytes (96 out-of-place, 32 in-place)" in result["problems"][1]


@pytest.mark.parametrize("args, unknown", [
    ({"all_reduce_perf": "/nonexistent/all_reduce_perf"}, "all_reduce_perf not found (/nonexistent/all_reduce_perf)"),
    ({"dcgm": "required"}, "dcgmi not found and dcgm: required"),
])
def test_missing_evidence_is_unknown_not_pass(node: t.Callable[..., dict[str, t.Any]], args: dict[str, t.Any],
                                              unknown: str) -> None:
    result = node(dict(args, fail_on_reject=False))
    assert result["verdict"] == "unknown"
    assert result["unknowns"][0].startswith(unknown)


def test_check_mode_runs_nothing(node: t.Callable[..., dict[str, t.Any]], tmp_path: Path) -> None:
    result = node({"_ansible_check_mode": True})
    assert result["verdict"] == "not_run" and result["changed"] is True
    assert not (tmp_path / "double.log").exists() and not (tmp_path / "rec").exists()


def test_bad_environment_names_are_refused(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node({"nccl_env": {"NCCL DEBUG": "x"}})
    assert result["failed"] is True and result["msg"] == "nccl_env: not environment variable names: NCCL DEBUG"


def test_the_record_holds_the_key_that_observe_reads(node: t.Callable[..., dict[str, t.Any]], tmp_path: Path) -> None:
    env = {"NCCL_P2P_DISABLE": "0", "NCCL_DEBUG": "WARN"}
    result = node({"nccl_env": env})
    assert result["verdict"] == "pass"
    key = record(result)["key"]
    assert key["driver"] == "580.95.05" and key["kernel"] == os.uname().release and key["nccl_env"] == env
    assert key["gpus"][0] == {"bus_id": "0000:03:00", "rate_gts": 16.0, "width": 16} and len(key["gpus"]) == 8
    assert result["key"] == key
    (tmp_path / "bin").rename(tmp_path / "bin.run")
    (tmp_path / "sys").rename(tmp_path / "sys.run")
    observed = node({"observe": True, "nccl_env": env, "_ansible_check_mode": True})
    assert observed["changed"] is False and observed["failed"] is False
    assert observed["key"] == key and observed["previous"]["verdict"] == "pass" and observed["record_error"] is None
    assert "verdict" not in observed  # nothing was judged


def test_observe_runs_nothing_and_sees_a_narrower_link(node: t.Callable[..., dict[str, t.Any]], tmp_path: Path) -> None:
    observed = node({"observe": True}, width={"84": "8"})
    assert observed["previous"] is None and observed["record_error"] is None
    assert {"bus_id": "0000:84:00", "rate_gts": 16.0, "width": 8} in observed["key"]["gpus"]
    assert not (tmp_path / "double.log").exists() and not (tmp_path / "rec").exists()


@pytest.mark.parametrize("content, error", [(b"{not json", "not JSON: "), (b"[1]", "not a JSON object"),
                                            (b"\xff\xfe", "not JSON: ")])
def test_observe_says_why_a_record_cannot_be_read(node: t.Callable[..., dict[str, t.Any]], tmp_path: Path,
                                                  content: bytes, error: str) -> None:
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "acceptance.json").write_bytes(content)
    observed = node({"observe": True})
    assert observed["previous"] is None and observed["record_error"].startswith(error)
