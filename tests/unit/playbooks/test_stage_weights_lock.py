"""stage_weights.yml switches the nodes' model links: it runs under the fleet's run lock, and
releases it on every way out that Ansible sees (a failed host too), as site.yml does.

Real ansible-playbook runs of the playbook on localhost (connection local, the lock in a temp
dir): a run beside another holder is refused before it stages anything; a run whose staging
fails takes the lock first, releases it in its last play, and fails naming the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "stage_weights.yml"
PLAYS = yaml.safe_load(PLAYBOOK.read_text())


def test_the_lock_is_taken_before_the_role_and_released_by_a_last_play():
    stage, last = PLAYS
    assert "roles" not in stage, "roles: run outside any block: a failure there would end the playbook holding the lock"
    assert [t.get("vars", {}).get("__gpuserve_lock_state") for t in stage["pre_tasks"]] == ["present"]
    (work,) = stage["tasks"]
    assert work["block"][0]["ansible.builtin.import_role"]["name"] == "gpuserve.vllm.vllm_weights"
    assert work["rescue"][0]["ansible.builtin.import_tasks"] == "tasks/node_failed.yml"
    assert work["rescue"][-1].get("ansible.builtin.meta") == "end_host"
    assert last["hosts"] == stage["hosts"]
    names = [t["name"] for t in last["tasks"]]
    assert names.index("Release the fleet's run lock") < names.index("Name what failed")
    assert last["tasks"][0]["vars"]["__gpuserve_lock_state"] == "absent"


def run(tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    inventory = tmp / "inventory.ini"
    inventory.write_text("[gpu_nodes]\nlocalhost ansible_connection=local ansible_become=false "
                         f"ansible_python_interpreter={sys.executable}\n")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_LOCALHOST_WARNING="0")
    argv = ["ansible-playbook", "-v", "-i", str(inventory), str(PLAYBOOK),
            "-e", json.dumps({"gpuserve_lock_path": str(tmp / "state" / "site.lock"), "gpuserve_lock_host": "localhost"}),
            *extra]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180, check=False, cwd=REPO)


def test_a_failed_staging_releases_the_lock_and_fails_naming_the_host(tmp_path):
    # A checkpoint without repo or revision: the role refuses it, inside the rescued block.
    result = run(tmp_path, "-e", json.dumps({"vllm_weights_checkpoints": [{"name": "kimi"}]}))
    out = result.stdout
    assert result.returncode != 0, out[-4000:]
    taken, released = out.find("lock acquired by run"), out.find("fleet lock released by run")
    failed = out.find("failed to stage the weights")
    assert -1 < taken < released < failed, out[-6000:]
    assert "localhost failed to stage the weights: " in out
    assert not (tmp_path / "state" / "site.lock").exists()


def test_a_staging_beside_another_run_is_refused_before_it_stages(tmp_path):
    lock = tmp_path / "state" / "site.lock"
    lock.parent.mkdir()
    holder = {"run_id": "run-elsewhere", "controller": "ops-other", "boot_id": "b", "pid": 1, "pid_start": "1",
              "started": 1.0, "user": "alice", "command": "ansible-playbook site.yml", "heartbeat": 4e9}
    lock.write_text(json.dumps(holder))
    result = run(tmp_path)
    assert result.returncode != 0
    assert "the fleet lock is held by run run-elsewhere" in result.stdout, result.stdout[-4000:]
    assert "nothing to stage" not in result.stdout  # the role never ran
    assert json.loads(lock.read_text()) == holder  # and another run's lock is left alone
