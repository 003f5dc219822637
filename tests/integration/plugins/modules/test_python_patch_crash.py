"""python_patch killed at every step of a 4-file run never loses or mixes a file.

The real module runs as its own process (`python -m ...python_patch args.json`, what Ansible
runs on the node) under strace, whose fault injection sends SIGKILL to it when it makes its K-th
rename(2) (or unlink(2)) call: every record write, journal write and file replacement, and the
commit. Nothing in the product knows about the test. For every K, until a run is not killed:

* after the kill, every file holds either its original or its patched bytes, never a mix;
* the next run succeeds, leaves all four files patched, and says it rolled back the killed run
  whenever a journal was left (no false "changed since" warning);
* `state: absent` then gives the pristine bytes of every file, leaving no record, journal or
  temp file behind.

The same holds for a run adding edits to already patched files and for a killed `state: absent`.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
import typing as t
import venv
from pathlib import Path

import pytest

from tests.support.strace_kill import STRACE, collection_pythonpath, requires_strace

MODULE = "ansible_collections.gpuserve.vllm.plugins.modules.python_patch"
NAMES = ("a", "b", "c", "d")


pytestmark = requires_strace


def edit(old: str, new: str, ident: str) -> t.Dict[str, t.Any]:
    return {"id": ident, "replace": {"old": old, "new": new}}


class Node:
    """A package of four files, a state_dir, and the module run as a process on them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pkg = root / "pkg"
        self.pkg.mkdir(parents=True)
        self.state = root / "state"
        self.pristine = {}
        for name in NAMES:
            data = ("# %s\nX = 1\nY = 1\n" % name).encode()
            (self.pkg / (name + ".py")).write_bytes(data)
            self.pristine[name] = data
        self.env = dict(os.environ, PYTHONPATH=collection_pythonpath())
        self.count = 0

    def args(self, edits: t.List[t.Dict[str, t.Any]], state: str = "present") -> Path:
        files = [{"path": str(self.pkg / (n + ".py")), "edits": edits} for n in NAMES]
        self.count += 1
        path = self.root / ("args-%d.json" % self.count)
        path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
            "files": files, "state": state, "state_dir": str(self.state)}}))
        return path

    def run(self, args: Path, kill_at: t.Tuple[str, int] | None = None) -> t.Dict[str, t.Any]:
        """The module's JSON result; {'killed': True} when strace killed it."""
        cmd = [sys.executable, "-m", MODULE, str(args)]
        if kill_at is not None:
            call, when = kill_at
            cmd = [t.cast(str, STRACE), "-f", "-qq", "-o", os.devnull, "-e", "trace=" + call,
                   "-e", "inject=%s:signal=SIGKILL:when=%d" % (call, when)] + cmd
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self.env, check=False,
                              timeout=120)
        if proc.returncode in (-9, 137):
            return {"killed": True}
        assert proc.stdout.strip(), (proc.returncode, proc.stderr[-3000:])
        return json.loads(proc.stdout)

    def files(self) -> t.Dict[str, bytes]:
        return {n: (self.pkg / (n + ".py")).read_bytes() for n in NAMES}

    def leftovers(self) -> t.List[str]:
        """Anything but the four files in the package, and any record or journal."""
        out = sorted(p.name for p in self.pkg.iterdir() if p.name[:-3] not in NAMES)
        for sub in ("records", "journal"):
            if (self.state / sub).exists():
                out += sorted("%s/%s" % (sub, p.name) for p in (self.state / sub).iterdir())
        return out


FIRST = [edit("X = 1", "X = 2", "x2")]
BOTH = FIRST + [edit("Y = 1", "Y = 2", "y2")]


def _patched(node: Node, edits: t.List[t.Dict[str, t.Any]]) -> t.Dict[str, bytes]:
    out = {}
    for name, data in node.pristine.items():
        text = data.decode()
        for e in edits:
            text = text.replace(e["replace"]["old"], e["replace"]["new"])
        out[name] = text.encode()
    return out


