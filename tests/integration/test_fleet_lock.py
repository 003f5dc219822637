"""gpuserve.vllm.fleet_lock through real ansible-playbook runs on localhost (connection local).

Run 1 takes the lock and waits on a file; run 2, started meanwhile, fails naming run 1's
ansible-playbook pid and leaves the lock alone; run 1 is then SIGKILLed with every process it
started (Ansible's workers call setsid, so the tree is walked through /proc, not a process
group); run 3 takes the lock over with the "ended without releasing it" message and its release leaves no lock.
The monitoring role's serving-state script reads the lock as each run left it (held, then none).
Needs the environment of tests/env.sh. Bounded: every wait and run has a timeout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _lock

RUN_TIMEOUT = 120
SERVING_STATE = Path(__file__).resolve().parents[2] / "roles" / "monitoring" / "files" / "gpuserve_serving_state.py"


def lock_series(lock: Path, tmp: Path) -> dict[str, str]:
    """What gpuserve_serving_state.py (the lock host's textfile script) reports of the lock: name -> value."""
    (tmp / "serving-state.json").write_text(json.dumps({"node": "router01", "start_record": "", "lock": str(lock)}))
    subprocess.run([sys.executable, "-I", "-B", str(SERVING_STATE), str(tmp / "serving-state.json"), str(tmp / "serving.prom")],
                   check=True, timeout=30)
    return dict(line.split(" ", 1) for line in (tmp / "serving.prom").read_text().splitlines() if line.startswith("gpuserve_fleet_run"))


def children(pid: int) -> list[int]:
    """Every descendant of pid, read from /proc (ppid is field 4 of /proc/<pid>/stat)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int) -> None:
    """Stop the process so it starts nothing new, then SIGKILL it and all it started."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    for victim in [pid] + children(pid):
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Runs:
    """Playbooks in a temp dir against localhost, all sharing one lock path."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock = root / "state" / "site.lock"
        self.go = root / "go"
        self.inventory = root / "inventory.ini"
        self.inventory.write_text(
            f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
        self.env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
                        ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_DEPRECATION_WARNINGS="0")

    def playbook(self, name: str, tasks: list[dict[str, t.Any]]) -> Path:
        path = self.root / f"{name}.json"
        path.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
        return path

    def argv(self, playbook: Path) -> list[str]:
        return ["ansible-playbook", "-i", str(self.inventory), str(playbook), "-e", "token=s3cret"]

    def take(self) -> dict[str, t.Any]:
        return {"gpuserve.vllm.fleet_lock": {"path": str(self.lock)}, "register": "taken"}

    def release(self) -> dict[str, t.Any]:
        return {"gpuserve.vllm.fleet_lock": {"path": str(self.lock), "state": "absent"},
                "register": "released"}

    def run(self, playbook: Path) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(playbook), capture_output=True, text=True, env=self.env,
                              timeout=RUN_TIMEOUT, check=False)

    def wait_for_lock(self, proc: subprocess.Popen, timeout: float = 60) -> dict[str, t.Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.lock.exists():
                return json.loads(self.lock.read_text())
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"run 1 ended (rc {proc.returncode}) before it took the lock:\n"
                                     f"{out[-4000:]}\n{err[-2000:]}")
            time.sleep(0.1)
        raise AssertionError(f"run 1 took no lock within {timeout} s")


@pytest.fixture()
def runs(tmp_path: Path) -> Runs:
    return Runs(tmp_path)


def test_second_run_refused_killed_run_taken_over(runs: Runs) -> None:
    holding = runs.playbook("run1", [
        runs.take(),
        {"ansible.builtin.wait_for": {"path": str(runs.go), "timeout": 90}},
        runs.release(),
    ])
    run1 = subprocess.Popen(runs.argv(holding), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=runs.env)
    try:
        record = runs.wait_for_lock(run1)
        assert record["pid"] == run1.pid, record  # the ansible-playbook process, not a worker
        assert lock_series(runs.lock, runs.root) == {"gpuserve_fleet_run_lock_read_success": "1", "gpuserve_fleet_run_locked": "1",
                                                     "gpuserve_fleet_run_heartbeat_timestamp_seconds": f"{record['heartbeat']:.3f}"}
        assert "s3cret" not in record["command"] and "-e '***'" in record["command"]

        second = runs.run(runs.playbook("run2", [runs.take()]))
        assert second.returncode != 0, second.stdout[-4000:]
        assert f"ansible-playbook pid {run1.pid}" in second.stdout, second.stdout[-4000:]
        assert "still running" in second.stdout
        assert json.loads(runs.lock.read_text()) == record

        kill_tree(run1.pid)
        run1.communicate(timeout=30)
        assert run1.returncode == -signal.SIGKILL
        # A killed run leaves its lock; its heartbeat, seeing the process gone, marks it ended.
        ended = wait_for_ended(runs.lock)
        assert {k: v for k, v in ended.items() if k != "ended"} == record, ended

        out = runs.root / "run3-results.json"
        third = runs.run(runs.playbook("run3", [
            runs.take(), runs.release(),
            {"ansible.builtin.copy": {"content": "{{ [taken, released] | to_json }}", "dest": str(out)}},
        ]))
        assert third.returncode == 0, third.stdout[-4000:] + third.stderr[-2000:]
        taken, released = json.loads(out.read_text())
        assert taken["action"] == "takeover" and taken["changed"], taken
        assert "a lock left by a run that ended without releasing it" in taken["msg"] and f"pid {run1.pid} " in taken["msg"]
        assert taken["previous"] == ended and taken["holder"]["run_id"] != record["run_id"]
        # said without -v: a warning naming the killed run
        warned = " ".join((third.stdout + third.stderr).split())
        assert re.search(r"\[WARNING\]: a lock left by a run that ended without releasing it .*pid " + str(run1.pid) + " ", warned), warned[-3000:]
        assert released["action"] == "release" and released["previous"]["run_id"] == taken["holder"]["run_id"]
        assert not runs.lock.exists()
        assert sorted(p.name for p in runs.lock.parent.iterdir()) == []  # no temp file either
        assert lock_series(runs.lock, runs.root) == {"gpuserve_fleet_run_lock_read_success": "1", "gpuserve_fleet_run_locked": "0"}
    finally:
        runs.go.touch()
        if run1.poll() is None:
            kill_tree(run1.pid)
            run1.communicate(timeout=30)


def test_one_run_keeps_its_lock_across_tasks_and_releases(runs: Runs) -> None:
    out = runs.root / "results.json"
    result = runs.run(runs.playbook("run", [
        runs.take(),
        {"gpuserve.vllm.fleet_lock": {"path": str(runs.lock)}, "register": "again"},
        runs.release(),
        {"ansible.builtin.copy": {"content": "{{ [taken, again, released] | to_json }}", "dest": str(out)}},
    ]))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    taken, again, released = json.loads(out.read_text())
    assert (taken["action"], again["action"], released["action"]) == ("acquire", "keep", "release")
    assert taken["holder"]["run_id"] == again["holder"]["run_id"] == released["previous"]["run_id"]
    assert not runs.lock.exists()


def wait_for_ended(lock: Path, seconds: float = 15) -> dict[str, t.Any]:
    """The lock's record once the dead run's heartbeat has marked it ended."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        record = json.loads(lock.read_text())
        if record.get("ended"):
            return record
        time.sleep(0.1)
    raise AssertionError(f"the lock was not marked ended within {seconds} s: {lock.read_text()}")


def gone_within(pid: int, seconds: float) -> bool:
    """Whether process pid has ended (or is only a zombie) within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


STALE, EVERY = 6, 1  # seconds: a "long step" of 8 s outlasts the stale age, beats fit six times


def test_heartbeat_keeps_a_long_step_fresh_and_dies_with_its_run(runs: Runs) -> None:
    """A step longer than the stale age: the run's lock, judged as from another controller (only
    its heartbeat to go by), stays held; the run killed, its heartbeat stops within seconds
    (it is no descendant of the run: nothing killed it) and the lock goes stale STALE s later."""
    out = runs.root / "taken.json"
    holding = runs.playbook("run1", [
        {"gpuserve.vllm.fleet_lock": {"path": str(runs.lock), "stale_after": STALE, "heartbeat_every": EVERY},
         "register": "taken"},
        {"ansible.builtin.copy": {"content": "{{ taken | to_json }}", "dest": str(out)}},
        {"ansible.builtin.wait_for": {"path": str(runs.go), "timeout": 90}},
    ])
    run1 = subprocess.Popen(runs.argv(holding), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=runs.env)
    other = dict(runs.wait_for_lock(run1), run_id="run-on-another-controller")
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        beating = json.loads(out.read_text())["heartbeat_pid"]
        assert isinstance(beating, int) and beating not in children(run1.pid), beating
        first = json.loads(runs.lock.read_text())["heartbeat"]
        time.sleep(STALE + 2)  # the long step
        record = json.loads(runs.lock.read_text())
        assert record["heartbeat"] >= first + STALE, (first, record)
        judged = _lock.decide(record, other, holder_alive=None, now=time.time(), stale_after=STALE)
        assert judged["action"] == "refuse", judged

        kill_tree(run1.pid)
        run1.communicate(timeout=30)
        assert gone_within(beating, 2 * 2.0 + 5), "the heartbeat outlived its run"
        last = json.loads(runs.lock.read_text())
        time.sleep(2 * EVERY)
        assert json.loads(runs.lock.read_text()) == last  # no beat after the run
        # Its last act: the lock marked ended, taken over from another controller at once (not
        # after the stale age, not only with gpuserve_lock_break).
        assert last.get("ended"), last
        judged = _lock.decide(last, other, holder_alive=None, now=last["heartbeat"] + 1, stale_after=STALE)
        assert judged["action"] == "takeover" and "ended without releasing it" in judged["msg"], judged
    finally:
        runs.go.touch()
        if run1.poll() is None:
            kill_tree(run1.pid)
            run1.communicate(timeout=30)


def test_heartbeat_stops_at_the_release_and_never_takes_the_lock_back(runs: Runs) -> None:
    out = runs.root / "results.json"
    result = runs.run(runs.playbook("run", [
        {"gpuserve.vllm.fleet_lock": {"path": str(runs.lock), "stale_after": STALE, "heartbeat_every": EVERY},
         "register": "taken"},
        {"gpuserve.vllm.fleet_lock": {"path": str(runs.lock), "stale_after": STALE, "heartbeat_every": EVERY},
         "register": "again"},
        {"ansible.builtin.pause": {"seconds": 2}},
        runs.release(),
        {"ansible.builtin.pause": {"seconds": 3}},  # beats would fall here
        {"ansible.builtin.copy": {"content": "{{ [taken, again, released] | to_json }}", "dest": str(out)}},
    ]))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    taken, again, released = json.loads(out.read_text())
    assert taken["heartbeat_pid"] == again["heartbeat_pid"]  # one per run
    assert released["previous"]["heartbeat"] > taken["holder"]["heartbeat"]  # it beat before the release
    assert gone_within(taken["heartbeat_pid"], 0.5), "the heartbeat outlived the lock"
    assert not runs.lock.exists()


def test_a_heartbeat_that_would_not_fit_is_refused(runs: Runs) -> None:
    result = runs.run(runs.playbook("run", [
        {"gpuserve.vllm.fleet_lock": {"path": str(runs.lock), "stale_after": 60, "heartbeat_every": 30}}]))
    assert result.returncode != 0 and "does not fit three times" in result.stdout, result.stdout[-3000:]
    assert not runs.lock.exists()
