# shellcheck shell=bash
# Test environment for gpuserve.vllm, sourced by tests/run.sh and by developers:
#   source tests/env.sh
# It installs the pinned dev tools into .venv (once per requirements change), takes the
# third-party collections the tests need from the PyPI `ansible` wheel (Galaxy is not reachable),
# and exposes this checkout as the collection gpuserve.vllm through a symlinked
# ansible_collections tree. Everything downloaded lives in $GPUSERVE_CACHE, outside the repo.

GPUSERVE_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
export GPUSERVE_REPO
export GPUSERVE_CACHE="${GPUSERVE_CACHE:-$HOME/.cache/gpuserve}"
export GPUSERVE_WHEEL_CACHE="${GPUSERVE_WHEEL_CACHE:-$GPUSERVE_CACHE/wheels}"
# The `ansible` wheel whose bundled collections the tests use (containers.podman etc.).
GPUSERVE_ANSIBLE_BUNDLE_VERSION="${GPUSERVE_ANSIBLE_BUNDLE_VERSION:-12.3.0}"
GPUSERVE_BUNDLED_COLLECTIONS=(containers/podman community/general ansible/posix)

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
  export VIRTUAL_ENV="$venv"
  case ":$PATH:" in *":$venv/bin:"*) ;; *) export PATH="$venv/bin:$PATH" ;; esac
}

_gpuserve_collections() {
  local deps="$GPUSERVE_CACHE/collections-$GPUSERVE_ANSIBLE_BUNDLE_VERSION" missing=0 c
  for c in "${GPUSERVE_BUNDLED_COLLECTIONS[@]}"; do
    [ -d "$deps/ansible_collections/$c" ] || missing=1
  done
  if [ "$missing" = 1 ]; then
    _gpuserve_log "extracting ${GPUSERVE_BUNDLED_COLLECTIONS[*]} from ansible==$GPUSERVE_ANSIBLE_BUNDLE_VERSION"
    local dl
    dl="$(mktemp -d)"
    python3 -m pip download -q --no-deps -d "$dl" "ansible==$GPUSERVE_ANSIBLE_BUNDLE_VERSION" || return 1
    rm -rf "$deps.tmp" && mkdir -p "$deps.tmp"
    local patterns=()
    for c in "${GPUSERVE_BUNDLED_COLLECTIONS[@]}"; do patterns+=("ansible_collections/$c/*"); done
    (cd "$deps.tmp" && python3 -m zipfile -e "$dl"/ansible-*.whl . >/dev/null) || return 1
    mkdir -p "$deps.final/ansible_collections"
    for c in "${GPUSERVE_BUNDLED_COLLECTIONS[@]}"; do
      mkdir -p "$deps.final/ansible_collections/${c%/*}"
      mv "$deps.tmp/ansible_collections/$c" "$deps.final/ansible_collections/$c"
    done
    rm -rf "$deps.tmp" "$dl" "$deps" && mv "$deps.final" "$deps"
  fi
  # This checkout as gpuserve.vllm, without copying it; one link tree per checkout, so two
  # clones (a developer's and a CI run's) never test each other's code.
  local self
  self="$GPUSERVE_CACHE/self-$(printf '%s' "$GPUSERVE_REPO" | sha256sum | cut -c1-12)"
  mkdir -p "$self/ansible_collections/gpuserve"
  ln -sfn "$GPUSERVE_REPO" "$self/ansible_collections/gpuserve/vllm"
  export ANSIBLE_COLLECTIONS_PATH="$self:$deps"
  export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
}

_gpuserve_venv && _gpuserve_collections
