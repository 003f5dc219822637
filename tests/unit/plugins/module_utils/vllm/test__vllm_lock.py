"""Tables for the fleet lock (plugins/module_utils/_vllm/_lock.py) and its module, in-process.

The rules decide who holds the fleet: a killed run on this controller is taken over, a live or
unknowable holder refuses naming it, secrets never reach the lock file's command line.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest

from ansible.module_utils import basic

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _lock
from ansible_collections.gpuserve.vllm.plugins.modules import fleet_lock

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "plugins" / "modules"))
from module_runner import run_module_main  # noqa: E402


def rec(run_id: str = "run-a", pid: int = 4242, **kw: t.Any) -> dict:
    return dict({"run_id": run_id, "controller": "ctl1", "boot_id": "boot-1", "pid_ns": "pid:[4026531836]", "pid": pid,
                 "pid_start": "1000", "started": 1735689600.0, "user": "alice",
                 "command": "ansible-playbook site.yml -e '***'", "heartbeat": 1735689600.0}, **kw)


ME = rec("run-me", 7, user="bob")


@pytest.mark.parametrize("existing, alive, brk, action, words", [
    (None, None, "", "acquire", ["run-me", "pid 7"]),
    (rec("run-me"), None, "", "keep", ["already held by this run"]),
    (rec(), True, "", "refuse", ["still running", "pid 4242", "run-a", "ctl1", "alice"]),
    (rec(), False, "", "takeover", ["a lock left by a run that ended without releasing it (killed, or stopped",
                                    "taken over", "pid 4242"]),
    (rec(), None, "", "refuse", ["another controller or boot", "-e gpuserve_lock_break=run-a", "pid 4242"]),
    (rec(), None, "run-a", "takeover", ["taken over on purpose", "run-a"]),
    (rec(), None, "run-b", "refuse", ["gpuserve_lock_break=run-b names another run"]),
    (rec(), True, "run-a", "refuse", ["still running"]),  # seen alive here: the word is wrong
    (rec(), False, "run-a", "takeover", ["ended without releasing it"]),
    # marked ended by its heartbeat: taken over from anywhere at once, whatever is judged here
    (rec(ended=1735689700.0), None, "", "takeover", ["ended without releasing it (interrupted, killed",
                                                     "process end at 2025-01-01T00:01:40Z", "run-a"]),
    (rec(ended=1735689700.0), True, "", "takeover", ["cut short before its last play"]),
    (rec("run-me", ended=1735689700.0), None, "", "keep", ["already held by this run"]),
])
def test_decide(existing, alive, brk, action, words) -> None:
    decision = _lock.decide(existing, ME, holder_alive=alive, break_run_id=brk)
    assert decision["action"] == action
    for word in words:
        assert word in decision["msg"], decision["msg"]


@pytest.mark.parametrize("heartbeat, stale_after, action", [
    (1735689600.0 + 3 * 3600 - 1, 3 * 3600, "refuse"),  # renewed within the bound: alive as far as known
    (1735689600.0, 3 * 3600, "takeover"),  # silent for 3 h 1 s
    (None, 3 * 3600, "takeover"),  # no heartbeat: its start counts
    (1735689600.0, 0, "refuse"),  # 0: never taken for gone
])
def test_a_holder_that_cannot_be_judged_is_gone_after_its_heartbeat_stops(heartbeat, stale_after, action) -> None:
    now = 1735689600.0 + 3 * 3600 + 1
    decision = _lock.decide(rec(heartbeat=heartbeat), ME, holder_alive=None, now=now, stale_after=stale_after)
    assert decision["action"] == action, decision["msg"]
    if action == "takeover":
        assert decision["msg"].startswith("a lock whose run gave no sign of life for 180 min "
                                          "(gpuserve_lock_stale_after: 180 min) was taken over: run run-a")
    # A holder seen alive on this controller is never taken for gone, whatever its heartbeat.
    assert _lock.decide(rec(heartbeat=0.0), ME, holder_alive=True, now=now, stale_after=1)["action"] == "refuse"


def test_keep_renews_the_heartbeat(monkeypatch, lock) -> None:
    module(monkeypatch, lock, holder=ME)
    renewed = module(monkeypatch, lock, holder=ME, clock=ME["heartbeat"] + 60)
    assert (renewed["changed"], renewed["action"]) == (False, "keep")
    assert json.loads(lock.read_text()) == dict(ME, heartbeat=ME["heartbeat"] + 60)


def test_the_heartbeat_is_the_lock_hosts_clock(monkeypatch, lock) -> None:
    """A controller whose clock is a day behind stamps nothing: the lock host stamps and ages the
    heartbeat with its own clock, so the live run's lock is not taken for stale by the next run."""
    skewed = dict(ME, heartbeat=ME["heartbeat"] - 86400)
    module(monkeypatch, lock, holder=skewed, clock=ME["heartbeat"])
    assert json.loads(lock.read_text())["heartbeat"] == ME["heartbeat"]
    other = rec("run-b", 9, controller="ctl2")
    refused = module(monkeypatch, lock, holder=other, holder_alive=None, judged_run_id="run-me",
                     stale_after=3600, clock=ME["heartbeat"] + 60)
    assert refused["action"] == "refuse" and refused["failed"]


