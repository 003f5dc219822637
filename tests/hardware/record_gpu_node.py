"""Record what a real NVIDIA node says about itself, and show how gpu_preflight reads it.

Run on a machine WITH a GPU (no Ansible needed, stdlib only):
    python3 tests/hardware/record_gpu_node.py OUTDIR
It saves the raw outputs the preflight parses (nvidia-smi query CSV and ``topo -m``,
/proc/driver/nvidia/version, modinfo, /proc/cmdline, ``lspci -vvv``, ``journalctl -k -b`` or
``dmesg``, ``nvidia-smi --query-gpu=driver_version``, the libcuda CUDA version) into OUTDIR,
plus the nvidia-smi banner and ``nvidia-smi -q`` for reference, so that new test fixtures come
from real boxes; then prints the facts ``_gpu._facts.collect`` derives and the problems
``_gpu._verdicts.evaluate`` raises for the RTX PRO 6000 expectations of the gpu_node role's defaults.
Exit status 1 when a parser could not read a recording it should have read.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# The module_utils import each other as ansible_collections.gpuserve.vllm...: link the checkout there.
_ROOT = Path(tempfile.mkdtemp(prefix="gpuserve-recorder-"))
(_ROOT / "ansible_collections" / "gpuserve").mkdir(parents=True)
(_ROOT / "ansible_collections" / "gpuserve" / "vllm").symlink_to(Path(__file__).resolve().parents[2])
sys.path.insert(0, str(_ROOT))
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _facts  # noqa: E402
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _verdicts  # noqa: E402
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_driver  # noqa: E402

ROLE_DEFAULTS = {
    "require_gpu": True, "expected_gpu_count": 8, "expected_gpu_name": "RTX PRO 6000",
    "expected_compute_capability": "12.0", "min_driver_branch": 580,
    "require_open_kernel_modules": True, "acs": "warn", "allow_mig": False,
    "health_action": "fail", "ignore_xids": [],
}


def main(outdir: Path) -> int:
    outdir.mkdir(parents=True, exist_ok=True)
    recorded: dict[str, str] = {}

    def run(argv: list[str]) -> tuple[int, str, str]:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                              env={"LC_ALL": "C", "PATH": "/usr/bin:/bin:/usr/sbin:/sbin:/usr/local/bin"})
        words = [Path(argv[0]).name] + [a.lstrip("-") for a in argv[1:]]
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(words))[:60]
        recorded[name] = proc.stdout
        (outdir / f"{name}.txt").write_text(proc.stdout + (f"\n# stderr:\n{proc.stderr}" if proc.stderr else ""))
        return proc.returncode, proc.stdout, proc.stderr

    def read(path: str) -> str | None:
        try:
            text = Path(path).read_text()
        except OSError:
            return None
        (outdir / ("file" + path.replace("/", "-") + ".txt")).write_text(text)
        return text

    def cuda_query() -> int | None:
        value = _nvidia_driver.libcuda_version()
        (outdir / "libcuda-cuDriverGetVersion.txt").write_text("%s\n" % value)
        return value

    facts = _facts.collect(shutil.which, run, read, cuda_query)
    driver = _nvidia_driver.driver_facts(shutil.which, run, read, cuda_query)
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi:  # for reference only: the preflight never reads these (banner text changes per branch)
        run([nvidia_smi])
        run([nvidia_smi, "-q"])
    problems, advisories = _verdicts.evaluate(facts, ROLE_DEFAULTS)
    report = {"facts": facts, "driver": driver, "problems_vs_role_defaults": problems, "advisories": advisories}
    (outdir / "facts.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    unread = []
    if facts["gpu_present"] and facts["topology"] is None:
        unread.append(f"topology: {facts['topology_error']}")
    if facts["gpu_present"] and not all(g["compute_capability"] for g in facts["gpus"]):
        unread.append("compute capability missing from the query CSV")
    if facts["gpu_present"] and facts["kernel_module"]["flavor"] == _nvidia_driver.FLAVOR_UNKNOWN:
        unread.append("kernel module flavour unknown")
    for line in unread:
        print("UNREAD:", line)
    return 1 if unread else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-node-recording")))
