"""The fleet's Prometheus rules (roles/monitoring/files/rules/) checked and unit-tested by promtool.

promtool comes from Debian's prometheus package, fetched once into $GPUSERVE_CACHE
(tests/support/promtool.py). Each rule group has its promtool test file here, named after the
group (gpuserve-vllm.serving -> serving.test.yml); a test fails when promtool reports a failure,
and the tables below check that every alert has a case where it fires and one where it stays
silent, that every recording rule is evaluated, and that every alert carries what an operator
needs (severity, summary, a runbook anchor that exists in docs/monitoring.md).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.promtool import promtool

REPO = Path(__file__).resolve().parents[3]
RULES_DIR = REPO / "roles" / "monitoring" / "files" / "rules"
RULE_FILES = sorted(RULES_DIR.glob("*.rules.yml"))
TESTS_DIR = Path(__file__).resolve().parent
DOC = REPO / "docs" / "monitoring.md"
SEVERITIES = {"critical", "warning", "info"}


def _groups() -> list[dict]:
    return [group for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"]]


GROUPS = _groups()
ALERTS = [(group["name"], rule) for group in GROUPS for rule in group["rules"] if "alert" in rule]


def _test_file(group_name: str) -> Path:
    return TESTS_DIR / f"{group_name.split('.', 1)[1]}.test.yml"


def _run(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(promtool()), *map(str, args)], capture_output=True, text=True, timeout=300, check=False)


def test_rule_files_exist() -> None:
    assert RULE_FILES, f"no *.rules.yml under {RULES_DIR}"


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules(rule_file: Path) -> None:
    result = _run("check", "rules", rule_file)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("group", [g["name"] for g in GROUPS])
def test_promtool_test_rules(group: str) -> None:
    test_file = _test_file(group)
    assert test_file.is_file(), f"rule group {group} has no promtool tests: create {test_file.relative_to(REPO)}"
    result = _run("test", "rules", test_file)
    # promtool prints FAILED with the expected and the actual alerts/samples of each failing case.
    assert result.returncode == 0 and "FAILED" not in result.stdout + result.stderr, result.stdout + result.stderr


@pytest.mark.parametrize(("group", "rule"), ALERTS, ids=[rule["alert"] for _group, rule in ALERTS])
def test_alert_fires_and_stays_silent(group: str, rule: dict) -> None:
    """Each alert has a case in its group's test file where it fires, and one where it must not."""
    cases = [case for test in yaml.safe_load(_test_file(group).read_text())["tests"]
             for case in test.get("alert_rule_test", []) if case["alertname"] == rule["alert"]]
    assert any(case.get("exp_alerts") for case in cases), f"{rule['alert']}: no case where it fires"
    assert any(not case.get("exp_alerts") for case in cases), f"{rule['alert']}: no case where it stays silent"


def test_every_recording_rule_is_evaluated() -> None:
    exprs = " ".join(case["expr"] for test in yaml.safe_load((TESTS_DIR / "recording.test.yml").read_text())["tests"]
                     for case in test.get("promql_expr_test", []))
    records = [rule["record"] for group in GROUPS for rule in group["rules"] if "record" in rule]
    assert records
    assert [r for r in records if not re.search(rf"(?<![\w:]){re.escape(r)}(?![\w:])", exprs)] == []


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in markdown.splitlines() if line.startswith("#")}


@pytest.mark.parametrize(("group", "rule"), ALERTS, ids=[rule["alert"] for _group, rule in ALERTS])
def test_alert_labels_and_runbook(group: str, rule: dict) -> None:
    assert rule.get("labels", {}).get("severity") in SEVERITIES
    annotations = rule.get("annotations", {})
    assert annotations.get("summary")
    assert annotations.get("runbook") == f"docs/monitoring.md#{rule['alert'].lower()}"
    assert rule["alert"].lower() in _anchors(DOC.read_text()), f"docs/monitoring.md has no section {rule['alert']}"
