#!/usr/bin/python
# Copyright: contributors to gpuserve.vllm
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module gpuserve.vllm.gpu_preflight: NVIDIA GPU node facts checked against expectations."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_preflight
short_description: Collect NVIDIA GPU node facts and check them against what the inventory expects
version_added: 0.1.0
description:
  - Reads what an NVIDIA GPU node says about itself and returns it as structured facts
    (GPU count, names, PCI addresses, compute capability, driver version and branch, kernel
    module flavour open or proprietary, CUDA version the driver supports, MIG mode and error
    states per GPU, this boot's Xid events, the NVIDIA GPUs on the PCI bus, kernel command line
    IOMMU/ACS switches, PCIe ACS state of every bridge, the C(nvidia-smi topo -m) matrix).
  - Runs C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits), C(nvidia-smi topo -m),
    C(modinfo -F license nvidia), C(modinfo -F version nvidia), C(lspci -vvv) and
    C(journalctl -k -b) (or C(dmesg) when the journal holds no kernel messages), reads
    C(/proc/driver/nvidia/version) and C(/proc/cmdline), and asks C(libcuda.so.1) for the CUDA
    version (C(cuDriverGetVersion)). The nvidia-smi banner is never read. It changes nothing.
  - Compares the facts with the expectations given (GPU count, name, compute capability,
    minimum driver branch, open kernel modules) and reports every mismatch as a problem with a
    message an operator can act on. With O(fail_on_problems=true) the module fails with those
    messages; otherwise it returns them in RV(problems).
  - A node without an NVIDIA GPU (no C(nvidia-smi), or C(nvidia-smi) failing or listing no GPU)
    is a problem only when O(require_gpu=true); with O(require_gpu=false) the hardware checks
    are skipped and RV(rehearsal) is true, for containers and CI. When C(lspci) still sees
    NVIDIA GPUs the problem says so instead of "no GPU", and names the proprietary kernel module
    (which cannot drive Blackwell GPUs) when that is the cause.
  - Refuses MIG mode (unless O(allow_mig=true)), GPUs whose fields read an error state
    (C(ERR!), C([GPU requires reset]), C([Unknown Error])) or that nvidia-smi cannot open, and
    fatal Xid errors of this boot (79, 48, 95, 119, 120, ...); O(health_action=warn) turns these
    into advisories, O(ignore_xids) skips handled Xid numbers. Other Xids are advisories.
  - Other findings (ACS on a PCIe-only box, a pending driver reboot, persistence mode off,
    facts that could not be read) are advisories, returned in RV(advisories) and shown as
    warnings.
author:
  - gpuserve maintainers (@gpuserve)
