# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Gather what an NVIDIA GPU node says about itself, for the gpu_preflight module.

``collect`` takes the side effects (find a binary, run a command, read a file, ask libcuda) as
arguments, so that recorded outputs of real nodes drive the unit tests. The parsing lives by
concern in _nvidia_smi (query CSV, topology), _nvidia_driver (driver, CUDA, kernel module),
_nvidia_xid (kernel log) and _pci (lspci, /proc/cmdline); the verdicts in _verdicts.
Stdlib only, Python 3.9+, no Ansible imports: it runs on the managed node.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _pci as pci
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_driver as drv
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_smi as smi
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_xid as xid

CMDLINE_FILE = "/proc/cmdline"
JOURNAL_ARGS = ["-k", "-b", "--no-pager", "-q"]


def read_kernel_log(find: drv.Finder, run: drv.Runner) -> dict[str, t.Any]:
    """This boot's kernel log: the journal when it holds kernel messages, else dmesg; text + source."""
    tried: list[str] = []
    journalctl = find("journalctl")
    if journalctl is not None:
        rc, out, err = run([journalctl] + JOURNAL_ARGS)
        if rc == 0 and not xid.is_empty_journal(out):
            return {"text": out, "source": "journalctl " + " ".join(JOURNAL_ARGS), "reason": None}
        tried.append("journalctl -k -b %s" % (
            "failed (rc=%d): %s" % (rc, drv.first_line(err, out)) if rc != 0 else "has no kernel messages"))
    dmesg = find("dmesg")
    if dmesg is not None:
        rc, out, err = run([dmesg])
        if rc == 0:
            return {"text": out, "source": "dmesg", "reason": None}
        tried.append("dmesg failed (rc=%d): %s" % (rc, drv.first_line(err, out)))
    else:
        tried.append("dmesg is not installed")
    return {"text": None, "source": None, "reason": "; ".join(tried)}


def _query_gpus(find: drv.Finder, run: drv.Runner, facts: dict[str, t.Any]) -> str | None:
    """Run the nvidia-smi query into facts; returns its path when it exists."""
    nvidia_smi = find("nvidia-smi")
    if nvidia_smi is None:
        facts["no_gpu_reason"] = "nvidia-smi is not installed (not on PATH)"
        return None
    rc, out, err = run(smi.query_argv(nvidia_smi))
    parsed = smi.parse_query_output(out)
    gpus, unreadable = parsed["gpus"], parsed["unreadable"]
    facts.update(gpus=gpus, gpu_count=len(gpus), unreadable_gpus=unreadable,
                 gpu_present=bool(gpus or unreadable), smi_rc=rc)
    if not facts["gpu_present"]:
        first = drv.first_line(err, "\n".join(parsed["messages"]))
        facts["no_gpu_reason"] = ("nvidia-smi failed (rc=%d): %s" % (rc, first or "no output")) if rc != 0 \
            else "nvidia-smi lists no GPU" + (" (%s)" % first if first else "")
    facts["mig_enabled_gpus"] = [gpu["index"] for gpu in gpus if gpu["mig_enabled"]]
    return nvidia_smi


def collect(find: drv.Finder, run: drv.Runner, read: drv.Reader,
            cuda_query: drv.CudaQuery = lambda: None) -> dict[str, t.Any]:
    """Gather every fact the preflight needs; never raises for a missing tool, says why instead."""
    facts: dict[str, t.Any] = {
        "gpu_present": False,
        "no_gpu_reason": None,
        "gpus": [],
        "gpu_count": 0,
        "unreadable_gpus": [],
        "mig_enabled_gpus": [],
        "smi_rc": None,
        "topology": None,
        "topology_error": None,
        "cmdline": pci.parse_cmdline(read(CMDLINE_FILE) or ""),
        "acs": {"checked": False, "reason": None, "functions": 0, "access_denied": False,
                "devices": [], "enabled_devices": []},
        "pci_nvidia_gpus": None,
    }
    nvidia_smi = _query_gpus(find, run, facts)
    if facts["gpus"]:
        rc, out, err = run([nvidia_smi, "topo", "-m"])  # type: ignore[list-item]
        if rc == 0:
            try:
                facts["topology"] = smi.parse_topology(out)
            except smi.GpuFactsError as exc:
                facts["topology_error"] = str(exc)
        else:
            facts["topology_error"] = "nvidia-smi topo -m failed (rc=%d): %s" % (rc, drv.first_line(err, out))

    module = drv.kernel_module(find, run, read)
    listed = sorted({gpu["driver_version"] for gpu in facts["gpus"] if gpu["driver_version"]})
    driver = drv.driver_facts(find, run, read, cuda_query, listed_version=listed[0] if listed else None,
                              module=module)
    facts["kernel_module"] = module
    version = listed[0] if listed else driver["driver_version"] or module["version"]
    facts.update(driver_version=version, driver_branch=smi.driver_branch(version),
                 cuda_version=driver["cuda_version"], cuda_version_source=driver["cuda_version_source"],
                 cuda_version_exact=driver["cuda_version_exact"])

    acs = facts["acs"]
    lspci = find("lspci")
    if lspci is None:
        acs["reason"] = "lspci is not installed (package pciutils)"
    else:
        rc, out, err = run([lspci, "-vvv"])
        if rc != 0:
            acs["reason"] = "lspci -vvv failed (rc=%d): %s" % (rc, drv.first_line(err, out))
        else:
            parsed = pci.parse_lspci(out)
            facts["pci_nvidia_gpus"] = parsed.pop("nvidia_gpus")
            acs.update(parsed)
            if acs["access_denied"]:
                acs["reason"] = "lspci could not read capabilities (run as root: become: true)"
            else:
                acs["checked"] = True

    log = read_kernel_log(find, run)
    facts["kernel_log"] = {"source": log["source"], "reason": log["reason"], "xid_events": [],
                           "open_module_required": [], "fallen_off_bus": []}
    if log["text"] is not None:
        parsed_log = xid.parse_kernel_log(log["text"])
        parsed_log.pop("nvrm_lines")
        facts["kernel_log"].update(parsed_log)
    return facts
