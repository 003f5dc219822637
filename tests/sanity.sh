#!/usr/bin/env bash
# Run `ansible-test sanity` for gpuserve.vllm from a plain checkout.
#
# ansible-test insists on the path layout .../ansible_collections/<namespace>/<name>/, so this
# copies the collection's files (tracked + untracked-but-not-ignored, never .venv or caches)
# into a temporary tree and runs there with --local (no containers, no network).
#
#   tests/sanity.sh                 # the tests that can run here (see SANITY_TESTS below)
#   tests/sanity.sh --test pep8     # --test replaces the default list
#   tests/sanity.sh plugins/modules/python_patch.py   # only these files (ansible-test targets)
#
# Interpreter: $SANITY_PYTHON (default: the repo's .venv python from tests/env.sh, then python3).
# It only needs ansible-core: ansible-test builds one venv per sanity test under
# ~/.ansible/test/venv with its own pinned requirements, installed from the package index.
# ansible-test bootstraps pip in those venvs with a get-pip script from ci-files.testing.ansible.com,
# which is not reachable here; when that script is not cached, a stand-in that uses the
# interpreter's own ensurepip is written to the cache path ansible-test reads.
#
# Tests NOT run here and why:
#   shellcheck  - needs the shellcheck binary (not installed on these machines)
#   pslint      - needs PowerShell (pwsh); the collection has no PowerShell
#   mypy        - ansible-test pins a mypy stack not installed here; the test is slow on 2 cores
#   integration-aliases - applies only to tests/integration targets, which this collection has none of
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${SANITY_PYTHON:-}" ] && [ -x "$REPO/.venv/bin/python" ]; then SANITY_PYTHON="$REPO/.venv/bin/python"; fi
PYTHON="${SANITY_PYTHON:-$(command -v python3)}"
PYVER="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
ANSIBLE_TEST="$(dirname "$PYTHON")/ansible-test"
[ -x "$ANSIBLE_TEST" ] || ANSIBLE_TEST="$(command -v ansible-test)"

SANITY_TESTS=(
  action-plugin-docs ansible-doc changelog compile empty-init ignores import line-endings
  no-assert no-get-exception no-illegal-filenames no-smart-quotes pep8 pylint replace-urlopen
  runtime-metadata shebang symlinks use-compat-six validate-modules yamllint
)

# Stand-in for ansible-test's get-pip bootstrap (see above); never replaces a real cached one.
pip_version="$("$PYTHON" -c 'import pathlib, re, ansible_test
src = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
print(re.search(r"pip=.([0-9.]+).", src.read_text()).group(1))')"
get_pip="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if [ ! -f "$get_pip" ]; then
  mkdir -p "$(dirname "$get_pip")"
  cat >"$get_pip" <<'PY'
"""Stand-in for get-pip.py written by gpuserve.vllm tests/sanity.sh: ensurepip, then pip install ARGS (what get-pip does)."""
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"],
                      stdout=subprocess.DEVNULL)
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
PY
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dest="$work/ansible_collections/gpuserve/vllm"
mkdir -p "$dest"

# Tracked files plus untracked ones git does not ignore (a new module before its first commit).
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard) |
  (cd "$REPO" && while IFS= read -r -d '' f; do
     case "$f" in .venv/*|.cache/*|tests/output/*|collections/*) continue ;; esac  # collections/: link to the checkout
     [ -e "$f" ] || continue  # deleted in the work tree
     printf '%s\0' "$f"
   done) |
  (cd "$REPO" && xargs -0 cp --parents -P -t "$dest")

# ansible-test wants a git repo (or no .git at all) to list files; give it one of its own.
(cd "$dest" && git init -q && git add -A >/dev/null 2>&1 || true)

cd "$dest"
args=("$@")
case " $* " in
  *" --test "*|*" --test="*) ;;  # the caller chose the tests
  *) for t in "${SANITY_TESTS[@]}"; do args+=(--test "$t"); done ;;
esac
echo "[sanity] ansible-test sanity --local --python $PYVER ${args[*]}" >&2
"$ANSIBLE_TEST" sanity --local --python "$PYVER" --color no "${args[@]}"
