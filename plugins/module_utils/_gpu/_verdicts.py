# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Judge the facts of _facts.collect against what the inventory expects.

Every problem names the option that relaxes it (the gpu_node role maps options to its variables)
and says what an operator should do next; advisories are warnings that do not fail the node.
Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _pci as pci
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_driver as drv
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_smi as smi

HEALTH_CHOICES = ("fail", "warn")
_OPEN_FIX = ("install the open kernel modules of the same branch (Ubuntu: nvidia-driver-%s-server-open; "
             "NVIDIA's CUDA repository: nvidia-open), remove the proprietary package, and reboot")


def _problem(code: str, option: str, message: str) -> dict[str, str]:
    return {"code": code, "option": option, "message": message}


def _shown(items: list[str], limit: int = 8) -> str:
    return ", ".join(items[:limit]) + (" and %d more" % (len(items) - limit) if len(items) > limit else "")


def acs_p2p_risk(facts: dict[str, t.Any]) -> bool:
    """True when GPU peer traffic on a PCIe-only box crosses ACS-enabled bridges unprotected."""
    topology = facts.get("topology") or {}
    if not facts.get("gpu_present") or topology.get("nvlink"):
        return False
    if facts["gpu_count"] < 2:
        return False
    return bool(facts["acs"]["enabled_devices"]) and not facts["cmdline"]["p2p_safe"]


def _gpu_labels(facts: dict[str, t.Any]) -> dict[str, str]:
    """PCI key -> 'GPU3 (00000000:44:00.0)' for the GPUs nvidia-smi listed."""
    labels = {}
    for gpu in facts["gpus"]:
        key = pci.pci_key(gpu["bus_id"])
        if key:
            labels[key] = "GPU%s (%s)" % (gpu["index"], gpu["bus_id"])
    return labels


def _no_gpu(facts: dict[str, t.Any], expect: dict[str, t.Any]) -> list[dict[str, str]]:
    """nvidia-smi lists nothing: no GPU here, or GPUs on the bus the driver does not serve."""
    on_bus = facts.get("pci_nvidia_gpus") or []
    module = facts["kernel_module"]
    log = facts["kernel_log"]
    if on_bus:
        seen = "lspci sees %d NVIDIA GPU(s) (%s)" % (len(on_bus), _shown([gpu["address"] for gpu in on_bus], 4))
        refused = log["open_module_required"]
        if refused or (module["flavor"] == drv.FLAVOR_PROPRIETARY and expect.get("require_open_kernel_modules")):
            evidence = ("the kernel log (%s) says GPU %s requires use of the NVIDIA open kernel modules"
                        % (log["source"], ", ".join(refused))) if refused else \
                "the loaded NVIDIA kernel module is the proprietary one (%s)" % (module["source"] or "modinfo")
            return [_problem(
                "kernel_module", "require_open_kernel_modules",
                "%s but %s, and %s: Blackwell GPUs work only with the open kernel modules. Fix: %s (this "
                "role: gpu_node_driver_install: true). Relaxing this check does not make the GPUs usable."
                % (seen, facts["no_gpu_reason"], evidence,
                   _OPEN_FIX % (facts["driver_branch"] or "<branch>")))]
        if expect.get("require_gpu", True):
            return [_problem(
                "gpus_not_served", "require_gpu",
                "%s but %s: this is a GPU node whose NVIDIA driver does not serve its GPUs. Read "
                "`journalctl -k -b | grep NVRM` for the reason, (re)install the driver "
                "(gpu_node_driver_install: true) and reboot. A rehearsal without GPU only skips the "
                "hardware checks, it does not make the GPUs usable." % (seen, facts["no_gpu_reason"]))]
        return []
    if expect.get("require_gpu", True):
        return [_problem(
            "no_gpu", "require_gpu",
            "no NVIDIA GPU found: %s, and lspci sees no NVIDIA GPU either. On a GPU node, install the "
            "NVIDIA driver and check that `nvidia-smi` lists the GPUs; on a machine without GPUs "
            "(container, CI), run as a rehearsal that does not require a GPU." % facts["no_gpu_reason"])]
    return []


