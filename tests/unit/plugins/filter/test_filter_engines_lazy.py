"""Finding any gpuserve filter imports none of the engines (plugins/plugin_utils/_lazy_engine.py).

ansible-core finds a collection's filter by loading every file of its plugins/filter, in each
task's worker process; an engine imported at a filter file's top cost every task that used any
gpuserve filter about 0.12 s of controller CPU (benchmarks/bench_filter_load.py). Checked here
with ansible-core's own loader, in a fresh interpreter as a worker is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.plugin_utils._lazy_engine import Engine

REPO = Path(__file__).resolve().parents[4]
FILTER_DOCS = sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.yml"))

# Looks every filter up as a task's templating does, then calls one; prints which of the
# collection's module_utils were imported after each.
PROBE = """
import json, sys
from ansible.plugins.loader import filter_loader, init_plugin_loader
init_plugin_loader([sys.argv[1]])
def engines():
    return sorted(m for m in sys.modules if m.startswith("ansible_collections.gpuserve.vllm.plugins.module_utils."))
found = {name: filter_loader.get("gpuserve.vllm." + name) for name in sys.argv[2:]}
after_lookup = engines()
result = found["vllm_is_loopback"].j2_function("127.0.0.1")
print(json.dumps({"found": sorted(n for n, f in found.items() if f is not None),
                  "after_lookup": after_lookup, "after_call": engines(), "result": result}))
"""


@pytest.fixture(scope="module")
def seen() -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "collections"), *FILTER_DOCS],
                          capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(done.stdout)


def test_looking_every_filter_up_imports_no_engine(seen: dict) -> None:
    assert seen["found"] == FILTER_DOCS
    assert seen["after_lookup"] == []


def test_calling_a_filter_imports_its_engine_only(seen: dict) -> None:
    assert seen["result"] is True
    assert seen["after_call"] == ["ansible_collections.gpuserve.vllm.plugins.module_utils._vllm",
                                  "ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._net"]


def test_engine_reads_the_module_and_names_it() -> None:
    net = Engine("_vllm._net")
    assert net.bare_host(" [::1] ") == "::1"
    assert repr(net) == "Engine('ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._net')"
    with pytest.raises(AttributeError):
        net.no_such_name  # noqa: B018 (the read is the test)
