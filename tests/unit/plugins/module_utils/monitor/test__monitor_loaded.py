"""Whether Prometheus, Alertmanager and Grafana run what is on disk (_monitor/_loaded.py).

The `systemctl show --timestamp=us+utc <units> -p ...` text (one block per unit, a blank line
between) and the `find ... -maxdepth 1 -printf '%T@ %p\\n'` lines are what systemd 252.39 and GNU
find printed on a podman node of tests/containers (Debian 12). The /metrics text is the REAL
Prometheus' (Debian's package, tests/support/promtool.py) in test_the_real_prometheus_says_when_it_loaded:
it is started on loopback, its configuration touched, reloaded by SIGHUP, and judged after each.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._monitor import _loaded
from tests.support.promtool import prometheus

RUNNING = """MainPID=20
ExecMainStartTimestamp=Sat 2026-12-05 21:49:09.281938 UTC
LoadState=loaded
ActiveState=active
NeedDaemonReload=no
"""
STARTED = 1796507349.281938  # the ExecMainStartTimestamp above
NOT_FOUND = """MainPID=0
ExecMainStartTimestamp=
LoadState=not-found
ActiveState=inactive
NeedDaemonReload=no
"""
CONFIG, RULES, FLAGS = "/etc/prometheus/prometheus.yml", "/etc/prometheus/gpuserve", "/etc/default/prometheus"
PROMETHEUS = {"name": "prometheus", "restart_paths": [FLAGS], "reload_paths": [CONFIG, RULES],
              "metric_prefix": "prometheus", "reload_as": "reloaded"}
GRAFANA = {"name": "grafana-server", "restart_paths": ["/etc/grafana/provisioning/datasources/gpuserve.yml"],
           "reload_paths": [], "metric_prefix": ""}


def files(config: float, rules: float, flags: float = STARTED - 60) -> str:
    return (f"{config:.10f} {CONFIG}\n{rules:.10f} {RULES}\n{rules:.10f} {RULES}/gpuserve-vllm.rules.yml\n"
            f"{flags:.10f} {FLAGS}\n")


def metrics(loaded: float, ok: int = 1) -> str:
    return ("# HELP prometheus_config_last_reload_success_timestamp_seconds Timestamp of the last successful configuration reload.\n"
            "# TYPE prometheus_config_last_reload_success_timestamp_seconds gauge\n"
            f"prometheus_config_last_reload_success_timestamp_seconds {loaded:.9e}\n"
            "# TYPE prometheus_config_last_reload_successful gauge\n"
            f"prometheus_config_last_reload_successful {ok}\n")


@pytest.mark.parametrize(("show", "file_times", "text", "action", "why"), [
    # Loaded after its files were written: nothing to do, every run.
    (RUNNING, files(STARTED + 10, STARTED + 10), metrics(STARTED + 20), "none", ""),
    # A run wrote the configuration, then failed or was killed before Prometheus loaded it.
    (RUNNING, files(STARTED + 30, STARTED + 10), metrics(STARTED + 20), "reload", f"{CONFIG} changed after its last load"),
    # A rules file added or removed moves its folder's time.
    (RUNNING, files(STARTED + 10, STARTED + 30), metrics(STARTED + 20), "reload", f"{RULES} changed after its last load"),
    (RUNNING, files(STARTED + 10, STARTED + 10), metrics(STARTED + 20, ok=0), "reload", "its last load of its configuration failed"),
    # Its flags are read at its start only.
    (RUNNING, files(STARTED - 5, STARTED - 5, flags=STARTED + 5), metrics(STARTED + 20), "restart",
     f"{FLAGS} changed after it started"),
    (RUNNING.replace("NeedDaemonReload=no", "NeedDaemonReload=yes"), files(STARTED - 5, STARTED - 5), metrics(STARTED), "restart",
     "NeedDaemonReload=yes"),
    # /metrics did not answer: its start stands in for its last load.
    (RUNNING, files(STARTED + 30, STARTED - 5), None, "reload", "when it last loaded could not be read: connection refused"),
    (RUNNING, files(STARTED - 30, STARTED - 5), None, "none", ""),
    # Not running: its start (the role's `running` task) loads what is on disk.
    (NOT_FOUND, files(STARTED + 30, STARTED + 30), None, "none", "not running"),
    # Whether it runs cannot be read: never guessed.
    ("", files(STARTED + 30, STARTED + 30), metrics(STARTED), "unknown", "ActiveState=(nothing)"),
    (RUNNING.replace("Sat 2026-12-05 21:49:09.281938 UTC", ""), files(STARTED, STARTED), metrics(STARTED), "unknown",
     "no start time"),
])
def test_prometheus(show: str, file_times: str, text: str | None, action: str, why: str) -> None:
    plan = _loaded.plan(PROMETHEUS, show, file_times, text, "connection refused")
    assert plan["action"] == action, plan
    assert why in plan["msg"], plan
    assert plan["name"] == "prometheus"


def test_reload_as_restart_and_check_mode_pending() -> None:
    older = files(STARTED + 10, STARTED + 10)
    assert _loaded.plan(dict(PROMETHEUS, reload_as="restarted"), RUNNING, files(STARTED + 30, STARTED), metrics(STARTED + 20)
                        )["action"] == "restart"
    pending = _loaded.plan(dict(PROMETHEUS, pending_reload=[CONFIG]), RUNNING, older, metrics(STARTED + 20))
    assert pending["action"] == "reload" and f"{CONFIG} would change" in pending["reasons"]
    pending = _loaded.plan(dict(PROMETHEUS, pending_restart=[FLAGS]), RUNNING, older, metrics(STARTED + 20))
    assert pending["action"] == "restart" and f"{FLAGS} would change" in pending["reasons"]


def test_without_metrics_a_service_restarts_for_what_it_reads() -> None:
    grafana = "/etc/grafana/provisioning/datasources/gpuserve.yml"
    assert _loaded.plan(GRAFANA, RUNNING, f"{STARTED - 1:.10f} {grafana}\n")["action"] == "none"
    plan = _loaded.plan(GRAFANA, RUNNING, f"{STARTED + 1:.10f} {grafana}\n")
    assert plan["action"] == "restart" and plan["reasons"] == [f"{grafana} changed after it started"]


def test_plans_pairs_blocks_and_reads_with_their_services() -> None:
    alertmanager = {"name": "prometheus-alertmanager", "restart_paths": [], "reload_paths": ["/etc/prometheus/alertmanager.yml"],
                    "metric_prefix": "alertmanager", "reload_as": "reloaded"}
    shows = RUNNING + "\n" + NOT_FOUND + "\n" + RUNNING
    found = files(STARTED + 30, STARTED) + f"{STARTED + 30:.10f} /etc/prometheus/alertmanager.yml\n"
    am_metrics = ("alertmanager_config_last_reload_success_timestamp_seconds %.9e\n"
                  "alertmanager_config_last_reload_successful 1\n" % (STARTED + 40))
    reads = [{"status": 200, "content": metrics(STARTED + 20)}, {"status": 200, "content": am_metrics}]
    result = _loaded.plans([PROMETHEUS, GRAFANA, alertmanager], shows, found, reads)
    assert [(p["name"], p["action"]) for p in result] == [
        ("prometheus", "reload"), ("grafana-server", "none"), ("prometheus-alertmanager", "none")]
    refused = [{"status": -1, "msg": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>"}]
    plan = _loaded.plans([PROMETHEUS], RUNNING, found, refused)[0]
    assert plan["action"] == "reload" and "Connection refused" in plan["msg"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:  # loopback only
        return response.read().decode()


def _until(what: str, probe, seconds: float = 60):
    deadline, last = time.monotonic() + seconds, None
    while time.monotonic() < deadline:
        try:
            last = probe()
            if last:
                return last
        except OSError as exc:
            last = exc
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {seconds} s (last: {last!r})")


def _show(pid: int) -> str:
    """What systemd would say of this process: its start, from /proc (the test runs it, not systemd)."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime"))
    started = boot + ticks / os.sysconf("SC_CLK_TCK")
    stamp = time.strftime("%a %Y-%m-%d %H:%M:%S", time.gmtime(started)) + ".%06d UTC" % int((started % 1) * 1e6)
    return f"MainPID={pid}\nExecMainStartTimestamp={stamp}\nLoadState=loaded\nActiveState=active\nNeedDaemonReload=no\n"


