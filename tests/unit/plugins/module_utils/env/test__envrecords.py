"""_env._records: the envs a root-owned record names, and the records that cannot be trusted.

Run as root (as on the node): the files are made for real, owned by root or given to another uid."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _records as er

A, B, OLD = "/opt/ml-env.d/vllm-0.17.0-aaaa", "/opt/ml-env.d/vllm-0.18.0-bbbb", "/opt/ml-env.d/vllm-0.16.0-oooo"
JOURNAL = {"version": 1, "action": "upgrade", "from": A, "to": B, "previous": OLD, "rollback_to": A,
           "steps": ["switch", "restart"], "why": ["the server runs vllm-0.17.0-aaaa"], "created": 1.0}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the records are root's: made and chowned as root")


def write(path: Path, text: str, mode: int = 0o600, uid: int = 0) -> str:
    path.write_text(text)
    os.chmod(path, mode)
    os.chown(path, uid, 0)
    return str(path)


@pytest.mark.parametrize("value, named", [
    (JOURNAL, [A, B, OLD]),
    ({"from": B, "to": A, "at": "2026-12-01T10:00:00Z"}, [B, A]),
    ({"switches": [{"from": "", "to": B}, {"from": B, "to": A}]}, [B, A]),
    ([], []),
    ("relative/path", []),
])
def test_every_absolute_path_in_a_record_is_named(value, named):
    assert er.named_paths(value) == named


def test_a_killed_runs_journal_and_an_absent_hold(tmp_path: Path):
    journal = write(tmp_path / "plan.json", json.dumps(JOURNAL))
    assert er.protected_by([journal, str(tmp_path / "absent.json")]) == ([A, B, OLD], [])


@pytest.mark.parametrize("make, why", [
    (lambda p: write(p, "{not json"), "not JSON"),
    (lambda p: write(p, b"\xff\xfe".decode("latin-1")), "not JSON"),
    (lambda p: write(p, json.dumps(JOURNAL), uid=65534), "owned by uid 65534"),
    (lambda p: write(p, json.dumps(JOURNAL), mode=0o622), "mode 0622"),
    (lambda p: write(p, " " * (er.MAX_BYTES + 1)), "larger than"),
    (lambda p: (p.with_suffix(".real").write_text(json.dumps(JOURNAL)), p.symlink_to(p.with_suffix(".real")),
                str(p))[-1], "a symbolic link"),
    (lambda p: (os.mkfifo(p), str(p))[-1], "not a regular file"),
    (lambda p: (p.mkdir(), str(p))[-1], "not a regular file"),
], ids=["garbage", "not utf-8", "another owner", "writable by others", "too large", "a link", "a fifo", "a dir"])
def test_a_record_that_cannot_be_trusted_is_a_problem_not_nothing(tmp_path: Path, make, why):
    path = make(tmp_path / "plan.json")
    named, problems = er.protected_by([path])
    assert named == [] and len(problems) == 1 and why in problems[0] and path in problems[0]
