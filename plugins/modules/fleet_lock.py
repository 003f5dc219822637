#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: the fleet lock file, so that one site.yml run at a time rolls a fleet."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_lock
short_description: Take, keep or release the lock that lets one ansible-playbook run at a time roll a fleet
version_added: 0.3.0
description:
  - A lock file on the node that stands for the fleet names the ansible-playbook run holding it
    (controller, pid and its start ticks, boot id, start time, user, command line with the
    values of C(-e) and of every password and key option replaced by C(***), run id).
  - The companion action plugin of the same name builds this run's record on the controller
    (the run id is the same for every task of one ansible-playbook process) and calls the
    module with O(state=present), which takes a free lock or keeps this run's, and refuses
    another run's as long as nobody judged it; the action plugin then judges on the controller
    whether that holder still runs, and calls the module again with its judgement. Use the task,
    not the module's options O(holder), O(holder_alive) and O(judged_run_id), which the action
    plugin fills in.
  - With O(state=present) a missing lock is created with a hard link from a synced temporary
    file, so of two runs starting together exactly one wins; the other is refused, naming it.
    The same run asking again keeps the lock. A lock left by a run killed on this controller
    (its pid gone, or reused by another process) is taken over, and the message names the killed run.
    A holder on another controller or boot cannot be checked from here - the task fails naming
    it and saying how to take it over on purpose - C(-e gpuserve_lock_break=<its run id>),
    passed as O(break_run_id), once the operator has checked that run is gone.
  - O(state=absent) removes the lock only when this run holds it; another run's lock is left
    alone with a warning. A lock file holding no holder record fails the task and is left as it is.
  - The heartbeat. Once the lock is taken or kept, the action plugin starts a heartbeat process on
    the controller (one per run) that renews the lock every O(heartbeat_every) seconds with
    O(state=renew), over the same connection and become as the task, however long a step of the run
    takes (a weight download, a reboot with acceptance, a model load). It is bound to the run - it
    reads every 2 s whether the C(ansible-playbook) process (pid and start ticks) still runs, and
    stops within seconds of its end, whatever the way out (a kill too). It also stops once the lock
    is no longer this run's (released, or taken over). So a live run's lock never goes stale, and
    a dead run's goes stale O(stale_after) seconds after its last heartbeat at the latest.
  - A run that ends without its last play (Ctrl-C, a kill, a playbook cut short) leaves its lock,
    but its heartbeat, seeing its process gone, marks the record C(ended) (O(state=ended)), and any
    run, from any controller, then takes it over at once, with the warning naming it. Needs a
    Linux controller (C(/proc)); elsewhere the lock is renewed by the tasks only.
  - Every change of the lock file (take, renew, release) holds an exclusive C(flock) on its
    directory, so a heartbeat in flight cannot write back a lock its run has just released or
    another run has just taken over.
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details:
      - Writes and removes nothing and reports what it would do. A lock held by another run is a
        warning instead of a failure - a check run changes nothing, so it may run beside a real one.
  diff_mode:
    support: full
    details: The holder line before and after.
  idempotent:
    support: full
    details:
      - The same run taking the lock again keeps it (C(changed=false)); releasing twice removes once.
  platform:
    platforms: posix
options:
  path:
    description: The lock file. Its directory is created C(0755) when missing; the file is C(0644).
    type: path
    default: /var/lib/gpuserve/site.lock
  state:
    description:
      - V(present) takes or keeps the lock, V(absent) releases it, V(query) only reads it.
      - V(renew) is the heartbeat's - renews this run's lock, never takes one (the action plugin's
        heartbeat process uses it). V(ended) is its last act once the run's process is gone - marks
        this run's lock for any run to take over.
    type: str
    choices: [present, absent, query, renew, ended]
    default: present
  holder:
    description:
      - This run's holder record (C(run_id), C(controller), C(boot_id), C(pid_ns), C(pid), C(pid_start),
        C(started), C(user), C(command)). Set by the action plugin. Its C(heartbeat) is stamped here, with
        the lock host's clock, which also ages it.
    type: dict
  holder_alive:
    description:
      - Whether the holder named by O(judged_run_id) still runs - V(true), V(false) (killed on
        this controller) or V(null) (cannot be told). Judged on the controller by the action plugin.
    type: raw
  judged_run_id:
    description:
      - The run id O(holder_alive) was judged for. A lock found with any other run id was written
        after that judgement, by a run that was then running, and counts as held by a live run.
    type: str
    default: ""
  break_run_id:
    description: Take over the lock of this run id even though it cannot be checked from here.
    type: str
    default: ""
  stale_after:
    description:
      - Seconds after the holder's last heartbeat (each O(state=present) of the holding run renews
        it) after which a holder that cannot be checked from here is taken for gone and its lock
        taken over, with a message naming it. V(0) never.
      - A run's heartbeat process renews it every O(heartbeat_every) seconds however long a step
        takes; the tasks renew it too (site.yml at each play and each batch of its rolling play).
    type: int
    default: 10800
  heartbeat_every:
    description:
      - Seconds between two renewals by the run's heartbeat process (read by the action plugin;
        the module itself does nothing with it). V(0) is a sixth of O(stale_after). At most a third of
        O(stale_after) (the task fails otherwise). No heartbeat process when O(stale_after=0),
        in check mode, or for O(state=absent) and O(state=query).
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Take the fleet lock (fails naming the holder while another run rolls the fleet)
  gpuserve.vllm.fleet_lock:
    break_run_id: "{{ gpuserve_lock_break | default('') }}"
  run_once: true

