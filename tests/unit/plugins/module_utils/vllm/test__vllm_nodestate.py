"""What vllm_node_state reads (plugins/module_utils/_vllm/_nodestate.py), on real processes and links.

The env of a running process is read the way the module reads it on a node: a real venv whose
script names the env's interpreter in its shebang (as uv and venv write them), started for
real, its /proc/<pid>/cmdline read back -- also with the env store behind a symlink (a mounted
NVMe) and the stable link switched while the process runs.
"""

from __future__ import annotations

import os
import subprocess
import time
import venv

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _nodestate as ns
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu._nvidia_smi import parse_memory_csv
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._unit import parse_systemctl_show


@pytest.fixture()
def store(tmp_path):
    """/nvme/envs/{a,b} behind /opt/ml-env.d -> /nvme/envs, link /opt/ml-env -> store/a."""
    real = tmp_path / "nvme" / "envs"
    real.mkdir(parents=True)
    for name in ("a", "b"):
        venv.create(real / name, with_pip=False, symlinks=True)
        script = real / name / "bin" / "vllm"
        # The shebang names the env through the store path, as uv writes it.
        script.write_text(f"#!{tmp_path / 'opt' / 'ml-env.d' / name / 'bin' / 'python'}\n"
                          "import time\ntime.sleep(30)\n")
        script.chmod(0o755)
    (tmp_path / "opt").mkdir()
    os.symlink(real, tmp_path / "opt" / "ml-env.d")
    os.symlink(tmp_path / "opt" / "ml-env.d" / "a", tmp_path / "opt" / "ml-env")
    return tmp_path


def test_the_env_of_a_running_process_is_its_real_path(store):
    link = str(store / "opt" / "ml-env")
    proc = subprocess.Popen([link + "/bin/vllm"])  # started through the stable link, as systemd does
    try:
        time.sleep(0.3)
        argv = ns.read_cmdline(proc.pid)
        started = time.time() - 1
        env, note = ns.process_env(argv, link, os.lstat(link).st_mtime, started)
        assert note == ""
        assert env == str(store / "nvme" / "envs" / "a")
        assert ns.link_view(link)["env"] == env  # the link, compared by real path too
        # Switch the link while it runs: the process still reports the env it started from.
        os.unlink(link)
        os.symlink(store / "opt" / "ml-env.d" / "b", link)
        env_after, _reason = ns.process_env(ns.read_cmdline(proc.pid), link, os.lstat(link).st_mtime, started)
        assert env_after == env
        assert ns.link_view(link)["env"] == str(store / "nvme" / "envs" / "b")
    finally:
        proc.kill()
        proc.wait()


def test_an_interpreter_named_through_the_link_after_a_switch_cannot_be_told(store):
    link = str(store / "opt" / "ml-env")
    argv = [link + "/bin/python", "-m", "vllm.entrypoints.cli.main", "serve"]
    env, note = ns.process_env(argv, link, link_changed=2000.0, started=1000.0)
    assert env == "" and "changed after it started" in note
    env, note = ns.process_env(argv, link, link_changed=500.0, started=1000.0)
    assert env == str(store / "nvme" / "envs" / "a") and note == ""


@pytest.mark.parametrize("argv, note", [
    ([], "is not an absolute interpreter path"),
    (["python3", "x"], "is not an absolute interpreter path"),
    (["/usr/lib/thing", "x"], "not an env's bin/ interpreter"),
])
def test_processes_that_are_not_an_env(argv, note):
    env, why = ns.process_env(argv, "/opt/ml-env", None, None)
    assert env == "" and note in why


def test_unit_view_from_systemctl_show():
    # `systemctl show vllm.service -p ...` of a running unit (systemd 252, the molecule image's).
    text = ("LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\nNRestarts=0\n"
            "ExecMainStartTimestampMonotonic=3600000000\nNeedDaemonReload=no\n")
    view = ns.unit_view(parse_systemctl_show(text), mono_now=3700.0, wall_now=1_800_000_000.0)
    assert view["main_pid"] == 4242 and view["active_state"] == "active"
    assert view["started"] == pytest.approx(1_800_000_000.0 - 100)
    assert view["need_daemon_reload"] is False
    dead = ns.unit_view(parse_systemctl_show("LoadState=not-found\nActiveState=inactive\nMainPID=0\n"
                                             "ExecMainStartTimestampMonotonic=0\n"), 1.0, 2.0)
    assert dead["started"] is None and dead["load_state"] == "not-found"
    assert dead["need_daemon_reload"] is False


