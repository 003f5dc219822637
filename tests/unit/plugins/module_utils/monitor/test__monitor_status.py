"""The fleet status table (module_utils/_monitor/_status.py), as tables of node states."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._monitor import _status as ms

NOW = 1_796_300_000.0
SERVING = {
    "unit": {"active_state": "active", "main_pid": 4242, "started": NOW - 2 * 3600 - 5 * 60},
    "process": {"env": "/opt/ml-env.d/vllm-0.33.0-8c01d2e3f4a5"},
    "start_record": {"current": True, "vllm_version": "0.33.0", "env": "/opt/ml-env.d/vllm-0.33.0-8c01d2e3f4a5",
                     "model": "/srv/models/kimi-k2.5.d/3f2a9c1b7d40 manifest 9e8d7c6b5a4f3e2d1c0b", "changed": [],
                     "unreadable": []},
    "health": {"status": 200, "known": True},
    "metrics": {"reachable": True, "known": True, "running": 54.0, "waiting": 2.0, "kv_cache_usage": 0.7247,
                "spec_decode": {"drafts": 21998.0, "draft_tokens": 65994.0, "accepted_tokens": 38561.0}},
    "reboot": {"pending": False}, "files": {"restart_marker": None},
}
ROUTED = [{"name": "router01", "state": "serving", "listed": True, "healthy": True, "unknown": False}]


def _with(**changes) -> dict:
    state = copy.deepcopy(SERVING)
    for key, value in changes.items():
        section, field = key.split("__")
        state[section][field] = value
    return state


def test_a_serving_node() -> None:
    assert ms.row({"name": "gpu01", "state": SERVING, "routers": ROUTED}, NOW) == {
        "node": "gpu01", "health": "healthy", "vllm": "0.33.0", "env": "vllm-0.33.0-8c01d2e3f4a5",
        "weights": "3f2a9c1b7d40 (manifest 9e8d7c6b5a4f)", "routers": "router01:healthy", "run": "54", "wait": "2",
        "kv": "72%", "accept": "2.75", "started": "2026-12-03 10:08 (2h05m ago)", "restart pending": "-"}


@pytest.mark.parametrize(("state", "routers", "column", "expected"), [
    # Restart reasons from the start record, as the serve plan reads them.
    (_with(start_record__changed=["env_file", "model"]), ROUTED, "restart pending", "env_file, model"),
    (_with(start_record__unreadable=["nccl_conf (permission denied)"]), ROUTED, "restart pending",
     "nccl_conf (permission denied) unreadable"),
    (_with(start_record__current=False), ROUTED, "restart pending", "unknown (no start record of this start)"),
    (_with(reboot__pending=True, reboot__reason="driver 580.95.05 installed"), ROUTED, "restart pending",
     "reboot: driver 580.95.05 installed"),
    (_with(files__restart_marker=NOW - 60), ROUTED, "restart pending", "restart requested"),
    # Weights revisions as hf download records them.
    (_with(start_record__model="/srv/models/kimi-k2.5 commits 3f2a9c1b7d40aa55bb66cc77dd88ee99ff001122"), ROUTED,
     "weights", "kimi-k2.5 (3f2a9c1b7d40)"),
    # Routers: each one's view of the node.
    (SERVING, [{"name": "r1", "state": "serving", "listed": True, "healthy": False},
               {"name": "r2", "state": "serving", "listed": False},
               {"name": "r3", "state": "absent"}, {"name": "r4", "state": "unknown", "unknown": True}], "routers",
     "r1:unhealthy r2:not routed r3:router down r4:?"),
    (SERVING, [], "routers", "-"),
    # No spec decoding, no KV gauge.
    (_with(metrics__spec_decode=None, metrics__kv_cache_usage=None), ROUTED, "accept", "-"),
    (_with(metrics__spec_decode={"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}), ROUTED, "accept", "-"),
    # /metrics did not answer (a time-out): unknown, not zero; nothing listens: nothing to show.
    (_with(metrics__reachable=False, metrics__known=False), ROUTED, "run", "?"),
    (_with(metrics__reachable=False, metrics__known=True), ROUTED, "kv", "-"),
    # Health.
    (_with(health__status=None), ROUTED, "health", "loading"),
    (_with(health__status=503), ROUTED, "health", "HTTP 503"),
    (_with(health__status=None, health__known=False), ROUTED, "health", "?"),
    (_with(health__status=None, unit__active_state="failed", unit__main_pid=0), [], "health", "failed"),
    (_with(health__status=None, unit__active_state="failed", unit__main_pid=0), [], "vllm", "-"),
])
def test_cells(state: dict, routers: list, column: str, expected: str) -> None:
    assert ms.row({"name": "gpu01", "state": state, "routers": routers}, NOW)[column] == expected


def test_a_node_that_did_not_answer() -> None:
    node = {"name": "gpu07", "error": "Failed to connect to the host via ssh: timed out\nmore"}
    cells = ms.row(node, NOW)
    assert {cells[c] for c in ms.COLUMNS if c != "node"} == {"?"}
    assert ms.table([node], NOW)["lines"][-1] == "gpu07: Failed to connect to the host via ssh: timed out"
    # A module that failed on the node (its result registered): the same, with the module's message.
    assert ms.note({"name": "gpu08", "state": {"failed": True, "msg": "systemctl show vllm.service failed (rc 1)"}}) == \
        "gpu08: systemctl show vllm.service failed (rc 1)"
    assert ms.note({"name": "gpu01", "state": SERVING}) == ""


def test_table_lines_and_summary() -> None:
    nodes = [{"name": "gpu02", "state": _with(health__status=None, unit__active_state="inactive", unit__main_pid=0)},
             {"name": "gpu01", "state": _with(start_record__changed=["model"]), "routers": ROUTED},
             {"name": "gpu03", "error": "unreachable"}]
    result = ms.table(nodes, NOW)
    assert result["lines"][0].split() == ["node", "health", "vllm", "env", "weights", "routers", "run", "wait", "kv",
                                          "accept", "started", "restart", "pending"]
    assert [line.split()[0] for line in result["lines"][2:5]] == ["gpu01", "gpu02", "gpu03"]
    assert len({len(line) for line in result["lines"][:2]}) == 1  # the rule is as wide as the header
    assert result["summary"] == "3 node(s): 1 healthy, 1 not healthy, 1 unknown; 1 with a restart pending"
    assert result["lines"][5:] == [result["summary"], "gpu03: unreachable"]
