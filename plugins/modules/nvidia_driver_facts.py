#!/usr/bin/python
# Copyright: contributors to gpuserve.vllm
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module gpuserve.vllm.nvidia_driver_facts: the NVIDIA driver and the CUDA version it supports."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_driver_facts
short_description: Read the NVIDIA driver version and the CUDA version it supports, across driver branches
version_added: 0.1.0
description:
  - Reads the NVIDIA driver version from C(/proc/driver/nvidia/version) (the loaded kernel
    module), else from C(nvidia-smi --query-gpu=driver_version --format=csv,noheader).
  - Reads the CUDA version the driver supports from the driver itself (C(cuDriverGetVersion) of
    C(libcuda.so.1), exact), else derives it from the driver version with NVIDIA's table of
    minimum drivers per CUDA release (a lower bound, said so in RV(cuda_version_source)).
  - Never reads the nvidia-smi banner, whose C(CUDA Version) became C(CUDA UMD Version) (and
    C(Driver Version) C(KMD Version)) in the 610 driver branch.
  - The same code backs M(gpuserve.vllm.gpu_preflight); a node without a driver is not an
    error here, RV(reason) says what is missing so that a role can decide.
options:
  nvidia_smi:
    description:
      - The nvidia-smi command, a name looked up on E(PATH) or a path (a test double in molecule).
    type: str
    default: nvidia-smi
  next_boot:
    description:
      - A new driver is on disk and loads at the next reboot (the gpu_node role's driver plan says so). When no
        kernel module is loaded, the version of the module on disk (C(modinfo -F version nvidia)) is the driver
        judged, said so in RV(driver_version_source); nvidia-smi is not asked.
    type: bool
    default: false
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
  - gpuserve.vllm.attributes.read_only
"""

EXAMPLES = r"""
- name: Ask the NVIDIA driver which CUDA version it supports
  gpuserve.vllm.nvidia_driver_facts:
  register: driver

- name: Refuse a driver older than the CUDA 12.9 a vLLM build needs
  ansible.builtin.assert:
    that: driver.cuda_version is version('12.9', '>=')
    fail_msg: "driver {{ driver.driver_version }} supports CUDA {{ driver.cuda_version }} ({{ driver.cuda_version_source }})"
"""

RETURN = r"""
driver_version:
  description: The NVIDIA driver version; null when no driver was found.
  returned: always
  type: str
  sample: 580.95.05
driver_branch:
  description: First number of RV(driver_version); null when unknown.
  returned: always
  type: int
  sample: 580
driver_version_source:
  description: Where RV(driver_version) was read.
  returned: always
  type: str
  sample: /proc/driver/nvidia/version
cuda_version:
  description: The CUDA version (major.minor) the driver supports; null when unknown.
  returned: always
  type: str
  sample: "13.0"
cuda_version_exact:
  description: True when RV(cuda_version) comes from libcuda; false when it is the table's lower bound.
  returned: always
  type: bool
  sample: true
cuda_version_source:
  description: Where RV(cuda_version) comes from.
  returned: always
  type: str
  sample: cuDriverGetVersion (libcuda.so.1)
kernel_module:
  description: The NVIDIA kernel module (flavour V(open), V(proprietary) or V(unknown), version, license, source, installed_version).
  returned: always
  type: dict
reason:
  description: Why RV(cuda_version) is unknown; null when it is known.
  returned: always
  type: str
  sample: /proc/driver/nvidia/version is missing (no NVIDIA kernel module loaded); nvidia-smi is not installed (not on PATH)
"""

import os
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_driver


# The node's files as the module_utils read them (a seam the tests replace).
_reader = _nvidia_driver.read_text_file


def main() -> None:
    module = AnsibleModule(
        argument_spec={"nvidia_smi": {"type": "str", "default": "nvidia-smi"},
                       "next_boot": {"type": "bool", "default": False}},
        supports_check_mode=True,
    )

    def run(argv: list[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        return rc, out, err

    def find(name: str) -> str | None:
        if os.sep in name:
            return name if os.access(name, os.X_OK) else None
        return module.get_bin_path(name, required=False)

    facts: dict[str, t.Any] = _nvidia_driver.driver_facts(
        find, run, _reader, _nvidia_driver.libcuda_version, nvidia_smi=module.params["nvidia_smi"],
        next_boot=module.params["next_boot"])
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