def test_a_unit_file_systemd_has_not_loaded_is_read():
    """The unit rendered by a run killed before its daemon-reload, vLLM restarted by systemd since
    (NRestarts 1): systemd runs the unit it had in memory and says so."""
    assert "NeedDaemonReload" in ns.UNIT_FIELDS  # what vllm_node_state asks systemctl show for
    text = ("LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=5151\nNRestarts=1\n"
            "ExecMainStartTimestampMonotonic=3690000000\nNeedDaemonReload=yes\n"
            "InvocationID=5f4c2d9e0a7b4e1f8c3d2b1a09876543\n")
    view = ns.unit_view(parse_systemctl_show(text), mono_now=3700.0, wall_now=1_800_000_000.0)
    assert view["need_daemon_reload"] is True and view["n_restarts"] == 1


def test_gauges_and_progress():
    # vLLM v1 /metrics lines (names and labels as in https://docs.vllm.ai/en/latest/design/metrics.html).
    text = ('vllm:num_requests_running{engine="0",model_name="kimi-k2.5"} 3.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="kimi-k2.5"} 1.0\n'
            'vllm:prompt_tokens_total{engine="0",model_name="kimi-k2.5"} 1200.0\n'
            'vllm:generation_tokens_total{engine="0",model_name="kimi-k2.5"} 34.0\n')
    assert ns.gauges(text) == {"present": True, "running": 3.0, "waiting": 1.0, "progress": 1234.0,
                               "kv_cache_usage": None, "spec_decode": None}
    assert ns.gauges("# nothing\n") == {"present": False, "running": 0.0, "waiting": 0.0, "progress": None,
                                        "kv_cache_usage": None, "spec_decode": None}


