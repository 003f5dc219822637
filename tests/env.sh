# shellcheck shell=bash
# Test environment for gpuserve.vllm, sourced by tests/run.sh and by developers:
#   source tests/env.sh
# It installs the pinned dev tools into .venv (once per requirements change), takes the
# third-party collections the tests need from the PyPI `ansible` wheel (Galaxy is not reachable;
# scripts/bundled-collections.sh) and exposes this checkout as the collection gpuserve.vllm
# through its committed link tree collections/ansible_collections/gpuserve/vllm (also what
# ansible.cfg uses). Everything downloaded lives in $GPUSERVE_CACHE, outside the repo.

GPUSERVE_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
export GPUSERVE_REPO
export GPUSERVE_CACHE="${GPUSERVE_CACHE:-$HOME/.cache/gpuserve}"
export GPUSERVE_WHEEL_CACHE="${GPUSERVE_WHEEL_CACHE:-$GPUSERVE_CACHE/wheels}"
# TEST DOUBLE vLLM wheels (tests/support/double_vllm_wheel.py), mounted into molecule's fleet nodes.
export GPUSERVE_DOUBLE_WHEELS="${GPUSERVE_DOUBLE_WHEELS:-$GPUSERVE_CACHE/double-wheels}"
mkdir -p "$GPUSERVE_WHEEL_CACHE" "$GPUSERVE_DOUBLE_WHEELS"
# The key Ansible logs in with over SSH to molecule nodes that run sshd (molecule/fleet): made
# once; the public half is mounted read-only as the nodes' root authorized_keys.
export GPUSERVE_MOLECULE_SSH_KEY="${GPUSERVE_MOLECULE_SSH_KEY:-$GPUSERVE_CACHE/molecule-ssh/id_ed25519}"
if [ ! -f "$GPUSERVE_MOLECULE_SSH_KEY.pub" ]; then
  mkdir -p "$(dirname "$GPUSERVE_MOLECULE_SSH_KEY")" &&
    ssh-keygen -q -t ed25519 -N '' -C gpuserve-molecule -f "$GPUSERVE_MOLECULE_SSH_KEY" </dev/null
fi

_gpuserve_log() { printf '[env] %s\n' "$*" >&2; }

_gpuserve_venv() {
  local venv="$GPUSERVE_REPO/.venv" stamp
  stamp="$(sha256sum "$GPUSERVE_REPO/requirements-dev.txt" | cut -d' ' -f1)"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$stamp" ]; then
    _gpuserve_log "installing pinned dev tools into $venv"
    python3 -m venv "$venv" || return 1
    "$venv/bin/python" -m pip install -q --upgrade pip || return 1
    "$venv/bin/python" -m pip install -q -r "$GPUSERVE_REPO/requirements-dev.txt" || return 1
    echo "$stamp" >"$venv/.requirements.sha256"
  fi
  # TEST ENVIRONMENT ONLY: the controller's own modules (localhost tasks, molecule's podman
  # driver) keep the bytecode of their payload zips' files, as the test images' do
  # (tests/containers/zipimport_cache.py says why).
  local site
  for site in "$venv"/lib/python3*/site-packages; do
    cmp -s "$GPUSERVE_REPO/tests/containers/zipimport_cache.py" "$site/gpuserve_test_zipimport_cache.py" ||
      cp "$GPUSERVE_REPO/tests/containers/zipimport_cache.py" "$site/gpuserve_test_zipimport_cache.py" || return 1
    [ -f "$site/gpuserve-test-zipimport-cache.pth" ] ||
      echo "import gpuserve_test_zipimport_cache" >"$site/gpuserve-test-zipimport-cache.pth" || return 1
  done
  export GPUSERVE_TEST_ZIPIMPORT_CACHE="$GPUSERVE_CACHE/zipimport"
  export VIRTUAL_ENV="$venv"
  case ":$PATH:" in *":$venv/bin:"*) ;; *) export PATH="$venv/bin:$PATH" ;; esac
}

_gpuserve_collections() {
  # containers.podman etc. from the PyPI `ansible` wheel (shared with scripts/rehearse.sh).
  local deps
  deps="$(bash "$GPUSERVE_REPO/scripts/bundled-collections.sh")" || return 1
  export ANSIBLE_COLLECTIONS_PATH="$GPUSERVE_REPO/collections:$deps"
  export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
}

_gpuserve_venv && _gpuserve_collections
