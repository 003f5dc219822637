"""The fleet's end state after its life (molecule/fleet verify), read with pytest-testinfra.

Run by life/11_end_state.yml as
    pytest molecule/fleet/tests --hosts=podman://gpuserve-fleet-node1,...,podman://gpuserve-fleet-router
Each node serves from the env its link names, as the service user, with no journal left and the
state files root's alone; the router runs as its own user, unchanged by the fleet's growth, with
every node in workers.env and in its live worker list, healthy.
"""

from __future__ import annotations

import json

import pytest

ROUTER = "gpuserve-fleet-router"


def is_router(host) -> bool:
    return host.backend.get_hostname() == ROUTER


@pytest.fixture()
def node(host):
    if is_router(host):
        pytest.skip("a GPU node check")
    return host


@pytest.fixture()
def router(host):
    if not is_router(host):
        pytest.skip("a router check")
    return host


def test_vllm_serves_as_the_service_user_from_the_linked_env(node):
    service = node.service("vllm.service")
    assert service.is_running and service.is_enabled
    pid = node.check_output("systemctl show vllm.service -p MainPID --value")
    assert node.check_output(f"stat -c %U /proc/{pid}").strip() == "vllm"
    argv0 = node.file(f"/proc/{pid}/cmdline").content.split(b"\0")[0].decode()
    link = node.file("/opt/ml-env")
    assert link.is_symlink and link.linked_to.startswith("/opt/ml-env.d/vllm-")
    assert argv0 == link.linked_to + "/bin/python"  # the process runs the env the link names


def test_no_journal_left_and_state_files_are_roots(node):
    assert not node.file("/var/lib/gpuserve/vllm_server.plan.json").exists
    state = node.file("/var/lib/gpuserve")
    assert state.user == "root" and state.mode & 0o022 == 0
    hold = node.file("/var/lib/gpuserve/vllm_server.rollback.json")
    if hold.exists:
        assert hold.user == "root" and hold.mode == 0o600
        assert json.loads(hold.content_string)["to"] == node.file("/opt/ml-env").linked_to
    switches = node.file("/var/lib/gpuserve/vllm_server.switch.json")
    if switches.exists:  # what a rollback undoes: root's alone, each switch from, to, at
        assert switches.user == "root" and switches.mode == 0o600
        assert all({"from", "to", "at", "rollback"} <= set(s) for s in json.loads(switches.content_string)["switches"])


def test_previous_names_a_built_env(node):
    previous = node.file("/opt/ml-env.previous")
    assert previous.is_symlink
    assert node.file(previous.linked_to + "/bin/vllm").exists


def test_no_canary_is_left_running(node):
    assert not node.service("vllm-canary.service").is_running


def test_the_router_runs_unprivileged_with_every_node(router):
    assert router.service("vllm-router.service").is_running
    pid = router.check_output("systemctl show vllm-router.service -p MainPID --value")
    assert router.check_output(f"stat -c %U /proc/{pid}").strip() == "vllm-router"
    workers_env = router.file("/etc/vllm-router/workers.env").content_string
    nodes = [f"http://gpuserve-fleet-node{i}:8000" for i in range(1, 4)]
    assert all(url in workers_env for url in nodes)
    assert "gpuserve-fleet-node" not in router.file("/etc/systemd/system/vllm-router.service").content_string
    live = json.loads(router.check_output(
        "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:30000/workers').read().decode())\""))
    assert sorted(w["url"] for w in live["workers"] if w["is_healthy"]) == nodes
