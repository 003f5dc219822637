#!/usr/bin/env bash
# Build the local test images (no registry is reachable here), once; later runs reuse them.
#   localhost/gpuserve-debian12:latest          Debian 12 minbase + python3, python3-apt, sudo, venv,
#       and zipimport_cache.py (root's Ansible modules compile their payload's files once)
#   localhost/gpuserve-debian12-systemd:latest  the same with systemd as PID 1
#   localhost/gpuserve-debian12-sshd:latest     the same with sshd: every molecule scenario's
#       containers, which Ansible reaches over SSH with pipelining (one round trip per task; the
#       podman connection needs four), as a real fleet is reached (molecule/shared/ssh.yml)
# Images carry a label with a hash of this script and of the host's extra CA certificates: a
# change to either rebuilds them. GPUSERVE_REBUILD_IMAGES=1 forces a rebuild.
# Facts behind each step: ../shared/reference/containers.md.
set -euo pipefail
# One build at a time: tests/run.sh builds them in its second lane while the first one's steps that
# need them wait here, then reuse them.
exec 9>"${TMPDIR:-/tmp}/gpuserve-build-images.lock"
flock 9

base=localhost/gpuserve-debian12:latest
systemd_image=localhost/gpuserve-debian12-systemd:latest
sshd_image=localhost/gpuserve-debian12-sshd:latest
rebuild="${GPUSERVE_REBUILD_IMAGES:-0}"
host_cas=(/usr/local/share/ca-certificates/*.crt)
[ -e "${host_cas[0]}" ] || host_cas=()
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
recipe="$(cat "${BASH_SOURCE[0]}" "$here/zipimport_cache.py" "${host_cas[@]}" | sha256sum | cut -c1-16)"
label="LABEL io.gpuserve.recipe=$recipe"

have() {
  [ "$rebuild" != 1 ] && podman image exists "$1" &&
    [ "$(podman image inspect --format '{{ index .Labels "io.gpuserve.recipe" }}' "$1")" = "$recipe" ]
}

build_base() {
  local root
  root="$(mktemp -d /var/tmp/gpuserve-rootfs.XXXXXX)"
  trap 'rm -rf "$root"' RETURN
  echo "[images] debootstrap bookworm into $root"
  debootstrap --variant=minbase \
    --include=python3,python3-apt,python3-venv,sudo,ca-certificates \
    bookworm "$root" http://deb.debian.org/debian >/dev/null
  # Reach the same mirror as the host does.
  rm -f "$root/etc/apt/sources.list"
  cp /etc/apt/sources.list.d/*.sources "$root/etc/apt/sources.list.d/" 2>/dev/null || true
  [ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$root/etc/apt/sources.list"
  for conf in /etc/apt/apt.conf.d/99*; do [ -f "$conf" ] && cp "$conf" "$root/etc/apt/apt.conf.d/"; done
  # Where the host reaches the package indexes through a TLS-inspecting proxy, containers must
  # trust the same extra CAs (nothing to copy where the host has none).
  if [ "${#host_cas[@]}" -gt 0 ]; then
    cp "${host_cas[@]}" "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
  fi
  chroot "$root" apt-get clean
  # TEST IMAGES ONLY: root's Ansible modules keep the bytecode of their payload zips' files
  # (zipimport_cache.py says why); Python runs the .pth line at every start.
  install -m 0644 "$here/zipimport_cache.py" "$root/usr/lib/python3/dist-packages/gpuserve_test_zipimport_cache.py"
  echo "import gpuserve_test_zipimport_cache" >"$root/usr/lib/python3/dist-packages/gpuserve-test-zipimport-cache.pth"
  # Emptied lists, as images ship them (the roles refresh lists that offer nothing: gpuserve.vllm.apt_lists).
  rm -rf "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | podman import --change "$label" - "$base" >/dev/null
  echo "[images] built $base"
}

# derive <from image> <new image> <Debian packages...>: the packages installed into <from>, booting
# systemd as PID 1.
derive() {
  local ctr=gpuserve-image-build from=$1 image=$2
  shift 2
  podman rm -f "$ctr" >/dev/null 2>&1 || true
  podman run --name "$ctr" "$from" bash -c '
    set -e
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    apt-get clean
    rm -rf /var/lib/apt/lists/*' derive "$@"
  podman commit --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' --change "$label" \
    "$ctr" "$image" >/dev/null 2>&1
  podman rm -f "$ctr" >/dev/null
  echo "[images] built $image"
}

if have "$base"; then echo "[images] reusing $base"; else build_base; rebuild=1; fi
if have "$systemd_image"; then echo "[images] reusing $systemd_image"; else derive "$base" "$systemd_image" systemd systemd-sysv dbus; rebuild=1; fi
# iproute2: a server has `ip`, which Ansible's network facts read (the monitoring role's fleet address).
if have "$sshd_image"; then echo "[images] reusing $sshd_image"; else derive "$systemd_image" "$sshd_image" openssh-server iproute2; fi