- name: Release it at the end of the run
  gpuserve.vllm.fleet_lock:
    state: absent
  run_once: true
"""

RETURN = r"""
action:
  description:
    - V(acquire), V(keep), V(takeover) or V(refuse) for O(state=present); V(release), V(leave)
      (another run's lock) or V(none) (no lock) for O(state=absent); V(query) for O(state=query);
      V(keep) or V(lost) (no lock, or another run's) for O(state=renew); V(ended) or V(lost) for O(state=ended).
  returned: always
  type: str
holder:
  description: The record in force after the task (or that would be in check mode); null when there is no lock.
  returned: always
  type: dict
previous:
  description: The record replaced or removed, if any.
  returned: always
  type: dict
heartbeat_pid:
  description:
    - The controller's pid of this run's heartbeat process (started by this task or an earlier one of
      the run); null when there is none (check mode, V(stale_after=0), no C(/proc)).
  returned: when O(state=present) took or kept the lock
  type: int
msg:
  description: One line saying what was done and naming the holder.
  returned: always
  type: str
"""

import contextlib
import fcntl
import json
import os
import time
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpuserve.vllm.plugins.module_utils import _atomic
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._lock import (
    RECORD_FIELDS, LockError, decide, holder_text, mark_ended, parse_record, renew)


def read_lock(path: str) -> dict | None:
    """The record in the lock file, None when there is none (LockError for anything else)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return parse_record(handle.read())
    except FileNotFoundError:
        return None


def publish(path: str, record: dict, *, replace: bool) -> None:
    """Write the record whole: synced temp file, then link (fails if one appeared) or replace.
    The directory is there: `guarded` made it."""
    data = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8")
    _atomic.publish(_atomic.write_temp(path, data, mode=0o644), path, replace=replace)


@contextlib.contextmanager
def guarded(path: str, create: bool) -> t.Iterator[None]:
    """Hold an exclusive flock on the lock's directory: one change of the lock at a time (a renewal
    read before a release or a takeover must not write its record back after it). No directory and
    `create` false: there is no lock to guard."""
    directory = os.path.dirname(os.path.abspath(path))
    if create and not os.path.isdir(directory):
        os.makedirs(directory, mode=0o755, exist_ok=True)
        os.chmod(directory, 0o755)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def renewed(p: dict, me: dict, check: bool) -> dict:
    """The heartbeat: a new stamp on this run's lock; any other lock, or none, is left alone."""
    existing = read_lock(p["path"])
    decision = renew(existing, me)
    if decision["action"] == "keep" and not check:
        publish(p["path"], dict(existing, heartbeat=me["heartbeat"]), replace=True)
    holder = dict(existing, heartbeat=me["heartbeat"]) if decision["action"] == "keep" else existing
    return dict(decision, holder=holder, previous=None, changed=False)


def ended(p: dict, me: dict, check: bool) -> dict:
    """The heartbeat saw this run's process end before it released the lock: mark it so."""
    existing = read_lock(p["path"])
    decision = mark_ended(existing, me, time.time())
    if decision["action"] == "ended" and not check:
        publish(p["path"], decision["record"], replace=True)
    return {"action": decision["action"], "msg": decision["msg"], "holder": decision.get("record", existing),
            "previous": None, "changed": False}


def present(p: dict, me: dict, check: bool) -> dict:
    """Decide on the lock found; write this run's record when acquiring (a link: cannot race)
    or taking over (a replace: two runs taking over one dead lock in the same instant could)."""
    for _attempt in range(2):
        existing = read_lock(p["path"])
        judged = existing is not None and existing["run_id"] == p["judged_run_id"]
        alive = p["holder_alive"] if judged else True
        decision = decide(existing, me, holder_alive=None if alive is None else boolean(alive),
                          break_run_id=p["break_run_id"], now=time.time(), stale_after=p["stale_after"])
        result = dict(decision, holder=existing, previous=None, changed=False)
        if decision["action"] == "refuse":
            return result
        if decision["action"] == "keep":
            # The heartbeat: a holder that cannot be judged from another controller is alive
            # as long as it renews this. Bookkeeping of the same run: not a change.
            if not check:
                publish(p["path"], dict(existing, heartbeat=me.get("heartbeat")), replace=True)
            return dict(result, holder=dict(existing, heartbeat=me.get("heartbeat")))
        result.update(holder=me, previous=existing, changed=True)
        if check:
            return result
        try:
            publish(p["path"], me, replace=decision["action"] == "takeover")
            return result
        except FileExistsError:
            continue  # another run linked its record first: read it and decide again
    return {"action": "refuse", "holder": read_lock(p["path"]), "previous": None, "changed": False,
            "msg": "other runs took and released the fleet lock while this run tried to take it: run again"}


def absent(p: dict, me: dict, check: bool) -> dict:
    """Remove the lock only when this run holds it."""
    existing = read_lock(p["path"])
    if existing is None:
        return {"action": "none", "msg": "no fleet lock to release", "holder": None,
                "previous": None, "changed": False}
    if existing["run_id"] != me["run_id"]:
        return {"action": "leave", "holder": existing, "previous": None, "changed": False,
                "msg": f"the fleet lock is held by another run and was left alone: {holder_text(existing)}"}
    if not check:
        os.unlink(p["path"])
    return {"action": "release", "msg": f"fleet lock released by {holder_text(me)}",
            "holder": None, "previous": existing, "changed": True}


def main() -> None:
    """Read, decide, act; errors name the lock file."""
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/var/lib/gpuserve/site.lock"},
            "state": {"type": "str", "choices": ["present", "absent", "query", "renew", "ended"], "default": "present"},
            "holder": {"type": "dict"},
            "holder_alive": {"type": "raw"},
            "judged_run_id": {"type": "str", "default": ""},
            "break_run_id": {"type": "str", "default": ""},
            "stale_after": {"type": "int", "default": 10800},
            "heartbeat_every": {"type": "int", "default": 0},  # the action plugin's: accepted, not used here
        },
        required_if=[("state", "present", ["holder"]), ("state", "absent", ["holder"]), ("state", "renew", ["holder"]),
                     ("state", "ended", ["holder"])],
        supports_check_mode=True,
    )
    p = module.params
    me = {key: (p["holder"] or {}).get(key) for key in RECORD_FIELDS}
    # Stamped with the lock host's clock, which also ages it (decide's `now`): a controller whose
    # clock is off cannot make its own lock look stale, or another run's look fresh.
    me["heartbeat"] = time.time()
    if p["state"] != "query" and not (isinstance(me["run_id"], str) and me["run_id"]):
        module.fail_json(msg="holder has no run_id: the fleet_lock action plugin sets it; use the task")
    result: dict[str, t.Any]
    try:
        if p["state"] == "query":
            found = read_lock(p["path"])
            result = {"action": "query", "holder": found, "previous": None, "changed": False,
                      "msg": f"held by {holder_text(found)}" if found else "no fleet lock"}
        else:
            act = {"present": present, "absent": absent, "renew": renewed, "ended": ended}[p["state"]]
            with guarded(p["path"], create=p["state"] == "present" and not module.check_mode):
                result = act(p, me, module.check_mode)
    except LockError as exc:
        module.fail_json(msg=f"{p['path']}: {exc}. The file was left as it is: look at it, and remove it "
                             "once no run holds the lock", path=p["path"])
    except (OSError, ValueError, TypeError) as exc:
        module.fail_json(msg=f"{p['path']}: {exc}", path=p["path"])
    if module._diff and result["changed"]:
        before, after = result["previous"], result["holder"]
        result["diff"] = {"before_header": p["path"], "after_header": p["path"],
                          "before": holder_text(before) + "\n" if before else "",
                          "after": holder_text(after) + "\n" if after else ""}
    if result["action"] == "refuse":
        if not module.check_mode:
            module.fail_json(**result)
        module.warn(f"check mode: {result['msg']}")
    elif result["action"] == "leave":
        module.warn(result["msg"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