@pytest.mark.parametrize("existing, found", [
    ([1, 2], "holds list"), ("junk", "holds str"), ({"pid": 1}, "without a run_id (keys: pid)"),
    ({"run_id": ""}, "without a run_id"), ({"run_id": 5}, "without a run_id"),
])
def test_decide_malformed_raises(existing, found) -> None:
    with pytest.raises(_lock.LockError, match=found.replace("(", r"\(").replace(")", r"\)")):
        _lock.decide(existing, ME, holder_alive=None)


@pytest.mark.parametrize("text, found", [
    ("", "not JSON"), ("garbage", "'garbage', not JSON"), ("[1]", "holds list"), ('{"pid": 1}', "without a run_id"),
])
def test_parse_record_refuses(text, found) -> None:
    with pytest.raises(_lock.LockError, match=found):
        _lock.parse_record(text)


def fake_proc(root: Path, pid: int, ticks: str, comm: str = "ansible-playboo") -> str:
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    fields = ["S"] + [str(n) for n in range(4, 22)] + [ticks, "0", "0"]
    (root / str(pid) / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields) + "\n")
    return str(root)


@pytest.mark.parametrize("record, proc_pid, ticks, comm, expected", [
    (rec(), 4242, "1000", "ansible-playboo", True),
    (rec(), 4242, "1000", "a) (b c)", True),  # comm with spaces and parentheses
    (rec(), 4242, "2000", "python3", False),  # pid reused by another process
    (rec(), 99, "1000", "x", False),  # pid gone
    (rec(controller="ctl2"), 4242, "1000", "x", None),
    (rec(boot_id="boot-0"), 4242, "1000", "x", None),  # the controller rebooted since
    (rec(pid="x"), 4242, "1000", "x", None),
    (rec(pid=0), 4242, "1000", "x", None),
    # Another PID namespace of this host (a second controller container, same host name and
    # boot): its pid means nothing here. The same namespace, or a record from before pid_ns: judged.
    (rec(pid_ns="pid:[4026532001]"), 4242, "1000", "x", None),
    ({k: v for k, v in rec().items() if k != "pid_ns"}, 99, "1000", "x", False),
])
def test_holder_alive(tmp_path, record, proc_pid, ticks, comm, expected) -> None:
    proc = fake_proc(tmp_path, proc_pid, ticks, comm)
    assert _lock.holder_alive(record, controller="ctl1", boot_id="boot-1", proc=proc,
                              pid_ns="pid:[4026531836]") is expected


