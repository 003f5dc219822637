#!/usr/bin/env bash
# Make this Debian 12 host able to run molecule's podman scenarios (rootful, no registry).
# Idempotent: installs only what is missing, rewrites containers.conf only when it differs.
# Each setting below answers a failure measured on these hosts (../shared/reference/containers.md).
set -euo pipefail

# strace: the python_patch crash test kills the module at each rename/unlink (strace -e inject).
# rsync: the weights staging tests resume real transfers (gpuserve.vllm.vllm_weights).
# openssh-client: Ansible reaches the weights hosts and molecule/fleet's nodes over SSH.
# make: molecule/gpu_node builds the nccl-tests double with it on a node that has none (copied there).
packages=(podman runc catatonit netavark aardvark-dns iptables debootstrap strace rsync openssh-client make)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "[setup-host] installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# crun refuses the hybrid cgroup layout; podman's default nofile exceeds the hard limit here.
nofile="$(ulimit -Hn)"
[ "$nofile" = unlimited ] && nofile=1048576
want="$(cat <<CONF
# Written by gpuserve.vllm tests/containers/setup-host.sh
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
)"
conf=/etc/containers/containers.conf
if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
  mkdir -p /etc/containers
  printf '%s\n' "$want" >"$conf"
  echo "[setup-host] wrote $conf"
fi
podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}}' >/dev/null

# The molecule scenarios that need no package index run on this network: internal (no route out),
# reachable from this host (SSH). Their molecule.yml names it in extra_opts, not as `network`, so
# molecule's destroy does not delete it and its create does not make an ordinary one instead.
airgap=gpuserve-molecule-airgap
if ! podman network exists "$airgap"; then
  podman network create --internal "$airgap" >/dev/null
  echo "[setup-host] created the internal podman network $airgap"
elif [ "$(podman network inspect --format '{{.Internal}}' "$airgap")" != true ]; then
  echo "[setup-host] podman network $airgap exists and is not internal: podman network rm $airgap, then run this again" >&2
  exit 1
fi
echo "[setup-host] podman ready: $(podman --version)"
