"""An air-gapped router host (podman --network none) installs uv and vllm-router from a
wheelhouse the real playbooks/build_wheelhouse.yml built here from the package index.

In order: the build asks the host's interpreter its platform and fetches the router's sets; a
second build fetches nothing; the host installs from the wheelhouse alone, twice (no change the
second time); a pin the wheelhouse lacks, and a flipped byte, are refused before anything
changes on the host, naming the package or the file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "tests" / "support"))
import weights_fleet as wf  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")

HERE = Path(__file__).resolve().parent
HOST = "gpuserve-wheelhouse-it"
REMOTE = "/srv/wheelhouse"


def _play(ctx: dict[str, t.Any], playbook: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    started = time.monotonic()
    proc = subprocess.run(wf.playbook_argv(ctx["inventory"], playbook, *extra), capture_output=True, text=True,
                          env=wf.ansible_env(), timeout=600, check=False)
    print(f"\n[wheelhouse] {playbook.name} {' '.join(extra)}: rc {proc.returncode} in {time.monotonic() - started:.1f} s")
    return proc, dict(wf.task_results(proc.stdout).get(HOST, []))


def _in_host(command: str) -> subprocess.CompletedProcess:
    return wf.sh("podman", "exec", HOST, "bash", "-c", command, check=False)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> t.Iterator[dict[str, t.Any]]:
    if shutil.which("podman") is None:
        pytest.fail("needs podman (bash tests/containers/setup-host.sh)")
    if wf.sh("podman", "image", "exists", wf.BASE_IMAGE, check=False).returncode != 0:
        wf.sh("bash", str(REPO / "tests/containers/build-images.sh"), timeout=1200)
    work = tmp_path_factory.mktemp("wheelhouse")
    wf.sh("podman", "rm", "-f", HOST, check=False)
    wf.sh("podman", "run", "-d", "--name", HOST, "--network", "none", wf.BASE_IMAGE, "sleep", "infinity")
    inventory = work / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {"vllm_routers": {"hosts": {HOST: {
        "ansible_connection": "containers.podman.podman", "ansible_python_interpreter": "/usr/bin/python3",
        "vllm_router_start": False}}}}}}))
    yield {"inventory": inventory, "house": work / "wh"}
    wf.sh("podman", "rm", "-f", HOST, check=False)


def _build(ctx):
    return _play(ctx, REPO / "playbooks" / "build_wheelhouse.yml", "-e", f"gpuserve_wheelhouse_dir={ctx['house']}")


def test_build_fetches_the_router_sets_for_the_hosts_platform(ctx):
    proc, results = _build(ctx)
    assert proc.returncode == 0, proc.stdout[-3000:]
    built = next(r for name, r in results.items() if name.startswith("Build the wheelhouse"))
    assert sorted(s["name"] for s in built["sets"]) == ["uv", "vllm_router"]
    manifest = json.loads((ctx["house"] / "gpuserve-wheelhouse.json").read_text())
    assert manifest["platform"]["python"] == "3.11" and manifest["platform"]["glibc"] == "2.36"
    assert any(name.startswith("vllm_router-0.1.17-") for name in manifest["files"])
    subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=ctx["house"], check=True)
    print(f"[wheelhouse] {built['files']} files, {built['size_bytes'] / 2**20:.1f} MiB")


def test_a_second_build_fetches_nothing(ctx):
    proc, results = _build(ctx)
    built = next(r for name, r in results.items() if name.startswith("Build the wheelhouse"))
    assert proc.returncode == 0 and (built["changed"], built["fetched"]) == (False, [])


def test_the_air_gapped_host_installs_from_the_wheelhouse_alone_twice(ctx):
    assert _in_host("python3 -c 'import socket; socket.create_connection((\"pypi.org\", 443), 3)'").returncode != 0
    wf.sh("podman", "cp", str(ctx["house"]), f"{HOST}:{REMOTE}")
    _in_host(f"chown -R root:root {REMOTE} && chmod -R go-w {REMOTE}")
    proc = _play(ctx, HERE / "router_install.yml", "-e", f"vllm_router_wheelhouse={REMOTE}")[0]
    assert proc.returncode == 0, proc.stdout[-4000:]
    version = _in_host("/opt/vllm-router/bin/python -c 'import importlib.metadata as m; print(m.version(\"vllm-router\"))'")
    assert version.stdout.strip() == "0.1.17"
    again = _play(ctx, HERE / "router_install.yml", "-e", f"vllm_router_wheelhouse={REMOTE}")[0]
    assert again.returncode == 0 and wf.recap(again.stdout)[HOST]["changed"] == 0


def test_a_pin_the_wheelhouse_lacks_is_refused_before_anything_changes(ctx):
    proc, results = _play(ctx, HERE / "router_install.yml", "-e", f"vllm_router_wheelhouse={REMOTE}",
                          "-e", "vllm_router_version=0.1.99", "-e", "vllm_router_dir=/opt/vllm-router-next",
                          "-e", "vllm_router_tools_dir=/opt/vllm-router-tools-next")
    assert proc.returncode != 0
    failed = [r["msg"] for r in results.values() if r.get("failed")]
    assert failed and "no wheel of vllm-router==0.1.99" in failed[0] and REMOTE in failed[0]
    assert _in_host("ls -d /opt/vllm-router-next /opt/vllm-router-tools-next").returncode != 0


def test_a_flipped_byte_is_refused_before_anything_changes(ctx):
    wheel = _in_host(f"ls {REMOTE}/vllm_router-*.whl").stdout.strip()
    _in_host(f"printf 'X' | dd of={wheel} bs=1 seek=100 conv=notrunc status=none")
    proc, results = _play(ctx, HERE / "router_install.yml", "-e", f"vllm_router_wheelhouse={REMOTE}",
                          "-e", "vllm_router_dir=/opt/vllm-router-next")
    failed = [r["msg"] for r in results.values() if r.get("failed")]
    assert proc.returncode != 0 and failed and f"{Path(wheel).name}: sha256 differs" in failed[0]
    assert _in_host("ls -d /opt/vllm-router-next").returncode != 0
