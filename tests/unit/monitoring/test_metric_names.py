"""Every metric the rules and the Grafana dashboard use exists, with that name and type, in the software that
exports it.

- vllm:* -- read from the REAL vLLM wheels of each release the rules cover (downloaded once into
  $GPUSERVE_WHEEL_CACHE by tests/support/vllm_wheels.py; tests/run.sh prefetches them): the
  metric constructors in vllm/v1/metrics/loggers.py and vllm/v1/spec_decode/metrics.py, parsed
  with ast. prometheus_client exposes a Counter "vllm:x" as vllm:x_total and a Histogram as
  vllm:x_bucket/_sum/_count, so the name a rule uses is mapped back to the declared one and type.
- vllm_router_* -- looked up in the pinned vllm-router's compiled extension (tests/support/
  vllm_router_bin.py installs it): the metric names are string literals in its binary.
- DCGM_FI_* -- the table below, copied from NVIDIA/dcgm-exporter etc/default-counters.csv
  (main, 2026-05-12, d5e5f510): whether the CSV enables the field, and its type. Not read at
  test time (no network, and the exporter is not installed here).

The dashboard's names are checked in the file as committed (roles/monitoring/files/grafana/); that each of
its queries returns series is test_prometheus_live.py's test_dashboard_queries_return_series.
"""

from __future__ import annotations

import ast
import json
import re
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.support.vllm_router_bin import router_bin
from tests.support.vllm_wheels import vllm_wheel

REPO = Path(__file__).resolve().parents[3]
RULE_FILES = sorted((REPO / "roles" / "monitoring" / "files" / "rules").glob("*.rules.yml"))
DASHBOARDS = sorted((REPO / "roles" / "monitoring" / "files" / "grafana").glob("*.json"))

# The releases the rules claim to cover: those the collection supports (README "Which vLLM to
# pin": 0.16/0.17 with the EAGLE-3 patches, 0.18 and 0.33 native).
VLLM_RELEASES = ["0.16.0", "0.17.0", "0.18.0", "0.33.0"]
VLLM_METRIC_SOURCES = ["vllm/v1/metrics/loggers.py", "vllm/v1/spec_decode/metrics.py"]

