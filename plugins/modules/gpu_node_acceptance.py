#!/usr/bin/python
# Copyright: contributors to gpuserve.vllm
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module gpuserve.vllm.gpu_node_acceptance: prove that a provisioned GPU node works as a whole."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_node_acceptance
short_description: Accept or reject a GPU node on an all-reduce over every GPU and the GPUs' diagnostics
version_added: 0.1.0
description:
  - Runs nccl-tests' C(all_reduce_perf) over every GPU of the node (one process, C(-g <GPUs>)),
    with result checking on by default, and judges the bus bandwidth of the largest message
    size against a floor that follows from the GPUs' PCIe links.
  - The floor is O(p2p_fraction) (or O(no_p2p_fraction) without peer-to-peer) times the raw
    per-direction bandwidth of the slowest GPU link (the lower of the GPU's and its upstream
    port's C(max_link_speed) and C(max_link_width) in sysfs; Gen5 x16 is 63.0 GB/s after
    128b/130b encoding). O(min_busbw) replaces it.
  - Runs C(dcgmi diag -r <dcgm_level>) when C(dcgmi) is found; without DCGM it checks what
    C(nvidia-smi) and the kernel log say (every expected GPU listed, none in an error state, no
    fatal Xid this boot), the checks M(gpuserve.vllm.gpu_preflight) makes.
  - The verdict is V(pass), V(fail), or V(unknown) when evidence is missing (a tool not found,
    an output that cannot be read, no link and no floor given); unknown is not pass.
  - Writes the figures and the verdict as JSON to O(record) (root-owned, 0644, through a synced
    temporary file renamed into place), also when the node is rejected, with the key of what was
    accepted - driver version, kernel release, GPU bus ids and maximum PCIe links, the kernel's
    IOMMU/ACS arguments and O(nccl_env).
  - With O(observe=true) it only reads that key and the last record, for the gpu_node role's
    decision to run acceptance again or not (filter P(gpuserve.vllm.gpu_node_acceptance_plan#filter)).
author:
  - gpuserve maintainers (@gpuserve)
options:
  expected_gpu_count:
    description:
      - GPUs the node must have and the all-reduce must span. Defaults to the number nvidia-smi lists.
    type: int
  all_reduce_perf:
    description: The C(all_reduce_perf) binary, a path or a name looked up on E(PATH).
    type: str
    default: all_reduce_perf
  min_bytes:
    description: Smallest message size (C(-b)), as all_reduce_perf reads it (V(128M), V(1G)).
    type: str
    default: 128M
  max_bytes:
    description: Largest message size (C(-e)).
    type: str
    default: 4G
  step_factor:
    description: Factor between sizes (C(-f)).
    type: int
    default: 2
  check:
    description:
      - Check the results (C(-c 1)). With V(false) wrong values go unseen and the run is
        reported as unchecked.
    type: bool
    default: true
  extra_args:
    description: More all_reduce_perf arguments, appended as they are (for example V([-n, "50"])).
    type: list
    elements: str
    default: []
  nccl_env:
    description:
      - Environment for all_reduce_perf (C(NCCL_*) and other variables), passed in the
        environment, never on the command line. Names must be environment variable names.
      - C(NCCL_P2P_DISABLE=1) or C(NCCL_P2P_LEVEL=LOC) makes the floor the one without P2P
        unless O(p2p) says otherwise.
    type: dict
    default: {}
  measure_min_bytes:
    description:
      - Judge the lowest bus bandwidth over the sizes of at least this many bytes. Default is
        the largest size only; smaller sizes measure latency, not the links.
    type: int
  min_busbw:
    description: Bus-bandwidth floor in GB/s, replacing the one derived from the PCIe links.
    type: float
  p2p:
    description:
      - Whether NCCL moves data GPU to GPU (P2P) on this node. Default - from O(nccl_env).
    type: bool
  p2p_fraction:
    description: Fraction of the slowest link's bandwidth a healthy all-reduce reaches with P2P.
    type: float
    default: 0.55
  no_p2p_fraction:
    description: The same without P2P (NCCL staging through host memory).
    type: float
    default: 0.35
  dcgm:
    description:
      - V(auto) runs dcgmi diag when dcgmi is found, else the nvidia-smi check; V(required)
        leaves the verdict unknown without dcgmi; V(skip) always runs the nvidia-smi check.
    type: str
    choices: [auto, required, skip]
    default: auto
  dcgm_level:
    description: C(dcgmi diag -r) level (1 is seconds, 2 minutes, 3 and 4 much longer).
    type: int
    choices: [1, 2, 3, 4]
    default: 2
  record:
    description: Where the JSON record of this run is written (its directory is made 0755).
    type: path
    default: /var/lib/gpuserve/acceptance.json
  fail_on_reject:
    description: Fail the task with the verdict's reasons unless the verdict is V(pass).
    type: bool
    default: true
  observe:
    description:
      - Run nothing and write nothing - read the GPUs (C(nvidia-smi --query-gpu)), their PCIe links,
        the kernel release and command line and O(record), and return RV(key), RV(previous) and
        RV(record_error). Runs in check mode too.
    type: bool
    default: false
notes:
  - Run it as root (C(become=true)) on an idle node; the all-reduce and the diagnostics load every GPU.
  - No GPU was used to develop this module; the floor fractions are calibrated on published
    8-GPU PCIe measurements (see docs/acceptance.md) and should be confirmed on the first node.
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: partial
    details:
      - Check mode runs nothing and writes no record; it reports the record as changed and the verdict V(not_run).
      - O(observe=true) only reads, in check mode as well.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Every run measures anew and rewrites the record.
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Accept an 8x RTX PRO 6000 node
  gpuserve.vllm.gpu_node_acceptance:
    expected_gpu_count: 8
    all_reduce_perf: /opt/nccl-tests/build/all_reduce_perf
  become: true

- name: Record the verdict without failing, with a floor measured on a known-good node
  gpuserve.vllm.gpu_node_acceptance:
    min_busbw: 38.0
    nccl_env: {NCCL_DEBUG: WARN}
    fail_on_reject: false
  become: true
  register: acceptance

- name: Read what the last acceptance was for, without running anything
  gpuserve.vllm.gpu_node_acceptance:
    observe: true
    nccl_env: {NCCL_P2P_DISABLE: "0"}
  register: observed
"""

RETURN = r"""
verdict:
  description: V(pass), V(fail), V(unknown), or V(not_run) in check mode.
  returned: always
  type: str
  sample: pass
message:
  description: One line for a pass, else the reasons, one per line.
  returned: always
  type: str
problems:
  description: Why the node is rejected, one sentence each (the GPU, the test, the figure against the floor).
  returned: always
  type: list
  elements: str
unknowns:
  description: What could not be decided.
  returned: always
  type: list
  elements: str
advisories:
  description: Findings that do not reject the node (skipped or warned diagnostics, an unchecked run).
  returned: always
  type: list
  elements: str
busbw:
  description: The figure judged - busbw (GB/s), size (bytes), side (out_of_place or in_place); null when not measured.
  returned: always
  type: dict
floor:
  description: The floor (GB/s), its source (topology or override), fraction, p2p, slowest link and formula.
  returned: always
  type: dict
links:
  description: Each GPU's PCIe link as read from sysfs (rate_gts, width, generation, gbps, current values).
  returned: always
  type: list
  elements: dict
argv:
  description: The all_reduce_perf command line (null in check mode).
  returned: always
  type: list
  elements: str
health_source:
  description: The health check that ran (dcgmi diag -r N, nvidia-smi), or null.
  returned: always
  type: str
record:
  description: Path of the JSON record.
  returned: always
  type: str
key:
  description:
    - What this acceptance is about, as observed now - driver, kernel, gpus (bus_id, rate_gts, width of the maximum
      link), iommu_args, nccl_env and the key's version. Stored in the record.
  returned: always
  type: dict
previous:
  description: The record's content before this run (null when there is none or it cannot be read).
  returned: when O(observe=true)
  type: dict
record_error:
  description: Why the record could not be read (null when it was read or does not exist).
  returned: when O(observe=true)
  type: str
"""

import datetime
import json
import os
import re
import socket
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _acceptance as acc
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _acceptance_key as acckey
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _dcgmi
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _facts
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_driver
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nvidia_smi
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _pci
from ansible_collections.gpuserve.vllm.plugins.module_utils._patch import _files

# Seams the tests replace: the node's files, where sysfs lists PCI devices.
_reader = _nvidia_driver.read_text_file
_SYSFS_PCI = "/sys/bus/pci/devices"
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def read_links(gpus: list[dict[str, t.Any]]) -> list[dict[str, t.Any]]:
    """Each GPU's link from sysfs: its own attributes and its upstream port's (the parent directory)."""
    links = []
    for gpu in gpus:
        label = "GPU%s (%s)" % (gpu["index"], gpu["bus_id"])
        key = _pci.pci_key(gpu["bus_id"])
        device = os.path.join(_SYSFS_PCI, key + ".0") if key else None
        values: dict[str, str | None] = {}
        upstream: dict[str, str | None] | None = None
        if device and os.path.exists(device):
            values = {name: _reader(os.path.join(device, name)) for name in acc.LINK_ATTRIBUTES}
            parent = os.path.dirname(os.path.realpath(device))
            if _pci.pci_key(os.path.basename(parent)):
                upstream = {name: _reader(os.path.join(parent, name)) for name in acc.LINK_ATTRIBUTES}
        link = acc.gpu_link(label, values, upstream)
        link["bus_id"] = gpu["bus_id"]
        links.append(link)
    return links


def observed_key(gpus: list[dict[str, t.Any]], links: list[dict[str, t.Any]], env: dict[str, str]) -> dict[str, t.Any]:
    """The key of what an acceptance proves, read the same way for a run and for observe."""
    cmdline = _pci.parse_cmdline(_reader(_facts.CMDLINE_FILE) or "")
    return acckey.acceptance_key(driver_versions=[gpu.get("driver_version") for gpu in gpus],
                                 kernel_release=os.uname().release, links=links,
                                 iommu_args=cmdline["iommu_args"], nccl_env=env)


def read_record(path: str) -> tuple[t.Any, str | None]:
    """(content, None), (None, None) when there is no record, (None, why) when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, "%s: %s" % (type(exc).__name__, exc.strerror or exc)
    try:
        content = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return None, "not JSON: %s" % exc
    if not isinstance(content, dict):
        return None, "not a JSON object"
    return content, None


def observe(module: AnsibleModule, find: t.Callable[[str], str | None], run: t.Callable[..., tuple[int, str, str]],
            env: dict[str, str]) -> None:
    """Exit with the key as observed now and the last record; runs no test, writes nothing."""
    gpus: list[dict[str, t.Any]] = []
    nvidia_smi = find("nvidia-smi")
    if nvidia_smi is not None:
        gpus = _nvidia_smi.parse_query_output(run(_nvidia_smi.query_argv(nvidia_smi))[1])["gpus"]
    links = read_links(gpus)
    previous, error = read_record(module.params["record"])
    module.exit_json(changed=False, key=observed_key(gpus, links, env), previous=previous, record_error=error,
                     record=module.params["record"], links=links)


def write_record(path: str, record: dict[str, t.Any]) -> None:
    """The record whole or not at all: synced temp file, 0644, renamed over the old one; dir 0755."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    tmp = _files.write_temp(path, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    try:
        os.chmod(tmp, 0o644)
        if os.geteuid() == 0:
            os.chown(tmp, 0, 0)
        _files.replace(tmp, path)
    except BaseException:
        _files.remove_quietly(tmp)
        raise


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "expected_gpu_count": {"type": "int"},
            "all_reduce_perf": {"type": "str", "default": "all_reduce_perf"},
            "min_bytes": {"type": "str", "default": "128M"},
            "max_bytes": {"type": "str", "default": "4G"},
            "step_factor": {"type": "int", "default": 2},
            "check": {"type": "bool", "default": True},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "nccl_env": {"type": "dict", "default": {}},
            "measure_min_bytes": {"type": "int"},
            "min_busbw": {"type": "float"},
            "p2p": {"type": "bool"},
            "p2p_fraction": {"type": "float", "default": acc.P2P_FRACTION},
            "no_p2p_fraction": {"type": "float", "default": acc.NO_P2P_FRACTION},
            "dcgm": {"type": "str", "choices": ["auto", "required", "skip"], "default": "auto"},
            "dcgm_level": {"type": "int", "choices": [1, 2, 3, 4], "default": 2},
            "record": {"type": "path", "default": "/var/lib/gpuserve/acceptance.json"},
            "fail_on_reject": {"type": "bool", "default": True},
            "observe": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    env = {str(key): str(value) for key, value in params["nccl_env"].items()}
    bad = sorted(key for key in env if not _ENV_NAME_RE.match(key))
    if bad:
        module.fail_json(msg="nccl_env: not environment variable names: %s" % ", ".join(bad))

    def run(argv: list[str], environ: dict[str, str] | None = None) -> tuple[int, str, str]:
        return module.run_command(argv, environ_update=dict(environ or {}, LC_ALL="C"))

    def find(name: str) -> str | None:
        return name if os.path.isabs(name) and os.access(name, os.X_OK) else module.get_bin_path(name, required=False)

    if params["observe"]:
        observe(module, find, run, env)
    if module.check_mode:
        module.exit_json(changed=True, verdict=acc.NOT_RUN, record=params["record"], argv=None, links=[],
                         problems=[], unknowns=[], advisories=[], busbw=None, floor=None, health_source=None,
                         key=None, message="check mode: nothing was run and no record was written")

    try:
        facts = _facts.collect(find, run, _reader)
    except _nvidia_smi.GpuFactsError as exc:
        module.fail_json(msg="cannot read the GPU node facts: %s" % exc)
    gpus = facts["gpus"]
    expected = params["expected_gpu_count"] or facts["gpu_count"]
    links = read_links(gpus)
    p2p = params["p2p"] if params["p2p"] is not None else acc.p2p_from_env(env)
    floor = acc.bus_floor(links, p2p, override=params["min_busbw"], p2p_fraction=params["p2p_fraction"],
                          no_p2p_fraction=params["no_p2p_fraction"])

    binary = find(params["all_reduce_perf"])
    argv = [binary or params["all_reduce_perf"], "-b", params["min_bytes"], "-e", params["max_bytes"],
            "-f", str(params["step_factor"]), "-g", str(expected), "-c", "1" if params["check"] else "0"]
    argv += params["extra_args"]
    nccl_text = nccl_rc = nccl_reason = None
    if binary is None:
        nccl_reason = "all_reduce_perf not found (%s): install nccl-tests or give its path" % params["all_reduce_perf"]
    elif not expected:
        nccl_reason = "no GPU to run all_reduce_perf on (%s)" % (facts["no_gpu_reason"] or "nvidia-smi lists none")
    else:
        nccl_rc, out, err = run(argv, env)
        nccl_text = out + ("\n" + err if err else "")

    labels = {gpu["index"]: "GPU%s (%s)" % (gpu["index"], gpu["bus_id"]) for gpu in gpus}
    dcgmi = find("dcgmi") if params["dcgm"] != "skip" else None
    health = health_reason = None
    if dcgmi:
        source = "dcgmi diag -r %d" % params["dcgm_level"]
        rc, out, err = run([dcgmi, "diag", "-r", str(params["dcgm_level"])])
        try:
            health = _dcgmi.findings(_dcgmi.parse_diag(out), lambda i: labels.get(i, "GPU%d" % i), source)
        except _dcgmi.DcgmiError as exc:
            health_reason = "%s (rc=%d): %s%s" % (source, rc, exc, ("; stderr: " + err.strip()[:300]) if err.strip() else "")
    elif params["dcgm"] == "required":
        source, health_reason = None, "dcgmi not found and dcgm: required (install datacenter-gpu-manager)"
    else:
        source, health = "nvidia-smi", acc.smi_health(facts, expected)

    result = acc.decide(nccl_text=nccl_text, gpus=gpus, expected_gpus=expected, floor=floor, health=health,
                        health_source=source, min_bytes=params["measure_min_bytes"], nccl_rc=nccl_rc,
                        nccl_reason=nccl_reason, health_reason=health_reason)
    result.update(links=links, argv=argv, record=params["record"], key=observed_key(gpus, links, env))
    record = dict(result, time=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  host=socket.gethostname(), nccl_env=env, dcgm_level=params["dcgm_level"] if dcgmi else None,
                  gpus=[{key: gpu[key] for key in ("index", "bus_id", "name", "uuid")} for gpu in gpus])
    try:
        write_record(params["record"], record)
    except OSError as exc:
        module.fail_json(msg="cannot write the acceptance record %s: %s" % (params["record"], exc), **result)
    for advisory in result["advisories"]:
        module.warn(advisory)
    if result["verdict"] != acc.PASS and params["fail_on_reject"]:
        module.fail_json(msg=result["message"], changed=True, **result)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
