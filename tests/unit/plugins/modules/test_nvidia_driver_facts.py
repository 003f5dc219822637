"""gpuserve.vllm.nvidia_driver_facts end to end with the fake nvidia-smi (tests/fixtures/gpu_node/doubles).

The 610 branch prints "CUDA UMD Version" in its banner; the module asks the query interface,
so the banner double (which fails the test if it were read) never matters.
"""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_driver
from ansible_collections.gpuserve.vllm.plugins.modules import nvidia_driver_facts

from module_runner import run_module_main

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "gpu_node"
DOUBLES = FIXTURES / "doubles"


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> t.Callable[..., dict[str, t.Any]]:
    def run(args: dict[str, t.Any], *, proc_version: str | None = None, libcuda: int | None = None,
            **env: str) -> dict[str, t.Any]:
        monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % DOUBLES)
        monkeypatch.setenv("GPU_NODE_DOUBLE_FIXTURES", str(FIXTURES))
        for key, value in env.items():
            monkeypatch.setenv("GPU_NODE_DOUBLE_" + key.upper(), value)
        text = (FIXTURES / proc_version).read_text() if proc_version else None
        monkeypatch.setattr(nvidia_driver_facts, "_reader",
                            lambda path: text if path == _nvidia_driver.DRIVER_VERSION_FILE else None)
        monkeypatch.setattr(_nvidia_driver, "libcuda_version", lambda loader=None: libcuda)
        return run_module_main(nvidia_driver_facts, args, monkeypatch)
    return run


def test_610_branch_from_proc_and_libcuda(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node({}, proc_version="proc-driver-nvidia-version-610-open.txt", libcuda=13030)
    assert (result["driver_version"], result["driver_branch"], result["cuda_version"]) == ("610.43.02", 610, "13.3")
    assert result["cuda_version_exact"] is True and result["changed"] is False


def test_610_branch_from_the_query_interface(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node({}, driver_version="nvidia-smi-driver-version-610.txt")
    assert (result["driver_version"], result["driver_version_source"]) == ("610.43.02", "nvidia-smi --query-gpu")
    assert (result["cuda_version"], result["cuda_version_exact"]) == ("13.0", False)
    assert "580.65.06" in result["cuda_version_source"]


def test_a_path_to_a_missing_nvidia_smi(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node({"nvidia_smi": "/usr/local/bin/no-such-nvidia-smi"})
    assert result["failed"] is False and result["cuda_version"] is None
    assert "/usr/local/bin/no-such-nvidia-smi does not exist or is not executable" in result["reason"]


def test_nvidia_smi_without_a_driver(node: t.Callable[..., dict[str, t.Any]]) -> None:
    result = node({}, smi_fail="nvidia-smi-failed-no-driver.txt")
    assert result["cuda_version"] is None
    assert "failed (rc=9): NVIDIA-SMI has failed" in result["reason"]