# dcgm-exporter etc/default-counters.csv: field -> (type, enabled in the default CSV).
DCGM_DEFAULT_COUNTERS = {
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", True),  # "Value of the last XID error encountered."
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", True),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", True),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", True),  # dashboard only (read again at 00d6d344, 2026)
    "DCGM_FI_DEV_FB_USED": ("gauge", True),  # dashboard only
    "DCGM_FI_DEV_FB_FREE": ("gauge", True),  # dashboard only
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("counter", True),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", True),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", False),
    "DCGM_FI_DEV_THERMAL_VIOLATION": ("counter", False),
    "DCGM_FI_DEV_POWER_VIOLATION": ("counter", False),
}
# Fields the rules use that the default CSV leaves commented out: docs/monitoring.md says to enable them.
DCGM_OPT_IN = {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_POWER_VIOLATION"}

_METRIC = re.compile(r"(?<![\w:])((?:vllm:|vllm_router_|DCGM_FI_)[A-Za-z0-9_:]+)")


def dashboard_exprs() -> list[str]:
    """Every panel target's expression and every query variable's query, of every dashboard the role ships."""
    exprs = []
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for top in dashboard["panels"]:
            exprs += [t["expr"] for panel in [top] + top.get("panels", []) for t in panel.get("targets", [])]
        exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def _exprs(dashboard: bool = True) -> list[str]:
    return [rule["expr"] for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"]] + (dashboard_exprs() if dashboard else [])


def used(prefix: str, dashboard: bool = True) -> set[str]:
    """Metric names the rules' (and the dashboard's) expressions use (recording rules' own names are level:name:op)."""
    return {name for expr in _exprs(dashboard) for name in _METRIC.findall(expr) if name.startswith(prefix)}


def _kind(call: ast.Call) -> str | None:
    text = ast.unparse(call.func).lower()
    for kind in ("counter", "gauge", "histogram"):
        if kind in text:
            return kind
    return None


def declared_vllm_metrics(source: str) -> dict[str, str]:
    """{"vllm:name": "counter"|"gauge"|"histogram"} from a vLLM metrics module's source.

    Two shapes occur in the releases: self._counter_cls(name="vllm:x", ...) and (0.33) a list of
    ("vllm:x", doc) tuples assigned to counter_specs, each passed to self._counter_cls(name=name).
    """
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and (kind := _kind(node)):
            for arg in [kw.value for kw in node.keywords if kw.arg == "name"] + node.args[:1]:
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("vllm:"):
                    found[arg.value] = kind
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("_specs")
                                                  for t in node.targets):
            kind = next((k for k in ("counter", "gauge", "histogram")
                         if any(k in t.id for t in node.targets if isinstance(t, ast.Name))), None)
            for const in ast.walk(node.value):
                if kind and isinstance(const, ast.Constant) and str(const.value).startswith("vllm:"):
                    found[const.value] = kind
    return found


def exposed_as(declared: dict[str, str]) -> dict[str, str]:
    """The names prometheus_client exposes for the declared metrics -> the declared name."""
    names: dict[str, str] = {}
    for name, kind in declared.items():
        base = name.removesuffix("_total")
        if kind == "counter":
            names[base + "_total"] = name
        elif kind == "histogram":
            names.update({name + suffix: name for suffix in ("_bucket", "_sum", "_count")})
        else:
            names[name] = name
    return names


@pytest.mark.parametrize(("source", "expected"), [
    ('c = self._counter_cls(name="vllm:num_preemptions", documentation="x", labelnames=l)',
     {"vllm:num_preemptions": "counter"}),
    ('g = self._gauge_cls(name="vllm:kv_cache_usage_perc", multiprocess_mode="mostrecent")',
     {"vllm:kv_cache_usage_perc": "gauge"}),
    ('h = self._histogram_cls(name="vllm:time_to_first_token_seconds", buckets=[1.0])',
     {"vllm:time_to_first_token_seconds": "histogram"}),
    ('counter_specs = [("vllm:spec_decode_num_drafts", "Number of drafts.")]\n'
     'cs = [self._counter_cls(name=name, documentation=doc) for name, doc in counter_specs]',
     {"vllm:spec_decode_num_drafts": "counter"}),
    ('x = {"vllm:kv_cache_usage_perc": "kv_cache_usage_perc"}', {}),  # a mention is no declaration
])
def test_declared_vllm_metrics(source: str, expected: dict[str, str]) -> None:
    assert declared_vllm_metrics(source) == expected


@pytest.mark.parametrize(("declared", "exposed"), [
    ({"vllm:generation_tokens": "counter"}, {"vllm:generation_tokens_total": "vllm:generation_tokens"}),
    ({"vllm:kv_cache_usage_perc": "gauge"}, {"vllm:kv_cache_usage_perc": "vllm:kv_cache_usage_perc"}),
    ({"vllm:x_seconds": "histogram"}, {"vllm:x_seconds_bucket": "vllm:x_seconds", "vllm:x_seconds_sum": "vllm:x_seconds",
                                       "vllm:x_seconds_count": "vllm:x_seconds"}),
])
def test_exposed_as(declared: dict[str, str], exposed: dict[str, str]) -> None:
    assert exposed_as(declared) == exposed


def test_rules_use_vllm_metrics() -> None:
    assert used("vllm:") >= {"vllm:generation_tokens_total", "vllm:num_requests_running",
                             "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total",
                             "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total",
                             "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket"}


@pytest.mark.parametrize("version", VLLM_RELEASES)
def test_vllm_metrics_exist_in_release(version: str) -> None:
    with zipfile.ZipFile(vllm_wheel(version)) as wheel:
        declared: dict[str, str] = {}
        for member in VLLM_METRIC_SOURCES:
            declared.update(declared_vllm_metrics(wheel.read(member).decode()))
    exposed = exposed_as(declared)
    missing = sorted(used("vllm:") - exposed.keys())
    assert not missing, (f"vLLM {version} exports none of {missing} (declared in {VLLM_METRIC_SOURCES}: "
                         f"{sorted(declared)}); change the rules or the dashboard, or the releases they cover")


def test_dashboard_uses_vllm_metrics() -> None:
    """The dashboard's vLLM names are in used(), so test_vllm_metrics_exist_in_release checks them too."""
    assert DASHBOARDS, "no dashboard under roles/monitoring/files/grafana"
    names = {n for expr in dashboard_exprs() for n in _METRIC.findall(expr) if n.startswith("vllm:")}
    assert names >= {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                     "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds_bucket",
                     "vllm:inter_token_latency_seconds_bucket", "vllm:spec_decode_num_accepted_tokens_per_pos_total"}
    assert names <= used("vllm:")


def test_router_metrics_exist_in_pinned_release() -> None:
    extensions = list(router_bin().parent.parent.glob("lib/python3*/site-packages/vllm_router_rs*.so"))
    assert extensions, f"no vllm_router_rs extension in {router_bin().parent.parent}"
    binary = extensions[0].read_bytes()
    names = used("vllm_router_")
    assert names >= {"vllm_router_worker_health"}
    assert [name for name in sorted(names) if name.encode() not in binary] == []


def test_dcgm_fields_are_default_counters() -> None:
    names = used("DCGM_FI_")
    assert names, "the rules use no DCGM field"
    assert sorted(names - DCGM_DEFAULT_COUNTERS.keys()) == [], "a DCGM field not in the table: read the CSV, add it"
    assert {name for name in names if not DCGM_DEFAULT_COUNTERS[name][1]} == DCGM_OPT_IN
    # Counters are alerted on with rate()/increase(), gauges never.
    for expr in _exprs():
        for name in _METRIC.findall(expr):
            if name in DCGM_DEFAULT_COUNTERS and DCGM_DEFAULT_COUNTERS[name][0] == "gauge":
                assert not re.search(rf"(rate|increase)\({re.escape(name)}\b", expr), expr


def test_dcgm_opt_in_fields_are_documented() -> None:
    doc = (REPO / "docs" / "monitoring.md").read_text()
    assert [name for name in sorted(DCGM_OPT_IN) if name not in doc] == []
