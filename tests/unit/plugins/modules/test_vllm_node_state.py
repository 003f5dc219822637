"""vllm_node_state on a host systemd does not run: nothing can run there, so nothing is refused.

The env guards of vllm_install and eagle3_patches ask this module whether a running vLLM uses
the env; a build host or container without systemd (PID 1 something else) must read as "no
server", and a host with systemd whose systemctl fails must still fail loudly.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _unit_boundary
from ansible_collections.gpuserve.vllm.plugins.modules import vllm_node_state

from module_runner import run_module_main


def _args(tmp_path: Path) -> dict:
    env = tmp_path / "opt" / "ml-env.d" / "a"
    (env / "bin").mkdir(parents=True)
    (tmp_path / "opt" / "ml-env").symlink_to(env)
    return {"link": str(tmp_path / "opt" / "ml-env"), "health_url": "", "metrics_url": "",
            "journal": str(tmp_path / "plan.json"), "hold": str(tmp_path / "hold.json"),
            "restart_marker": str(tmp_path / "restart")}


def test_no_systemd_reads_as_nothing_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path / "no-such-dir"))
    result = run_module_main(vllm_node_state, _args(tmp_path), monkeypatch)
    assert not result.get("failed"), result
    assert result["unit"]["systemd"] is False and result["unit"]["load_state"] == "not-found"
    assert result["unit"]["main_pid"] == 0 and result["process"]["env"] == ""
    assert result["link"]["env"] == str(tmp_path / "opt" / "ml-env.d" / "a")


def test_systemd_whose_systemctl_fails_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tmp_path / "bin").mkdir()
    systemctl = tmp_path / "bin" / "systemctl"
    systemctl.write_text("#!/bin/sh\necho 'Failed to connect to bus: Host is down' >&2\nexit 1\n")
    systemctl.chmod(0o755)
    result = run_module_main(vllm_node_state, _args(tmp_path), monkeypatch)
    assert result["failed"] and "systemctl show vllm.service failed (rc 1): Failed to connect to bus" in result["msg"]


def test_a_unit_file_systemd_has_not_loaded_is_returned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """systemctl show is asked for NeedDaemonReload and its `yes` returned (a unit a killed run
    wrote, not loaded: the serve plan restarts the server for it)."""
    monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tmp_path / "bin").mkdir()
    systemctl = tmp_path / "bin" / "systemctl"
    systemctl.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" > {tmp_path / 'argv'}\n"
                         "printf 'MainPID=0\\nNRestarts=1\\nLoadState=loaded\\nActiveState=failed\\nSubState=failed\\n"
                         "ExecMainStartTimestampMonotonic=0\\nInvocationID=\\nNeedDaemonReload=yes\\n'\n")
    systemctl.chmod(0o755)
    result = run_module_main(vllm_node_state, _args(tmp_path), monkeypatch)
    assert not result.get("failed"), result
    assert "--property=NeedDaemonReload" in (tmp_path / "argv").read_text().split()
    assert result["unit"]["need_daemon_reload"] is True and result["unit"]["active_state"] == "failed"


@pytest.fixture()
def silent_port():
    """A loopback port that accepts connections and never answers (a hung server or a lost scrape)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture()
