"""Grafana asked for on an air-gapped host (an internal podman network: no route out) whose apt
sources are Debian's: gpuserve.vllm.apt_lists refreshes the lists (the package has no candidate),
apt-get update reaches none of the sources and exits 0, and the role refuses Grafana by name,
naming the sources it could not fetch, before anything of Grafana is installed. Reached over SSH
with pipelining, as a monitoring host is.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "tests" / "support"))
import weights_fleet as wf  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")

PREFIX = "gpuserve-grafana-it"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> t.Iterator[tuple[wf.Fleet, Path]]:
    if shutil.which("podman") is None:
        pytest.fail("needs podman (bash tests/containers/setup-host.sh)")
    work = tmp_path_factory.mktemp("grafana")
    fleet = wf.Fleet(PREFIX, ["mon"], work)
    fleet.create(internal=True)
    # A password (TEST ONLY): without one the role refuses first (the test below).
    yield fleet, fleet.inventory(work / "inventory.json", group="monitoring",
                                 group_vars={"monitoring_grafana": True, "monitoring_grafana_admin_password": "test-only"})
    fleet.destroy()


def test_grafana_without_an_admin_password_is_refused_naming_the_variable(host: tuple[wf.Fleet, Path]) -> None:
    """Grafana would start with admin/admin: refused before anything of it is installed."""
    fleet, inventory = host
    proc = subprocess.run(wf.playbook_argv(inventory, Path(__file__).with_name("grafana.yml"))
                          + ["-e", "monitoring_grafana_admin_password="], capture_output=True,
                          text=True, env=wf.ansible_env(), timeout=300, check=False)
    results = dict(wf.task_results(proc.stdout)[fleet.host("mon")])
    refusal = next(r for name, r in results.items() if name.startswith("Grafana -- refuse without an admin password"))
    assert proc.returncode != 0 and refusal.get("failed"), proc.stdout[-3000:]
    assert "monitoring_grafana_admin_password is empty" in refusal["msg"], refusal["msg"]
    assert not any(name.startswith("Grafana -- is its package available") for name in results)
    assert fleet.exec(fleet.host("mon"), "dpkg-query -W grafana", check=False).returncode != 0


def test_grafana_without_a_reachable_source_is_refused_naming_it(host: tuple[wf.Fleet, Path]) -> None:
    fleet, inventory = host
    proc = subprocess.run(wf.playbook_argv(inventory, Path(__file__).with_name("grafana.yml")), capture_output=True,
                          text=True, env=wf.ansible_env(), timeout=300, check=False)
    results = dict(wf.task_results(proc.stdout)[fleet.host("mon")])
    lists = next(r for name, r in results.items() if name.startswith("Grafana -- is its package available"))
    refusal = next(r for name, r in results.items() if name.startswith("Grafana -- refuse without a candidate"))
    assert proc.returncode != 0 and refusal.get("failed"), proc.stdout[-3000:]
    assert lists["refreshed"] and not lists["changed"] and lists["without_candidate"] == ["grafana"], lists
    assert lists["fetch_failures"] and all(f.startswith("http://deb.debian.org/debian") for f in lists["fetch_failures"]), lists
    for fragment in (f"Nothing of Grafana was installed on {fleet.host('mon')}", "its apt sources offer no package 'grafana'",
                     "apt-get update could not fetch http://deb.debian.org/debian bookworm",
                     "configure Grafana's apt repository"):
        assert fragment in refusal["msg"], refusal["msg"]
    assert fleet.exec(fleet.host("mon"), "dpkg-query -W grafana", check=False).returncode != 0