options:
  require_gpu:
    description:
      - Whether a node without an NVIDIA GPU is a problem.
      - Set to V(false) to rehearse on machines without GPUs; the hardware checks are then
        skipped when no GPU is found.
    type: bool
    default: true
  expected_gpu_count:
    description:
      - Number of GPUs C(nvidia-smi) must list. Not checked when omitted.
    type: int
  expected_gpu_name:
    description:
      - Case-insensitive substring every GPU name must contain, for example V(RTX PRO 6000).
        Not checked when omitted or empty.
    type: str
  expected_compute_capability:
    description:
      - Compute capability every GPU must report, as C(nvidia-smi) prints it, for example
        V(12.0). Not checked when omitted or empty.
    type: str
  min_driver_branch:
    description:
      - Lowest acceptable driver branch (the first number of the driver version, V(580) for
        580.95.05). Not checked when omitted.
    type: int
  require_open_kernel_modules:
    description:
      - Whether the loaded NVIDIA kernel module must be the open one (Blackwell GPUs need it).
      - The flavour comes from C(/proc/driver/nvidia/version) (C(Open Kernel Module)) or, when
        no module is loaded, from C(modinfo -F license nvidia) (V(Dual MIT/GPL) is open,
        V(NVIDIA) proprietary).
    type: bool
    default: false
  allow_mig:
    description:
      - Accept GPUs in MIG mode. vLLM with tensor parallelism needs whole GPUs, so MIG is refused
        by default.
    type: bool
    default: false
  health_action:
    description:
      - What to do with GPUs in an error state, GPUs nvidia-smi cannot open and fatal Xid errors
        of this boot - V(fail) makes them problems, V(warn) advisories.
    type: str
    choices: [fail, warn]
    default: fail
  ignore_xids:
    description:
      - Xid numbers of this boot's kernel log to report as advisories only (for example an Xid
        handled by a GPU reset without a reboot; the kernel log keeps it until the next boot).
    type: list
    elements: int
    default: []
  acs:
    description:
      - What to do when PCIe ACS is enabled on bridges of a box whose GPUs talk over PCIe only
        and the kernel command line has neither C(iommu=pt) nor C(pci=noacs) (NCCL peer-to-peer
        traffic can hang).
      - V(warn) adds an advisory, V(fail) a problem, V(ignore) nothing (for example when NCCL
        peer-to-peer is disabled anyway).
    type: str
    choices: [warn, fail, ignore]
    default: warn
  fail_on_problems:
    description:
      - Fail the task when any problem is found. With V(false) the problems are only returned.
    type: bool
    default: true
  reboot_pending:
    description:
      - A new NVIDIA driver is on disk and loads at the next reboot (the gpu_node role's driver plan says so).
      - When no GPU can be read now, the hardware checks are deferred (RV(deferred)) and only the kernel module on
        disk, what the node will boot into, is judged (O(min_driver_branch), O(require_open_kernel_modules)). A
        module missing from disk is a problem. When the GPUs can be read, the running driver is judged as usual.
    type: bool
    default: false
notes:
  - Run it as root (C(become=true)); as an ordinary user C(lspci) cannot read the ACS
    capability and the ACS state is reported as unknown.
  - Binaries are looked up on E(PATH) and in the sbin directories.
extends_documentation_fragment:
  - gpuserve.vllm.attributes
  - gpuserve.vllm.attributes.read_only
"""

EXAMPLES = r"""
- name: Check an 8x RTX PRO 6000 Blackwell node
  gpuserve.vllm.gpu_preflight:
    expected_gpu_count: 8
    expected_gpu_name: RTX PRO 6000
    expected_compute_capability: "12.0"
    min_driver_branch: 580
    require_open_kernel_modules: true
  become: true

- name: Rehearse in a container without GPUs, collecting problems instead of failing
  gpuserve.vllm.gpu_preflight:
    require_gpu: false
    fail_on_problems: false
  register: preflight

- name: Show the topology
  ansible.builtin.debug:
    var: preflight.topology.gpu_pair_links
"""

RETURN = r"""
gpu_present:
  description: Whether C(nvidia-smi) listed at least one GPU.
  returned: always
  type: bool
  sample: true
no_gpu_reason:
  description: Why no GPU was found; null when one was.
  returned: always
  type: str
  sample: nvidia-smi is not installed (not on PATH)
rehearsal:
  description: True when no GPU was found and O(require_gpu=false), so the hardware checks were skipped.
  returned: always
  type: bool
  sample: false
deferred:
  description: True when no GPU was found and O(reboot_pending=true), so the hardware checks wait for the reboot.
  returned: always
  type: bool
  sample: false
gpu_count:
  description: Number of GPUs C(nvidia-smi) listed.
  returned: always
  type: int
  sample: 8
gpus:
  description: One entry per GPU, as C(nvidia-smi --query-gpu) reports it.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: GPU index, type: int, sample: 0}
    name: {description: Product name, type: str, sample: NVIDIA RTX PRO 6000 Blackwell Server Edition}
    bus_id: {description: PCI address, type: str, sample: "00000000:03:00.0"}
    uuid: {description: GPU UUID, type: str, sample: GPU-3f1c8a52-6d0e-4b7a-9c21-5e8f0a7b1d24}
    driver_version: {description: Driver version, type: str, sample: 580.95.05}
    compute_capability: {description: Compute capability; null when not reported, type: str, sample: "12.0"}
    memory_total_mib: {description: Memory in MiB, type: int, sample: 97887}
    persistence_mode: {description: Persistence mode on; null when not reported, type: bool, sample: true}
    pstate: {description: Performance state; null when not reported or in an error state, type: str, sample: P0}
    mig_enabled: {description: MIG mode (current); null when the GPU has no MIG, type: bool, sample: false}
    mig_pending: {description: MIG mode after the next reset; null when the GPU has no MIG, type: bool, sample: false}
    errors: {description: "Fields in an error state, as nvidia-smi field -> value", type: dict, sample: {pstate: "[GPU requires reset]"}}
