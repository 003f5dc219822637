"""The nvidia-smi textfile script (roles/monitoring/files/gpuserve_gpu_metrics.py) the GPU nodes run without dcgm-exporter.

Its output is checked by the real promtool (`promtool check metrics`, Prometheus' own exposition
parser and linter), its metric names against what the rules use, and its run end to end against
a TEST DOUBLE of nvidia-smi (tests/fixtures/monitoring/doubles) that answers only its query.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.promtool import promtool
from tests.unit.monitoring.test_metric_names import DCGM_DEFAULT_COUNTERS, used

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "roles" / "monitoring" / "files" / "gpuserve_gpu_metrics.py"
FIXTURES = REPO / "tests" / "fixtures" / "monitoring"
DOUBLE = FIXTURES / "doubles" / "nvidia-smi"
CSV = (FIXTURES / "nvidia-smi-query-gpu-metrics-8gpu.csv").read_text()


def _load():
    spec = importlib.util.spec_from_file_location("gpuserve_gpu_metrics", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gm = _load()


def _samples(text: str) -> dict[str, dict[str, float]]:
    """metric -> {gpu: value}."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = re.match(r'^(\w+)(?:\{gpu="(\d+)".*\})? (\S+)$', line)
        assert match, line
        out.setdefault(match.group(1), {})[match.group(2) or ""] = float(match.group(3))
    return out


def test_render_the_fixture_box() -> None:
    samples = _samples(gm.render(CSV, True))
    assert samples["gpuserve_gpu_query_success"] == {"": 1.0}
    assert samples["DCGM_FI_DEV_POWER_USAGE"]["0"] == 412.37
    assert len(samples["DCGM_FI_DEV_POWER_USAGE"]) == 8
    # GPU 5 reads [GPU requires reset] for its temperature, GPU 3 [N/A] for its ECC count: left out.
    assert sorted(samples["DCGM_FI_DEV_GPU_TEMP"]) == ["0", "1", "2", "3", "4", "6", "7"]
    assert sorted(samples["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]) == ["0", "1", "2", "4", "5", "6", "7"]
    assert samples["DCGM_FI_DEV_FB_USED"]["7"] == 91874


def test_labels_are_dcgm_exporters() -> None:
    line = next(line for line in gm.render(CSV, True).splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{"))
    assert line == ('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-3f1c8a52-6d0e-4b7a-9c21-5e8f0a7b1d24",device="nvidia0",'
                    'modelName="NVIDIA RTX PRO 6000 Blackwell Server Edition",pci_bus_id="00000000:03:00.0"} 54')


@pytest.mark.parametrize(("csv_text", "ok", "expected"), [
    ("", False, "gpuserve_gpu_query_success 0"),  # nvidia-smi did not answer: no stale values, a 0
    ("No devices were found\n", False, "gpuserve_gpu_query_success 0"),
    (CSV, False, "gpuserve_gpu_query_success 0"),  # a lost GPU: nvidia-smi fails, lists the others
])
def test_failures_read_as_zero(csv_text: str, ok: bool, expected: str) -> None:
    text = gm.render(csv_text, ok)
    assert expected in text.splitlines()


# promtool's linter (exit status 3) objects to dcgm-exporter's own conventions, kept on purpose so
# that the rules read both sources alike: its camelCase labels (UUID, modelName) and a counter
# named ..._TOTAL, not ..._total. A parse error (exit status 1) or any other lint fails.
DCGM_CONVENTIONS = (re.compile(r"^DCGM_FI_\w+ label names should be written in 'snake_case' not 'camelCase'$"),
                    re.compile(r'^DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter metrics should have "_total" suffix$'))


def test_promtool_accepts_the_textfile() -> None:
    """Prometheus' own parser and linter (`promtool check metrics`) on what node_exporter would serve."""
    for text in (gm.render(CSV, True), gm.render("", False)):
        result = subprocess.run([str(promtool()), "check", "metrics"], input=text, capture_output=True, text=True,
                                timeout=60, check=False)
        lint = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        assert result.returncode in (0, 3), result.stdout + result.stderr
        assert [line for line in lint if not any(c.match(line) for c in DCGM_CONVENTIONS)] == []


def test_names_are_those_the_rules_and_dcgm_exporter_use() -> None:
    names = {metric for metric, _kind, _help in gm.METRICS.values()}
    assert names <= DCGM_DEFAULT_COUNTERS.keys()
    # What the rules read that nvidia-smi can give: temperature, power and double-bit ECC.
    assert used("DCGM_FI_", dashboard=False) & names == {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
                                                         "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}
    # Every GPU field the Grafana dashboard reads, the script writes too (its panels work without dcgm-exporter).
    assert used("DCGM_FI_") - used("DCGM_FI_", dashboard=False) <= names
    # The counter is typed as one (the rule takes increase() of it).
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter" in gm.render(CSV, True)


@pytest.mark.parametrize(("env", "rc", "success"), [({}, 0, "1"), ({"MONITORING_DOUBLE_RC": "15"}, 1, "0")])
def test_script_run_against_the_double(tmp_path: Path, env: dict, rc: int, success: str) -> None:
    target = tmp_path / "gpuserve_gpu.prom"
    target.write_text("old\n")
    result = subprocess.run([sys.executable, "-I", "-B", str(SCRIPT), str(target), str(DOUBLE)], capture_output=True,
                            text=True, timeout=60, check=False, env=dict(os.environ, **env))
    assert result.returncode == rc, result.stderr
    text = target.read_text()
    assert f"gpuserve_gpu_query_success {success}" in text.splitlines()
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == ["gpuserve_gpu.prom"]  # no temporary file left


def test_script_argv_is_the_query() -> None:
    assert gm.query_argv("/usr/bin/nvidia-smi") == [
        "/usr/bin/nvidia-smi", "--query-gpu=" + ",".join(gm.FIELDS), "--format=csv,noheader,nounits"]
