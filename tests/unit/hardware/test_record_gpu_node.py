"""The hardware recorder (tests/hardware/record_gpu_node.py) over the recorded-output test doubles.

The recorder is meant for real GPU nodes; here the fake nvidia-smi/modinfo/lspci from
tests/fixtures/gpu_node/doubles stand in, so a change that breaks it shows up before it is
needed on a real box.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOUBLES = REPO / "tests" / "fixtures" / "gpu_node" / "doubles"


def test_recorder_saves_outputs_and_parses_them(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=f"{DOUBLES}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run([sys.executable, str(REPO / "tests/hardware/record_gpu_node.py"), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "facts.json").read_text())
    assert report["facts"]["gpu_count"] == 8
    assert report["facts"]["topology"] is not None
    assert report["problems_vs_role_defaults"] == []
    saved = {p.name for p in tmp_path.iterdir()}
    assert any(name.startswith("nvidia-smi-topo") for name in saved)
    assert any(name.startswith("nvidia-smi-query-gpu") for name in saved)
    assert "journalctl-k-b-no-pager-q.txt" in saved
    assert "libcuda-cuDriverGetVersion.txt" in saved
    assert report["driver"]["driver_version"] == "580.95.05"
    assert report["facts"]["kernel_log"]["source"] == "journalctl -k -b --no-pager -q"