def closed_port():
    """A loopback port nothing listens on (refused: known)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_a_health_read_that_times_out_is_unknown_not_unhealthy(tmp_path, monkeypatch, silent_port):
    monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path / "no-such-dir"))
    monkeypatch.setattr(vllm_node_state.time, "sleep", lambda _s: None)
    url = f"http://127.0.0.1:{silent_port}"
    result = run_module_main(vllm_node_state, dict(_args(tmp_path), health_url=url + "/health",
                                                   metrics_url=url + "/metrics", timeout=1, tries=2), monkeypatch)
    assert result["health"] == {"status": None, "error": "timed out", "known": False, "tries": 2}
    assert result["metrics"]["known"] is False and result["metrics"]["reachable"] is False
    assert result["metrics"]["tries"] == 2


def test_a_refused_read_is_known_and_read_once(tmp_path, monkeypatch, closed_port):
    monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path / "no-such-dir"))
    url = f"http://127.0.0.1:{closed_port}"
    result = run_module_main(vllm_node_state, dict(_args(tmp_path), health_url=url + "/health",
                                                   metrics_url=url + "/metrics", timeout=1, tries=3), monkeypatch)
    assert result["health"]["known"] is True and result["health"]["tries"] == 1
    assert "refused" in result["health"]["error"].lower()
    assert result["metrics"]["known"] is True and result["metrics"]["reachable"] is False


def test_an_answer_after_a_missed_read_counts(monkeypatch):
    """One missed read, then an answer: the answer is what the plan sees (tries 2)."""
    answers = iter([(None, "timed out"), (200, "ok")])
    status, text, kind, used = vllm_node_state.ns.probe(lambda: next(answers), 3, lambda: None)
    assert (status, kind, used) == (200, "answer", 2)


def test_the_nccl_configuration_time_is_read_like_the_unit(tmp_path, monkeypatch):
    """What the plan compares with the server's start: a missing file is None, never 0."""
    monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path / "no-such-dir"))
    conf = tmp_path / "nccl.conf"
    args = dict(_args(tmp_path), nccl_conf=str(conf))
    absent = run_module_main(vllm_node_state, args, monkeypatch)
    conf.write_text("NCCL_P2P_DISABLE=1\n")
    present = run_module_main(vllm_node_state, args, monkeypatch)
    assert absent["files"]["nccl_conf"] is None
    assert present["files"]["nccl_conf"] == conf.stat().st_mtime


def _site(env: Path) -> Path:
    site = env / "lib" / "python3.11" / "site-packages"
    for path in ("vllm/model_executor/models/deepseek_v2.py", "vllm/__init__.py",
                 "vllm/model_executor/models/__pycache__/deepseek_v2.cpython-311.pyc"):
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text("")
    (site / "vllm-0.17.0.dist-info").mkdir()
    (site / "torch-2.9.0.dist-info").mkdir()
    for path in site.rglob("*"):
        os.utime(path, (1000.0, 1000.0))
    os.utime(site, (1000.0, 1000.0))
    return site


def test_env_code_time_follows_patches_and_installs_not_bytecode(tmp_path):
    """What a running server loaded from its env: a patched file or a package's new dist-info
    counts; root writing bytecode (an import check, a preflight) does not."""
    site = _site(tmp_path / "env")
    assert vllm_node_state.ns.code_mtime(str(tmp_path / "env")) == 1000.0
    pyc = site / "vllm/model_executor/models/__pycache__/deepseek_v2.cpython-311.pyc"
    os.utime(pyc, (5000.0, 5000.0))
    os.utime(pyc.parent, (5000.0, 5000.0))
    assert vllm_node_state.ns.code_mtime(str(tmp_path / "env")) == 1000.0
    os.utime(site / "vllm/model_executor/models/deepseek_v2.py", (2000.0, 2000.0))  # a patch
    assert vllm_node_state.ns.code_mtime(str(tmp_path / "env")) == 2000.0
    os.utime(site / "torch-2.9.0.dist-info", (3000.0, 3000.0))  # a reinstall, files hard-linked from a cache
    assert vllm_node_state.ns.code_mtime(str(tmp_path / "env")) == 3000.0
    assert vllm_node_state.ns.code_mtime(str(tmp_path / "no-env")) is None


