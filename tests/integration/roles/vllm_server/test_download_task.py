"""The role's per-node download (vllm_server_download): only what is missing, never over a pin.

roles/vllm_server/tasks/download.yml runs through ansible-playbook on localhost with the role's
defaults and vars. The Hub cannot be reached here, so `hf` is a TEST DOUBLE: it records its argv
and leaves what `hf download --local-dir` leaves, a sharded safetensors checkpoint
(tests/support/tiny_checkpoint.py, real files) and, per file, the download metadata in the format
of huggingface_hub's _local_folder.write_download_metadata (0.36.2: the commit on the first line).
The weights check that judges the directories is the real module. Needs tests/env.sh.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")

REPO = Path(__file__).resolve().parents[4]
PINNED, OTHER = "1" * 40, "2" * 40
TOKEN = "hf_secret_token_0123"
HF_DOUBLE = """#!{python}
# TEST DOUBLE of `hf download REPO --local-dir DIR [--revision R]` (see the test's docstring).
import sys
sys.path.insert(0, {support!r})
from pathlib import Path
from tiny_checkpoint import make_checkpoint
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(" ".join(args) + "\\n")
local = Path(args[args.index("--local-dir") + 1])
commit = args[args.index("--revision") + 1] if "--revision" in args else "{newest}"
meta = local / ".cache" / "huggingface" / "download"
meta.mkdir(parents=True, exist_ok=True)
for name in make_checkpoint(local, shards=2, shard_bytes=4096):
    (meta / (name + ".metadata")).write_text(commit + '\\n"etag"\\n1796274797.0\\n')
# Where the token is, and where it is not: the environment, every ancestor's command line.
import json, os
path = os.environ.get("HF_TOKEN_PATH", "")
seen, pid = [], os.getpid()
while pid > 1:
    try:
        cmdline = Path(f"/proc/{{pid}}/cmdline").read_bytes()
        pid_next = int(Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        break
    if {token!r}.encode() in cmdline:
        seen.append(pid)
    pid = pid_next
with open({log!r} + ".token", "a") as record:
    record.write(json.dumps({{"env": "HF_TOKEN" in os.environ, "path": path,
                              "file": Path(path).read_text() == {token!r} if path else None,
                              "mode": oct(os.stat(path).st_mode & 0o777) if path else None,
                              "folder": oct(os.stat(os.path.dirname(path)).st_mode & 0o777) if path else None,
                              "in_cmdline": seen}}) + "\\n")
"""


def _variables(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"vllm_server_hf_cli": str(tmp_path / "hf"), "vllm_server_user": "root", "vllm_server_group": "root",
            "vllm_server_model_repo": "moonshotai/Kimi-K2.5", "vllm_server_model_path": str(tmp_path / "model"),
            "vllm_server_model_revision": PINNED, "vllm_server_drafter_repo": "lightseekorg/kimi-k2.5-eagle3",
            "vllm_server_drafter_path": str(tmp_path / "drafter"), "vllm_server_drafter_revision": "",
            "vllm_server_hf_token": TOKEN, "ansible_become_method": "su", **extra}


def _result(tasks: list[dict], name: str) -> dict:
    return next(t["hosts"]["localhost"] for t in tasks if t["task"]["name"].startswith(name))


def test_downloads_only_what_is_missing_and_never_over_a_pin(tmp_path: Path, role_tasks) -> None:
    log = tmp_path / "hf.log"
    (tmp_path / "hf").write_text(HF_DOUBLE.format(python=sys.executable, support=str(REPO / "tests" / "support"),
                                                  log=str(log), newest="3" * 40, token=TOKEN))
    (tmp_path / "hf").chmod(0o755)

    proc, tasks = role_tasks("download.yml", _variables(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert log.read_text().splitlines() == [
        f"download moonshotai/Kimi-K2.5 --local-dir {tmp_path / 'model'} --revision {PINNED}",
        f"download lightseekorg/kimi-k2.5-eagle3 --local-dir {tmp_path / 'drafter'}"]
    warned = [r["msg"] for r in _result(tasks, "Say which downloads are not pinned")["results"] if "msg" in r]
    assert len(warned) == 1 and "vllm_server_drafter_revision" in warned[0]
    assert TOKEN not in proc.stdout + proc.stderr
    # The token reached hf through a 0600 file in a 0700 folder, gone afterwards: never in its
    # environment, nor on a command line of hf or of anything that started it (sudo/su, sh).
    seen = [json.loads(line) for line in (tmp_path / "hf.log.token").read_text().splitlines()]
    assert len(seen) == 2 and all(s["file"] and not s["env"] and not s["in_cmdline"] for s in seen), seen
    assert {(s["mode"], s["folder"]) for s in seen} == {("0o600", "0o700")}
    assert not any(Path(s["path"]).parent.exists() for s in seen)

    # Again: both directories are complete (headers read), nothing is downloaded or said.
    proc, tasks = role_tasks("download.yml", _variables(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert len(log.read_text().splitlines()) == 2
    assert all(r["complete"] for r in _result(tasks, "Find what the weights directories lack")["results"])
    assert _result(tasks, "Say which downloads are not pinned")["results"] == []

    # Another pin for the directory vLLM reads: refused, naming both commits; nothing downloaded.
    before = sorted(p.name for p in (tmp_path / "model").iterdir())
    proc, tasks = role_tasks("download.yml", _variables(tmp_path, vllm_server_model_revision=OTHER))
    assert proc.returncode != 0
    refused = _result(tasks, "Refuse a revision pin the directory does not hold")["results"]
    assert len(refused) == 1 and f"holds {PINNED}" in refused[0]["msg"] and f"the pin is {OTHER}" in refused[0]["msg"]
    assert len(log.read_text().splitlines()) == 2
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == before
