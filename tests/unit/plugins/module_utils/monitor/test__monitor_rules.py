"""_rules.tune: the inventory's `for:` and left-out alerts over the fleet's real rules file, and refusals."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpuserve.vllm.plugins.module_utils._monitor import _rules as mr
from tests.support.promtool import promtool

REPO = Path(__file__).resolve().parents[5]
RULES = {path.name: yaml.safe_load(path.read_text()) for path in (REPO / "roles" / "monitoring" / "files" / "rules").glob("*.rules.yml")}


def _alerts(files: dict) -> dict[str, str]:
    return {rule["alert"]: rule.get("for", "") for rules in files.values() for group in rules["groups"]
            for rule in group["rules"] if "alert" in rule}


def test_nothing_asked_changes_nothing():
    assert mr.tune(RULES, {}, []) == RULES


def test_the_durations_are_set_and_the_disabled_alerts_left_out():
    tuned = mr.tune(RULES, {"VllmServerDown": "2s", "VllmEngineHang": "1h30m"}, ["VllmFleetCapacityLow", "GpuPcieReplays"])
    before, after = _alerts(RULES), _alerts(tuned)
    assert (after["VllmServerDown"], after["VllmEngineHang"]) == ("2s", "1h30m")
    assert set(before) - set(after) == {"VllmFleetCapacityLow", "GpuPcieReplays"}
    assert {name: after[name] for name in after if name not in ("VllmServerDown", "VllmEngineHang")} == \
        {name: before[name] for name in after if name not in ("VllmServerDown", "VllmEngineHang")}
    assert _alerts(RULES)["VllmServerDown"] == "5m"  # the parsed original is not touched


def test_the_tuned_file_passes_promtool(tmp_path):
    tuned = mr.tune(RULES, {"VllmServerDown": "90s"}, ["VllmRouterNoHealthyWorker"])
    for name, rules in tuned.items():
        (tmp_path / name).write_text(yaml.safe_dump(rules, width=4096))
        done = subprocess.run([str(promtool()), "check", "rules", str(tmp_path / name)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_group_whose_alerts_are_all_left_out_goes():
    files = {"a.rules.yml": {"groups": [{"name": "g1", "rules": [{"alert": "A", "expr": "up == 0"}]},
                                        {"name": "g2", "rules": [{"record": "r", "expr": "up"}, {"alert": "B", "expr": "up"}]}]}}
    assert mr.tune(files, {}, ["A", "B"]) == {"a.rules.yml": {"groups": [{"name": "g2", "rules": [{"record": "r", "expr": "up"}]}]}}


def test_a_name_is_found_in_any_of_the_files():
    files = {"a.rules.yml": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up"}]}]},
             "b.rules.yml": {"groups": [{"name": "h", "rules": [{"alert": "B", "expr": "up"}]}]}}
    assert _alerts(mr.tune(files, {"B": "1m"}, ["A"])) == {"B": "1m"}


@pytest.mark.parametrize(("alert_for", "disabled", "says"), [
    ({"VllmServerDwn": "5m"}, [], "no alert named VllmServerDwn in the fleet's rules (they are: "),
    ({}, ["instance:vllm_generation_tokens:rate5m"], "no alert named instance:vllm_generation_tokens:rate5m"),
    ({"VllmServerDown": "5 minutes"}, [], "not a Prometheus duration (e.g. 90s, 5m, 1h30m): VllmServerDown: '5 minutes'"),
    ({"VllmServerDown": 300}, [], "VllmServerDown: 300"),
    ({"VllmServerDown": "m5"}, [], "VllmServerDown: 'm5'"),
])
def test_refusals_name_what_is_wrong(alert_for, disabled, says):
    with pytest.raises(mr.RulesError) as caught:
        mr.tune(RULES, alert_for, disabled)
    assert says in str(caught.value)


def test_a_file_that_is_no_rules_file_is_named():
    with pytest.raises(mr.RulesError, match="x.rules.yml: expected a Prometheus rules file"):
        mr.tune({"x.rules.yml": ["not", "rules"]}, {}, [])
