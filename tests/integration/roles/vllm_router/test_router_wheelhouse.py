"""An air-gapped router host (an internal podman network: no route out) gets uv and vllm-router from a wheelhouse
the real playbooks/build_wheelhouse.yml built here from the package index, pushed to it by
site.yml itself (gpuserve_wheelhouse_source: the wheelhouse role in the routers' play).

In order: the build asks the host's interpreter its platform and fetches the router's sets; a
second build fetches nothing, nor does one killed mid-download leave a manifest, and the next
completes it; site.yml refuses a source folder that is no built wheelhouse before
the host changes; a push killed after its first wheel leaves a folder the install refuses, and the
next run completes it and installs from the wheelhouse alone (hashes required); a third run
changes nothing; a wheel the manifest no longer lists is removed and a changed byte on the host
repaired by the next push; a pin the wheelhouse lacks, and a flipped byte, are refused by the
install itself before anything changes on the host, naming the package or the file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
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
SITE = REPO / "playbooks" / "site.yml"
PREFIX = "gpuserve-wheelhouse-it"
HOST = f"{PREFIX}-router"
REMOTE = "/srv/wheelhouse"


def _play(ctx: dict[str, t.Any], playbook: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    started = time.monotonic()
    proc = subprocess.run(wf.playbook_argv(ctx["inventory"], playbook, *extra), capture_output=True, text=True,
                          env=wf.ansible_env(), timeout=600, check=False)
    print(f"\n[wheelhouse] {playbook.name} {' '.join(extra)}: rc {proc.returncode} in {time.monotonic() - started:.1f} s")
    return proc, dict(wf.task_results(proc.stdout).get(HOST, []))


def _site(ctx: dict[str, t.Any], source: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """site.yml's routers play, as an operator runs it for the routers alone."""
    return _play(ctx, SITE, "--tags", "vllm_router", "-e", f"gpuserve_wheelhouse_source={source}", *extra)


def _in_host(command: str) -> subprocess.CompletedProcess:
    return wf.sh("podman", "exec", HOST, "bash", "-c", command, check=False)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> t.Iterator[dict[str, t.Any]]:
    if shutil.which("podman") is None:
        pytest.fail("needs podman (bash tests/containers/setup-host.sh)")
    work = tmp_path_factory.mktemp("wheelhouse")
    # Reached over SSH with pipelining, as a router host is; its network is internal (no route out).
    fleet = wf.Fleet(PREFIX, ["router"], work)
    fleet.create(internal=True)
    inventory = fleet.inventory(work / "inventory.json", group="vllm_routers", group_vars={
        # No systemd in this container: the router is installed and configured, not started.
        "vllm_router_start": False, "vllm_router_validate_unit": False,
        "vllm_router_worker_urls": ["http://127.0.0.1:8000"], "vllm_router_wheelhouse": REMOTE})
    yield {"inventory": inventory, "house": work / "wh"}
    fleet.destroy()


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