def _count(facts: dict[str, t.Any], expected: int) -> list[dict[str, str]]:
    known = facts["gpu_count"] + len(facts["unreadable_gpus"])
    if known == expected:
        return []
    listed = _shown(["GPU%s at %s" % (gpu["index"], gpu["bus_id"]) for gpu in facts["gpus"]], 16)
    head = "expected %d NVIDIA GPUs, nvidia-smi lists %d (%s)" % (expected, known, listed)
    if known > expected:
        return [_problem(
            "gpu_count", "expected_gpu_count",
            "%s: this node has more GPUs than the inventory says. Check that the inventory points at the "
            "right host; if the node really has %d GPUs, raise the expected count to %d (and the tensor "
            "parallel size vLLM uses)." % (head, known, known))]
    on_bus = facts.get("pci_nvidia_gpus") or []
    seen = {pci.pci_key(gpu["bus_id"]) for gpu in facts["gpus"]} | \
        {pci.pci_key(gpu["bus_id"]) for gpu in facts["unreadable_gpus"]}
    missing = [gpu["address"] for gpu in on_bus if pci.pci_key(gpu["address"]) not in seen]
    bus = (" lspci still sees %d NVIDIA GPUs; missing from nvidia-smi: %s." % (len(on_bus), ", ".join(missing))) \
        if missing else ""
    return [_problem(
        "gpu_count", "expected_gpu_count",
        "%s.%s A GPU missing from the list has usually fallen off the bus: look for Xid 79 in "
        "`journalctl -k -b | grep -i xid` (or dmesg), compare with `lspci -d 10de:`, then reseat or "
        "power-cycle the node; if the node really has %d GPUs, lower the expected count to %d."
        % (head, bus, known, known))]


def _health(facts: dict[str, t.Any], expect: dict[str, t.Any]) -> tuple[list[dict[str, str]], list[str]]:
    """GPU error states, GPUs nvidia-smi cannot open, and this boot's Xid events."""
    problems: list[dict[str, str]] = []
    advisories: list[str] = []
    labels = _gpu_labels(facts)
    found: list[tuple[str, str, str]] = []  # (code, option, message)
    for gpu in facts["gpus"]:
        if gpu["errors"]:
            fields = ", ".join("%s=%s" % item for item in gpu["errors"].items())
            found.append(("gpu_error", "health_action",
                          "GPU%s (%s) is in an error state: nvidia-smi reads %s. Drain the node and reset "
                          "the GPU (`nvidia-smi -r -i %s`) or reboot; look for Xid errors in "
                          "`journalctl -k -b | grep -i xid`." % (gpu["index"], gpu["bus_id"], fields, gpu["index"])))
    for gpu in facts["unreadable_gpus"]:
        found.append(("gpu_unreadable", "health_action",
                      "nvidia-smi cannot open the GPU at %s: %s. Reboot the node; if it stays lost, reseat "
                      "or service the GPU." % (gpu["bus_id"], gpu["reason"])))
    log = facts["kernel_log"]
    ignored = set(expect.get("ignore_xids") or [])
    for event in log["xid_events"]:
        where = labels.get(pci.pci_key(event["bus_id"]) or "", "the GPU at PCI %s" % event["bus_id"])
        text = "Xid %d (%s) on %s, %d time(s) in this boot's kernel log (%s)%s" % (
            event["xid"], event["meaning"], where, event["count"], log["source"],
            (": " + event["detail"]) if event["detail"] else "")
        if event["xid"] in ignored:
            advisories.append("%s; ignored as asked (ignore_xids)." % text)
        elif event["fatal"]:
            found.append(("xid", "ignore_xids", "%s. The GPU cannot be trusted to serve: %s. After the fix "
                                                "a reboot clears the log." % (text, event["action"])))
        else:
            advisories.append("%s. %s." % (text, event["action"][:1].upper() + event["action"][1:]))
    for bus in log["fallen_off_bus"]:
        found.append(("xid", "ignore_xids", "the kernel log (%s) says the NVIDIA GPU %s has fallen off the bus "
                                            "(as Xid 79). Reseat the GPU, check its power and PCIe link, "
                                            "then reboot." % (log["source"], bus)))
    if log["source"] is None:
        advisories.append("could not read this boot's kernel log (%s): Xid errors not checked. Run as root "
                          "(become: true)." % log["reason"])
    for code, option, message in found:
        if expect.get("health_action", "fail") == "fail":
            problems.append(_problem(code, option, message))
        else:
            advisories.append(message)
    return problems, advisories


