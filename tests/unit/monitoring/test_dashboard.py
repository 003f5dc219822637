"""The Grafana dashboard the monitoring role provisions (roles/monitoring/files/grafana/gpuserve-vllm.json), as a
file: its variables, its panels' datasource and layout. That every query returns series from a real Prometheus
is test_prometheus_live.py's; that every metric name exists in the vLLM releases, the router and dcgm-exporter is
test_metric_names.py's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DASHBOARD = Path(__file__).resolve().parents[3] / "roles" / "monitoring" / "files" / "grafana" / "gpuserve-vllm.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _panels(dashboard: dict) -> list[dict]:
    return [p for top in dashboard["panels"] for p in [top] + top.get("panels", []) if p["type"] != "row"]


def test_variables(dashboard: dict) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables.keys() == {"datasource", "node", "floor"}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    # The nodes are the vLLM scrape targets' instances (the inventory names), several at once or all.
    assert variables["node"]["query"] == 'label_values(up{job="vllm"}, instance)'
    assert variables["node"]["multi"] and variables["node"]["includeAll"] and variables["node"]["allValue"] == ".*"
    assert variables["floor"]["type"] == "constant"


def test_every_panel_queries_the_datasource_variable(dashboard: dict) -> None:
    panels = _panels(dashboard)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for panel in panels:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]


def test_node_variable_filters_every_per_node_series(dashboard: dict) -> None:
    """A vLLM or GPU series without instance=~"$node" would ignore the node picker (fleet-wide panels aside)."""
    fleet_wide = {"vLLM servers up", "Fleet generation tokens/s"}
    for panel in _panels(dashboard):
        for target in panel["targets"]:
            for selector in re.findall(r"(?:vllm:|instance:|DCGM_FI_)[\w:]+\{[^}]*\}|(?:vllm:|DCGM_FI_)[\w:]+(?![\w:{])", target["expr"]):
                if panel["title"] not in fleet_wide:
                    assert 'instance=~"$node"' in selector, (panel["title"], selector)
                if selector.startswith("vllm:"):
                    assert 'job="vllm"' in selector, (panel["title"], selector)


def test_layout(dashboard: dict) -> None:
    """Every panel inside the 24-column grid, none overlapping another."""
    cells = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine
