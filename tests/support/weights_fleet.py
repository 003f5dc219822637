"""A staging host and nodes in podman for the vllm_weights role (tests and benchmarks).

Each host is a plain container of the test image (tests/containers/build-images.sh) with rsync,
openssh-server (sshd started as the container's process, host keys generated at start) and
iproute2 added once into a derived image, on one podman network, so the hosts reach each
other's sshd at their addresses, as nodes do on a cluster network. Ansible reaches them the way
it reaches a fleet: SSH as root with a key made for the run and pipelining (ansible.cfg), one
round trip per task (the containers.podman connection needs four or more per task).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import time
import typing as t
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "localhost/gpuserve-debian12:latest"
NODE_IMAGE = "localhost/gpuserve-weights-node:latest"
PACKAGES = "rsync openssh-server openssh-client iproute2"
START = "ssh-keygen -A >/dev/null && mkdir -p /run/sshd && /usr/sbin/sshd && exec sleep infinity"


def sh(*argv: str, check: bool = True, timeout: float = 600, **kw: t.Any) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout, **kw)


def _recipe() -> str:
    base_id = sh("podman", "image", "inspect", "--format", "{{.Id}}", BASE_IMAGE).stdout.strip()
    return hashlib.sha256(f"{base_id} {PACKAGES}".encode()).hexdigest()[:16]


def ensure_image() -> str:
    """The node image, built once from the test base image (about 30 s); reused while it matches."""
    if sh("podman", "image", "exists", BASE_IMAGE, check=False).returncode != 0:
        sh("bash", str(REPO / "tests/containers/build-images.sh"), timeout=1200)
    recipe = _recipe()
    label = sh("podman", "image", "inspect", "--format", '{{ index .Labels "io.gpuserve.recipe" }}',
               NODE_IMAGE, check=False).stdout.strip()
    if label == recipe:
        return NODE_IMAGE
    builder = "gpuserve-weights-image-build"
    sh("podman", "rm", "-f", builder, check=False)
    sh("podman", "run", "--name", builder, BASE_IMAGE, "bash", "-c",
       "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
       f"apt-get install -y -qq --no-install-recommends {PACKAGES} >/dev/null; "
       "rm -f /etc/ssh/ssh_host_*; apt-get clean; rm -rf /var/lib/apt/lists/*; "
       "touch -d 2000-01-01 /var/lib/apt/lists", timeout=900)
    sh("podman", "commit", "--change", f"LABEL io.gpuserve.recipe={recipe}", builder, NODE_IMAGE)
    sh("podman", "rm", "-f", builder, check=False)
    return NODE_IMAGE


class Fleet:
    """Containers `<prefix>-<name>` on network `<prefix>-net`; removed by destroy()."""

    def __init__(self, prefix: str, names: t.Sequence[str], workdir: Path) -> None:
        self.prefix, self.names = prefix, list(names)
        self.network = f"{prefix}-net"
        self.key = workdir / "ansible_ed25519"
        self.addresses: dict[str, str] = {}

    def host(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    @property
    def hosts(self) -> list[str]:
        return [self.host(n) for n in self.names]

    def create(self, extra: t.Mapping[str, t.Sequence[str]] | None = None, internal: bool = False) -> None:
        """Start every host; extra: name -> more `podman run` options (mounts, capabilities);
        internal: the network has no route out (air-gapped hosts, still reached over SSH from here)."""
        image = ensure_image()
        self.destroy()
        sh("podman", "network", "create", *(["--internal"] if internal else []), self.network)
        for name in self.names:
            sh("podman", "run", "-d", "--init", "--name", self.host(name), "--hostname", self.host(name),
               "--network", self.network, *(extra or {}).get(name, ()), image, "bash", "-c", START)
        if not self.key.exists():
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.prefix}-ansible", "-f", str(self.key))
        public = self.key.with_suffix(".pub").read_text().strip()
        for host in self.hosts:  # sshd is up once its host keys exist and it listens
            deadline = time.monotonic() + 30
            while self.exec(host, "test -s /etc/ssh/ssh_host_ed25519_key.pub && test -e /run/sshd.pid",
                            check=False).returncode != 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{host}: sshd did not start")
                time.sleep(0.2)
            self.exec(host, f"install -d -m 0700 /root/.ssh && echo {shlex.quote(public)} >> /root/.ssh/authorized_keys")
            self.addresses[host] = sh("podman", "inspect", "--format",
                                      f"{{{{ (index .NetworkSettings.Networks \"{self.network}\").IPAddress }}}}",
                                      host).stdout.strip()

    def destroy(self) -> None:
        for host in self.hosts:
            sh("podman", "rm", "-f", "-t", "0", host, check=False)
        sh("podman", "network", "rm", "-f", self.network, check=False)

    def exec(self, host: str, command: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        return sh("podman", "exec", host, "bash", "-c", command, check=check, timeout=timeout)

    def copy_in(self, host: str, local: Path, remote: str) -> None:
        self.exec(host, f"mkdir -p {shlex.quote(os.path.dirname(remote.rstrip('/')))}")
        sh("podman", "cp", str(local), f"{host}:{remote}")

    def inventory(self, path: Path, hostvars: t.Mapping[str, t.Mapping[str, t.Any]] | None = None,
                  group_vars: t.Mapping[str, t.Any] | None = None, group: str = "weights_fleet") -> Path:
        hosts = {self.host(n): {"ansible_host": self.addresses[self.host(n)], **(hostvars or {}).get(n, {})}
                 for n in self.names}
        data = {"all": {"children": {group: {"hosts": hosts}},
                        "vars": {"ansible_connection": "ssh", "ansible_user": "root",
                                 "ansible_ssh_private_key_file": str(self.key),
                                 # throwaway containers: their host keys are new every run
                                 "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                                 "ansible_python_interpreter": "/usr/bin/python3",
                                 **(group_vars or {})}}}
        path.write_text(json.dumps(data, indent=1))
        return path


def ansible_env() -> dict[str, str]:
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
                ANSIBLE_HOST_KEY_CHECKING="false", ANSIBLE_RETRY_FILES_ENABLED="false",
                ANSIBLE_DEPRECATION_WARNINGS="false")


def playbook_argv(inventory: Path, playbook: Path, *extra: str) -> list[str]:
    return ["ansible-playbook", "-i", str(inventory), str(playbook), *extra]


def task_results(stdout: str) -> dict[str, list[tuple[str, dict[str, t.Any]]]]:
    """Host -> [(task name, result)] from the json callback's output."""
    data = json.loads(stdout[stdout.index("{"):])
    out: dict[str, list[tuple[str, dict[str, t.Any]]]] = {}
    for play in data["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                name = task["task"]["name"].split(" : ", 1)[-1]  # without the "role : " prefix
                out.setdefault(host, []).append((name, result))
    return out


def recap(stdout: str) -> dict[str, dict[str, int]]:
    return json.loads(stdout[stdout.index("{"):])["stats"]
