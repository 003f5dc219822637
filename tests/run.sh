#!/usr/bin/env bash
# The one test command (README "Tests"; .ci/run runs exactly this).
#   bash tests/run.sh            all steps
#   bash tests/run.sh unit lint  only the named steps
# Steps: lint sanity unit integration build molecule rehearsal firstcontact vllm_full. Every step
# runs even when an earlier one failed, so one run reports everything; the exit status is non-zero
# when any step failed. The last line is
# "gpuserve: N passed, N failed" (pytest tests + molecule scenarios + the other steps).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
out="$repo/tests/output"
mkdir -p "$out"

all_steps=(lint sanity unit integration build molecule rehearsal firstcontact vllm_full)
steps=("$@")
[ "${#steps[@]}" -eq 0 ] && steps=("${all_steps[@]}")

# The day's third (docs/development.md, "Two cores: the day's third"). On the CI machines of late
# 2026 the whole suite takes 95 minutes or more (CI stops at 90): every run takes every step, the
# fleet scenario and the lint, sanity and unit tiers whole, and a third of the role scenarios and
# of the longest integration and vllm_full files, those of the day's third (the UTC day's number
# modulo 3), so that three successive days run all of them. GPUSERVE_TEST_PART=all runs all
# three; 0, 1 or 2 one of them; GPUSERVE_TEST_DAY sets the day. A scenario or file named in no
# part runs every day.
test_day="${GPUSERVE_TEST_DAY:-$(($(date -u +%s) / 86400))}"
test_part="${GPUSERVE_TEST_PART:-$((test_day % 3))}"
declare -A part_of=(
  # molecule scenarios (the fleet runs every role end to end every day)
  [vllm_server]=0 [gpu_node]=1 [ml_env]=2 [vllm_install]=2 [eagle3_patches]=2
  # tests/integration's longest files
  [test_vllm_weights_fleet.py]=0 [test_python_patch_crash.py]=0
  [test_router_wheelhouse.py]=1 [test_python_patch.py]=1 [test_eagle3_patches_role.py]=2
  # tests/vllm_full
  [test_preflight_boundary.py]=0 [test_preflight_cache.py]=0
  [test_preflight.py]=1 [test_preflight_no_deps.py]=1
  [test_canary_real.py]=2 [test_eagle3_real.py]=2 [test_kimi_k2_variant.py]=2 [test_weights_real.py]=2
)
in_part() { [ "$test_part" = all ] || [ -z "${part_of[$1]:-}" ] || [ "${part_of[$1]}" = "$test_part" ]; }
# pytest's --ignore for the test files under <dir> of the other parts.
other_part_ignores() { # other_part_ignores <dir>
  local file
  while IFS= read -r file; do in_part "${file##*/}" || echo "--ignore=$file"; done < <(find "$1" -name 'test_*.py' | sort)
}
case "$test_part" in
  0 | 1 | 2) echo "gpuserve: day $test_day, part $test_part of 3: $(for name in "${!part_of[@]}"; do in_part "$name" || echo "$name"; done | sort | paste -sd' ') run on the next two days (GPUSERVE_TEST_PART=all runs them too)" ;;
  all) ;;
  *) echo "FATAL: GPUSERVE_TEST_PART is '$test_part': 0, 1, 2 or all"; echo "gpuserve: 0 passed, 1 failed"; exit 1 ;;
esac

passed=0
failed=0
failures=()
timings=()
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
# vllm_full's envs (GBs of downloads, mostly a wait on the network and the disk) are built in the
# background from here on; step_vllm_full waits for them (the builder locks each env).
vllm_full_versions=(0.16.0 0.17.0 0.18.0 0.33.0)
if [[ " ${steps[*]} " == *" vllm_full "* ]]; then
  python3 tests/support/vllm_full_env.py "${vllm_full_versions[@]}" >"$out/vllm_full-envs.log" 2>&1 &
fi
timings+=("environment $SECONDS s")

step_lint() {
  banner "ansible-lint (production profile)"
  ansible-lint --profile production
}

step_sanity() {
  banner "ansible-test sanity"
  bash tests/sanity.sh
}

