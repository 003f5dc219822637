"""Tables for the run's env decisions and their one-line report (plugins/module_utils/_vllm_upgrade.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _vllm_upgrade as vu

OLD, NEW = "/opt/ml-env.d/vllm-0.17.0-aaaaaaaaaaaa", "/opt/ml-env.d/vllm-0.18.0-bbbbbbbbbbbb"


@pytest.mark.parametrize("current, target, kw, action, canary, stop, reason", [
    (OLD, NEW, {}, "switch", True, False, ""),
    (OLD, NEW + "/", {}, "switch", True, False, ""),
    (NEW, NEW, {}, "none", False, False, "the link already names"),
    (OLD, "", {}, "none", False, False, "vllm_server_env_target is empty"),
    (OLD, "", {"canary_requested": True}, "none", True, False, ""),
    (NEW, NEW, {"canary_requested": True}, "none", True, False, ""),
    ("", NEW, {}, "switch", True, False, ""),
    ("", "", {"canary_requested": True}, "none", False, False, "no env to run a canary of"),
    (OLD, NEW, {"start": False}, "switch", False, False, "vllm_server_start is false"),
    (OLD, NEW, {"canary": False}, "switch", False, False, "vllm_server_canary is false"),
    (OLD, NEW, {"canary": False, "canary_requested": True}, "switch", True, False, ""),
    (OLD, NEW, {"drained": True}, "switch", True, True, ""),
    (OLD, NEW, {"batch_size": 1, "hosts_count": 4}, "switch", True, True, ""),
    (OLD, NEW, {"batch_size": 4, "hosts_count": 4}, "switch", True, False, ""),
    (OLD, NEW, {"stop_server": "true"}, "switch", True, True, ""),
    (OLD, NEW, {"stop_server": "false", "drained": True}, "switch", True, False, ""),
    (OLD, NEW, {"stop_server": True}, "switch", True, True, ""),
    (OLD, NEW, {"drained": True, "server_active": False}, "switch", True, False, ""),
    (OLD, NEW, {"rollback": True}, "rollback", False, False, "rollback"),
])
def test_plan(current, target, kw, action, canary, stop, reason):
    got = vu.plan(current, target, **kw)
    assert (got["action"], got["canary"], got["stop_server"]) == (action, canary, stop)
    assert reason in got["canary_reason"]
    if canary:
        assert got["canary_env"] == (target.rstrip("/") or current)
        assert got["stop_reason"]


def test_plan_refuses_an_unknown_stop_mode():
    with pytest.raises(vu.UpgradeError, match="vllm_server_canary_stop_server must be one of auto, true, false; found 'maybe'"):
        vu.plan(OLD, NEW, stop_server="maybe")


def test_report_of_a_full_upgrade():
    decision = vu.plan(OLD, NEW)
    fact = vu.report(decision, canary={"ok": True, "seconds": 41.2},
                     switch={"changed": True, "switched_from": OLD, "switched_to": NEW},
                     start={"ok": True}, prune={"removed": ["/opt/ml-env.d/vllm-0.16.0-cccccccccccc"]})
    assert fact["line"] == ("env upgrade: env vllm-0.18.0-bbbbbbbbbbbb built; canary passed in 41.2 s; "
                            "switched vllm-0.17.0-aaaaaaaaaaaa -> vllm-0.18.0-bbbbbbbbbbbb; healthy after "
                            "the switch; pruned vllm-0.16.0-cccccccccccc")
    assert fact["canary_run"] and fact["canary_ok"] and fact["switched"] and fact["start_ok"]
    assert not fact["rolled_back"] and fact["canary_seconds"] == 41.2


def test_report_of_a_failed_canary():
    fact = vu.report(vu.plan(OLD, NEW), canary={"ok": False, "seconds": 3.1, "msg": "IndentationError: x"},
                     switch={"changed": False, "skipped": True})
    assert "canary FAILED after 3.1 s: IndentationError: x; no switch" in fact["line"]
    assert fact["canary_ok"] is False and not fact["switched"]


def test_report_of_a_rollback_after_a_failed_start():
    fact = vu.report(vu.plan(OLD, NEW), canary={"ok": True, "seconds": 5},
                     switch={"changed": True, "switched_from": OLD, "switched_to": NEW},
                     start={"ok": False, "msg": "died"}, rollback={"ok": True, "to": OLD})
    assert "start FAILED: died; rolled back to vllm-0.17.0-aaaaaaaaaaaa, healthy" in fact["line"]
    assert fact["rolled_back"]


@pytest.mark.parametrize("decision, kw, line", [
    (vu.plan(OLD, NEW), {"check_mode": True},
     "env upgrade: env vllm-0.18.0-bbbbbbbbbbbb built; canary of vllm-0.18.0-bbbbbbbbbbbb would run beside "
     f"the server; would switch {OLD} -> {NEW}"),
    (vu.plan(NEW, NEW), {}, "env upgrade: env vllm-0.18.0-bbbbbbbbbbbb (already serving)"),
    (vu.plan(OLD, ""), {}, "env upgrade: no switch: vllm_server_env_target is empty"),
    (vu.plan(OLD, NEW, start=False), {"switch": {"changed": True, "switched_from": OLD, "switched_to": NEW}},
     "env upgrade: env vllm-0.18.0-bbbbbbbbbbbb built; no canary (vllm_server_start is false (no GPU): no "
     "canary; nothing serves, so the switch is safe); switched vllm-0.17.0-aaaaaaaaaaaa -> vllm-0.18.0-bbbbbbbbbbbb"),
    (vu.plan(OLD, NEW, rollback=True), {"check_mode": True},
     "env upgrade: env vllm-0.18.0-bbbbbbbbbbbb built; would roll back to the previous env"),
    (vu.plan(OLD, NEW, drained=True), {"check_mode": True},
     "env upgrade: env vllm-0.18.0-bbbbbbbbbbbb built; canary of vllm-0.18.0-bbbbbbbbbbbb would run after "
     f"stopping the server (the node is drained (vllm_server_drained)); would switch {OLD} -> {NEW}"),
])
def test_report_lines(decision, kw, line):
    assert vu.report(decision, **kw)["line"] == line


@pytest.mark.parametrize("stat, expected", [
    ({"exists": True, "islnk": True, "lnk_source": NEW + "/"}, NEW),
    ({"exists": True, "islnk": False, "isdir": True}, "/opt/ml-env"),
    ({"exists": True, "islnk": False, "isdir": False}, ""),
    ({"exists": False}, ""),
    (None, ""),
])
def test_current_env_from_the_links_stat(stat, expected):
    assert vu.current_env(stat, "/opt/ml-env") == expected
