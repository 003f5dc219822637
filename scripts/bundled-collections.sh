#!/usr/bin/env bash
# Print the path of an ansible_collections tree holding the third-party collections the playbooks
# and tests use (containers.podman, community.general, ansible.posix), taking them once from the
# PyPI `ansible` wheel (Galaxy is not needed) into $GPUSERVE_CACHE (~/.cache/gpuserve), outside
# the repository. Used by tests/env.sh and scripts/rehearse.sh:
#   ANSIBLE_COLLECTIONS_PATH="...:$(bash scripts/bundled-collections.sh)"
# Needs python3 with pip; progress goes to stderr, the path alone to stdout.
set -euo pipefail

cache="${GPUSERVE_CACHE:-$HOME/.cache/gpuserve}"
version="${GPUSERVE_ANSIBLE_BUNDLE_VERSION:-12.3.0}"
collections=(containers/podman community/general ansible/posix)
deps="$cache/collections-$version"

missing=0
for c in "${collections[@]}"; do
  [ -d "$deps/ansible_collections/$c" ] || missing=1
done
if [ "$missing" = 1 ]; then
  echo "[collections] extracting ${collections[*]} from ansible==$version into $deps" >&2
  dl="$(mktemp -d)"
  trap 'rm -rf "$dl" "$deps.tmp" "$deps.final"' EXIT
  python3 -m pip download -q --no-deps -d "$dl" "ansible==$version" >&2
  rm -rf "$deps.tmp" "$deps.final" && mkdir -p "$deps.tmp" "$deps.final/ansible_collections"
  (cd "$deps.tmp" && python3 -m zipfile -e "$dl"/ansible-*.whl . >/dev/null)
  for c in "${collections[@]}"; do
    mkdir -p "$deps.final/ansible_collections/${c%/*}"
    mv "$deps.tmp/ansible_collections/$c" "$deps.final/ansible_collections/$c"
  done
  # Complete or absent: the tree appears under its name only once every collection is in it.
  rm -rf "$deps" && mv "$deps.final" "$deps"
fi
printf '%s\n' "$deps"