def test_the_real_prometheus_says_when_it_loaded(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "a.rules.yml").write_text("groups: []\n")
    config.write_text(f"global: {{scrape_interval: 1m}}\nrule_files: ['{rules}/*.rules.yml']\n")
    service = dict(PROMETHEUS, restart_paths=[], reload_paths=[str(config), str(rules)])
    port = _free_port()
    proc = subprocess.Popen(["timeout", "90", str(prometheus()), f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        loaded = _until("Prometheus loaded its configuration",
                        lambda: _loaded.sample(_metrics(port), "prometheus_config_last_reload_success_timestamp_seconds"))
        server = int(subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=True).stdout.split()[0])

        def judge() -> dict:
            found = subprocess.run(["find", str(config), str(rules), "-maxdepth", "1", "-printf", "%T@ %p\\n"],
                                   capture_output=True, text=True, check=True).stdout
            return _loaded.plan(service, _show(server), found, _metrics(port))

        assert judge()["action"] == "none", judge()
        # What a run killed after writing a rules file leaves: the file newer than the last load.
        now = time.time()
        assert now > loaded
        os.utime(rules / "a.rules.yml", (now, now))
        assert judge()["reasons"] == [f"{rules}/a.rules.yml changed after its last load"]
        os.kill(server, signal.SIGHUP)  # what `systemctl reload prometheus` sends
        _until("Prometheus reloaded", lambda: (_loaded.sample(_metrics(port), "prometheus_config_last_reload_success_timestamp_seconds")
                                               or 0) > loaded)
        assert judge()["action"] == "none", judge()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