def test_gauges_kv_and_spec_decode_from_real_vllm_metrics():
    """tests/fixtures/monitoring/vllm-0.33.0-metrics.txt: vLLM 0.33.0's own exposition, two engines."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[5] / "tests" / "fixtures" / "monitoring" / "vllm-0.33.0-metrics.txt").read_text()
    view = ns.gauges(text)
    assert view["running"] == 54.0 and view["waiting"] == 0.0
    assert view["kv_cache_usage"] == pytest.approx(0.7247180383253109)  # the fuller of the two engines
    assert view["spec_decode"] == {"drafts": 21998.0, "draft_tokens": 65994.0, "accepted_tokens": 38561.0}


def test_records(tmp_path):
    path = tmp_path / "plan.json"
    assert ns.read_record(str(path)) is None
    path.write_text('{"action": "upgrade"}')
    assert ns.read_record(str(path)) == {"action": "upgrade"}
    path.write_text('{"action": ')
    with pytest.raises(ns.StateError, match=r"plan.json cannot be read as JSON .* remove the file and re-run"):
        ns.read_record(str(path))
    path.write_text("[1]")
    with pytest.raises(ns.StateError, match="holds list, not a JSON object"):
        ns.read_record(str(path))


def test_envs_view(store):
    a = str(store / "nvme" / "envs" / "a")
    (store / "nvme" / "envs" / "a" / "bin" / "vllm").unlink()
    view = ns.envs_view([a, "", a, str(store / "missing")])
    assert view == {a: {"exists": True, "built": False}, str(store / "missing"): {"exists": False, "built": False}}


def test_gpu_memory_rows():
    # Format of `nvidia-smi --query-gpu=index,memory.total,memory.free --format=csv,noheader,nounits`
    # (comma and space separated MiB integers, as in the public output quoted in
    # https://github.com/clEsperanto/CLIc/issues/89); the totals are the fixture box's (97887 MiB).
    text = "0, 97887, 9120\n1, 97887, 9004\n2, 97887, [Unknown Error]\n"
    assert parse_memory_csv(text) == [{"index": 0, "total_mib": 97887, "free_mib": 9120},
                                      {"index": 1, "total_mib": 97887, "free_mib": 9004}]


@pytest.mark.parametrize("content, reason, install", [
    # written by gpu_node's handler (kernel command line) and by releases before staging
    ("new kernel command line (gpuserve.vllm.gpu_node)\n", "new kernel command line (gpuserve.vllm.gpu_node)", []),
    ("new kernel command line or NVIDIA driver (gpuserve.vllm.gpu_node)\n",
     "new kernel command line or NVIDIA driver (gpuserve.vllm.gpu_node)", []),
    # written by gpu_node's driver.yml on a serving node
    ("NVIDIA driver staged: nvidia-driver-590-server-open nvidia-utils-590-server (gpuserve.vllm.gpu_node)\n"
     "install: nvidia-driver-590-server-open nvidia-utils-590-server\n",
     "NVIDIA driver staged: nvidia-driver-590-server-open nvidia-utils-590-server (gpuserve.vllm.gpu_node)",
     ["nvidia-driver-590-server-open", "nvidia-utils-590-server"]),
    ("", "", []),
])
def test_reboot_view_reads_the_reason_and_the_staged_packages(
        tmp_path, content: str, reason: str, install: list[str]) -> None:
    marker = tmp_path / "reboot-pending"
    marker.write_text(content, encoding="utf-8")
    assert ns.reboot_view(str(marker)) == {"pending": True, "reason": reason, "install": install}


def test_reboot_view_without_a_request(tmp_path) -> None:
    assert ns.reboot_view(str(tmp_path / "reboot-pending")) == {"pending": False, "reason": "", "install": []}
    assert ns.reboot_view("") == {"pending": False, "reason": "", "install": []}


def test_acceptance_view_reads_the_reason_gpu_node_wrote(tmp_path) -> None:
    marker = tmp_path / "acceptance-pending"
    assert ns.acceptance_view(str(marker)) == {"pending": False, "reason": ""}
    assert ns.acceptance_view("") == {"pending": False, "reason": ""}
    # as gpu_node's acceptance.yml writes it on a serving node
    marker.write_text("node acceptance: asked for (gpu_node_acceptance_force or --tags acceptance); the server runs: "
                      "... (gpuserve.vllm.gpu_node)\n", encoding="utf-8")
    assert ns.acceptance_view(str(marker)) == {
        "pending": True, "reason": "node acceptance: asked for (gpu_node_acceptance_force or --tags acceptance); "
                                   "the server runs: ... (gpuserve.vllm.gpu_node)"}


def test_a_running_server_is_read_where_its_argv_says_it_listens(store):
    """The unit's ExecStart as the role renders it (_server.serve_argv), started for real through
    the stable link, its /proc cmdline read back: a server started on port 8001 is read there
    although this run configures 8002 (a changed vllm_server_port, not yet restarted)."""
    from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._server import serve_argv
    link = str(store / "opt" / "ml-env")
    argv = serve_argv(link + "/bin/vllm", "/srv/models/kimi-k2.5", {"host": "0.0.0.0", "port": 8001, "trust_remote_code": True})
    proc = subprocess.Popen(argv)
    try:
        time.sleep(0.3)
        read = ns.read_cmdline(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    view = ns.listen_view(read, "http://127.0.0.1:8002/health", "http://127.0.0.1:8002/metrics")
    assert view == {"host": "0.0.0.0", "port": 8001, "source": "process",
                    "health_url": "http://127.0.0.1:8001/health", "metrics_url": "http://127.0.0.1:8001/metrics"}


@pytest.mark.parametrize("argv, address", [
    (["/e/bin/python", "/opt/ml-env/bin/vllm", "serve", "/m", "--host", "10.0.0.5", "--port", "8001"], ("10.0.0.5", 8001)),
    # argparse's other spelling, and the last of a repeated flag.
    (["/e/bin/python", "/opt/ml-env/bin/vllm", "serve", "/m", "--port=8002", "--port", "8003"], ("", 8003)),
    # Unset: vLLM listens on every address, port 8000.
    (["/e/bin/python", "/opt/ml-env/bin/vllm", "serve", "/m"], ("", 8000)),
    # Not a `vllm serve` process, or a port that is no number: nothing to follow.
    (["/e/bin/python", "-c", "pass"], None),
    (["/e/bin/python", "/opt/ml-env/bin/vllm", "serve", "/m", "--port", "http"], None),
])
def test_served_address(argv, address):
    assert ns.served_address(argv) == address


@pytest.mark.parametrize("argv, health, expected", [
    # A host of this node's is read there; an IPv6 one in brackets.
    (["/p", "/v", "serve", "/m", "--host", "127.0.0.2", "--port", "8001"], "http://127.0.0.1:8000/health",
     "http://127.0.0.2:8001/health"),
    (["/p", "/v", "serve", "/m", "--host", "::1"], "http://127.0.0.1:8000/health", "http://[::1]:8000/health"),
    # An address that is not this node's (or a name): root does not follow the service user's argv
    # there; only the port is taken, on the configured host.
    (["/p", "/v", "serve", "/m", "--host", "203.0.113.9", "--port", "22"], "http://10.0.0.6:8000/health",
     "http://10.0.0.6:22/health"),
    (["/p", "/v", "serve", "/m", "--host", "evil.example", "--port", "8001"], "http://127.0.0.1:8000/health",
     "http://127.0.0.1:8001/health"),
    # Nothing runs (no argv), or nothing to ask: the configured URL stands.
    ([], "http://127.0.0.1:8000/health", "http://127.0.0.1:8000/health"),
    (["/p", "/v", "serve", "/m", "--port", "8001"], "", ""),
])
def test_listen_view_urls(argv, health, expected):
    assert ns.listen_view(argv, health, "")["health_url"] == expected
