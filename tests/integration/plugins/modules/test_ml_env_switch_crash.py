"""ml_env_switch killed at every step never leaves the stable path on half an env.

The real module runs as its own process (`python -m ...ml_env_switch args.json`, what Ansible runs
on the node) under strace, whose fault injection sends SIGKILL to it at its K-th symlink(2),
rename(2) or fsync(2): every temporary link, every replacement of a link, the move of a legacy
directory, every directory sync. Nothing in the product knows about the test. For every K, until
a run is not killed:

* after the kill, the stable path names a whole env (one of the two the run switches between; for
  a legacy directory also "absent" in the one window the docs name), and no env lost a file;
* the next run (same arguments) finishes: the link names the target, `.previous` the env that
  served before, no temporary link is left. A rollback is a swap (each call swaps again), so
  after a killed rollback the next run names the env rolled back to as `target`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

from tests.support.strace_kill import STRACE, collection_pythonpath, requires_strace

MODULE = "ansible_collections.gpuserve.vllm.plugins.modules.ml_env_switch"


pytestmark = requires_strace


class Node:
    """/opt of a node in a temp dir: a store with envs a, b, c (each with a marker file)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = root / "ml-env.d"
        self.link = root / "ml-env"
        self.previous = root / "ml-env.previous"
        for name in ("a", "b", "c"):
            self.make_env(self.store / name)
        self.env = dict(os.environ, PYTHONPATH=collection_pythonpath())

    @staticmethod
    def make_env(path: Path) -> None:
        (path / "bin").mkdir(parents=True)
        (path / "bin" / "python").symlink_to(sys.executable)
        (path / "marker").write_text(path.name)

    def names(self, path: Path) -> str:
        """Which whole env a path names: its marker (a, b, c, legacy), 'absent' or 'BROKEN:...'."""
        if not os.path.lexists(path):
            return "absent"
        if not (path / "bin" / "python").exists() or not (path / "marker").exists():
            return "BROKEN:" + os.path.realpath(path)
        return (path / "marker").read_text()

    def run(self, args: t.Dict[str, t.Any], kill_at: t.Tuple[str, int] | None = None) -> t.Dict[str, t.Any]:
        spec = self.root / "args.json"
        module_args = dict(args, link=str(self.link), store_dir=str(self.store))
        spec.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": module_args}))
        cmd = [sys.executable, "-m", MODULE, str(spec)]
        if kill_at is not None:
            call, when = kill_at
            cmd = [t.cast(str, STRACE), "-f", "-qq", "-o", os.devnull, "-e", "trace=" + call,
                   "-e", "inject=%s:signal=SIGKILL:when=%d" % (call, when)] + cmd
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self.env, check=False, timeout=60)
        if proc.returncode in (-9, 137):
            return {"killed": True}
        assert proc.stdout.strip(), (proc.returncode, proc.stderr[-3000:])
        return json.loads(proc.stdout)

    def leftovers(self) -> t.List[str]:
        return sorted(p.name for p in self.root.iterdir() if p.name.startswith("."))


def _ok(result: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    assert not result.get("killed") and not result.get("failed"), result
    return result


def _setup(node: Node, scenario: str) -> t.Tuple[t.Dict[str, t.Any], t.Set[str], str, str | None]:
    """Arguments, what the link may name after a kill, and the link/previous markers at the end."""
    if scenario == "switch":  # serving a (previous c) -> b
        node.link.symlink_to(node.store / "a")
        node.previous.symlink_to(node.store / "c")
        return {"target": str(node.store / "b")}, {"a", "b"}, "b", "a"
    if scenario == "rollback":  # serving b (previous a) -> back to a
        node.link.symlink_to(node.store / "b")
        node.previous.symlink_to(node.store / "a")
        return {"rollback": True}, {"a", "b"}, "a", None
    node.make_env(node.link)  # legacy: a real directory at the stable path
    (node.link / "marker").write_text("legacy")
    return {"target": str(node.store / "b")}, {"legacy", "b", "absent"}, "b", "legacy"


@pytest.mark.parametrize("call", ["symlink", "rename", "fsync"])
@pytest.mark.parametrize("scenario", ["switch", "rollback", "legacy"])
def test_killed_at_every_step(tmp_path: Path, scenario: str, call: str) -> None:
    kills = 0
    for when in range(1, 20):
        node = Node(tmp_path / f"{call}-{when}")
        args, allowed, final, final_previous = _setup(node, scenario)
        result = node.run(args, kill_at=(call, when))
        if not result.get("killed"):
            _ok(result)
            assert result["changed"] is True
            assert node.names(node.link) == final
            break
        kills += 1
        now = node.names(node.link)
        assert now in allowed, (scenario, call, when, now)
        # Every env is still whole, wherever it is.
        for env in node.store.iterdir():
            if not env.name.startswith("."):
                assert not node.names(env).startswith("BROKEN"), (scenario, call, when, env)
        finish = {"target": str(node.store / "a")} if scenario == "rollback" else args
        again = _ok(node.run(finish))
        assert node.names(node.link) == final, (scenario, call, when, again)
        if final_previous is not None:
            assert node.names(node.previous) == final_previous, (scenario, call, when, again)
        assert node.leftovers() == [], (scenario, call, when)
        assert _ok(node.run(finish))["changed"] is False
    else:
        pytest.fail("the run was still killed at step 19")
    expected = {"symlink": 2, "rename": 2, "fsync": 4}[call]
    if scenario == "legacy":
        expected += {"symlink": 0, "rename": 1, "fsync": 2}[call]
    assert kills == expected, (scenario, call, kills)  # every step of the plan was hit
