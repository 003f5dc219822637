"""What listens where: the flags files, drop-ins and timer units the monitoring role renders (its real templates
and vars, through ansible-playbook), and the REAL Debian binaries started with those flags on loopback.

The inventory: gpu01 reached at an IP (its exporters listen there), gpu02 named by a name with its
monitoring_listen_address set, router01 at monitoring_address 127.0.0.3 (loopback, so that the real
node_exporter can listen there: Prometheus on mon01 would refuse it), the monitoring host mon01 with
Alertmanager on. Alertmanager (Debian's prometheus-alertmanager, tests/support/promtool.py) runs with the
rendered ARGS: its API answers on loopback and says its cluster is disabled (no gossip on :9094).
node_exporter (Debian's prometheus-node-exporter) runs with router01's rendered ARGS: it serves the
textfile directory's metric at 127.0.0.3 and refuses 127.0.0.1 (not every address). Every process runs
under `timeout` and is killed at the end.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.promtool import alertmanager, alertmanager_share, node_exporter

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "monitoring"

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _args(path: Path) -> list[str]:
    """The ARGS= of a Debian /etc/default file, split as systemd splits $ARGS."""
    (line,) = [line for line in path.read_text().splitlines() if line.startswith("ARGS=")]
    return shlex.split(shlex.split(line.split("=", 1)[1])[0])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("listen")
    ports = {"alertmanager": _free_port(), "node": _free_port()}
    (tmp / "hosts.ini").write_text(
        "[gpu_nodes]\n"
        "gpu01 ansible_host=10.9.0.11\n"
        "gpu02 ansible_host=gpu02.example.internal monitoring_listen_address=10.9.0.12\n"
        "[vllm_routers]\n"
        "router01 monitoring_address=127.0.0.3\n"
        "[monitoring]\n"
        "mon01\n"
        "[all:vars]\n"
        "vllm_server_host=0.0.0.0\nvllm_router_prometheus_host=0.0.0.0\n"
        f"ansible_connection=local\nansible_python_interpreter={os.sys.executable}\n")
    (tmp / "render.yml").write_text(f"""---
- name: Render what the monitoring role writes for listening
  hosts: all
  gather_facts: false
  vars_files:
    - {ROLE}/defaults/main.yml
    - {ROLE}/vars/main.yml
  tasks:
    - name: The flags files and drop-ins
      ansible.builtin.template:
        src: "{ROLE}/templates/{{{{ item }}}}"
        dest: "{tmp}/{{{{ inventory_hostname }}}}.{{{{ item }}}}"
        mode: "0644"
      loop: [node-exporter.default.j2, prometheus.default.j2, alertmanager.default.j2, grafana-admin-password.conf.j2,
             gpuserve-gpu-metrics.service.j2]
    - name: The scrape configuration
      ansible.builtin.copy:
        content: "{{{{ __monitoring_scrape | to_json }}}}"
        dest: "{tmp}/{{{{ inventory_hostname }}}}.scrape.json"
        mode: "0644"
