"""Tables for unit-death detection from `systemctl show` (plugins/module_utils/_vllm/_unit.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _unit as vu


RUNNING = {"ActiveState": "active", "SubState": "running", "MainPID": "100", "NRestarts": "0"}


@pytest.mark.parametrize("current, fragment", [
    (RUNNING, None),
    (dict(RUNNING, NRestarts="1", MainPID="200"), "restarted it 1 time(s)"),
    ({"ActiveState": "activating", "SubState": "auto-restart", "MainPID": "0", "NRestarts": "0",
      "ExecMainStatus": "1"}, "died (main process exit status 1); a restart by systemd was pending"),
    ({"ActiveState": "failed", "SubState": "failed", "MainPID": "0", "Result": "exit-code",
      "ExecMainStatus": "1"}, "failed (main process exit status 1) (result exit-code"),
    ({"ActiveState": "inactive", "SubState": "dead", "MainPID": "0"}, "is not running"),
    (dict(RUNNING, MainPID="300"), "main process 100 is gone"),
    ({"LoadState": "not-found", "ActiveState": "inactive"}, "does not exist"),
])
def test_unit_death(current: dict, fragment: str | None) -> None:
    reason = vu.unit_death("vllm.service", RUNNING, current)
    if fragment is None:
        assert reason is None
    else:
        assert reason is not None and fragment in reason, reason


def test_parse_systemctl_show() -> None:
    assert vu.parse_systemctl_show("ActiveState=active\nMainPID=12\nbroken\nX=a=b\n") == {
        "ActiveState": "active", "MainPID": "12", "X": "a=b"}