def test_holder_alive_without_boot_id_cannot_tell(tmp_path) -> None:
    proc = fake_proc(tmp_path, 4242, "1000")
    assert _lock.holder_alive(rec(boot_id=""), controller="ctl1", boot_id="", proc=proc) is None


def test_start_ticks_of_this_process_and_run_id() -> None:
    ticks = _lock.start_ticks(os.getpid())
    assert ticks and ticks.isdigit()
    assert _lock.run_id("c", "b", 1, ticks) == _lock.run_id("c", "b", 1, ticks)
    assert _lock.run_id("c", "b", 1, ticks) != _lock.run_id("c", "b", 1, ticks + "1")
    assert _lock.run_id("c", "b", 1, ticks, "pid:[1]") != _lock.run_id("c", "b", 1, ticks, "pid:[2]")
    assert abs(_lock.process_started(ticks) - _lock.process_started(ticks)) < 1e-9


def test_holder_text() -> None:
    line = _lock.holder_text(rec())
    assert line == ("run run-a: ansible-playbook pid 4242 on controller ctl1, started "
                    "2025-01-01T00:00:00Z by alice: ansible-playbook site.yml -e '***'")
    assert "started ?" in _lock.holder_text(rec(started=None))


AP = ["ansible-playbook", "-i", "inv", "site.yml"]


@pytest.mark.parametrize("extra, expected", [
    ([], ""),
    (["-e", "pw=s3cret"], "-e '***'"),
    (["-e=pw=s3cret"], "'-e=***'"),
    (["-epw=s3cret"], "'-e***'"),
    (["-vve@secrets.yml"], "'-vve***'"),
    (["-ve", "pw=s3cret"], "-ve '***'"),
    (["-e", "a b"], "-e '***'"),
    (["--extra-vars", "x"], "--extra-vars '***'"),
    (["--extra-vars=x"], "'--extra-vars=***'"),
    (["--extra", "x"], "--extra '***'"),  # argparse takes unambiguous prefixes
    (["--vault-password-file", "f"], "--vault-password-file '***'"),
    (["--vault-pass-file=f"], "'--vault-pass-file=***'"),
    (["--vault-id", "dev@f"], "--vault-id '***'"),
    (["--private-key", "k"], "--private-key '***'"),
    (["--key-file=k"], "'--key-file=***'"),
    (["--become-password-file", "f"], "--become-password-file '***'"),
    (["--connection-password-file", "f"], "--connection-password-file '***'"),
    (["--conn-pass-file", "f"], "--conn-pass-file '***'"),
    (["--become", "-l", "web"], "--become -l web"),
    (["--connection", "local", "-C"], "--connection local -C"),
    (["-vvv", "-t", "roll", "-K"], "-vvv -t roll -K"),
])
def test_redact_command(extra, expected) -> None:
    line = _lock.redact_command(AP + extra)
    assert line == " ".join(filter(None, ["ansible-playbook -i inv site.yml", expected]))
    assert "s3cret" not in line


# --- the module, in-process --------------------------------------------------------------


@pytest.fixture()
def lock(tmp_path) -> Path:
    return tmp_path / "var" / "gpuserve" / "site.lock"


class LockHostClock:
    """The lock host's clock (the module's time.time()), set by the test."""
    now = ME["heartbeat"]

    @classmethod
    def time(cls) -> float:
        return cls.now


def module(monkeypatch, lock: Path, clock: float | None = None, **args: t.Any) -> dict:
    warnings: list[str] = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, w: warnings.append(w))
    monkeypatch.setattr(LockHostClock, "now", ME["heartbeat"] if clock is None else clock)
    monkeypatch.setattr(fleet_lock, "time", LockHostClock)
    result = run_module_main(fleet_lock, dict({"path": str(lock)}, **args), monkeypatch)
    return dict(result, warnings=warnings)


def put(lock: Path, record: t.Any) -> None:
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(record if isinstance(record, str) else json.dumps(record))


