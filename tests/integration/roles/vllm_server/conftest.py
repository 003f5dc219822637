"""Run one of roles/vllm_server's task files on localhost, as the role would, with its defaults
and vars; the results come back from the json callback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

ROLE = Path(__file__).resolve().parents[4] / "roles" / "vllm_server"
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars_files: [{role}/defaults/main.yml, {role}/vars/main.yml]
  tasks:
    - name: Run the role's {tasks} tasks
      ansible.builtin.include_tasks: {role}/tasks/{tasks}
"""


@pytest.fixture
def role_tasks(tmp_path: Path) -> t.Callable[..., tuple[subprocess.CompletedProcess, list[dict]]]:
    """role_tasks(tasks_file, variables) -> (the finished ansible-playbook, its tasks' results)."""

    def run(tasks_file: str, variables: dict[str, t.Any]) -> tuple[subprocess.CompletedProcess, list[dict]]:
        play = tmp_path / f"play-{tasks_file.replace('/', '-')}"
        play.write_text(PLAYBOOK.format(role=ROLE, tasks=tasks_file))
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
        proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local",
                               "-e", json.dumps({"ansible_python_interpreter": sys.executable, **variables}), str(play)],
                              capture_output=True, text=True, env=env, timeout=300, check=False)
        return proc, json.loads(proc.stdout)["plays"][0]["tasks"]

    return run
