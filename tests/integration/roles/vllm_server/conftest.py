"""Run one of roles/vllm_server's task files on localhost, as the role would (include_role
tasks_from: its defaults, vars and templates); the results come back from the json callback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

ROLE = Path(__file__).resolve().parents[4] / "roles" / "vllm_server"


@pytest.fixture
def role_tasks(tmp_path: Path) -> t.Callable[..., tuple[subprocess.CompletedProcess, list[dict]]]:
    """role_tasks(tasks_file, variables, before=[tasks]) -> (the finished ansible-playbook, its
    tasks' results); `before` runs first in the same play (what an earlier task left)."""

    def run(tasks_file: str, variables: dict[str, t.Any],
            before: list[dict[str, t.Any]] | None = None) -> tuple[subprocess.CompletedProcess, list[dict]]:
        play = tmp_path / f"play-{tasks_file.replace('/', '-')}"
        play.write_text(json.dumps([{  # JSON is YAML
            "hosts": "localhost", "gather_facts": False,
            "tasks": list(before or []) + [{"name": f"Run the role's {tasks_file} tasks", "ansible.builtin.include_role": {
                "name": str(ROLE), "tasks_from": tasks_file.removesuffix(".yml")}}]}]))
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
        # From a file, as an operator passes secrets: the tests look for the token on command lines.
        extra = tmp_path / f"vars-{tasks_file.replace('/', '-')}.json"
        extra.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **variables}))
        extra.chmod(0o600)
        proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", f"@{extra}", str(play)],
                              capture_output=True, text=True, env=env, timeout=300, check=False)
        tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
        for task in tasks:  # the task's own name, as the role's task files spell it
            task["task"]["name"] = task["task"]["name"].removeprefix(f"{ROLE} : ")
        return proc, tasks

    return run
