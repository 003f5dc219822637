# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What a rollback undoes: the fleet's last rollout, read from the nodes' switch records.

Every switch of the env link (roles/vllm_server/tasks/steps/switch.yml) is first appended to a
root-owned record on the node (`<state_dir>/<service>_server.switch.json`): from, to, when (the
controller's clock), and whether it was a rollback. It is written *before* the link moves, so a
run killed in between leaves a record whose `to` the link does not name (the switch did not
happen: the node stays), never a switch without a record. A failed start whose recovery puts the
links back takes its switch off the record again (`undone`).

The last rollout is the most recent forward switch across the nodes read (rollbacks are not
rollouts), to env E; it began after the latest forward switch to any other env (`since`). A node
is part of it when its link names E and its own last forward switch went to E after `since`:
that node goes back to what it switched from. Any other node stays -- the rollout never reached
it, or it came to E in an earlier rollout -- and so does a node with no switch record. The pins
play no part: with the pins put back to the release before, nodes on it stay where they are.
A node whose rollback is done keeps a hold (one-shot), so a second rollback is never two steps
back. Stdlib only, no Ansible imports.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._nodeview import PlanError, _float, _switches, short

RECORD_VERSION = 1
# A record keeps the last switches only: enough to see the rollout before the last on each node.
HISTORY_MAX = 16


def last_forward(history: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, t.Any] | None:
    """The node's last switch that was not a rollback."""
    forward = [s for s in history if not s["rollback"]]
    return dict(forward[-1]) if forward else None


def record(history: t.Sequence[t.Mapping[str, t.Any]], frm: str, to: str, at: float,
           rollback: bool) -> dict[str, t.Any]:
    """The record to write before a switch: the history with this switch last (the last
    HISTORY_MAX). A killed run's entry for the same switch is replaced, not repeated."""
    kept = [dict(s) for s in history]
    if kept and (kept[-1]["from"], kept[-1]["to"], kept[-1]["rollback"]) == (frm, to, rollback):
        kept.pop()
    kept.append({"from": frm, "to": to, "at": float(at), "rollback": bool(rollback)})
    return {"version": RECORD_VERSION, "switches": kept[-HISTORY_MAX:]}


def undone(history: t.Sequence[t.Mapping[str, t.Any]], frm: str, to: str) -> dict[str, t.Any]:
    """The record once a failed start's recovery put the links back from `to` to `frm`: without
    that switch (it did not happen; left on record it would be taken for the last rollout)."""
    kept = [dict(s) for s in history]
    if kept and (kept[-1]["from"], kept[-1]["to"]) == (frm, to):
        kept.pop()
    return {"version": RECORD_VERSION, "switches": kept}


def last_rollout(reads: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """{env, at, since, read, unknown} from every node's vllm_node_state read (host -> result;
    None or a result without a link view: not read). `env` "" when no node has a forward switch."""
    forward, read, unknown = [], [], []
    for host, observed in sorted(reads.items()):
        if not isinstance(observed, t.Mapping) or "link" not in observed:
            unknown.append(str(host))
            continue
        read.append(str(host))
        forward += [s for s in _switches(observed.get("switches")) if not s["rollback"]]
    if not forward:
        return {"env": "", "at": None, "since": None, "read": read, "unknown": unknown}
    latest = max(forward, key=lambda s: s["at"])
    before = [s["at"] for s in forward if s["to"] != latest["to"]]
    return {"env": latest["to"], "at": latest["at"], "since": max(before) if before else None,
            "read": read, "unknown": unknown}


def back_to(link: str, history: t.Sequence[t.Mapping[str, t.Any]],
            rollout: t.Mapping[str, t.Any]) -> tuple[str, str]:
    """(the env this node rolls back to, "" when it stays; why, one clause)."""
    env = str(rollout.get("env") or "")
    if not env:
        return "", "not rolled back: no node read has a switch on record, so there is no rollout to undo"
    last = last_forward(history)
    if link != env:
        return "", (f"not rolled back: the last rollout switched nodes to {short(env)}; this node serves "
                    f"{short(link)}, so the rollout never switched it (or it went back since): it stays")
    if not last or last["to"] != env:
        what = f"its last switch on record went to {short(last['to'])}" if last else "it has no switch on record"
        return "", (f"not rolled back: it serves {short(env)}, the env of the last rollout, but {what}: "
                    "the rollout did not switch it, so it stays")
    since = _float(rollout.get("since"))
    if since is not None and last["at"] <= since:
        return "", (f"not rolled back: it came to {short(env)} in an earlier rollout (before the switches "
                    f"away from it), not the last one: it stays")
    if not last["from"]:
        return "", f"not rolled back: nothing served here before its switch to {short(env)}: it stays"
    unknown = [str(h) for h in rollout.get("unknown") or []]
    if unknown:
        raise PlanError(f"vllm_server_rollback: the last rollout is read from every node in play, and "
                        f"{', '.join(unknown)} could not be read (a node that failed or left earlier in "
                        "this run): one of them may hold a later rollout. Nothing was changed. Re-run "
                        "once they answer, or leave them out with --limit")
    return last["from"], f"the last rollout switched it from {short(last['from'])} to {short(env)}"