def test_a_build_killed_mid_download_is_completed_by_the_next(ctx, tmp_path):
    """The builder (and pip under it) killed as soon as its first wheel lands: no manifest is
    left to push from, and the next build fetches only what is missing."""
    house = tmp_path / "killed"
    argv = wf.playbook_argv(ctx["inventory"], REPO / "playbooks" / "build_wheelhouse.yml",
                            "-e", f"gpuserve_wheelhouse_dir={house}")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=wf.ansible_env())
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and not list(house.glob("*.whl")):
        time.sleep(0.05)
    _kill_tree(proc.pid)
    proc.wait(timeout=60)
    present = {p.name for p in house.glob("*.whl")}
    print(f"[wheelhouse] build killed with {len(present)} wheel(s) in {house.name}")
    assert present and not (house / "gpuserve-wheelhouse.json").exists(), sorted(house.iterdir())

    proc, results = _play(ctx, REPO / "playbooks" / "build_wheelhouse.yml", "-e", f"gpuserve_wheelhouse_dir={house}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    built = next(r for name, r in results.items() if name.startswith("Build the wheelhouse"))
    listed = json.loads((house / "gpuserve-wheelhouse.json").read_text())["files"]
    assert set(built["fetched"]) == set(listed) - present
    subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=house, check=True)


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant. Killing ansible-playbook's group is not enough:
    each worker runs in a session of its own (os.setsid) and goes on with its task's loop."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    for member in reversed(tree):
        try:
            os.kill(member, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _listing() -> str:
    return _in_host(f"ls -la --time-style=+%s {REMOTE} /opt 2>&1").stdout


@pytest.mark.parametrize(("spoil", "says"), [
    (lambda house: [p.unlink() for p in house.iterdir()], "has no gpuserve-wheelhouse.json and SHA256SUMS"),
    (lambda house: (house / "gpuserve-wheelhouse.json").write_text('{"format": 9}'), "not a format-1"),
    (lambda house: next(house.glob("vllm_router-*.whl")).unlink(), "the manifest lists wheels the folder lacks: vllm_router-0.1.17-"),
])
def test_site_refuses_a_source_that_is_no_built_wheelhouse(ctx, spoil, says, tmp_path):
    spoiled = tmp_path / "spoiled"
    shutil.copytree(ctx["house"], spoiled)
    spoil(spoiled)
    before = _listing()
    proc, results = _site(ctx, spoiled)
    failed = [r["msg"] for r in results.values() if r.get("failed")]
    assert proc.returncode != 0 and failed, proc.stdout[-3000:]
    assert f"wheelhouse_source {spoiled}" in failed[0] and says in failed[0] and "Nothing was changed" in failed[0]
    assert _listing() == before


def test_a_push_killed_after_its_first_wheel_is_refused_then_completed(ctx):
    """ansible-playbook and its workers killed (SIGKILL) as soon as the first wheel is on the host."""
    argv = wf.playbook_argv(ctx["inventory"], SITE, "--tags", "vllm_router", "-e",
                            f"gpuserve_wheelhouse_source={ctx['house']}")
    env = dict(wf.ansible_env(), ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_FORCE_COLOR="false")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen, in_copy = [], False
    try:
        for line in proc.stdout:
            seen.append(line)
            in_copy = in_copy or line.startswith("TASK [gpuserve.vllm.wheelhouse : Copy the wheels")
            if in_copy and "(item=" in line:
                _kill_tree(proc.pid)
                break
    finally:
        proc.wait(timeout=60)
    assert in_copy, "".join(seen[-40:])
    on_host = _in_host(f"ls {REMOTE}").stdout.split()
    assert len([n for n in on_host if n.endswith(".whl")]) == 1 and "gpuserve-wheelhouse.json" not in on_host, on_host

    # What the push left is never installed from: the install's own check refuses it.
    refused, results = _play(ctx, HERE / "router_install.yml", "-e", f"vllm_router_wheelhouse={REMOTE}")
    failed = [r["msg"] for r in results.values() if r.get("failed")]
    assert refused.returncode != 0 and failed and "gpuserve-wheelhouse.json does not exist" in failed[0]
    assert _in_host("ls -d /opt/vllm-router").returncode != 0

    done, results = _site(ctx, ctx["house"])
    assert done.returncode == 0, done.stdout[-4000:]
    copied = [r["item"] for r in results["Copy the wheels that are new or differ, then SHA256SUMS and the manifest"]["results"]]
    listed = json.loads((ctx["house"] / "gpuserve-wheelhouse.json").read_text())["files"]
    first = next(n for n in on_host if n.endswith(".whl"))
    assert copied == sorted(set(listed) - {first}) + ["SHA256SUMS", "gpuserve-wheelhouse.json"]  # the first was there
    for task in ("Install the pinned uv", "Install (a dry run in check mode) vllm-router==0.1.17"):
        assert {"--require-hashes", "--no-index", "--no-deps"} <= set(results[task]["cmd"]), task
    version = _in_host("/opt/vllm-router/bin/python -c 'import importlib.metadata as m; print(m.version(\"vllm-router\"))'")
    assert version.stdout.strip() == "0.1.17"


def test_the_air_gapped_host_converges_from_the_wheelhouse_alone_a_second_run_changes_nothing(ctx):
    assert _in_host("python3 -c 'import socket; socket.create_connection((\"pypi.org\", 443), 3)'").returncode != 0
    again = _site(ctx, ctx["house"])[0]
    assert again.returncode == 0 and wf.recap(again.stdout)[HOST]["changed"] == 0, again.stdout[-3000:]


def test_the_next_push_removes_an_unlisted_wheel_repairs_a_changed_byte_and_a_loose_mode(ctx):
    wheel = _in_host(f"ls {REMOTE}/vllm_router-*.whl").stdout.strip()
    loose = _in_host(f"ls {REMOTE}/uv-*.whl").stdout.strip()
    _in_host(f"cp {wheel} {REMOTE}/stale_pkg-1.0-py3-none-any.whl && chmod 0666 {loose} && "
             f"printf 'X' | dd of={wheel} bs=1 seek=100 conv=notrunc status=none")
    proc, results = _site(ctx, ctx["house"])
    assert proc.returncode == 0, proc.stdout[-3000:]
    copied = results["Copy the wheels that are new or differ, then SHA256SUMS and the manifest"]["results"]
    assert [r["item"] for r in copied] == [Path(wheel).name] and all(r["changed"] for r in copied)
    given_back = results["Give back to root, 0644, any file of the wheelhouse that is not"]["results"]
    assert [r["item"]["path"] for r in given_back if r["changed"]] == [loose]
    removed = results["Remove the wheels no set lists any more (pip would see them)"]["results"]
    assert [r["item"]["path"] for r in removed if r["changed"]] == [f"{REMOTE}/stale_pkg-1.0-py3-none-any.whl"]
    assert _in_host(f"cd {REMOTE} && sha256sum --quiet -c SHA256SUMS").returncode == 0


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
