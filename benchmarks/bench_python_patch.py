"""How long a no-change run of gpuserve.vllm.python_patch takes (target: < 1.5 s through Ansible).

Usage (after `source tests/env.sh`): python benchmarks/bench_python_patch.py [--runs N] [--version V]

Copies vLLM's deepseek_v2.py and config/speculative.py from a real wheel into a temp dir,
patches them once (the EAGLE-3 import, base, members and allow-list edits, all-or-nothing), then
times N re-runs that change nothing:
  * through Ansible: `ansible localhost -m gpuserve.vllm.python_patch -a <json>` (connection
    local), the figure an operator sees per task, next to the same command with
    ansible.builtin.ping (the floor Ansible itself costs on this machine at this load);
  * the module alone: `python -m ansible_collections.gpuserve.vllm.plugins.modules.python_patch
    args.json` (interpreter start, Ansible's module_utils import, reads, engine, result);
  * the module's work in-process: PythonPatch.run() with the arguments already parsed.
Prints medians; asserts nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import typing as t
from contextlib import redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.vllm_wheels import wheel_file  # noqa: E402

FILES = {
    "deepseek_v2.py": "vllm/model_executor/models/deepseek_v2.py",
    "speculative.py": "vllm/config/speculative.py",
}

EDITS = {
    "deepseek_v2.py": [
        {"id": "import", "import": {"module": ".interfaces", "names": ["SupportsEagle3"]}},
        {"id": "base", "base": {"class": "DeepseekV2ForCausalLM", "names": ["SupportsEagle3"]}},
        {"id": "set-layers", "member": {"class": "DeepseekV2ForCausalLM", "source": (
            "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
            "    self.model.aux_hidden_state_layers = layers\n")}},
        {"id": "get-layers", "member": {"class": "DeepseekV2ForCausalLM", "source": (
            "def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n"
            "    num_layers = len(self.model.layers)\n"
            "    return (2, num_layers // 2, num_layers - 3)\n")}},
    ],
    "speculative.py": [
        {"id": "allow-list", "when_missing": "skip", "element": {
            "scope": "SpeculativeConfig._verify_args", "name": "aux_hidden_states_supported",
            "values": ["kimi_k2", "deepseek_v3"]}},
    ],
}


def median_seconds(func: t.Callable[[], t.Any], runs: int) -> float:
    times = []
    for _run in range(runs):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--version", default="0.17.0")
    opts = parser.parse_args()
    if "ANSIBLE_COLLECTIONS_PATH" not in os.environ:
        sys.exit("source tests/env.sh first (ANSIBLE_COLLECTIONS_PATH is not set)")

    with tempfile.TemporaryDirectory(prefix="bench-python-patch-") as tmp:
        root = Path(tmp)
        files = []
        for name, member in FILES.items():
            path = root / name
            path.write_bytes(wheel_file(opts.version, member))
            lines = path.read_bytes().count(b"\n")
            files.append({"path": str(path), "edits": EDITS[name]})
            print("%-16s vllm %s, %d lines" % (name, opts.version, lines))
        args = {"files": files, "state_dir": str(root / "state")}
        env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_NOCOLOR="1")
        adhoc = ["ansible", "localhost", "-c", "local",
                 "-e", "ansible_python_interpreter=%s" % sys.executable,
                 "-m", "gpuserve.vllm.python_patch", "-a", json.dumps(args)]

        first = subprocess.run(adhoc, capture_output=True, text=True, env=env, check=False)
        if "CHANGED" not in first.stdout:
            sys.exit("the first run did not patch the files:\n%s%s" % (first.stdout, first.stderr))

        def through_ansible() -> None:
            out = subprocess.run(adhoc, capture_output=True, text=True, env=env, check=False)
            if "SUCCESS" not in out.stdout:
                sys.exit("a no-change run did not report SUCCESS:\n%s%s" % (out.stdout, out.stderr))

        module_args = root / "args.json"
        module_args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        collections_root = os.environ["ANSIBLE_COLLECTIONS_PATH"].split(":")[0]
        module_env = dict(env, PYTHONPATH=collections_root)
        direct = [sys.executable, "-m",
                  "ansible_collections.gpuserve.vllm.plugins.modules.python_patch", str(module_args)]

        def module_alone() -> None:
            out = subprocess.run(direct, capture_output=True, text=True, env=module_env, check=False)
            result = json.loads(out.stdout)
            if result.get("changed") or result.get("failed"):
                sys.exit("the direct module run was not a no-change run: %s" % out.stdout)

        sys.path.insert(0, collections_root)
        # pylint: disable-next=import-outside-toplevel
        from ansible.module_utils import basic
        # pylint: disable-next=import-outside-toplevel
        from ansible_collections.gpuserve.vllm.plugins.modules import python_patch as pp
        # pylint: disable-next=import-outside-toplevel
        from ansible_collections.gpuserve.vllm.plugins.module_utils._patch._run import PythonPatch

        # What ansible's module wrapper hands the module (2.19: arguments plus a JSON profile).
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()  # pylint: disable=protected-access
        basic._ANSIBLE_PROFILE = "legacy"  # pylint: disable=protected-access
        with redirect_stdout(io.StringIO()):
            module = basic.AnsibleModule(argument_spec=pp.argument_spec(),
                                         supports_check_mode=True)

        def in_process() -> None:
            result = PythonPatch(module.params, check=False, diff=False, warn=module.warn).run()
            if result["changed"]:
                sys.exit("the in-process run was not a no-change run")

        ping = adhoc[:adhoc.index("-m")] + ["-m", "ansible.builtin.ping"]

        def ansible_ping() -> None:
            subprocess.run(ping, capture_output=True, text=True, env=env, check=True)

        ping_s = median_seconds(ansible_ping, opts.runs)
        ansible_s = median_seconds(through_ansible, opts.runs)
        alone_s = median_seconds(module_alone, opts.runs)
        inproc_s = median_seconds(in_process, max(opts.runs, 10))
        print("no-change run through Ansible (ansible ad hoc, median of %d): %.3f s  (target < 1.5 s)"
              % (opts.runs, ansible_s))
        print("same ad hoc command with ansible.builtin.ping (Ansible's own floor here): %.3f s"
              % ping_s)
        print("load average while measuring: %s" % " ".join("%.1f" % x for x in os.getloadavg()))
        print("no-change run of the module alone (python -m ..., median of %d): %.3f s"
              % (opts.runs, alone_s))
        print("module's own work in-process (2 files, read + engine + records, median): %.1f ms"
              % (inproc_s * 1000))


if __name__ == "__main__":
    main()