def _mig(facts: dict[str, t.Any], expect: dict[str, t.Any]) -> tuple[list[dict[str, str]], list[str]]:
    enabled = facts["mig_enabled_gpus"]
    advisories = []
    pending_on = [str(gpu["index"]) for gpu in facts["gpus"] if gpu["mig_enabled"] is False and gpu["mig_pending"]]
    if pending_on:
        advisories.append("MIG mode will be enabled on GPU %s at the next GPU reset or reboot (pending): "
                          "run `nvidia-smi -i <index> -mig 0` to cancel it." % ", ".join(pending_on))
    if not enabled or expect.get("allow_mig"):
        return [], advisories
    pending_off = [gpu["index"] for gpu in facts["gpus"] if gpu["mig_enabled"] and gpu["mig_pending"] is False]
    shown = ", ".join(str(index) for index in enabled)
    return [_problem(
        "mig", "allow_mig",
        "MIG mode is enabled on GPU %s: vLLM with tensor parallelism needs whole GPUs, not MIG slices. "
        "Disable it as root with no process on the GPUs: `nvidia-smi -i %s -mig 0`%s, then reset the GPUs "
        "(`nvidia-smi -r`) or reboot." % (
            shown, shown.replace(" ", ""),
            " (already pending on GPU %s: only the reset is missing)" % ", ".join(map(str, pending_off))
            if pending_off else ""))], advisories


def _driver(facts: dict[str, t.Any], expect: dict[str, t.Any]) -> tuple[list[dict[str, str]], list[str]]:
    problems: list[dict[str, str]] = []
    advisories: list[str] = []
    min_branch = expect.get("min_driver_branch")
    if min_branch is not None:
        branch = facts["driver_branch"]
        if branch is None:
            problems.append(_problem(
                "driver_branch", "min_driver_branch",
                "could not read the NVIDIA driver version (nvidia-smi and %s say nothing usable); "
                "branch >= %d is required." % (drv.DRIVER_VERSION_FILE, min_branch)))
        elif branch < min_branch:
            problems.append(_problem(
                "driver_branch", "min_driver_branch",
                "NVIDIA driver %s is branch %d, below the required branch %d (RTX PRO 6000 Blackwell "
                "needs the %d data-center branch or newer, with the open kernel modules). Install a "
                "newer driver (Ubuntu: nvidia-driver-%d-server-open) and reboot, or lower the "
                "minimum branch." % (facts["driver_version"], branch, min_branch, min_branch, min_branch)))
    module = facts["kernel_module"]
    if expect.get("require_open_kernel_modules"):
        if module["flavor"] == drv.FLAVOR_PROPRIETARY:
            evidence = ("license %r" % module["license"]) if module["source"] == "modinfo nvidia" \
                else "%s says proprietary" % (module["source"] or "the kernel")
            problems.append(_problem(
                "kernel_module", "require_open_kernel_modules",
                "the NVIDIA kernel module is the proprietary one (%s), but Blackwell GPUs need the open "
                "kernel modules. Fix: %s." % (evidence, _OPEN_FIX % (facts["driver_branch"] or "<branch>"))))
        elif module["flavor"] != drv.FLAVOR_OPEN:
            problems.append(_problem(
                "kernel_module", "require_open_kernel_modules",
                "could not tell whether the NVIDIA kernel module is the open one: %s is missing "
                "and `modinfo -F license nvidia` gave nothing (the open module says 'Dual MIT/GPL'). "
                "Check that the nvidia module is loaded (`lsmod | grep nvidia`)." % drv.DRIVER_VERSION_FILE))
    if module["version"] and module["installed_version"] and module["version"] != module["installed_version"]:
        advisories.append(
            "the loaded NVIDIA kernel module is %s but %s is installed: a reboot is pending before "
            "the new driver is used." % (module["version"], module["installed_version"]))
    return problems, advisories


def _identity(facts: dict[str, t.Any], expect: dict[str, t.Any]) -> list[dict[str, str]]:
    """Name and compute capability; a field in an error state is reported by _health instead."""
    problems = []
    gpus = facts["gpus"]
    expected_name = expect.get("expected_gpu_name")
    if expected_name:
        wrong = [gpu for gpu in gpus if "name" not in gpu["errors"]
                 and expected_name.lower() not in (gpu["name"] or "").lower()]
        if wrong:
            found = "; ".join("GPU%s is %r" % (gpu["index"], gpu["name"]) for gpu in wrong)
            problems.append(_problem(
                "gpu_name", "expected_gpu_name",
                "expected every GPU name to contain %r, but %s. Check that the inventory points at "
                "the right host, or change the expected name." % (expected_name, found)))
    expected_cc = expect.get("expected_compute_capability")
    if expected_cc:
        wrong = [gpu for gpu in gpus if "compute_cap" not in gpu["errors"]
                 and gpu["compute_capability"] != str(expected_cc)]
        if wrong:
            found = "; ".join("GPU%s has %s" % (gpu["index"], gpu["compute_capability"] or "none reported")
                              for gpu in wrong)
            problems.append(_problem(
                "compute_capability", "expected_compute_capability",
                "expected compute capability %s (RTX PRO 6000 Blackwell is 12.0, sm_120), but %s. "
                "A driver too old to know the GPU reports none; otherwise this is a different GPU "
                "model than the inventory says." % (expected_cc, found)))
    return problems


