"""Run gpuserve.vllm.python_patch through real ansible-playbook and return the registered results.

It drives the real module through Ansible on localhost
(connection local, interpreter = this pytest's Python), registers every task and dumps the
registered values to JSON. Needs the environment of tests/env.sh (ANSIBLE_COLLECTIONS_PATH).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path

MODULE = "gpuserve.vllm.python_patch"


def task(args: t.Mapping[str, t.Any], **keywords: t.Any) -> t.Dict[str, t.Any]:
    """One python_patch task; keywords are task keywords (check_mode, diff, environment)."""
    return {"args": dict(args), "keywords": keywords}


def write_playbook(workdir: Path, tasks: t.Sequence[t.Mapping[str, t.Any]], *,
                   hosts: str = "localhost") -> t.Tuple[Path, Path]:
    """Write playbook + results path; each task registers r<i> and never stops the play."""
    out = workdir / ("results-%d.json" % len(list(workdir.glob("play-*.json"))))
    play_tasks: t.List[t.Dict[str, t.Any]] = []
    for index, item in enumerate(tasks):
        entry: t.Dict[str, t.Any] = {"name": "step %d" % index, MODULE: item["args"],
                                     "register": "r%d" % index, "ignore_errors": True}
        entry.update(item["keywords"])
        play_tasks.append(entry)
    names = ", ".join("r%d" % i for i in range(len(tasks)))
    play_tasks.append({
        "name": "dump results",
        "ansible.builtin.copy": {"content": "{{ [%s] | to_json }}" % names,
                                 "dest": "%s-{{ inventory_hostname }}" % out},
        "check_mode": False, "diff": False,
    })
    playbook = workdir / ("play-%d.json" % len(list(workdir.glob("play-*.json"))))
    playbook.write_text(json.dumps([{"hosts": hosts, "gather_facts": False,
                                     "tasks": play_tasks}], indent=1))
    return playbook, out


def run_playbook(workdir: Path, tasks: t.Sequence[t.Mapping[str, t.Any]], *,
                 hosts: t.Sequence[str] = ("localhost",),
                 env: t.Mapping[str, str] | None = None) -> t.Any:
    """Run the tasks; return the list of results (or {host: list} with several hosts)."""
    workdir.mkdir(parents=True, exist_ok=True)
    inventory = workdir / "inventory.ini"
    inventory.write_text("".join(
        "%s ansible_connection=local ansible_python_interpreter=%s\n" % (h, sys.executable)
        for h in hosts))
    playbook, out = write_playbook(workdir, tasks, hosts="all")
    environ = dict(os.environ)
    environ.update({"ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
                    "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_FORKS": "5"})
    environ.update(env or {})
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbook)],
                          capture_output=True, text=True, env=environ, check=False)
    results = {}
    for host in hosts:
        dump = Path("%s-%s" % (out, host))
        if proc.returncode != 0 or not dump.exists():
            raise AssertionError("ansible-playbook failed (rc=%s):\n%s\n%s"
                                 % (proc.returncode, proc.stdout[-6000:], proc.stderr[-3000:]))
        results[host] = json.loads(dump.read_text())
    return results[hosts[0]] if len(hosts) == 1 else results