def test_acquire_then_keep_then_release(monkeypatch, lock) -> None:
    first = module(monkeypatch, lock, holder=ME)
    assert (first["failed"], first["changed"], first["action"]) == (False, True, "acquire")
    assert json.loads(lock.read_text()) == ME and first["holder"] == ME
    assert stat.S_IMODE(lock.stat().st_mode) == 0o644 and stat.S_IMODE(lock.parent.stat().st_mode) == 0o755
    assert [p.name for p in lock.parent.iterdir()] == ["site.lock"]  # no temp file left
    again = module(monkeypatch, lock, holder=ME)
    assert (again["changed"], again["action"]) == (False, "keep")
    assert module(monkeypatch, lock, state="query")["holder"] == ME
    gone = module(monkeypatch, lock, state="absent", holder=ME)
    assert (gone["changed"], gone["action"], gone["previous"]) == (True, "release", ME)
    assert not lock.exists()
    assert module(monkeypatch, lock, state="absent", holder=ME)["changed"] is False


def test_live_holder_refused_naming_it(monkeypatch, lock) -> None:
    put(lock, rec())
    result = module(monkeypatch, lock, holder=ME, holder_alive=True, judged_run_id="run-a")
    assert result["failed"] and "pid 4242" in result["msg"] and "run-a" in result["msg"]
    assert json.loads(lock.read_text()) == rec()


def test_killed_holder_taken_over(monkeypatch, lock) -> None:
    put(lock, rec())
    result = module(monkeypatch, lock, holder=ME, holder_alive=False, judged_run_id="run-a", _ansible_diff=True)
    assert (result["failed"], result["changed"], result["action"]) == (False, True, "takeover")
    assert "a lock left by a run that ended without releasing it" in result["msg"] and result["previous"] == rec()
    assert json.loads(lock.read_text()) == ME
    assert "pid 4242" in result["diff"]["before"] and "pid 7" in result["diff"]["after"]


def test_lock_changed_since_judged_counts_as_live(monkeypatch, lock) -> None:
    put(lock, rec("run-c", 555))
    result = module(monkeypatch, lock, holder=ME, holder_alive=False, judged_run_id="run-a")
    assert result["failed"] and "pid 555" in result["msg"] and "still running" in result["msg"]


def test_link_race_refused_naming_the_winner(monkeypatch, lock) -> None:
    real = fleet_lock.read_lock
    calls: list[int] = []

    def racing_read(path: str) -> dict | None:
        found = real(path)
        if not calls:  # the other run links its record right after this run read "no lock"
            put(lock, rec("run-other", 3131))
        calls.append(1)
        return found

    monkeypatch.setattr(fleet_lock, "read_lock", racing_read)
    result = module(monkeypatch, lock, holder=ME)
    assert result["failed"] and "pid 3131" in result["msg"] and len(calls) == 2
    assert json.loads(lock.read_text())["run_id"] == "run-other"
    assert [p.name for p in lock.parent.iterdir()] == ["site.lock"]


def test_check_mode_writes_nothing_and_only_warns(monkeypatch, lock) -> None:
    result = module(monkeypatch, lock, holder=ME, _ansible_check_mode=True)
    assert (result["changed"], result["action"]) == (True, "acquire") and not lock.parent.exists()
    put(lock, rec())
    held = module(monkeypatch, lock, holder=ME, holder_alive=True, judged_run_id="run-a", _ansible_check_mode=True)
    assert (held["failed"], held["changed"], held["action"]) == (False, False, "refuse")
    assert "pid 4242" in held["warnings"][0]
    dead = module(monkeypatch, lock, holder=ME, holder_alive=False, judged_run_id="run-a", _ansible_check_mode=True)
    assert (dead["changed"], dead["action"]) == (True, "takeover") and json.loads(lock.read_text()) == rec()


