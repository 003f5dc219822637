#!/usr/bin/env bash
# The one test command (README "Tests"; .ci/run runs exactly this).
#   bash tests/run.sh            all steps
#   bash tests/run.sh unit lint  only the named steps
# Steps: lint sanity unit build molecule rehearsal vllm_full. Every step runs even when an earlier one failed, so one
# run reports everything; the exit status is non-zero when any step failed. The last line is
# "gpuserve: N passed, N failed" (pytest tests + molecule scenarios + the other steps).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
out="$repo/tests/output"
mkdir -p "$out"

all_steps=(lint sanity unit build molecule rehearsal vllm_full)
steps=("$@")
[ "${#steps[@]}" -eq 0 ] && steps=("${all_steps[@]}")

passed=0
failed=0
failures=()
record() { # record <name> <rc>
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "== PASS $1"
  else failed=$((failed + 1)); failures+=("$1"); echo "== FAIL $1 (rc=$2)"; fi
}
banner() { printf '\n==================== %s ====================\n' "$*"; }

banner "environment"
if ! { bash tests/containers/setup-host.sh && source tests/env.sh; }; then
  echo "FATAL: could not prepare the test environment (see above)"
  echo "gpuserve: 0 passed, 1 failed"
  exit 1
fi
# Real vLLM wheels the tests use, downloaded once into $GPUSERVE_WHEEL_CACHE (outside the repo).
GPUSERVE_TEST_VLLM_VERSIONS="${GPUSERVE_TEST_VLLM_VERSIONS:-0.14.1 0.15.1 0.16.0 0.17.0 0.17.1 0.18.0 0.22.0 0.33.0}"
# shellcheck disable=SC2086
python3 tests/support/vllm_wheels.py $GPUSERVE_TEST_VLLM_VERSIONS || echo "WARNING: wheel prefetch failed; tests that need them will fail"

step_lint() {
  banner "ansible-lint (production profile)"
  ansible-lint --profile production
}

step_sanity() {
  banner "ansible-test sanity"
  bash tests/sanity.sh
}

step_unit() {
  banner "pytest tests/unit"
  python -m pytest tests/unit -p no:cacheprovider -q --junitxml="$out/junit.xml"
  local rc=$?
  python3 - "$out/junit.xml" <<'PY' >"$out/unit-counts" || echo "0 0" >"$out/unit-counts"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
tests = sum(int(s.get("tests", 0)) for s in suites)
bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(tests - bad - skipped, bad)
PY
  return $rc
}

step_build() {
  banner "collection build + install + playbook by FQCN"
  local tmp rc=0
  tmp="$(mktemp -d)"
  ansible-galaxy collection build --force --output-path "$tmp/dist" . &&
    ansible-galaxy collection install --offline --force -p "$tmp/installed" "$tmp"/dist/gpuserve-vllm-*.tar.gz &&
    ANSIBLE_COLLECTIONS_PATH="$tmp/installed:${ANSIBLE_COLLECTIONS_PATH#*:}" \
      ansible-playbook -i inventories/rehearsal gpuserve.vllm.site --syntax-check || rc=1
  rm -rf "$tmp"
  return $rc
}

step_molecule() {
  banner "molecule scenarios (podman)"
  bash tests/containers/build-images.sh || return 1
  local scenario rc=0
  for scenario in $(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml | cut -d/ -f2 | sort); do
    banner "molecule test -s $scenario"
    if molecule test -s "$scenario"; then record "molecule:$scenario" 0; else record "molecule:$scenario" 1; rc=1; fi
  done
  return $rc
}

step_rehearsal() {
  # The README's main job, end to end: site.yml on a fresh rehearsal node, then again, which must
  # report no changes. The node is recreated first and removed afterwards.
  banner "rehearsal: scripts/rehearse.sh twice on a fresh node"
  local rc=0 recap
  bash scripts/rehearse.sh --destroy >/dev/null 2>&1
  if bash scripts/rehearse.sh; then
    bash scripts/rehearse.sh | tee "$out/rehearsal-rerun.log"
    rc=${PIPESTATUS[0]}
    recap="$(grep -E '^gpuserve-rehearsal +: ok=' "$out/rehearsal-rerun.log")"
    echo "second run: $recap"
    if [ "$rc" -eq 0 ] && ! grep -qE 'changed=0 +unreachable=0 +failed=0' <<<"$recap"; then
      echo "FAIL: the second run of site.yml changed something"
      rc=1
    fi
  else
    rc=1
  fi
  bash scripts/rehearse.sh --destroy >/dev/null 2>&1
  return $rc
}

# The real vLLM with all its dependencies (torch, CPU-only), one env per release, built once with
# uv into ~/.cache/gpuserve/vllm-full (~15 GB for three; minutes cold, nothing warm). Tests skip,
# with the reason printed (-rs), only when an env cannot be built.
step_vllm_full() {
  banner "pytest tests/vllm_full (real vLLM 0.16.0 / 0.17.0 / 0.18.0 with torch, no GPU)"
  local start=$SECONDS rc
  python3 tests/support/vllm_full_env.py 0.16.0 0.17.0 0.18.0 || echo "WARNING: a vLLM env could not be built; its tests skip (reasons below)"
  echo "vllm_full: envs ready after $((SECONDS - start)) s"
  python -m pytest tests/vllm_full -p no:cacheprovider -q -rs
  rc=$?
  echo "vllm_full: $((SECONDS - start)) s in all"
  return $rc
}

for step in "${steps[@]}"; do
  case "$step" in
    lint | sanity | build | rehearsal | vllm_full) "step_$step"; record "$step" $? ;;
    unit)
      step_unit; rc=$?
      read -r up uf <"$out/unit-counts"
      passed=$((passed + up)); failed=$((failed + uf))
      [ "$rc" -ne 0 ] && [ "$uf" -eq 0 ] && failed=$((failed + 1))  # e.g. a collection error
      [ "$rc" -ne 0 ] && failures+=("unit") ;;
    molecule) step_molecule || true ;;  # scenarios are recorded one by one
    *) echo "unknown step '$step' (known: ${all_steps[*]})"; failed=$((failed + 1)); failures+=("$step") ;;
  esac
done

banner "summary"
[ "${#failures[@]}" -gt 0 ] && echo "failed: ${failures[*]}"
echo "gpuserve: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