# pytest over one directory; the junit counts go to $out/<step>-counts for the summary.
pytest_step() { # pytest_step <step> <dir> [pytest options]
  banner "pytest $2"
  python -m pytest "$2" -p no:cacheprovider -q --durations=12 --junitxml="$out/$1.xml" "${@:3}"
  local rc=$?
  python3 - "$out/$1.xml" <<'PY' >"$out/$1-counts" || echo "0 0" >"$out/$1-counts"
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
step_unit() { pytest_step unit tests/unit; }
step_integration() {
  local ignores
  mapfile -t ignores < <(other_part_ignores tests/integration)
  bash tests/containers/build-images.sh && pytest_step integration tests/integration "${ignores[@]}"
}

step_build() {
  banner "collection build + install + playbook by FQCN + execution environment"
  local tmp rc=0
  tmp="$(mktemp -d)"
  ansible-galaxy collection build --force --output-path "$tmp/dist" . &&
    ansible-galaxy collection install --offline --force -p "$tmp/installed" "$tmp"/dist/gpuserve-vllm-*.tar.gz &&
    ANSIBLE_COLLECTIONS_PATH="$tmp/installed:${ANSIBLE_COLLECTIONS_PATH#*:}" \
      ansible-playbook -i inventories/rehearsal gpuserve.vllm.site --syntax-check || rc=1
  # Execution environments (AWX/AAP): ansible-builder finds the installed collection's own
  # requirements (meta/execution-environment.yml) and renders the example EE's build context.
  ansible-builder introspect --sanitize "$tmp/installed" | tee "$tmp/introspect.txt" &&
    grep -q "from collection gpuserve.vllm" "$tmp/introspect.txt" &&
    ansible-builder create -f docs/execution-environment.yml -c "$tmp/ee" &&
    test -s "$tmp/ee/Containerfile" || rc=1
  rm -rf "$tmp"
  return $rc
}

# GPUSERVE_MOLECULE_SCENARIOS="a b" runs only those (a developer's shortcut); otherwise every
# scenario of the day's third.
molecule_scenarios() {
  if [ -n "${GPUSERVE_MOLECULE_SCENARIOS:-}" ]; then echo "$GPUSERVE_MOLECULE_SCENARIOS"; return; fi
  local scenario
  for scenario in $(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml | cut -d/ -f2 | sort); do
    in_part "$scenario" && echo "$scenario"
  done
}

step_molecule() {
  banner "molecule scenarios (podman)"
  bash tests/containers/build-images.sh || return 1
  local scenario rc=0 start
  for scenario in $(molecule_scenarios); do
    [ "$scenario" = "$lane_scenario" ] && { echo "molecule:$scenario runs beside the other steps (see its lane below)"; continue; }
    banner "molecule test -s $scenario"
    start=$SECONDS
    if molecule test -s "$scenario" 2>&1 | tee "$out/molecule-$scenario.log"; then
      record "molecule:$scenario" 0
    else
      record "molecule:$scenario" 1; rc=1
    fi
    timings+=("  molecule:$scenario $((SECONDS - start)) s")
  done
  return $rc
}

# A task of the prepare roles that the fast path leaves out (site.yml, "A run with nothing to change").
rehearsal_prepared='TASK \[gpuserve.vllm.ml_env : Create the service user'

# site.yml's fast path (docs/operations.md, "A run with nothing to change"), on the rehearsal node
# the runs above left (the second of which took it: the first recorded the node at its end, after
# the serve plays): a change of each kind the prepare play repairs makes the next run prepare in
# full and repair it; then the fast path again.
rehearsal_fast_path() {
  local node=gpuserve-rehearsal rc=0 log="$out/rehearsal-fast-path.log" kind change repaired part
  local prepared="$rehearsal_prepared"
  fast_and_unchanged() { # fast_and_unchanged <what>
    bash scripts/rehearse.sh >"$log" 2>&1 || { echo "FAIL: $1: site.yml failed (tests/output/rehearsal-fast-path.log)"; return 1; }
    local recap
    recap="$(grep -E '^gpuserve-rehearsal +: ok=' "$log")"
    grep -q "$prepared" "$log" && { echo "FAIL: $1 prepared in full (no fast path)"; return 1; }
    grep -qE 'changed=0 +unreachable=0 +failed=0' <<<"$recap" || { echo "FAIL: $1 changed something: $recap"; return 1; }
    echo "fast path: $1 left the prepare roles out: $recap"
  }
  # (A run with nothing to change took the fast path already: step_rehearsal's second run.)
  # kind @ the change @ how its repair shows @ the part of the record that names it
  local changes="$out/rehearsal-fast-path-changes"
  cat >"$changes" <<'CHANGES'
/etc/nccl.conf edited@echo NCCL_DEBUG=TRACE >>/etc/nccl.conf@! grep -q TRACE /etc/nccl.conf@path:/etc/nccl.conf
a file of the serving env given to the service user@chown vllm "$(readlink -f /opt/ml-env)/pyvenv.cfg"@[ "$(stat -c %U "$(readlink -f /opt/ml-env)/pyvenv.cfg")" = root ]@tree:/opt/ml-env.d
the service user's shell changed@usermod -s /bin/bash vllm@[ "$(getent passwd vllm | cut -d: -f7)" = /usr/sbin/nologin ]@path:/etc/passwd
a wheel removed from the node's wheelhouse@rm /var/cache/gpuserve/wheelhouse/uv-*.whl@ls /var/cache/gpuserve/wheelhouse/uv-*.whl >/dev/null@tree:/var/cache/gpuserve/wheelhouse
CHANGES
  # One change of each kind at once; the read names each in its own part (-v shows its reasons).
  while IFS='@' read -r kind change repaired part; do podman exec "$node" sh -c "$change" </dev/null; done <"$changes"
  bash scripts/rehearse.sh -v >"$log" 2>&1 || { echo "FAIL: site.yml failed after the changes (tests/output/rehearsal-fast-path.log)"; return 1; }
  grep -q "$prepared" "$log" || { echo "FAIL: the run after the changes took the fast path"; rc=1; }
  while IFS='@' read -r kind change repaired part; do
    grep -q "\"$part: changed\"" "$log" || { echo "FAIL ($kind): the read did not name $part"; rc=1; }
    podman exec "$node" sh -c "$repaired" </dev/null || { echo "FAIL ($kind): the run did not repair it"; rc=1; }
  done <"$changes"
  [ "$rc" -eq 0 ] || return 1
  echo "fast path: $(cut -d'@' -f1 "$changes" | paste -sd';' | sed 's/;/; /g') -> the read named each, the run prepared in full and repaired them"
  fast_and_unchanged "the run after the repairs"
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
    if [ "$rc" -eq 0 ] && grep -q "$rehearsal_prepared" "$out/rehearsal-rerun.log"; then
      echo "FAIL: the second run prepared in full: the first run's record at its end did not hold"
      rc=1
    fi
    [ "$rc" -eq 0 ] && { rehearsal_fast_path || rc=1; }
    # Air-gapped (README "Air-gapped fleets"): the node has no network, and a pin its wheelhouse
    # lacks is refused, naming it, before anything changes on the node.
    if [ "$rc" -eq 0 ]; then
      local node=gpuserve-rehearsal before after
      [ "$(podman inspect -f '{{.HostConfig.NetworkMode}}' "$node")" = none ] ||
        { echo "FAIL: the rehearsal node has a network"; rc=1; }
      # The folders' entries, not the folders' own times: the run lock (taken before the
      # wheelhouse copy, which comes first on this node, and released by the last play) comes and
      # goes in /var/lib/gpuserve.
      before="$(podman exec "$node" ls -la --time-style=+%s /opt /opt/ml-env.d /var/lib/gpuserve | grep -v ' \.$')"
      if bash scripts/rehearse.sh -e vllm_install_version=0.18.0 >"$out/rehearsal-missing-wheel.log" 2>&1; then
        echo "FAIL: site.yml asked for vllm 0.18.0, which the wheelhouse lacks, and did not fail"; rc=1
      elif ! grep -q 'no wheel of vllm==0.18.0' "$out/rehearsal-missing-wheel.log"; then
        echo "FAIL: the refusal does not name vllm==0.18.0 (tests/output/rehearsal-missing-wheel.log)"; rc=1
      fi
      after="$(podman exec "$node" ls -la --time-style=+%s /opt /opt/ml-env.d /var/lib/gpuserve | grep -v ' \.$')"
      [ "$before" = "$after" ] || { echo "FAIL: the refused run changed the node:"; diff <(echo "$before") <(echo "$after"); rc=1; }
      [ "$rc" -eq 0 ] && echo "air-gapped: no network; a pin the wheelhouse lacks was refused and nothing changed"
    fi
  else
    rc=1
  fi
  bash scripts/rehearse.sh --destroy >/dev/null 2>&1
  return $rc
}

step_firstcontact() {
  # A newcomer's first contact (README "Quick start"): a fresh clone of the committed HEAD, a
  # throwaway venv with only the pinned ansible-core, no test environment, and the README's
  # playbook commands: site.yml from the checkout, and an ops repository's three-line site.yml
  # with the requirements.yml that installs the collection (from git, and from a built tarball).
  banner "first contact: fresh clone, only ansible-core, README commands"
  local tmp core rc=0
  tmp="$(mktemp -d)"
  core="$(grep -E '^ansible-core==' requirements-dev.txt)"
  git clone -q "$repo" "$tmp/clone" && python3 -m venv "$tmp/core" &&
    "$tmp/core/bin/pip" install -q --disable-pip-version-check "$core" || rc=1
  [ "$rc" -eq 0 ] && env -i HOME="$HOME" LANG=C.UTF-8 PATH="$tmp/core/bin:/usr/bin:/bin" T="$tmp" bash -euxc '
    cd "$T/clone"
    ansible-playbook -i inventories/example site.yml --syntax-check
    ansible-playbook -i inventories/example playbooks/site.yml --syntax-check
    ansible-galaxy collection build --output-path "$T/dist" .
    mkdir -p "$T/ops" && cp -r inventories "$T/ops/" && cd "$T/ops"
    printf -- "---\n- name: gpuserve.vllm site playbook\n  ansible.builtin.import_playbook: gpuserve.vllm.site\n" >site.yml
    for source in "{name: \"file://$T/clone\", type: git, version: HEAD}" \
                  "{name: \"$(ls "$T"/dist/gpuserve-vllm-*.tar.gz)\", type: file}"; do
      rm -rf collections && printf -- "---\ncollections:\n  - %s\n" "$source" >requirements.yml
      ansible-galaxy collection install --offline -r requirements.yml -p collections
      ansible-playbook -i inventories/example site.yml --syntax-check
    done' || rc=1
  # The quick start with no ansible-playbook anywhere on PATH: rehearse.sh installs the pinned
  # ansible-core itself (into the cache; removed first so that this path runs every time).
  rm -rf "${GPUSERVE_CACHE:?}/${core/==/-}"
  [ "$rc" -eq 0 ] && env -i HOME="$HOME" LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    GPUSERVE_CACHE="$GPUSERVE_CACHE" GPUSERVE_WHEEL_CACHE="$GPUSERVE_WHEEL_CACHE" \
    bash "$tmp/clone/scripts/rehearse.sh" --syntax-check | tee "$tmp/rehearse.log" &&
    grep -q "installing $core into" "$tmp/rehearse.log" || rc=1
  bash "$tmp/clone/scripts/rehearse.sh" --destroy >/dev/null 2>&1
  rm -rf "$tmp"
  return $rc
}

# The real vLLM with all its dependencies (torch, CPU-only), one env per release, built once with
# uv into ~/.cache/gpuserve/vllm-full (~24 GB for four; minutes cold, nothing warm). Tests of an
# env that cannot be built skip with the reason printed (-rs), and the step fails: a tier that
# did not run is not a pass.
step_vllm_full() {
  banner "pytest tests/vllm_full (real vLLM 0.16.0 / 0.17.0 / 0.18.0 / 0.33.0 with torch, no GPU)"
  local start=$SECONDS rc envs_rc=0
  python3 tests/support/vllm_full_env.py "${vllm_full_versions[@]}" || envs_rc=1
  echo "vllm_full: the envs' build, started with the run (tests/output/vllm_full-envs.log):"
  cat "$out/vllm_full-envs.log" 2>/dev/null
  [ "$envs_rc" -ne 0 ] && echo "FAIL: a vLLM env could not be built; its tests skip (reasons below)"
  echo "vllm_full: envs ready after $((SECONDS - start)) s of waiting"
  # Two workers, a test file each at a time: most of this tier is one interpreter importing vLLM and
  # torch.
  local ignores
  mapfile -t ignores < <(other_part_ignores tests/vllm_full)
  pytest_step vllm_full tests/vllm_full -rs -n 2 --dist loadfile "${ignores[@]}"
  rc=$?
  [ "$envs_rc" -ne 0 ] && rc=1
  echo "vllm_full: $((SECONDS - start)) s in all"
  return $rc
}

# A second lane: the fleet scenario runs beside the other steps, from the first one on (the lane
# builds the test images first; steps that need them wait for that build), instead of after them.
# It is the longest step (70 to 90 minutes on CI's cores) and both cores stay busy throughout, so
# the lane runs nothing else and the other steps run at a lower priority (nice 5) than the fleet:
# they take the CPU it leaves. GPUSERVE_SERIAL=1: one lane.
lane_scenario=""
lane_pid=""
if [ "${GPUSERVE_SERIAL:-0}" != 1 ] && [[ " ${steps[*]} " == *" molecule "* ]] &&
  [[ " $(molecule_scenarios | tr '\n' ' ') " == *" fleet "* ]]; then
  lane_scenario=fleet
fi
start_lane() {
  [ -z "$lane_scenario" ] || [ -n "$lane_pid" ] && return 0
  banner "second lane: molecule:$lane_scenario (output in tests/output/lane.log)"
  (
    start=$SECONDS
    bash tests/containers/build-images.sh || echo "WARNING: image build failed; the lane's scenario will fail"
    echo "lane: images $((SECONDS - start)) s"
    start=$SECONDS
    banner "molecule test -s $lane_scenario (second lane)"
    molecule test -s "$lane_scenario" 2>&1 | tee "$out/molecule-$lane_scenario.log"
    echo "${PIPESTATUS[0]}" >"$out/lane-molecule.rc"
    echo "lane: molecule:$lane_scenario $((SECONDS - start)) s"
  ) >"$out/lane.log" 2>&1 &
  lane_pid=$!
  renice -n 5 -p $$ >/dev/null
}
finish_lane() {
  [ -n "$lane_pid" ] || return 0
  local start=$SECONDS
  wait "$lane_pid"
  banner "second lane (waited $((SECONDS - start)) s for it): its output"
  cat "$out/lane.log"
  grep '^lane: ' "$out/lane.log" | sed 's/^lane: /time (second lane): /'
  record "molecule:$lane_scenario" "$(cat "$out/lane-molecule.rc" 2>/dev/null || echo 1)"
}

for step in "${steps[@]}"; do
  step_start=$SECONDS
  start_lane
  case "$step" in
    lint | sanity | build | rehearsal | firstcontact) "step_$step"; record "$step" $? ;;
    unit | integration | vllm_full)
      "step_$step"; rc=$?
      read -r up uf <"$out/$step-counts"
      passed=$((passed + up)); failed=$((failed + uf))
      [ "$rc" -ne 0 ] && [ "$uf" -eq 0 ] && failed=$((failed + 1))  # e.g. a collection error
      [ "$rc" -ne 0 ] && failures+=("$step") ;;
    molecule) step_molecule || true ;;  # scenarios are recorded one by one
    *) echo "unknown step '$step' (known: ${all_steps[*]})"; failed=$((failed + 1)); failures+=("$step") ;;
  esac
  timings+=("$step $((SECONDS - step_start)) s")
done

finish_lane

banner "summary"
printf 'time: %s\n' "${timings[@]}" "total $SECONDS s"
[ "${#failures[@]}" -gt 0 ] && echo "failed: ${failures[*]}"
# What failed, by name: CI shows only the tail of this output.
for failure in "${failures[@]}"; do
  case "$failure" in
    molecule:*) echo "$failure:"; python3 tests/support/failure_digest.py ansible "$out/molecule-${failure#molecule:}.log" ;;
    *) [ -f "$out/$failure.xml" ] && { echo "$failure:"; python3 tests/support/failure_digest.py junit "$out/$failure.xml"; } ;;
  esac
done
echo "gpuserve: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
