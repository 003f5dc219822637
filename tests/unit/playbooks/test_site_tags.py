"""docs/operations.md's "Tags" table against playbooks/site.yml: each documented combination
selects the plays the table says, or is refused before anything changes.

The plays a row selects are read from the real `ansible-playbook --list-tasks --tags ...` on the
example inventory: a play counts when a task other than the ones tagged `always` (argument
checks, the run lock) is selected in it. The refused rows are run for real, in check mode, on
a GPU-node group that is this machine (ansible_connection=local): play 1 stops at its first
checks, before anything is read from or written to the node beyond `setup`'s minimal facts.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SITE = REPO / "playbooks" / "site.yml"
DOC = REPO / "docs" / "operations.md"

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")


def documented_rows() -> list[tuple[str, str]]:
    """(tags cell, plays cell) of every row of the Tags table."""
    text = DOC.read_text()
    table = text[text.index("## Tags"):].split("\n\n")[1]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    assert rows, "docs/operations.md: the Tags table is empty"
    return [(tags.strip(), plays.strip()) for tags, plays in rows]


def cases() -> list[tuple[list[str], set[int] | None]]:
    """One ansible-playbook option list per documented combination, with the plays it selects (None: refused)."""
    out = []
    for tags, plays in documented_rows():
        wanted = None if plays == "none" else {int(p) for p in plays.split(",")}
        if tags == "(none)":
            out.append(([], wanted))
            continue
        for combination in re.findall(r"`([^`]+)`", tags):
            argv = combination.split() if combination.startswith("--") else ["--tags", combination]
            out.append((argv, wanted))
    return out


def selected_plays(argv: list[str]) -> set[int]:
    listing = subprocess.run(["ansible-playbook", "-i", str(REPO / "inventories" / "example"), str(SITE),
                              "--list-tasks", *argv], capture_output=True, text=True, check=True, cwd=REPO).stdout
    plays, play = set(), 0
    for line in listing.splitlines():
        found = re.match(r"\s+play #(\d+)", line)
        if found:
            play = int(found.group(1))
        elif "TAGS: [" in line and "always" not in line.rsplit("TAGS:", 1)[1]:
            plays.add(play)
    return plays


CASES = cases()


def test_the_table_names_every_tag_the_playbooks_document():
    header = SITE.read_text().split("# Tags:", 1)[1].split("\n#\n", 1)[0]
    documented = {t for argv, _plays in CASES for t in ",".join(argv[1::2]).split(",")}
    assert set(re.findall(r"\b(gpu_node|ml_env|vllm_install|eagle3_patches|vllm_router|vllm_server|canary|rollback|acceptance)\b",
                          header)) <= documented


@pytest.mark.parametrize("argv,plays", [c for c in CASES if c[1] is not None], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_the_documented_tags_select_the_documented_plays(argv, plays):
    assert selected_plays(argv) == plays


@pytest.mark.parametrize("argv", [c[0] for c in CASES if c[1] is None], ids=" ".join)
def test_the_documented_refusals_refuse_before_anything_changes(argv, tmp_path):
    (tmp_path / "hosts.ini").write_text("[gpu_nodes]\nlocalhost ansible_connection=local ansible_become=false "
                                        f"ansible_python_interpreter={sys.executable}\n[vllm_routers]\n")
    run = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.ini"), str(SITE), "--check", *argv],
                         capture_output=True, text=True, cwd=REPO, check=False)
    assert run.returncode != 0
    assert f"{' '.join(argv)} would skip" in " ".join(run.stdout.split()), run.stdout[-2000:]
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", run.stdout), run.stdout[-2000:]
