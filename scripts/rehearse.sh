#!/usr/bin/env bash
# Rehearse the main job on this machine: build (once) a local Debian 12 systemd node in podman and
# run the real playbooks/site.yml against it with inventories/rehearsal.
#   bash scripts/rehearse.sh                 converge the rehearsal node (re-run: no changes)
#   bash scripts/rehearse.sh --check --diff  show what would change, the vLLM patch diff included
#   bash scripts/rehearse.sh --destroy       remove the rehearsal node
# Extra arguments go to ansible-playbook. The node has no GPU: the play says so and stops short of
# starting vLLM; vLLM itself is a real wheel from the package index, installed with --no-deps.
# The node is air-gapped (podman --network none): every wheel it installs comes from a wheelhouse
# that the real playbooks/build_wheelhouse.yml builds here first (incrementally) from the
# inventory's pins, and site.yml copies to the node (gpuserve.vllm.wheelhouse; docs/air-gapped.md).
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
# the bundled collections (scripts/bundled-collections.sh) come from the PyPI `ansible` wheel, fetched
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

# The node is reached as fleets are, over SSH with pipelining (ansible.cfg); having no network, its
# sshd serves one connection at a time on stdin/stdout through `podman exec` (the ProxyCommand in
# inventories/rehearsal/hosts.yml), with this key, made once. The node sees only the public half.
ssh_dir="${GPUSERVE_CACHE:-$HOME/.cache/gpuserve}/rehearsal-ssh"
if [ ! -s "$ssh_dir/id_ed25519" ] || [ ! -s "$ssh_dir/node/authorized_keys" ]; then
  # A node still mounts the folder this replaces: it is made again with the new one.
  podman rm -f "$node" >/dev/null 2>&1 || true
  rm -rf "$ssh_dir" && mkdir -p "$ssh_dir/node" && chmod 0700 "$ssh_dir" "$ssh_dir/node"
  ssh-keygen -q -t ed25519 -N '' -C gpuserve-rehearsal -f "$ssh_dir/id_ed25519"
  install -m 0600 "$ssh_dir/id_ed25519.pub" "$ssh_dir/node/authorized_keys"
fi

# A node made by an older rehearse.sh (with a network, the wheelhouse mounted, reached through
# podman) is made again.
layout=air-gapped-ssh-3
if podman container exists "$node" &&
  [ "$(podman inspect -f '{{index .Config.Labels "gpuserve.rehearsal"}}' "$node")" != "$layout" ]; then
  echo "[rehearse] $node was made by an older rehearse.sh: making it again ($layout)"
  podman rm -f "$node" >/dev/null
fi
wheelhouse="${GPUSERVE_CACHE:-$HOME/.cache/gpuserve}/wheelhouse-rehearsal"
mkdir -p "$wheelhouse"
if ! podman container exists "$node"; then
  echo "[rehearse] creating node $node (no network; site.yml copies the wheelhouse to it)"
  podman run -d --name "$node" --hostname "$node" --systemd always --network none \
    --label "gpuserve.rehearsal=$layout" -v "$ssh_dir/node:/root/.ssh:ro" \
    localhost/gpuserve-debian12-sshd:latest /sbin/init >/dev/null
fi
[ "$(podman inspect -f '{{.State.Running}}' "$node")" = true ] || podman start "$node" >/dev/null
for _ in $(seq 1 60); do
  state="$(podman exec "$node" systemctl is-system-running 2>/dev/null || true)"
  case "$state" in running | degraded) break ;; esac
  sleep 1
done

# The wheelhouse for the node's pins, on this host (the package index; the vLLM wheel from the
# wheel cache); a syntax check needs none.
case " $* " in
  *" --syntax-check "*) ;;
  *)
    ansible-playbook -i inventories/rehearsal playbooks/build_wheelhouse.yml \
      -e "{\"gpuserve_wheelhouse_dir\": \"$wheelhouse\", \"gpuserve_wheelhouse_find_links\": [\"$GPUSERVE_WHEEL_CACHE\"]}" \
      >"$wheelhouse.log" 2>&1 || { cat "$wheelhouse.log" >&2; echo "rehearse: could not build the wheelhouse (above)" >&2; exit 2; }
    grep -o '"msg": "[0-9]* files[^"]*' "$wheelhouse.log" | cut -c9- | sed 's/^/[rehearse] wheelhouse: /' ;;
esac
exec ansible-playbook -i inventories/rehearsal playbooks/site.yml "$@"
