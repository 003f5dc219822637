# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The vLLM systemd unit's state from `systemctl show`, and whether its process died.

Stdlib only, Python 3.9+, no Ansible imports: modules run this on the managed node
and plugins on the controller.
"""

from __future__ import annotations

import typing as t


# InvocationID: each start of the unit has its own; the journal of the watched start is read by
# it, so a cause logged by an earlier start is never reported.
UNIT_PROPERTIES = ("ActiveState", "SubState", "MainPID", "NRestarts", "ExecMainStatus",
                   "ExecMainCode", "Result", "ExecMainStartTimestampMonotonic", "LoadState",
                   "InvocationID")


def parse_systemctl_show(text: str) -> dict[str, str]:
    """`systemctl show -p A -p B` output (KEY=value lines) as a dict."""
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def _int(props: t.Mapping[str, str], key: str) -> int:
    try:
        return int(props.get(key) or 0)
    except ValueError:
        return 0


def unit_death(unit: str, baseline: t.Mapping[str, str], current: t.Mapping[str, str]) -> str | None:
    """Why the unit's process is gone since `baseline` was taken, or None while it lives."""
    active = current.get("ActiveState", "")
    sub = current.get("SubState", "")
    status = current.get("ExecMainStatus", "")
    code = current.get("ExecMainCode", "")
    exit_text = f" (main process exit status {status})" if status not in ("", "0") else ""
    if current.get("LoadState") == "not-found":
        return f"{unit} does not exist"
    restarts = _int(current, "NRestarts") - _int(baseline, "NRestarts")
    if restarts > 0:
        return (f"{unit} died and systemd restarted it {restarts} time(s){exit_text}; "
                f"now {active}/{sub}")
    if sub == "auto-restart":
        return f"{unit} died{exit_text}; a restart by systemd was pending ({active}/{sub})"
    if active == "failed":
        return f"{unit} failed{exit_text} (result {current.get('Result', '?')}, code {code or '?'})"
    if active in ("inactive", "deactivating"):
        return f"{unit} is not running (state {active}/{sub}){exit_text}"
    old_pid, new_pid = _int(baseline, "MainPID"), _int(current, "MainPID")
    if old_pid and new_pid != old_pid:
        return f"{unit} main process {old_pid} is gone (now pid {new_pid or 'none'}){exit_text}"
    return None
