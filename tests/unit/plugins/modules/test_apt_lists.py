"""gpuserve.vllm.apt_lists against this host's real apt-cache, in check mode (nothing refreshed here).

The refresh itself runs in molecule/gpu_node (a file repository added to a node whose lists were
emptied when its image was made: the driver packages are found only because the lists are
refreshed at once) and in molecule/fleet (Prometheus and node_exporter on images with emptied lists).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.modules import apt_lists

sys.path.insert(0, str(Path(__file__).resolve().parent))
from module_runner import run_module_main  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("apt-cache") is None, reason="no apt on this host")


def test_a_package_no_source_offers_is_named_and_would_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_module_main(apt_lists, {"packages": ["bash", "gpuserve-no-such-package=1.0"], "_ansible_check_mode": True},
                             monkeypatch)
    assert not result["failed"] and not result["changed"] and not result["refreshed"], result
    assert result["without_candidate"] == ["gpuserve-no-such-package"]
    assert result["reason"] == "no candidate for gpuserve-no-such-package in apt's lists"
    assert "bash:" in result["policy"]
    # Nothing fetched in check mode. (A result key named "unreachable" would make Ansible call the host unreachable.)
    assert result["fetch_failures"] == [] and "unreachable" not in result


def test_refresh_off_only_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_module_main(apt_lists, {"packages": ["gpuserve-no-such-package"], "refresh": False}, monkeypatch)
    assert not result["failed"] and not result["refreshed"] and result["reason"] == ""
    assert result["without_candidate"] == ["gpuserve-no-such-package"]
