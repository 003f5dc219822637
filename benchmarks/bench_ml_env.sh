#!/usr/bin/env bash
# Benchmark for gpuserve.vllm.ml_env: how long it takes to build the same pinned env with uv and
# with pip (cold caches, then warm caches), and how long a no-change re-run of the role takes.
# Targets (issue 4): uv at least 5x faster than pip on the same pins; no-change re-run < 10 s.
# Prints figures; it asserts nothing (speed is measured here, never in tests).
#
#   bash benchmarks/bench_ml_env.sh            # needs the package index (PyPI) and /usr/bin/python3
#
# Env: BENCH_PYTHON (default /usr/bin/python3), BENCH_UV_VERSION (default the role's default),
#      BENCH_KEEP=1 keeps the work dir.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=/dev/null
source "$repo/tests/env.sh"

python_bin="${BENCH_PYTHON:-/usr/bin/python3}"
uv_version="${BENCH_UV_VERSION:-$(sed -n 's/^ml_env_uv_version: "\(.*\)"/\1/p' "$repo/roles/ml_env/defaults/main.yml")}"
work="$(mktemp -d /var/tmp/gpuserve-bench-ml-env.XXXXXX)"
[ "${BENCH_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT

# The same pins for both installers: the serving-side pure-Python/binary-wheel stack vLLM pulls in
# (no torch: that is gigabytes and would only measure the network). 47 packages.
pins="$work/requirements.txt"
cat >"$pins" <<'PINS'
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
attrs==26.1.0
click==8.5.1
fastapi==0.165.0
filelock==4.3.1
frozenlist==1.8.0
fsspec==2026.9.0
h11==0.16.0
hf-xet==1.8.0
httpcore2==2.16.2
httpx2==2.16.2
huggingface-hub==2.4.0
idna==3.20
jiter==0.19.0
markdown-it-py==4.3.0
mdurl==0.1.2
multidict==7.2.1
numpy==2.4.6
openai==3.57.0
opentelemetry-api==1.45.2
packaging==26.4
prometheus-client==0.26.0
propcache==0.5.4
pydantic==2.14.4
pydantic-core==2.50.5
pygments==2.21.0
pyyaml==6.0.4
regex==2026.11.19
rich==15.0.0
safetensors==0.8.0
shellingham==1.5.4
sniffio==1.3.1
starlette==1.10.0
tokenizers==0.23.3
tqdm==4.70.1
transformers==5.24.0
truststore==0.10.5
typer==0.29.2
typing-extensions==4.16.0
typing-inspection==0.4.5
uvicorn==0.54.0
yarl==1.25.1
PINS
npins="$(grep -c '==' "$pins")"

# pip reads only the index: this machine's pip.conf (extra local indexes, find-links,
# constraints) would slow pip down for reasons that have nothing to do with pip.
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_CONSTRAINT
export UV_PYTHON_DOWNLOADS=never UV_LINK_MODE=copy UV_NO_PROGRESS=1 UV_NATIVE_TLS=1

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

echo "[bench] bootstrapping uv==$uv_version (not timed)" >&2
"$python_bin" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q "uv==$uv_version"
uv="$work/tools/bin/uv"

build_uv() { # $1 = cache dir
  rm -rf "$work/env-uv"
  UV_CACHE_DIR="$1" "$uv" venv -q --python "$python_bin" "$work/env-uv"
  UV_CACHE_DIR="$1" "$uv" pip install -q --python "$work/env-uv/bin/python" -r "$pins"
}
build_pip() { # $1 = cache dir
  rm -rf "$work/env-pip"
  "$python_bin" -m venv "$work/env-pip"
  PIP_CACHE_DIR="$1" "$work/env-pip/bin/python" -m pip install -q -r "$pins"
}
timed() { local t0 t1; t0="$(now)"; "$@" >&2; t1="$(now)"; elapsed "$t0" "$t1"; }

echo "[bench] building the env ($npins pins) with uv and pip, cold then warm caches" >&2
uv_cold="$(timed build_uv "$work/uv-cache")"
pip_cold="$(timed build_pip "$work/pip-cache")"
uv_warm="$(timed build_uv "$work/uv-cache")"
pip_warm="$(timed build_pip "$work/pip-cache")"

# The role itself on this machine (connection local, paths under the work dir).
cat >"$work/play.yml" <<YAML
- name: Benchmark gpuserve.vllm.ml_env
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ml_env_dir: $work/role-env
    ml_env_tools_dir: $work/role-tools
    ml_env_uv_cache_dir: $work/uv-cache
    ml_env_user: $(id -un)
    ml_env_group: $(id -gn)
    ml_env_manage_user: false
    ml_env_manage_system_packages: false
    ml_env_python: $python_bin
    ml_env_uv_version: "$uv_version"
    ml_env_requirements_file: $pins
  roles:
    - gpuserve.vllm.ml_env
YAML
run_role() { ANSIBLE_PYTHON_INTERPRETER="$python_bin" ansible-playbook -i localhost, "$work/play.yml" >"$work/role.log" 2>&1; }
echo "[bench] running the ml_env role: first build (warm uv cache), then a no-change re-run" >&2
role_first="$(timed run_role)"
role_rerun="$(timed run_role)"
rerun_changed="$(sed -n 's/.*changed=\([0-9]*\).*/\1/p' "$work/role.log" | head -1)"

ratio() { awk -v p="$1" -v u="$2" 'BEGIN { printf "%.1f", (u > 0 ? p / u : 0) }'; }
verdict() { awk -v v="$1" -v t="$2" -v dir="$3" 'BEGIN { ok = (dir == "ge") ? (v >= t) : (v < t); print ok ? "met" : "NOT met" }'; }
r_cold="$(ratio "$pip_cold" "$uv_cold")"
r_warm="$(ratio "$pip_warm" "$uv_warm")"

printf '\nml_env benchmark (%s pins, %s, uv %s, host %s, %s cores)\n' "$npins" "$("$python_bin" -V)" "$uv_version" "$(hostname)" "$(nproc)"
printf '%-44s %10s\n' "measure" "seconds"
printf '%-44s %10s\n' "build env, uv, cold cache" "$uv_cold"
printf '%-44s %10s\n' "build env, pip, cold cache" "$pip_cold"
printf '%-44s %10s\n' "build env, uv, warm cache" "$uv_warm"
printf '%-44s %10s\n' "build env, pip, warm cache" "$pip_warm"
printf '%-44s %10s\n' "ml_env role, first build (warm uv cache)" "$role_first"
printf '%-44s %10s\n' "ml_env role, no-change re-run" "$role_rerun"
printf 'uv speed-up: cold %sx, warm %sx (target >= 5x: cold %s, warm %s)\n' \
  "$r_cold" "$r_warm" "$(verdict "$r_cold" 5 ge)" "$(verdict "$r_warm" 5 ge)"
printf 'no-change re-run: %s s, changed=%s (target < 10 s: %s)\n' \
  "$role_rerun" "${rerun_changed:-?}" "$(verdict "$role_rerun" 10 lt)"
