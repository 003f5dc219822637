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
    module flavour open or proprietary, kernel command line IOMMU/ACS switches, PCIe ACS state
    of every bridge, the C(nvidia-smi topo -m) matrix).
  - Runs C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits), C(nvidia-smi topo -m),
    C(modinfo -F license nvidia), C(modinfo -F version nvidia) and C(lspci -vvv), and reads
    C(/proc/driver/nvidia/version) and C(/proc/cmdline). It changes nothing on the node.
  - Compares the facts with the expectations given (GPU count, name, compute capability,
    minimum driver branch, open kernel modules) and reports every mismatch as a problem with a
    message an operator can act on. With O(fail_on_problems=true) the module fails with those
    messages; otherwise it returns them in RV(problems).
  - A node without an NVIDIA GPU (no C(nvidia-smi), or C(nvidia-smi) failing or listing no GPU)
    is a problem only when O(require_gpu=true); with O(require_gpu=false) the hardware checks
    are skipped and RV(rehearsal) is true, for containers and CI.
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
notes:
  - Run it as root (C(become=true)); as an ordinary user C(lspci) cannot read the ACS
    capability and the ACS state is reported as unknown.
  - Binaries are looked up on E(PATH) and in the sbin directories.
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; it runs and reports the same in check mode.
  diff_mode:
    support: none
    details: Nothing is changed, so there is no diff.
  idempotent:
    support: full
    details: The module never changes the node; C(changed) is always false.
  platform:
    platforms: posix
    details: Linux nodes with the NVIDIA driver (or without one, for a rehearsal).
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

from ansible_collections.gpuserve.vllm.plugins.module_utils import _gpu_facts


def _reader(path: str) -> str | None:
    """Read a small text file; None when it does not exist or cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "require_gpu": {"type": "bool", "default": True},
            "expected_gpu_count": {"type": "int"},
            "expected_gpu_name": {"type": "str"},
            "expected_compute_capability": {"type": "str"},
            "min_driver_branch": {"type": "int"},
            "require_open_kernel_modules": {"type": "bool", "default": False},
            "acs": {"type": "str", "choices": list(_gpu_facts.ACS_CHOICES), "default": "warn"},
            "fail_on_problems": {"type": "bool", "default": True},
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
        facts = _gpu_facts.collect(find, run, _reader)
    except _gpu_facts.GpuFactsError as exc:
        module.fail_json(msg="cannot read the GPU node facts: %s" % exc)

    expect: dict[str, t.Any] = {key: params[key] for key in (
        "require_gpu", "expected_gpu_count", "expected_gpu_name", "expected_compute_capability",
        "min_driver_branch", "require_open_kernel_modules", "acs")}
    problems, advisories = _gpu_facts.evaluate(facts, expect)
    result: dict[str, t.Any] = dict(facts)
    result.update(
        changed=False,
        rehearsal=not facts["gpu_present"] and not params["require_gpu"],
        acs_p2p_risk=_gpu_facts.acs_p2p_risk(facts),
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
