"""The GPU nodes' serving-state script (roles/monitoring/files/gpuserve_serving_state.py) on real files.

The start record is written by the real start-record script as the unit's ExecStartPre runs it
(plugins/module_utils/_vllm/_startrecord.py, with an INVOCATION_ID) for an env and a model
revision laid out as ml_env and vllm_weights lay them out; the script runs as its systemd unit
runs it (system python, -I -B) and its file is checked by the real promtool (`promtool check
metrics`). The run lock as site.yml's fleet_lock writes it is read in
tests/integration/test_fleet_lock.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _startrecord as sr
from tests.support.promtool import promtool

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "roles" / "monitoring" / "files" / "gpuserve_serving_state.py"
COMMIT = "3f2a" * 10


def _load():
    spec = importlib.util.spec_from_file_location("gpuserve_serving_state", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ss = _load()


def run_script(tmp_path: Path, config: dict) -> tuple[int, list[str]]:
    path = tmp_path / "serving-state.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "gpuserve_serving.prom"
    result = subprocess.run([sys.executable, "-I", "-B", str(SCRIPT), str(path), str(out)], capture_output=True,
                            text=True, timeout=30, check=False)
    check = subprocess.run([str(promtool()), "check", "metrics"], input=out.read_text(), capture_output=True, text=True,
                           timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    return result.returncode, [line for line in out.read_text().splitlines() if not line.startswith("#")]


@pytest.fixture()
def started(tmp_path: Path) -> Path:
    """A node whose server started from env vllm-0.17.0-<12 hex> with a staged model revision and a
    drafter downloaded by `hf download`: the start record as the unit writes it."""
    env = tmp_path / "opt" / "ml-env.d" / "vllm-0.17.0-0123456789ab"
    (env / "lib" / "python3.11" / "site-packages" / "vllm").mkdir(parents=True)
    (env / "lib" / "python3.11" / "site-packages" / "vllm" / "__init__.py").write_text("")
    (env / "lib" / "python3.11" / "site-packages" / "vllm-0.17.0.dist-info").mkdir()
    (env / "bin").mkdir()
    (env / "bin" / "vllm").write_text("#!/bin/sh\n")
    revision = tmp_path / "store" / "kimi-k2.5" / COMMIT
    (revision / ".gpuserve").mkdir(parents=True)
    (revision / ".gpuserve" / "manifest.json").write_text('{"commit": "%s"}\n' % COMMIT)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "kimi-k2.5").symlink_to(revision)
    drafter = tmp_path / "models" / "eagle3"
    (drafter / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (drafter / ".cache" / "huggingface" / "download" / "model.safetensors.metadata").write_text("b" * 40 + "\netag\n1\n")
    record = tmp_path / "vllm_server.start.json"
    assert sr.main(["--record", str(record), "--executable", str(env / "bin" / "vllm"),
                    "--model", str(tmp_path / "models" / "kimi-k2.5"), "--drafter", str(drafter)],
                   environ={"INVOCATION_ID": "abc"}) == 0
    return record


def test_what_the_server_started_with(started: Path, tmp_path: Path) -> None:
    rc, lines = run_script(tmp_path, {"node": "gpu01", "start_record": str(started), "lock": ""})
    digest = hashlib.sha256(('{"commit": "%s"}\n' % COMMIT).encode()).hexdigest()
    commits = hashlib.sha256(b"b" * 40).hexdigest()  # the first lines' digest, never the lines
    assert rc == 0
    assert (f'gpuserve_vllm_serving_info{{node="gpu01",vllm_version="0.17.0",env="vllm-0.17.0-0123456789ab",'
            f'model="{COMMIT} manifest {digest[:12]}",drafter="eagle3 commits {commits[:12]}"}} 1') in lines
    assert 'gpuserve_vllm_serving_read_success{node="gpu01"} 1' in lines
    at = json.loads(started.read_text())["at"]
    assert f'gpuserve_vllm_serving_started_timestamp_seconds{{node="gpu01"}} {at:.3f}' in lines
    assert not [line for line in lines if line.startswith("gpuserve_fleet_run")], "no lock named: no lock series"


def test_no_record_and_an_unreadable_one(tmp_path: Path) -> None:
    rc, lines = run_script(tmp_path, {"node": "gpu02", "start_record": str(tmp_path / "none.json")})
    assert rc == 0 and 'gpuserve_vllm_serving_read_success{node="gpu02"} 1' in lines
    assert not [line for line in lines if line.startswith("gpuserve_vllm_serving_info")], "never started: nothing served"
    for text in ("{not json", '{"format": 1}', "[]"):
        (tmp_path / "bad.json").write_text(text)
        rc, lines = run_script(tmp_path, {"node": "gpu02", "start_record": str(tmp_path / "bad.json")})
        assert rc == 1 and 'gpuserve_vllm_serving_read_success{node="gpu02"} 0' in lines, text
        assert not [line for line in lines if line.startswith("gpuserve_vllm_serving_info")], "unknown, not nothing"


def test_the_lock_host_without_a_server(tmp_path: Path) -> None:
    lock = tmp_path / "site.lock"
    rc, lines = run_script(tmp_path, {"node": "router01", "start_record": "", "lock": str(lock)})
    assert rc == 0 and "gpuserve_fleet_run_locked 0" in lines and "gpuserve_fleet_run_lock_read_success 1" in lines
    assert not [line for line in lines if line.startswith("gpuserve_vllm_serving")], "no start record named: no serving series"
    lock.write_text("garbage")
    rc, lines = run_script(tmp_path, {"node": "router01", "start_record": "", "lock": str(lock)})
    assert rc == 1 and "gpuserve_fleet_run_lock_read_success 0" in lines
    assert not [line for line in lines if line.startswith("gpuserve_fleet_run_locked")], "unknown, not unlocked"


@pytest.mark.parametrize(("identity", "expected"), [
    ("absent", "absent"),
    ("", "absent"),
    ("/srv/store/kimi/abc123 manifest sha256:" + "f" * 64, "abc123 manifest " + "f" * 12),
    ("/srv/models/eagle3 commits sha256:" + "a" * 64, "eagle3 commits " + "a" * 12),
    ("unreadable: /srv/models/eagle3/.gpuserve/manifest.json: a FIFO, not a regular file", "unreadable"),
    ("/srv/models/plain/", "plain"),
])
def test_revision_drops_the_directories(identity: str, expected: str) -> None:
    assert ss.revision(identity) == expected