def test_weights_paths_are_timed_by_the_link_not_its_target(tmp_path, monkeypatch):
    """vllm_weights switches a link to a revision staged (and timed) long before: the switch is the change."""
    monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path / "no-such-dir"))
    revision = tmp_path / "store" / "kimi" / "abc123"
    revision.mkdir(parents=True)
    os.utime(revision, (1000.0, 1000.0))
    link = tmp_path / "kimi"
    link.symlink_to(revision)
    os.utime(link, (4000.0, 4000.0), follow_symlinks=False)
    args = dict(_args(tmp_path), model_path=str(link), drafter_path=str(tmp_path / "no-drafter"))
    result = run_module_main(vllm_node_state, args, monkeypatch)
    assert result["files"]["model"] == 4000.0
    assert result["files"]["drafter"] is None
    assert result["files"]["env_code"] is None  # nothing runs


def _rendered(path: Path, content: bytes, mode: str) -> dict:
    import hashlib
    return {"name": path.name, "path": str(path), "sha256": hashlib.sha256(content).hexdigest(), "mode": mode}


@pytest.mark.skipif(os.geteuid() != 0, reason="root:root files need root")
def test_rendered_files_are_compared_by_content_owner_and_mode(tmp_path, monkeypatch):
    """What the template module's check mode told the plan before: a file differs in its bytes,
    its owner or its mode, or is missing; the same file reads as the same."""
    monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path / "no-such-dir"))
    unit, env, gone, link = tmp_path / "vllm.service", tmp_path / "vllm.env", tmp_path / "gone", tmp_path / "lnk"
    unit.write_bytes(b"[Unit]\n")
    unit.chmod(0o644)
    env.write_bytes(b'VLLM_API_KEY="k"\n')
    env.chmod(0o644)  # rendered 0600
    link.symlink_to(unit)
    args = dict(_args(tmp_path), rendered=[
        _rendered(unit, b"[Unit]\n", "0644"), _rendered(env, b'VLLM_API_KEY="k"\n', "0600"),
        _rendered(gone, b"", "0644"), _rendered(link, b"[Unit]\n", "0644")])
    result = run_module_main(vllm_node_state, args, monkeypatch)
    assert result["rendered"] == {"vllm.service": {"same": True, "why": ""},
                                  "vllm.env": {"same": False, "why": "mode 0644, not 0600"},
                                  "gone": {"same": False, "why": "missing"},
                                  "lnk": {"same": False, "why": "not a regular file"}}
    unit.write_bytes(b"[Unit]\nAfter=x\n")
    os.chown(env, 4321, 0)
    env.chmod(0o600)
    result = run_module_main(vllm_node_state, args, monkeypatch)
    assert result["rendered"]["vllm.service"] == {"same": False, "why": "content differs"}
    assert result["rendered"]["vllm.env"] == {"same": False, "why": "owner 4321:0, not root:root"}
    assert args["rendered"][1]["sha256"] not in str(result)  # a digest of secrets is not returned


def test_a_mode_that_is_not_octal_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path / "no-such-dir"))
    args = dict(_args(tmp_path), rendered=[_rendered(tmp_path / "u", b"", "rw-r--r--")])
    result = run_module_main(vllm_node_state, args, monkeypatch)
    assert result["failed"] and "rendered: u: mode 'rw-r--r--' is not octal" in result["msg"]


def test_the_unit_environment_is_judged_like_vllm_unit_boundary(tmp_path, monkeypatch):
    """The same refusals as gpuserve.vllm.vllm_unit_boundary, returned for the checks to fail on;
    the environment's lines (secrets) are never in the result."""
    monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path / "no-such-dir"))
    open_dir = tmp_path / "lib"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    args = dict(_args(tmp_path), unit_environment=[f'LD_LIBRARY_PATH="{open_dir}"', 'VLLM_API_KEY="s3cret"'],
                unit_extra={"Environment": "OPENSSL_CONF=relative.cnf"})
    result = run_module_main(vllm_node_state, args, monkeypatch)
    problems = result["boundary"]["problems"]
    assert [p.split(" ", 1)[0] for p in problems] == [f"LD_LIBRARY_PATH={open_dir}", "OPENSSL_CONF=relative.cnf"]
    assert "is writable by every user" in problems[0] and "is relative" in problems[1]
    assert "s3cret" not in str(result)
    result = run_module_main(vllm_node_state, dict(args, unit_environment=["not a line"], unit_extra={}), monkeypatch)
    assert result["boundary"] == {"problems": ["unit_environment line 1 is not NAME=value (the lines of the unit's EnvironmentFile)"],
                                  "checked": [], "id": _unit_boundary.judged_id(["not a line"], {})}
    safe = run_module_main(vllm_node_state, dict(args, unit_environment=['VLLM_API_KEY="s3cret"'], unit_extra={}), monkeypatch)
    assert safe["boundary"] == {"problems": [], "checked": [], "id": _unit_boundary.judged_id([], {})}