def test_absent_leaves_another_runs_lock(monkeypatch, lock) -> None:
    put(lock, rec())
    result = module(monkeypatch, lock, state="absent", holder=ME)
    assert (result["failed"], result["changed"], result["action"]) == (False, False, "leave")
    assert "pid 4242" in result["warnings"][0] and json.loads(lock.read_text()) == rec()


@pytest.mark.parametrize("content", ["garbage\n", "[1, 2]", '{"pid": 1}', ""])
@pytest.mark.parametrize("state", ["present", "absent", "query"])
def test_malformed_lock_refused_naming_path_and_left(monkeypatch, lock, content, state) -> None:
    put(lock, content)
    result = module(monkeypatch, lock, state=state, holder=ME)
    assert result["failed"] and str(lock) in result["msg"] and "left as it is" in result["msg"]
    assert lock.read_text() == content


def test_module_alone_without_a_run_id_fails(monkeypatch, lock) -> None:
    assert "no run_id" in module(monkeypatch, lock, holder={"pid": 1})["msg"] and not lock.parent.exists()


@pytest.mark.parametrize("existing, action, words", [
    (rec("run-me"), "keep", ["heartbeat of run run-me"]),
    (None, "lost", ["no longer this run's (released)"]),
    (rec(), "lost", ["no longer this run's (held by run run-a"]),
])
def test_renew_never_takes_a_lock(existing, action, words) -> None:
    decision = _lock.renew(existing, ME)
    assert decision["action"] == action and all(w in decision["msg"] for w in words), decision


@pytest.mark.parametrize("existing, action", [(rec("run-me"), "ended"), (rec(), "lost"), (None, "lost")])
def test_mark_ended_marks_only_this_runs_lock(existing, action) -> None:
    decision = _lock.mark_ended(existing, ME, 1735689700.0)
    assert decision["action"] == action
    assert decision.get("record") == (dict(existing, ended=1735689700.0) if action == "ended" else None)


def test_ended_marks_this_runs_lock_for_any_run_and_leaves_any_other(monkeypatch, lock) -> None:
    """The heartbeat's last act, through the module, stamped with the lock host's clock."""
    put(lock, ME)
    marked = module(monkeypatch, lock, clock=ME["heartbeat"] + 60, state="ended", holder=ME)
    assert (marked["failed"], marked["changed"], marked["action"]) == (False, False, "ended")
    assert json.loads(lock.read_text()) == dict(ME, ended=ME["heartbeat"] + 60)
    other = _lock.decide(json.loads(lock.read_text()), rec("run-b"), holder_alive=None)
    assert other["action"] == "takeover", other
    put(lock, rec())
    assert module(monkeypatch, lock, state="ended", holder=ME)["action"] == "lost"
    assert json.loads(lock.read_text()) == rec()  # another run's lock: not touched
    lock.unlink()
    assert module(monkeypatch, lock, state="ended", holder=ME)["action"] == "lost" and not lock.exists()


@pytest.mark.parametrize("stale_after, every, expected", [
    (10800, 0, 1800.0),
    (10800, 600, 600.0),
    (10800, 3600, 3600.0),  # three beats fit exactly
    (0, 0, 0.0),            # nothing goes stale: nothing to beat for
    (0, 60, 0.0),
    ("600", "0", 100.0),    # templated task arguments arrive as strings
    (10800, 3601, None),
    (60, 30, None),
])
def test_heartbeat_every(stale_after, every, expected) -> None:
    if expected is None:
        with pytest.raises(_lock.LockError, match="does not fit three times"):
            _lock.heartbeat_every(stale_after, every)
    else:
        assert _lock.heartbeat_every(stale_after, every) == expected


class FakeTime:
    """A clock that only sleep() moves, and when the heartbeat beat."""

    def __init__(self) -> None:
        self.now = 0.0
        self.beats: list[float] = []

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += max(seconds, 0.01)


