"""The plan entry point decides from the read site.yml's idle play hands it.

The idle play observes each node first (entry point observe) and plans the nodes it keeps from
that read (__vllm_server_observed). roles/vllm_server/tasks/plan.yml runs here through
ansible-playbook on localhost with the role's defaults and vars, after a task that leaves a read
of a node that serves an env of a name no real read could give. A skipped observe task that
registered over it (an import with a `when`, as molecule/fleet chapter 3 once found: the dead
node's plan said "start (none) (no unit yet)") would make the plan decide from nothing. The read's
shape: tests/unit/plugins/module_utils/vllm/test__vllm_nodeplan.py (node()). Needs tests/env.sh.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")

HANDED = "/opt/ml-env.d/vllm-0.17.0-handed0read"


def handed_read(link: Path) -> dict:
    """What vllm_node_state registers for a node serving HANDED through `link`."""
    return {
        "unit": {"load_state": "loaded", "active_state": "active", "sub_state": "running", "main_pid": 4242,
                 "started": 1_700_000_000.0},
        "process": {"env": HANDED, "started": 1_700_000_000.0},
        "link": {"path": str(link), "kind": "link", "env": HANDED},
        "previous": {"path": f"{link}.previous", "kind": "absent", "env": ""},
        "target": {"path": "", "env": ""},
        "envs": {HANDED: {"exists": True, "built": True}},
        "files": {"unit": 1_699_999_000.0, "env_file": 1_699_999_000.0, "restart_marker": None},
        "start_record": {"present": False, "current": False, "changed": [], "error": ""},
        "journal": None, "hold": None, "reboot": {"pending": False, "reason": ""},
        "health": {"status": 200, "error": "", "known": True, "tries": 1},
        "metrics": {"reachable": True, "known": True}, "gpus": [],
        "rendered": {"unit": {"same": True, "why": ""}, "env_file": {"same": True, "why": ""}},
        "boundary": {"problems": [], "checked": []},
    }


def test_the_plan_decides_from_the_read_it_is_handed(tmp_path: Path, role_tasks) -> None:
    link = tmp_path / "ml-env"
    proc, tasks = role_tasks("plan.yml", {
        "__vllm_server_observed": True, "vllm_server_start": False, "vllm_server_env_link": str(link),
        "vllm_server_unit_dir": str(tmp_path), "vllm_server_config_dir": str(tmp_path),
    }, before=[{"name": "What the idle play's read left", "ansible.builtin.set_fact": {
        "vllm_server_node_state": handed_read(link)}}])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = next(t["hosts"]["localhost"]["msg"] for t in tasks if t["task"]["name"] == "Plan -- say it")
    assert HANDED.rsplit("/", 1)[1] in said and "serving" in said, said
    assert not [t for t in tasks if t["task"]["name"].startswith("Plan -- observe the node (")], \
        "the plan read the node again instead of deciding from the read it was handed"


def test_the_checks_refuse_a_read_that_judged_another_unit_environment(tmp_path: Path, role_tasks) -> None:
    """The unit environment is judged by the plan's read (vllm_node_state); checks run with other
    variables than that read's (vllm_server_env changed since) must not pass on the old verdict."""
    link = tmp_path / "ml-env"
    read = dict(handed_read(link), boundary={"problems": [], "checked": [], "id": "judged another environment"})
    proc, tasks = role_tasks("checks.yml", {
        "vllm_server_env_link": str(link), "vllm_server_preflight": False,
        "vllm_server_env": {"LD_PRELOAD": "/var/cache/vllm/libplanted.so"},
    }, before=[{"name": "What an earlier read left", "ansible.builtin.set_fact": {
        "vllm_server_node_state": read, "vllm_server_node_plan": {"changes": False}}}])
    assert proc.returncode != 0, proc.stdout[-3000:]
    refused = next(t["hosts"]["localhost"] for t in tasks if t["task"]["name"].startswith("Checks -- refuse a unit environment"))
    assert refused.get("failed") and "judged another unit environment" in refused["msg"], refused
