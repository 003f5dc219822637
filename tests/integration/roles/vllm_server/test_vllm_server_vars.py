"""The vllm_server role's derived variables, evaluated by Ansible itself (ansible-playbook on
localhost with roles/vllm_server/vars/main.yml), against the tested Python behind them.

The role once had its own YAML loopback test that disagreed with `is_loopback()` ([::1],
LOCALHOST and ip6-localhost counted as exposed); now both are one implementation, and this
test fails if the role's variable stops using it. Needs tests/env.sh.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._net import is_loopback
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._ranges import range_problems

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")

ROLE = Path(__file__).resolve().parents[4] / "roles" / "vllm_server"
HOSTS = ["127.0.0.1", "127.0.1.1", "localhost", "LOCALHOST", "::1", "[::1]", "ip6-localhost",
         "0.0.0.0", "::", "", "10.1.2.3", "gpu01.example", "fe80::1"]
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars_files: [{role}/defaults/main.yml, {role}/vars/main.yml]
  tasks:
    - name: Evaluate the role's derived variables per host
      ansible.builtin.debug:
        msg: "{{{{ {{'loopback': __vllm_server_loopback | bool, 'url': __vllm_server_base_url}} }}}}"
      vars:
        vllm_server_host: "{{{{ item }}}}"
      loop: {hosts}
    - name: Evaluate the range problems of bad numbers
      ansible.builtin.debug:
        msg: "{{{{ __vllm_server_range_problems }}}}"
      vars:
        vllm_server_port: 99999
        vllm_server_tensor_parallel_size: 0
        vllm_server_gpu_memory_utilization: 1.5
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    play = tmp_path_factory.mktemp("vars") / "play.yml"
    play.write_text(PLAYBOOK.format(role=ROLE, hosts=json.dumps(HOSTS)))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(play)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    return [task["hosts"]["localhost"] for task in tasks]


def test_role_loopback_is_the_python_one(results: list[dict]) -> None:
    got = {r["item"]: r["msg"]["loopback"] for r in results[0]["results"]}
    assert got == {host: is_loopback(host) for host in HOSTS}


@pytest.mark.parametrize("host, url", [("[::1]", "http://[::1]:8000"), ("::1", "http://[::1]:8000"),
                                       ("0.0.0.0", "http://127.0.0.1:8000"), ("", "http://127.0.0.1:8000")])
def test_role_client_url(results: list[dict], host: str, url: str) -> None:
    got = {r["item"]: r["msg"]["url"] for r in results[0]["results"]}
    assert got[host] == url


def test_role_range_problems_are_the_python_ones(results: list[dict]) -> None:
    # the drafter's size defaults to the target's, so it is refused with it
    expected = range_problems({"vllm_server_port": 99999, "vllm_server_tensor_parallel_size": 0,
                               "vllm_server_draft_tensor_parallel_size": 0,
                               "vllm_server_gpu_memory_utilization": 1.5})
    assert results[1]["msg"] == expected and len(expected) == 4