@pytest.mark.parametrize("dies_at, outcomes, beats_at, why", [
    # a live run: a beat every 10 s, as long as it lives (a step of any length)
    (35, ["keep"] * 9, [10, 20, 30], "the run ended"),
    # the lock host did not answer: again after `retry` (3 s), then every 10 s again
    (30, ["error", "keep", "keep"], [10, 13, 23], "the run ended"),
    # released (or taken by another run): no beat after that, even though the run lives on
    (1000, ["keep", "lost"], [10, 20], "the lock is no longer this run's"),
    # a run gone before the first beat: none at all
    (5, ["keep"], [], "the run ended"),
])
def test_heartbeat_loop(dies_at, outcomes, beats_at, why) -> None:
    fake, todo = FakeTime(), list(outcomes)

    def beat() -> str:
        fake.beats.append(fake.now)
        return todo.pop(0)

    stopped = _lock.heartbeat(lambda: fake.now < dies_at, beat, 10, poll=2, retry=3, clock=lambda: fake.now,
                              sleep=fake.sleep)
    assert stopped == why
    assert [round(at) for at in fake.beats] == beats_at
    # bound to the run: it stopped within one poll of the run's end, or at the lost lock
    assert fake.now <= dies_at + 2 or why != "the run ended"


def test_heartbeat_ends_with_a_real_process() -> None:
    """The liveness read of the action plugin (pid + start ticks) on a real process: killed, the
    heartbeat stops within a poll; while it ran, it beat."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ticks = _lock.start_ticks(proc.pid)
    beats: list[float] = []

    def beat() -> str:
        beats.append(time.monotonic())
        if len(beats) == 3:
            proc.kill()
            proc.wait()
        return "keep"

    started = time.monotonic()
    stopped = _lock.heartbeat(lambda: _lock.start_ticks(proc.pid) == ticks, beat, 0.2, poll=0.05)
    assert stopped == "the run ended" and len(beats) == 3
    assert time.monotonic() - beats[-1] < 1.0 and beats[0] - started >= 0.2


def test_renew_keeps_this_runs_lock_and_leaves_any_other(monkeypatch, lock) -> None:
    put(lock, ME)
    kept = module(monkeypatch, lock, clock=ME["heartbeat"] + 600, state="renew", holder=ME)
    assert (kept["failed"], kept["changed"], kept["action"]) == (False, False, "keep")
    assert json.loads(lock.read_text()) == dict(ME, heartbeat=ME["heartbeat"] + 600)
    put(lock, rec())
    lost = module(monkeypatch, lock, clock=ME["heartbeat"] + 1200, state="renew", holder=ME)
    assert (lost["failed"], lost["action"]) == (False, "lost")
    assert json.loads(lock.read_text()) == rec()  # another run's lock: not touched
    lock.unlink()
    assert module(monkeypatch, lock, state="renew", holder=ME)["action"] == "lost"
    assert not lock.exists()  # a heartbeat never takes a lock


def test_every_change_of_the_lock_waits_for_the_directory_flock(monkeypatch, lock) -> None:
    """A renewal read before a release must not write the lock back after it: both hold the flock."""
    put(lock, ME)
    fd = os.open(lock.parent, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    seen: list[bool] = []
    real_flock = fcntl.flock

    def spy(handle: int, op: int) -> None:
        seen.append(op == fcntl.LOCK_EX and os.path.samefile(f"/proc/self/fd/{handle}", lock.parent))
        real_flock(handle, op | fcntl.LOCK_NB)  # held by this test: must fail, not wait

    monkeypatch.setattr(fleet_lock.fcntl, "flock", spy)
    for state in ("renew", "absent", "present", "ended"):
        result = module(monkeypatch, lock, state=state, holder=ME)
        assert result["failed"] and "Resource temporarily unavailable" in result["msg"], (state, result)
    assert seen == [True, True, True, True]
    assert json.loads(lock.read_text()) == ME
    os.close(fd)