def _ok(result: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    assert not result.get("killed") and not result.get("failed"), result
    return result


@pytest.mark.parametrize("call", ["rename", "unlink"])
@pytest.mark.parametrize("scenario", ["apply", "add-edits", "absent"])
def test_killed_at_every_step(tmp_path: Path, scenario: str, call: str) -> None:
    kills = 0
    for when in range(1, 60):
        node = Node(tmp_path / ("%s-%d" % (call, when)))
        pristine = node.pristine
        start_edits, edits, state = {"apply": ([], BOTH, "present"),
                                     "add-edits": (FIRST, BOTH, "present"),
                                     "absent": (BOTH, BOTH, "absent")}[scenario]
        if start_edits:
            _ok(node.run(node.args(start_edits)))
        before = node.files()
        target = pristine if state == "absent" else _patched(node, edits)
        result = node.run(node.args(edits, state), kill_at=(call, when))
        if not result.get("killed"):
            _ok(result)
            assert node.files() == target
            break
        kills += 1
        # After the kill: each file whole, old or new.
        for name, data in node.files().items():
            assert data in (before[name], target[name]), (scenario, call, when, name, data)
        journal_left = bool(list((node.state / "journal").glob("txn-*.json")))
        # The next run finishes the job: all four files in the target state.
        again = _ok(node.run(node.args(edits, state)))
        assert node.files() == target, (scenario, call, when)
        assert bool(again["recovered"]) == journal_left, (call, when, again)
        assert not any("changed since" in w for w in again.get("warnings", [])), again
        # And absent gives the pristine bytes, with nothing left behind.
        _ok(node.run(node.args(BOTH, "absent")))
        assert node.files() == pristine, (scenario, call, when)
        assert node.leftovers() == [], (scenario, call, when)
    else:
        pytest.fail("the run was still killed at step 59")
    assert kills >= (4 if call == "rename" else 1)  # the seam really hit the run


def test_a_check_that_never_completed_runs_again(tmp_path: Path) -> None:
    """Killed while import_check runs: the next run must not accept the unchecked files."""
    node = Node(tmp_path)
    # import_check runs its python with -I: a venv whose .pth file names tmp_path finds pkg.
    venv.create(tmp_path / "venv", symlinks=True)
    site = glob.glob(str(tmp_path / "venv" / "lib" / "python*" / "site-packages"))[0]
    Path(site, "tmp.pth").write_text(str(tmp_path) + "\n")
    marker = tmp_path / "importing"
    (node.pkg / "slow.py").write_text("import os, time\nopen(%r, 'w').write(str(os.getpid()))\n"
                                      "time.sleep(60)\n" % str(marker))
    (node.pkg / "bad.py").write_text("raise ImportError('still broken')\n")
    args = node.args(BOTH)
    data = json.loads(args.read_text())
    data["ANSIBLE_MODULE_ARGS"]["import_check"] = ["pkg.slow"]
    data["ANSIBLE_MODULE_ARGS"]["python"] = str(tmp_path / "venv" / "bin" / "python")
    args.write_text(json.dumps(data))
    with subprocess.Popen([sys.executable, "-m", MODULE, str(args)], env=node.env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill()
    checker = int(marker.read_text())
    os.kill(checker, signal.SIGKILL)  # orphaned by the kill, as on a real node
    assert node.files() == _patched(node, BOTH)  # written, never checked
    data["ANSIBLE_MODULE_ARGS"]["import_check"] = ["pkg.bad"]
    args.write_text(json.dumps(data))
    failed = node.run(args)
    assert failed.get("failed") is True and "still broken" in failed["msg"], failed
    assert node.files() == node.pristine
    data["ANSIBLE_MODULE_ARGS"]["import_check"] = ["pkg.a"]
    args.write_text(json.dumps(data))
    good = _ok(node.run(args))
    assert good["changed"] is True and node.files() == _patched(node, BOTH)