""")
    (tmp / "vars.json").write_text(json.dumps({
        "monitoring_alertmanager": True, "monitoring_alertmanager_port": ports["alertmanager"],
        "monitoring_node_exporter_port": ports["node"], "monitoring_node_exporter_textfile_dir": str(tmp / "textfile"),
        "role_path": str(ROLE)}))
    result = subprocess.run(["ansible-playbook", "-i", str(tmp / "hosts.ini"), str(tmp / "render.yml"), "-e", f"@{tmp / 'vars.json'}"],
                            capture_output=True, text=True, cwd=REPO, timeout=180, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return tmp, ports


def test_exporters_listen_on_the_fleet_address(rendered) -> None:
    tmp, ports = rendered
    textfile = f"--collector.textfile.directory={tmp / 'textfile'}"
    assert {host: _args(tmp / f"{host}.node-exporter.default.j2") for host in ("gpu01", "gpu02", "router01")} == {
        "gpu01": [f"--web.listen-address=10.9.0.11:{ports['node']}", textfile],
        "gpu02": [f"--web.listen-address=10.9.0.12:{ports['node']}", textfile],
        "router01": [f"--web.listen-address=127.0.0.3:{ports['node']}", textfile]}
    # Prometheus scrapes each where it listens, not at the inventory's name; router01's address is a loopback one
    # (for the real node_exporter below), which Prometheus on mon01 could not reach: refused (main.yml's assert), named.
    scrape = json.loads((tmp / "mon01.scrape.json").read_text())
    assert scrape["problems"] == ["router01: its exporters listen on 127.0.0.3 (monitoring_listen_address), which Prometheus on "
                                  "mon01 cannot reach; set monitoring_listen_address to an address of the router host"]
    (node_job,) = [job for job in scrape["scrape_configs"] if job["job_name"] == "node"]
    assert {s["labels"]["instance"]: s["targets"][0] for s in node_job["static_configs"]} == {
        "gpu01": f"10.9.0.11:{ports['node']}", "gpu02": f"10.9.0.12:{ports['node']}"}


def test_prometheus_and_alertmanager_on_loopback_gossip_off(rendered) -> None:
    tmp, ports = rendered
    assert _args(tmp / "mon01.prometheus.default.j2") == ["--web.listen-address=127.0.0.1:9090", "--storage.tsdb.retention.time=15d"]
    assert _args(tmp / "mon01.alertmanager.default.j2") == [f"--web.listen-address=127.0.0.1:{ports['alertmanager']}",
                                                            "--cluster.listen-address="]


def test_grafana_reads_its_password_from_a_file(rendered) -> None:
    tmp, _ports = rendered
    assert "Environment=GF_SECURITY_ADMIN_PASSWORD=$__file{/etc/grafana/gpuserve-admin-password}" in \
        (tmp / "mon01.grafana-admin-password.conf.j2").read_text().splitlines()


def test_gpu_metrics_unit_is_hardened(rendered) -> None:
    tmp, _ports = rendered
    lines = (tmp / "gpu01.gpuserve-gpu-metrics.service.j2").read_text().splitlines()
    for wanted in ("ProtectSystem=strict", f"ReadWritePaths={tmp / 'textfile'}", "NoNewPrivileges=yes", "DevicePolicy=closed",
                   "DeviceAllow=char-nvidia rw", "CapabilityBoundingSet=", "IPAddressDeny=any", "RestrictAddressFamilies=AF_UNIX",
                   "SystemCallFilter=@system-service", "PrivateTmp=yes"):
        assert wanted in lines, wanted
    if shutil.which("systemd-analyze"):  # systemd's own reading of the unit: every directive known
        unit = tmp / "gpuserve-gpu-metrics.service"
        unit.write_text("\n".join(lines).replace("/usr/bin/python3 -I -B", "/bin/true") + "\n")
        check = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                               timeout=60, check=False)
        assert "Unknown key" not in check.stderr and "Invalid" not in check.stderr, check.stderr


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=2) as response:  # loopback only
        return response.read()


def _until(probe, what: str, seconds: float = 30):
    deadline, last = time.monotonic() + seconds, None
    while time.monotonic() < deadline:
        try:
            return probe()
        except OSError as exc:
            last = exc
            time.sleep(0.3)
    raise AssertionError(f"{what}: not within {seconds} s (last: {last!r})")


def test_real_alertmanager_with_the_rendered_flags_has_no_cluster(rendered) -> None:
    tmp, ports = rendered
    (tmp / "alertmanager.yml").write_text("route:\n  receiver: 'null'\nreceivers:\n  - name: 'null'\n")  # the role's default
    # Debian's Alertmanager opens its templates at /usr/share/prometheus/alertmanager: mounted there (a tmpfs over
    # /usr/share) in a mount namespace of its own, nothing installed on this machine.
    command = [str(alertmanager()), *_args(tmp / "mon01.alertmanager.default.j2"),
               f"--config.file={tmp / 'alertmanager.yml'}", f"--storage.path={tmp / 'am-data'}"]
    script = ('mount -t tmpfs none /usr/share && mkdir -p /usr/share/prometheus && cp -r "$0" /usr/share/prometheus/alertmanager'
              ' && exec timeout 60 "$@"')
    if subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("needs a mount namespace (unshare -m: root) for Debian's Alertmanager's templates")
    proc = subprocess.Popen(["unshare", "-m", "sh", "-c", script, str(alertmanager_share()), *command],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        status = json.loads(_until(lambda: _get(f"http://127.0.0.1:{ports['alertmanager']}/api/v2/status"), "Alertmanager's API"))
        assert status["cluster"]["status"] == "disabled", status["cluster"]
    finally:
        _stop(proc)


def test_real_node_exporter_listens_only_on_its_address(rendered) -> None:
    tmp, ports = rendered
    (tmp / "textfile").mkdir(exist_ok=True)
    (tmp / "textfile" / "gpuserve_test.prom").write_text("gpuserve_listen_test 1\n")
    proc = subprocess.Popen(["timeout", "60", str(node_exporter()), *_args(tmp / "router01.node-exporter.default.j2"),
                             "--collector.disable-defaults", "--collector.textfile"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        body = _until(lambda: _get(f"http://127.0.0.3:{ports['node']}/metrics"), "node_exporter on 127.0.0.3")
        assert b"\ngpuserve_listen_test 1\n" in body
        with pytest.raises(OSError):
            _get(f"http://127.0.0.1:{ports['node']}/metrics")
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server and `timeout` above it: their whole process group (a SIGKILL of `timeout`
    alone would leave the server running, orphaned)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
