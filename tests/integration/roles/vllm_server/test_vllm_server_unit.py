"""The units as the roles render them (ansible-playbook on localhost with the roles' defaults and
vars), judged by systemd itself: `systemd-analyze security --offline=true` prints the exposure
(at most 5.0 for vllm.service, issue 20; the router's unit keeps its level), and a directive
that would break the GPUs is refused before anything is rendered. The same figure for the unit
installed on a real systemd node: molecule/vllm_server (verify_boundary.yml). Needs tests/env.sh.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                       reason="needs ansible-playbook (source tests/env.sh)"),
    pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                       reason="needs systemd-analyze (systemd >= 250 for --offline)"),
]

ROLES = Path(__file__).resolve().parents[4] / "roles"
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars_files:
    - {roles}/vllm_server/defaults/main.yml
    - {roles}/vllm_server/vars/main.yml
    - {roles}/vllm_router/defaults/main.yml
    - {roles}/vllm_router/vars/main.yml
  tasks:
    - name: Render vllm.service with the role's defaults
      ansible.builtin.template:
        src: {roles}/vllm_server/templates/vllm.service.j2
        dest: {out}/vllm.service
        mode: "0644"
    - name: Render the router's unit with its defaults
      ansible.builtin.template:
        src: {roles}/vllm_router/templates/vllm-router.service.j2
        dest: {out}/vllm-router.service
        mode: "0644"
    - name: Render the router's unit with an operator's directive
      ansible.builtin.template:
        src: {roles}/vllm_router/templates/vllm-router.service.j2
        dest: {out}/router-extra/vllm-router.service
        mode: "0644"
      vars:
        vllm_router_unit_extra: {{CPUQuota: 200%, IPAddressDeny: any, IPAddressAllow: [localhost, 10.0.0.0/8]}}
    - name: Render vllm.service with a directive that hides the GPUs
      block:
        - name: Render it
          ansible.builtin.template:
            src: {roles}/vllm_server/templates/vllm.service.j2
            dest: {out}/refused/vllm.service
            mode: "0644"
          vars:
            vllm_server_unit_extra: {{PrivateDevices: true}}
      rescue:
        - name: Keep the refusal
          ansible.builtin.debug:
            msg: "{{{{ ansible_failed_result.msg }}}}"
"""


def _exposure(unit: Path) -> float:
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
                          capture_output=True, text=True, check=False)
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", proc.stdout + proc.stderr)
    assert found, proc.stdout[-2000:] + proc.stderr[-2000:]
    return float(found.group(1))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("units")
    (out / "router-extra").mkdir()
    (out / "refused").mkdir()
    play = out / "play.yml"
    play.write_text(PLAYBOOK.format(roles=ROLES, out=out))
    extra = json.dumps({"vllm_router_api_key": "", "ansible_python_interpreter": sys.executable})
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    cmd = ["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", extra, str(play)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, json.loads(proc.stdout)["plays"][0]["tasks"]


def test_vllm_service_exposure_is_at_most_5(rendered: tuple[Path, list[dict]]) -> None:
    out, _tasks = rendered
    exposure = _exposure(out / "vllm.service")
    print("systemd-analyze security vllm.service (as rendered, offline): %.1f" % exposure)
    assert exposure <= 5.0


def test_the_unit_keeps_what_the_gpus_need(rendered: tuple[Path, list[dict]]) -> None:
    text = (rendered[0] / "vllm.service").read_text()
    lines = set(text.splitlines())
    assert {"NoNewPrivileges=yes", "ProtectSystem=strict", "LimitMEMLOCK=infinity",
            "ReadWritePaths=/var/lib/vllm /var/cache/vllm", "CapabilityBoundingSet=",
            "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK"} <= lines
    for absent in ("PrivateDevices=", "DevicePolicy=", "DeviceAllow=", "MemoryDenyWriteExecute=",
                   "PrivateIPC=", "ProcSubset=pid"):
        assert not any(line.startswith(absent) for line in lines), absent
    assert "ExecStartPre=-+/bin/sh -c 'if [ -x /usr/bin/nvidia-modprobe ]" in text


def test_the_routers_unit_keeps_its_level(rendered: tuple[Path, list[dict]]) -> None:
    out, _tasks = rendered
    plain, extra = _exposure(out / "vllm-router.service"), _exposure(out / "router-extra" / "vllm-router.service")
    print("systemd-analyze security vllm-router.service (offline): %.1f, with "
          "vllm_router_unit_extra (IPAddressDeny=any ...): %.1f" % (plain, extra))
    assert plain <= 3.2 and extra <= plain  # 3.2: the router's unit before issue 20
    text = (out / "router-extra" / "vllm-router.service").read_text()
    assert "PrivateDevices=true\n" in text and "IPAddressAllow=localhost\nIPAddressAllow=10.0.0.0/8\n" in text


def test_a_directive_that_hides_the_gpus_is_refused(rendered: tuple[Path, list[dict]]) -> None:
    out, tasks = rendered
    msg = tasks[-1]["hosts"]["localhost"]["msg"]
    assert "vllm_server_unit_extra: refused, this would break vLLM on its GPUs" in msg, msg
    assert "PrivateDevices=yes gives vLLM a /dev without /dev/nvidia*" in msg
    assert not (out / "refused" / "vllm.service").exists()
