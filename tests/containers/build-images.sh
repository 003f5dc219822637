#!/usr/bin/env bash
# Build the local test images (no registry is reachable here), once; later runs reuse them.
#   localhost/gpuserve-debian12:latest          Debian 12 minbase + python3, python3-apt, sudo, venv
#   localhost/gpuserve-debian12-systemd:latest  the same with systemd as PID 1
# Set GPUSERVE_REBUILD_IMAGES=1 to rebuild. Facts behind each step: ../shared/reference/containers.md.
set -euo pipefail

base=localhost/gpuserve-debian12:latest
systemd_image=localhost/gpuserve-debian12-systemd:latest
rebuild="${GPUSERVE_REBUILD_IMAGES:-0}"

have() { [ "$rebuild" != 1 ] && podman image exists "$1"; }

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
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/*
  # Emptied lists must look stale, or apt's cache_valid_time trusts them and finds nothing.
  touch -d 2000-01-01 "$root/var/lib/apt/lists"
  tar -C "$root" -c . | podman import - "$base" >/dev/null
  echo "[images] built $base"
}

build_systemd() {
  local ctr=gpuserve-image-build
  podman rm -f "$ctr" >/dev/null 2>&1 || true
  podman run --name "$ctr" "$base" bash -c '
    set -e
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends systemd systemd-sysv dbus >/dev/null
    apt-get clean
    rm -rf /var/lib/apt/lists/*
    touch -d 2000-01-01 /var/lib/apt/lists'
  podman commit --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' "$ctr" "$systemd_image" >/dev/null
  podman rm -f "$ctr" >/dev/null
  echo "[images] built $systemd_image"
}

if have "$base"; then echo "[images] reusing $base"; else build_base; rebuild=1; fi
if have "$systemd_image"; then echo "[images] reusing $systemd_image"; else build_systemd; fi