def _pcie(facts: dict[str, t.Any], expect: dict[str, t.Any]) -> tuple[list[dict[str, str]], list[str]]:
    problems: list[dict[str, str]] = []
    advisories: list[str] = []
    if facts["topology"] is None and facts["gpus"]:
        advisories.append("GPU topology unknown: %s" % facts["topology_error"])
    acs = facts["acs"]
    mode = expect.get("acs", "warn")
    if not acs["checked"]:
        if mode != "ignore":
            advisories.append("PCIe ACS state unknown: %s." % acs["reason"])
    elif acs_p2p_risk(facts) and mode != "ignore":
        enabled = acs["enabled_devices"]
        message = (
            "PCIe ACS is enabled on %d bridge(s) (%s) of this PCIe-only GPU box and the kernel "
            "command line has neither iommu=pt nor pci=noacs: GPU peer-to-peer traffic is "
            "redirected through the root complex and NCCL can hang or crawl. Fix: add iommu=pt "
            "(or pci=noacs) to the kernel command line and reboot, or disable ACS/VT-d in the BIOS; "
            "fallback: NCCL_P2P_DISABLE=1 (slower, no hang)." % (len(enabled), _shown(enabled)))
        if mode == "fail":
            problems.append(_problem("acs", "acs", message))
        else:
            advisories.append(message)
    return problems, advisories


def _deferred(facts: dict[str, t.Any], expect: dict[str, t.Any]) -> tuple[list[dict[str, str]], list[str]]:
    """A new driver on disk waits for its reboot: judge the module the node will boot into."""
    version = facts["kernel_module"]["installed_version"]
    if not version:
        return [_problem(
            "driver_pending", "require_gpu",
            "a reboot into a new NVIDIA driver is due, but `modinfo nvidia` finds no NVIDIA kernel module on "
            "disk (%s): the driver packages built no module for the running kernel. Read the DKMS build log "
            "(/var/lib/dkms/nvidia/*/build/make.log) and `dkms status`, fix it and run again; the node was not "
            "rebooted into a driver that cannot load." % facts["no_gpu_reason"])], []
    on_disk = dict(facts, driver_version=version, driver_branch=smi.driver_branch(version))
    problems, advisories = _driver(on_disk, expect)
    advisories.append(
        "the NVIDIA driver %s on disk is not loaded yet (%s): judged as what the node boots into (branch, "
        "open kernel module); the GPU checks (count, names, health, links) run after the reboot."
        % (version, facts["no_gpu_reason"]))
    return problems, advisories


def evaluate(facts: dict[str, t.Any], expect: dict[str, t.Any]) -> tuple[list[dict[str, str]], list[str]]:
    """Problems (refusals, each naming the option that relaxes it) and advisories for the facts.

    ``expect`` keys: require_gpu, expected_gpu_count, expected_gpu_name,
    expected_compute_capability, min_driver_branch, require_open_kernel_modules, acs
    (warn|fail|ignore), allow_mig, health_action (fail|warn), ignore_xids, reboot_pending (a new
    driver is on disk and loads at the next reboot). None is not checked.
    """
    if not facts["gpu_present"]:
        if expect.get("reboot_pending"):
            return _deferred(facts, expect)
        problems = _no_gpu(facts, expect)
        advisories = []
        if not problems and facts.get("pci_nvidia_gpus"):
            advisories.append("rehearsal on a node where lspci sees %d NVIDIA GPU(s) that the driver does "
                              "not serve (%s)." % (len(facts["pci_nvidia_gpus"]), facts["no_gpu_reason"]))
        return problems, advisories

    problems = []
    advisories = []
    expected_count = expect.get("expected_gpu_count")
    if expected_count is not None:
        problems += _count(facts, expected_count)
    problems += _identity(facts, expect)
    for check in (_driver, _health, _mig, _pcie):
        found, advised = check(facts, expect)
        problems += found
        advisories += advised
    without_persistence = [str(gpu["index"]) for gpu in facts["gpus"] if gpu["persistence_mode"] is False]
    if without_persistence:
        advisories.append(
            "persistence mode is off on GPU %s: enable nvidia-persistenced so the driver stays "
            "initialised between processes." % ", ".join(without_persistence))
    return problems, advisories
