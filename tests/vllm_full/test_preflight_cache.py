"""The preflight's verdict cache and its faster parser build, with the real vLLM judging.

- The cache (module vllm_serve_preflight, cache_dir): on the patched 0.17.0 (a hardlinked copy
  of the patched overlay, changed only through temp file + rename), check mode writes nothing;
  an unchanged re-run returns the stored verdict; a changed patched file, a changed drafter
  config.json and a changed flag are judged again; a refusal is never stored.
- The probe imports vLLM's serve.py without vllm/entrypoints/cli/__init__.py (which only loads
  the `vllm bench` subcommands): the parser it builds must be the one a normal import builds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (FIXTURES, NATIVE, NEWEST, PATCHED, REPO, env_python, overlay_python,
                      playbook, run_python, timed)

ROLE = REPO / "roles" / "vllm_server"
EXAMPLE = REPO / "inventories" / "example" / "group_vars" / "gpu_nodes" / "main.yml"
PROBE_FILE = REPO / "plugins" / "module_utils" / "_vllm" / "_preflight_probe.py"


@pytest.fixture(scope="module")
def setup(patched_overlay: tuple, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Own copies (hardlinks) of the patched overlay and the drafter, and the example argv."""
    work = tmp_path_factory.mktemp("cache")
    subprocess.run(["cp", "-al", str(patched_overlay[1] / "vllm"), str(work / "vllm")], check=True)
    shutil.copytree(FIXTURES / "kimi-k2.5-eagle3", work / "drafter")
    (task,) = playbook([{
        "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml"),
                       str(EXAMPLE)],
        "tasks": [{"ansible.builtin.debug": {"var": "__vllm_server_argv"}, "vars": {
            "vllm_server_model_path": str(FIXTURES / "kimi-k2.5"),
            "vllm_server_drafter_path": str(work / "drafter")}}],
    }], work)
    return {"work": work, "argv": task["__vllm_server_argv"], "cache": str(work / "state" / "c")}


def _run(setup: dict, label: str, argv: list | None = None, check: bool = False) -> dict:
    start = time.monotonic()
    (result,) = playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "gpuserve.vllm.vllm_serve_preflight": {
            "python": str(overlay_python(env_python(PATCHED), setup["work"])),
            "argv": argv or setup["argv"],
            "compute_capability": "12.0", "fail_on_problems": False,
            "cache_dir": setup["cache"]},
        "check_mode": check}]}],
        setup["work"])
    timed(f"cache: {label} (cached {result.get('cached')}, {result.get('seconds')} s)", start)
    assert "checks" in result, result.get("msg")
    return result


def _replace(path: Path, text: str) -> None:
    """What python_patch and editors do: a new file renamed over the old (never in place)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_cache_stores_accepted_and_rejudges_every_change(setup: dict) -> None:
    checked = _run(setup, "check mode, empty cache", check=True)
    assert checked["cached"] is False and checked["problems"] == []
    assert "check mode never writes" in checked["cache"] and not os.path.exists(setup["cache"])

    stored = _run(setup, "first run")
    assert stored["cached"] is False and stored["cache"].startswith("stored in ")
    assert oct(os.stat(setup["cache"]).st_mode & 0o777) == "0o700"
    hit = _run(setup, "unchanged re-run")
    assert hit["cached"] is True and hit["checks"] == stored["checks"]
    assert hit["cache_key"] == stored["cache_key"]

    kimi = setup["work"] / "vllm" / "model_executor" / "models" / "kimi_k25.py"
    _replace(kimi, kimi.read_text() + "\n# changed after the verdict\n")
    patched = _run(setup, "a patched file changed")
    assert patched["cached"] is False and patched["problems"] == []
    assert patched["cache_key"] != stored["cache_key"]
    assert _run(setup, "re-run after that")["cached"] is True

    config = json.loads((setup["work"] / "drafter" / "config.json").read_text())
    config["rms_norm_eps"] = 1e-5
    _replace(setup["work"] / "drafter" / "config.json", json.dumps(config))
    assert _run(setup, "drafter config.json changed")["cached"] is False

    argv = list(setup["argv"])
    argv[argv.index("--max-num-seqs") + 1] = "32"
    assert _run(setup, "a flag changed", argv)["cached"] is False


def test_a_refusal_is_never_stored(setup: dict) -> None:
    argv = list(setup["argv"])
    argv[argv.index("--kv-cache-dtype") + 1] = "fp8"
    for label in ("fp8 on 0.17.0", "fp8 on 0.17.0 again"):
        result = _run(setup, label, argv)
        assert result["cached"] is False
        assert [p["check"] for p in result["problems"]] == ["attention-backend-target"]
        assert "vLLM refused" in result["cache"]


# Parser built by the probe (serve.py without the package __init__) vs a normal import.
PARSER = """
import json, runpy, sys
from vllm import platforms
from vllm.platforms.cpu import CpuPlatform
platforms.current_platform = CpuPlatform()
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser

def actions(serve):
    parser = FlexibleArgumentParser(prog="vllm")
    (cmd,) = serve.cmd_init()
    sub = cmd.subparser_init(parser.add_subparsers(dest="subparser"))
    return sorted([a.option_strings, a.dest, repr(a.default), repr(a.choices), repr(a.nargs),
                   type(a).__name__] for a in sub._actions)

probe = runpy.run_path(%(probe)r, run_name="gpuserve_probe")
fast = actions(probe["_serve_module"]())
bench_loaded = any(m.startswith("vllm.entrypoints.cli.benchmark") for m in sys.modules)
for name in [m for m in sys.modules if m.startswith("vllm.entrypoints.cli")]:
    del sys.modules[name]
import vllm.entrypoints.cli.serve as normal
full = actions(normal)
print(json.dumps({"same": fast == full, "flags": len(full), "bench_loaded": bench_loaded,
                  "bench_after": "vllm.entrypoints.cli.benchmark.latency" in sys.modules,
                  "grpc": any("--grpc" in a[0] for a in full)}))
""" % {"probe": str(PROBE_FILE)}


@pytest.mark.parametrize("version", [PATCHED, NATIVE, NEWEST])
def test_probe_parser_is_vllm_serve_parser(version: str) -> None:
    start = time.monotonic()
    found = json.loads(run_python(env_python(version), PARSER).splitlines()[-1])
    timed(f"serve parser, probe vs normal import, {version}", start)
    assert found["same"] is True and found["flags"] > 100, found
    assert found["bench_loaded"] is False
    # 0.16-0.18's vllm/entrypoints/cli/__init__.py loads the bench subcommands; 0.33's is empty
    assert found["bench_after"] is (version != NEWEST)
    assert found["grpc"] is (version != PATCHED)  # from 0.18 serve's subparser adds --grpc
