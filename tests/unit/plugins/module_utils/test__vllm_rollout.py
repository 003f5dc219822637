"""Tables for the will-it-restart decision of site.yml's rollout (plugins/module_utils/_vllm_rollout.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _vllm_rollout as vr

OLD, NEW = "/opt/ml-env.d/a-aaaaaaaaaaaa", "/opt/ml-env.d/b-bbbbbbbbbbbb"
LINK = {"exists": True, "islnk": True, "lnk_source": OLD}
LEGACY = {"exists": True, "islnk": False, "isdir": True}


@pytest.mark.parametrize("state, restart, reason", [
    ({"link_stat": LINK, "link": "/opt/ml-env", "target": OLD}, False, "nothing changes"),
    ({"link_stat": LINK, "link": "/opt/ml-env", "target": OLD + "/"}, False, "nothing changes"),
    ({"link_stat": LINK, "link": "/opt/ml-env", "target": ""}, False, "nothing changes"),
    ({"link_stat": LINK, "link": "/opt/ml-env", "target": NEW}, True, "env switch " + OLD + " -> " + NEW),
    ({"link_stat": LEGACY, "link": "/opt/ml-env", "target": NEW}, True, "env switch /opt/ml-env -> " + NEW),
    ({"link_stat": {"exists": False}, "link": "/opt/ml-env", "target": NEW}, True, "env switch none -> "),
    ({"marker": True}, True, "restart request file present"),
    ({"requested": "true"}, True, "vllm_server_restart_requested"),
    ({"requested": "false"}, False, "nothing changes"),
    ({"unit_changed": True}, True, "systemd unit changes"),
    ({"env_changed": True}, True, "env file changes"),
    ({"active": False}, True, "service not active"),
    ({"start": False, "marker": True, "link_stat": LINK, "target": NEW}, False, "vllm_server_start is false"),
    ({"start": "false", "unit_changed": True}, False, "vllm_server_start is false"),
])
def test_restart_plan(state, restart, reason):
    got = vr.restart_plan(state)
    assert got["restart"] is restart
    assert reason in got["line"]
    assert bool(got["reasons"]) is restart


def test_every_reason_is_listed():
    got = vr.restart_plan({"link_stat": LINK, "link": "/opt/ml-env", "target": NEW, "marker": True,
                           "unit_changed": True, "active": False})
    assert len(got["reasons"]) == 4
    assert got["line"].startswith("restart: env switch")