def test_a_server_whose_port_changed_is_read_where_it_listens(tmp_path, monkeypatch, closed_port):
    """The inventory moved the server to a port nothing listens on yet (closed_port); the running
    server (the TEST DOUBLE `vllm serve`, a real process with a real argv) still listens on the
    port it was started with. systemctl's MainPID points at it (a systemctl TEST DOUBLE printing
    `systemctl show`'s Property=value lines, systemctl(1)): it is read there, healthy, so the plan
    drains it instead of taking it for a server that does not answer."""
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        old_port = sock.getsockname()[1]
    double = Path(__file__).resolve().parents[3] / "doubles" / "fake_vllm_server.py"
    server = subprocess.Popen([sys.executable, str(double), "serve", "/srv/models/m", "--host", "127.0.0.1",
                               "--port", str(old_port), "--double-load-seconds", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{old_port}/health", timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path))
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        (tmp_path / "bin").mkdir()
        systemctl = tmp_path / "bin" / "systemctl"
        systemctl.write_text("#!/bin/sh\nprintf 'LoadState=loaded\\nActiveState=active\\nSubState=running\\n"
                             f"MainPID={server.pid}\\nNRestarts=0\\nExecMainStartTimestampMonotonic=1000000\\n"
                             "InvocationID=0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e\\n'\n")
        systemctl.chmod(0o755)
        new = f"http://127.0.0.1:{closed_port}"
        result = run_module_main(vllm_node_state, dict(_args(tmp_path), health_url=new + "/health",
                                                       metrics_url=new + "/metrics", tries=1), monkeypatch)
    finally:
        server.kill()
        server.wait()
    assert result["listen"] == {"host": "127.0.0.1", "port": old_port, "source": "process",
                                "health_url": f"http://127.0.0.1:{old_port}/health",
                                "metrics_url": f"http://127.0.0.1:{old_port}/metrics"}
    assert result["health"]["status"] == 200 and result["metrics"]["reachable"] is True


def test_the_switch_record_is_read_and_its_envs_are_looked_at(tmp_path, monkeypatch):
    """What a rollback undoes: the record's switches come back as written, and every env they name
    is in `envs` (the plan refuses a rollback to an env that is not built)."""
    import json

    monkeypatch.setattr(vllm_node_state, "SYSTEMD_RUNTIME", str(tmp_path / "no-such-dir"))
    record = tmp_path / "switch.json"
    older = tmp_path / "opt" / "ml-env.d" / "older"
    (older / "bin").mkdir(parents=True)
    (older / "bin" / "vllm").write_text("")
    current = str(tmp_path / "opt" / "ml-env.d" / "a")
    switches = [{"from": str(older), "to": current, "at": 1000.0, "rollback": False}]
    args = dict(_args(tmp_path), switch_record=str(record))
    assert run_module_main(vllm_node_state, args, monkeypatch)["switches"] == []
    record.write_text(json.dumps({"version": 1, "switches": switches}))
    result = run_module_main(vllm_node_state, args, monkeypatch)
    assert result["switches"] == switches
    assert result["envs"][str(older)] == {"exists": True, "built": True}
    record.write_text("[1, 2")
    assert "cannot be read as JSON" in run_module_main(vllm_node_state, args, monkeypatch)["msg"]
