"""site.yml's last play must run after any failure inside the plays before it (it releases the
run lock, says per host what happened and fails the run naming each failed host).

ansible-core ends a playbook at once, skipping every later play, when all hosts of a play or of
a serial batch have failed (PlaybookExecutor: `len(batch) == failed_hosts_count`), and when a
play's max_fail_percentage is exceeded. So the work of each play that runs under the lock sits
in a block whose rescue keeps what failed and leaves the play (tasks/node_failed.yml), and the
rolling play has no max_fail_percentage (it stops its rollout itself). molecule/fleet chapters
06 and 14 check the behaviour on a real fleet; this keeps the structure from being undone.
"""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYS = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
NODE_FAILED = yaml.safe_load((REPO / "playbooks" / "tasks" / "node_failed.yml").read_text())


def imported(tasks: list[dict]) -> list[dict]:
    """A play's `tasks` with each import_tasks of a play's own file replaced by the tasks of that
    file (one level: the table of contents; the shared lock and failure files stay as tasks)."""
    out = []
    for task in tasks:
        name = task.get("ansible.builtin.import_tasks")
        own = name and name not in ("tasks/fleet_lock.yml", "tasks/node_failed.yml")
        out += yaml.safe_load((REPO / "playbooks" / name).read_text()) if own else [task]
    return out


def rescued_work(play: dict) -> list[str]:
    """The names of the tasks of `play` (its `tasks:`) that do the play's work inside a block
    whose rescue imports tasks/node_failed.yml; and of those that do it outside one."""
    inside, outside = [], []
    for task in play.get("tasks") or []:
        rescue = task.get("rescue") or []
        if "block" in task and any(r.get("ansible.builtin.import_tasks") == "tasks/node_failed.yml" for r in rescue):
            inside.append(task["name"])
        else:
            outside.append(task.get("name", "?"))
    assert not outside, f"{play['name']}: tasks outside a block that rescues into tasks/node_failed.yml: {outside}"
    return inside


def test_every_play_under_the_lock_rescues_its_work():
    prepare, start, routers, roll, last = PLAYS[:5]
    for play in (prepare, start, routers, roll):
        assert "roles" not in play, f"{play['name']}: roles: cannot be rescued; import them in a block"
        assert rescued_work(play), play["name"]
    assert "max_fail_percentage" not in roll and "any_errors_fatal" not in roll
    # Which stage each rescue names: the rolling play's failures stop the rollout.
    stages = [task["rescue"][0]["vars"]["__gpuserve_stage"] for play in (prepare, start, routers, roll)
              for task in play["tasks"]]
    assert stages == ["prepare", "start", "routers", "roll"]
    # The last play releases the lock before it fails the run for what failed.
    names = [task.get("name", "") for task in imported(last["tasks"])]
    release = names.index("Release the fleet's run lock")
    assert release < names.index("Name what failed") and release < names.index("Name what was held and why")


def test_a_failed_host_leaves_the_play_without_failing_it():
    """Each rescue keeps what failed, then ends the host with a task of its own: an end_host
    inside the imported file leaves the host counted failed (ansible-core 2.19), and a serial
    batch of one failed host ends the playbook before its last play."""
    assert [next(k for k in task if k.startswith("ansible.builtin.")) for task in NODE_FAILED] == [
        "ansible.builtin.set_fact"]
    for play in PLAYS[:4]:
        for task in play["tasks"]:
            last = task["rescue"][-1]
            assert last.get("ansible.builtin.meta") == "end_host" and "always" in last["tags"], play["name"]


def test_site_reads_as_a_table_of_contents():
    """Each play a few lines, the work in imported files (issue 55: at most 200 lines)."""
    assert len((REPO / "playbooks" / "site.yml").read_text().splitlines()) <= 200
    for play in PLAYS:
        for section in ("pre_tasks", "tasks", "post_tasks"):
            assert len(play.get(section) or []) <= 2, f"{play['name']}: {section} has {len(play[section])} tasks"


def test_the_wheelhouse_copies_run_under_the_lock_in_the_rescued_work():
    """A copy changes the node: after the play's lock task, inside the block whose rescue leaves
    the run (a failed copy or wheelhouse check must not end the playbook holding the lock)."""
    def copies(tasks: list) -> list[str]:
        return [task["name"] for task in tasks or []
                if (task.get("ansible.builtin.include_role") or {}).get("name") == "gpuserve.vllm.wheelhouse"]

    found = 0
    for play in PLAYS:
        assert not copies(imported(play.get("pre_tasks") or [])) and not copies(play.get("tasks")), play["name"]
        for task in play.get("tasks") or []:
            inside = copies(imported(task.get("block") or []))
            if inside:
                found += len(inside)
                assert any((t.get("vars") or {}).get("__gpuserve_lock_state") == "present"
                           for t in imported(play.get("pre_tasks") or [])), play["name"]
                assert task["rescue"][0]["ansible.builtin.import_tasks"] == "tasks/node_failed.yml"
    assert found == 2  # the GPU nodes' (prepare play) and the routers'