unreadable_gpus:
  description: GPUs nvidia-smi could not open (C(Unable to determine the device handle ...)).
  returned: always
  type: list
  elements: dict
  sample: [{bus_id: "0000:84:00.0", reason: GPU is lost. Reboot the system to recover this GPU}]
mig_enabled_gpus:
  description: Indices of the GPUs in MIG mode.
  returned: always
  type: list
  elements: int
  sample: []
smi_rc:
  description: Exit status of the nvidia-smi query; null when nvidia-smi is missing.
  returned: always
  type: int
  sample: 0
pci_nvidia_gpus:
  description: NVIDIA GPUs C(lspci) sees, whether or not the driver serves them; null when lspci failed.
  returned: always
  type: list
  elements: dict
  sample: [{address: "03:00.0", description: "3D controller: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell Server Edition] (rev a1)"}]
cuda_version:
  description: The CUDA version the driver supports; null when unknown.
  returned: always
  type: str
  sample: "13.0"
cuda_version_source:
  description: Where RV(cuda_version) comes from (libcuda, else the driver version against NVIDIA's table).
  returned: always
  type: str
cuda_version_exact:
  description: True when RV(cuda_version) comes from libcuda, false when it is the table's lower bound.
  returned: always
  type: bool
kernel_log:
  description: This boot's kernel log as read for Xid errors.
  returned: always
  type: dict
  contains:
    source: {description: "The command read (journalctl -k -b ... or dmesg); null when none worked", type: str}
    reason: {description: Why no kernel log could be read, type: str}
    xid_events:
      description: One entry per GPU and Xid - bus_id, xid, meaning, fatal, action, detail, count.
      type: list
      elements: dict
    open_module_required: {description: GPUs the proprietary module refused (needs the open modules), type: list, elements: str}
    fallen_off_bus: {description: GPUs the driver reported as fallen off the bus, type: list, elements: str}
driver_version:
  description: Driver version (from C(nvidia-smi), else from the kernel module); null when unknown.
  returned: always
  type: str
  sample: 580.95.05
driver_branch:
  description: First number of RV(driver_version); null when unknown.
  returned: always
  type: int
  sample: 580
kernel_module:
  description: The NVIDIA kernel module.
  returned: always
  type: dict
  contains:
    flavor: {description: "V(open), V(proprietary) or V(unknown)", type: str, sample: open}
    version: {description: Version of the loaded (or else installed) module, type: str, sample: 580.95.05}
    license: {description: C(modinfo -F license nvidia); null when modinfo gave nothing, type: str, sample: Dual MIT/GPL}
    installed_version: {description: C(modinfo -F version nvidia), type: str, sample: 580.95.05}
    source: {description: Where the flavour was read, type: str, sample: /proc/driver/nvidia/version}
cmdline:
  description: The kernel command line and its IOMMU/ACS switches.
  returned: always
  type: dict
  contains:
    raw:
      description: /proc/cmdline.
      type: str
    iommu_args:
      description: The IOMMU and C(pci=noacs) arguments found.
      type: list
      elements: str
      sample: [iommu=pt]
    iommu_passthrough:
      description: C(iommu=pt) or C(iommu.passthrough=1) is set.
      type: bool
    iommu_disabled:
      description: One of C(iommu=off), C(intel_iommu=off), C(amd_iommu=off) is set.
      type: bool
    iommu_enabled:
      description: The IOMMU is forced on, for example C(intel_iommu=on) or C(iommu=force).
      type: bool
    pci_noacs:
      description: C(pci=noacs) is set.
      type: bool
    p2p_safe:
      description: Any switch that keeps GPU peer traffic off the ACS redirect path.
      type: bool
acs:
  description: PCIe Access Control Services state from C(lspci -vvv).
  returned: always
  type: dict
  contains:
    checked: {description: Whether the state could be read, type: bool}
    reason: {description: Why it could not be read, type: str}
    functions: {description: PCI functions seen, type: int}
    access_denied: {description: lspci ran without the rights to read capabilities, type: bool}
    devices: {description: "Functions with an ACS capability: address, description, control flags, enabled, redirect", type: list, elements: dict}
    enabled_devices: {description: Addresses whose ACSCtl has any flag on, type: list, elements: str, sample: ["00:01.1"]}
acs_p2p_risk:
  description: ACS enabled on a PCIe-only multi-GPU box with neither C(iommu=pt) nor C(pci=noacs).
  returned: always
  type: bool
  sample: false
topology:
  description: The C(nvidia-smi topo -m) matrix; null when no GPU or it could not be read.
  returned: always
  type: dict
  contains:
    gpus: {description: GPU names of the matrix, type: list, elements: str, sample: [GPU0, GPU1]}
    nics: {description: NIC names of the matrix, type: list, elements: str, sample: [NIC0]}
    nic_names: {description: NIC legend, type: dict, sample: {NIC0: mlx5_0}}
    links: {description: "Link type from each GPU to every GPU/NIC (X, SYS, NODE, PHB, PXB, PIX, NV#)", type: dict}
    affinity: {description: CPU/NUMA affinity per GPU, type: dict}
    gpu_pair_links: {description: Number of GPU pairs per link type, type: dict, sample: {NODE: 8, PIX: 4, SYS: 16}}
    nvlink: {description: Any GPU pair linked by NVLink, type: bool}
    pcie_only: {description: GPUs present and no NVLink between them, type: bool}
topology_error:
  description: Why the topology could not be read; null otherwise.
  returned: always
  type: str
problems:
  description: Mismatches with the expectations, each with a code, the option that relaxes it and a message.
  returned: always
  type: list
  elements: dict
  sample: [{code: gpu_count, option: expected_gpu_count, message: "expected 8 NVIDIA GPUs, nvidia-smi lists 7 ..."}]
advisories:
  description: Findings worth a warning that do not fail the check.
  returned: always
  type: list
  elements: str
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _facts
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _pci
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _verdicts
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_driver
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_smi


# The node's files as the module_utils read them (a seam the tests replace).
_reader = _nvidia_driver.read_text_file


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "require_gpu": {"type": "bool", "default": True},
            "expected_gpu_count": {"type": "int"},
            "expected_gpu_name": {"type": "str"},
            "expected_compute_capability": {"type": "str"},
            "min_driver_branch": {"type": "int"},
            "require_open_kernel_modules": {"type": "bool", "default": False},
            "allow_mig": {"type": "bool", "default": False},
            "health_action": {"type": "str", "choices": list(_verdicts.HEALTH_CHOICES), "default": "fail"},
            "ignore_xids": {"type": "list", "elements": "int", "default": []},
            "acs": {"type": "str", "choices": list(_pci.ACS_CHOICES), "default": "warn"},
            "fail_on_problems": {"type": "bool", "default": True},
            "reboot_pending": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params

    def run(argv: list[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        return rc, out, err

    def find(name: str) -> str | None:
        return module.get_bin_path(name, required=False)

    try:
        facts = _facts.collect(find, run, _reader, _nvidia_driver.libcuda_version)
    except _nvidia_smi.GpuFactsError as exc:
        module.fail_json(msg="cannot read the GPU node facts: %s" % exc)

    expect: dict[str, t.Any] = {key: params[key] for key in (
        "require_gpu", "expected_gpu_count", "expected_gpu_name", "expected_compute_capability",
        "min_driver_branch", "require_open_kernel_modules", "acs", "allow_mig", "health_action",
        "ignore_xids", "reboot_pending")}
    problems, advisories = _verdicts.evaluate(facts, expect)
    result: dict[str, t.Any] = dict(facts)
    result.update(
        changed=False,
        rehearsal=not facts["gpu_present"] and not params["require_gpu"] and not params["reboot_pending"],
        deferred=not facts["gpu_present"] and params["reboot_pending"],
        acs_p2p_risk=_verdicts.acs_p2p_risk(facts),
        problems=problems,
        advisories=advisories,
    )
    for advisory in advisories:
        module.warn(advisory)
    if problems and params["fail_on_problems"]:
        module.fail_json(
            msg="this node is not what the inventory says:\n- "
            + "\n- ".join(problem["message"] for problem in problems),
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
