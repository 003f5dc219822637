#!/usr/bin/env bash
# Rehearse the main job on this machine: build (once) a local Debian 12 systemd node in podman and
# run the real playbooks/site.yml against it with inventories/rehearsal.
#   bash scripts/rehearse.sh                 converge the rehearsal node (re-run: no changes)
#   bash scripts/rehearse.sh --check --diff  show what would change, the vLLM patch diff included
#   bash scripts/rehearse.sh --destroy       remove the rehearsal node
# Extra arguments go to ansible-playbook. The node has no GPU: the play says so and stops short of
# starting vLLM; vLLM itself is a real wheel from the package index, installed with --no-deps.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
node=gpuserve-rehearsal

if [ "${1:-}" = --destroy ]; then
  podman rm -f "$node"
  exit 0
fi

# Only ansible-core is needed (README "Quick start"); no test environment is sourced. Without an
# ansible-playbook on PATH the pinned ansible-core (requirements-dev.txt) is installed once into a
# venv under ~/.cache/gpuserve and used from there. ansible.cfg makes this checkout gpuserve.vllm;
# containers.podman (the connection to the node) comes from the PyPI `ansible` wheel, fetched
# once into ~/.cache/gpuserve.
if ! command -v ansible-playbook >/dev/null; then
  core="$(grep -E '^ansible-core==' requirements-dev.txt)"
  venv="${GPUSERVE_CACHE:-$HOME/.cache/gpuserve}/${core/==/-}"
  if [ ! -e "$venv/.installed" ]; then # a venv cannot be moved: an interrupted one is redone
    echo "[rehearse] no ansible-playbook on PATH: installing $core into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check "$core" ||
      { echo "rehearse: could not install $core into $venv (needs python3-venv and the package index)" >&2; exit 2; }
    touch "$venv/.installed"
  fi
  export PATH="$venv/bin:$PATH"
fi
bash tests/containers/setup-host.sh
bash tests/containers/build-images.sh
ANSIBLE_COLLECTIONS_PATH="$repo/collections:$(bash scripts/bundled-collections.sh)"
export ANSIBLE_COLLECTIONS_PATH
export GPUSERVE_WHEEL_CACHE="${GPUSERVE_WHEEL_CACHE:-$HOME/.cache/gpuserve/wheels}"

# The rehearsal installs the vLLM release its inventory pins, from the host's wheel cache.
version="$(ansible-inventory -i inventories/rehearsal --host "$node" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["vllm_install_version"])')"
python3 tests/support/vllm_wheels.py "$version" >/dev/null

if ! podman container exists "$node"; then
  echo "[rehearse] creating node $node"
  podman run -d --name "$node" --hostname "$node" --systemd always \
    --volume "$GPUSERVE_WHEEL_CACHE:/var/cache/gpuserve/wheels:ro" \
    localhost/gpuserve-debian12-systemd:latest /sbin/init >/dev/null
fi
[ "$(podman inspect -f '{{.State.Running}}' "$node")" = true ] || podman start "$node" >/dev/null
for _ in $(seq 1 60); do
  state="$(podman exec "$node" systemctl is-system-running 2>/dev/null || true)"
  case "$state" in running | degraded) break ;; esac
  sleep 1
done

exec ansible-playbook -i inventories/rehearsal playbooks/site.yml "$@"
