# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the gpu_node role: the driver's steps, whether node acceptance runs again, and where
it gets nccl-tests' all_reduce_perf.

The decisions are table-tested Python (module_utils/_gpu/_driver_plan.py, _acceptance_key.py,
_nccl_tests_plan.py, _bootargs.py), not Jinja.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpuserve.vllm.plugins.plugin_utils._lazy_engine import Engine

_apt = Engine("_apt")
acckey = Engine("_gpu._acceptance_key")
_bootargs = Engine("_gpu._bootargs")
_driver_fallback = Engine("_gpu._driver_fallback")
_driver_plan = Engine("_gpu._driver_plan")
_nccl_tests_plan = Engine("_gpu._nccl_tests_plan")


def gpu_node_acceptance_plan(observed: t.Any, force: t.Any = False, server_state: t.Any = None,
                             here: t.Any = False) -> dict[str, t.Any]:
    """gpu_node_acceptance's observe result | gpu_node_acceptance_plan(force, server_state, here)
    -> run, reason, summary, where (now | serve_play | "")."""
    if not isinstance(observed, dict) or not isinstance(observed.get("key"), dict):
        raise AnsibleFilterError("gpu_node_acceptance_plan: expected the result of gpuserve.vllm.gpu_node_acceptance "
                                 "with observe: true (a dict with 'key'), got %r" % (observed,))
    return acckey.plan(previous=observed.get("previous"), record_error=observed.get("record_error"),
                       key=observed["key"], force=boolean(force, strict=False),
                       record=observed.get("record") or "the acceptance record",
                       serving=_driver_plan.serving_from(str(server_state or "")) if server_state is not None else "inactive",
                       marker=server_state is not None, here=boolean(here, strict=False))


def gpu_node_driver_plan(observed: t.Any) -> dict[str, t.Any]:
    """What driver.yml read (apt's check, the driver, the server's unit) -> install, reboot, checks, message."""
    if not isinstance(observed, dict):
        raise AnsibleFilterError("gpu_node_driver_plan: expected a dict of what the node shows, got %r" % (observed,))
    try:
        return _driver_plan.plan(
            install_wanted=boolean(observed.get("install_wanted", True), strict=False),
            packages_change=boolean(observed.get("packages_change", False), strict=False),
            loaded=observed.get("loaded") or None, installed=observed.get("installed") or None,
            serving=_driver_plan.serving_from(str(observed.get("server_state") or "")),
            reboot_allowed=boolean(observed.get("reboot_allowed", False), strict=False),
            marker=boolean(observed.get("marker", False), strict=False),
            packages=[str(name) for name in observed.get("packages") or []])
    except (_driver_plan.DriverPlanError, TypeError) as exc:
        raise AnsibleFilterError("gpu_node_driver_plan: %s" % exc) from exc


def _listing(result: t.Any) -> str | None:
    """A registered command's stdout when it ran and succeeded, else None (not read)."""
    if not isinstance(result, dict) or result.get("skipped") or result.get("rc") != 0:
        return None
    return str(result.get("stdout") or "")


def gpu_node_driver_fallback(observed: t.Any, started: t.Any = None) -> dict[str, t.Any]:
    """What the serve play read after a failed staged install -> restart (on the old driver), driver, reasons,
    message; with `started` (start.yml's outcome) the message says how the start went."""
    if not isinstance(observed, dict) or not isinstance(observed.get("driver"), dict):
        raise AnsibleFilterError("gpu_node_driver_fallback: expected a dict with host, failure, marker, packages, "
                                 "dpkg_before, dpkg_after, driver (nvidia_driver_facts) and userland, got %r" % (observed,))
    userland = observed.get("userland") if isinstance(observed.get("userland"), dict) else {}
    ran = bool(userland) and not userland.get("skipped") and userland.get("rc") is not None
    return _driver_fallback.decide(
        host=str(observed.get("host") or "this node"), failure=str(observed.get("failure") or ""),
        marker=str(observed.get("marker") or "the reboot request"),
        packages=[str(name) for name in observed.get("packages") or []],
        dpkg_before=_listing(observed.get("dpkg_before")), dpkg_after=_listing(observed.get("dpkg_after")),
        kernel_module=observed["driver"].get("kernel_module") or {},
        userland_rc=int(userland["rc"]) if ran else None, userland_out=str(userland.get("stdout") or ""),
        userland_err=str(userland.get("stderr") or userland.get("msg") or ""),
        started=started if isinstance(started, dict) else None)


def gpu_node_driver_next_problems(apt_check: t.Any, packages: t.Any, min_branch: t.Any = None) -> list[str]:
    """apt's check-mode result | gpu_node_driver_next_problems(packages, min_branch) -> packages below the branch."""
    stdout = apt_check.get("stdout", "") if isinstance(apt_check, dict) else apt_check
    if not isinstance(stdout, str) or not isinstance(packages, (list, tuple)):
        raise AnsibleFilterError("gpu_node_driver_next_problems: expected ansible.builtin.apt's check-mode result and a "
                                 "list of package names, got %r and %r" % (apt_check, packages))
    try:
        branch = None if min_branch in (None, "") else int(min_branch)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpu_node_driver_next_problems: min_branch must be a number, got %r" % (min_branch,)) from exc
    return _driver_plan.next_driver_problems(stdout, [str(name) for name in packages], branch)


def gpu_node_kernel_cmdline_plan(observed: t.Any) -> dict[str, t.Any]:
    """What kernel_cmdline.yml read (the arguments, /proc/cmdline, the drop-in's and grub.cfg's times,
    /proc/stat) -> update_grub, reboot, missing, msg."""
    if not isinstance(observed, dict):
        raise AnsibleFilterError("gpu_node_kernel_cmdline_plan: expected a dict of what the node shows, got %r" % (observed,))
    try:
        return _bootargs.plan_from([str(arg) for arg in observed["args"]], str(observed["cmdline"]),
                                   str(observed.get("files") or ""), str(observed["dropin"]), str(observed["grub_cfg"]),
                                   str(observed.get("proc_stat") or ""))
    except KeyError as exc:
        raise AnsibleFilterError("gpu_node_kernel_cmdline_plan: %s missing from %r" % (exc, observed)) from exc


def _strings(value: t.Any, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise AnsibleFilterError("gpu_node_nccl_tests_plan: %s must be a list, got %r" % (name, value))
    return [str(item) for item in value]


def gpu_node_nccl_tests_plan(observed: t.Any) -> dict[str, t.Any]:
    """What nccl_tests.yml read (the binary, apt's candidates, the last build's record, CUDA, NCCL, make)
    -> action (present, packages, build, built, refuse), binary, record, build_packages, reason."""
    if not isinstance(observed, dict):
        raise AnsibleFilterError("gpu_node_nccl_tests_plan: expected a dict of what the node shows, got %r" % (observed,))
    try:
        gencode = str(observed.get("gencode") or "").strip() or \
            _nccl_tests_plan.gencode_for(str(observed.get("compute_capability") or ""))
        record = observed.get("record")
        packages = _strings(observed.get("packages"), "gpu_node_nccl_tests_packages")
        # apt-cache policy's output when it was asked (packages named, the binary missing).
        missing = _apt.without_candidate(packages, str(observed["apt_policy"])) \
            if observed.get("apt_policy") is not None else []
        return _nccl_tests_plan.plan(
            method=str(observed.get("method") or "auto"), host=str(observed.get("host") or "this node"),
            binary=str(observed["binary"]), binary_ok=boolean(observed.get("binary_ok", False), strict=False),
            packages=packages, packages_missing=missing,
            apt_fetch_failures=_strings(observed.get("apt_fetch_failures"), "apt_fetch_failures"),
            version=str(observed["version"]), sha256=str(observed.get("sha256") or ""),
            source=str(observed["source"]), install_dir=str(observed["install_dir"]),
            record=record if isinstance(record, dict) else None,
            built_ok=boolean(observed.get("built_ok", False), strict=False),
            cuda_home=str(observed["cuda_home"]), nvcc=boolean(observed.get("nvcc", False), strict=False),
            nvcc_output=str(observed.get("nvcc_output") or ""), nccl_home=str(observed["nccl_home"]),
            nccl_header=boolean(observed.get("nccl_header", False), strict=False),
            make=boolean(observed.get("make", False), strict=False), gencode=gencode,
            build_packages=_strings(observed.get("build_packages"), "gpu_node_nccl_tests_build_packages"))
    except KeyError as exc:
        raise AnsibleFilterError("gpu_node_nccl_tests_plan: %s missing from %r" % (exc, observed)) from exc
    except (_nccl_tests_plan.NcclTestsPlanError, TypeError) as exc:
        raise AnsibleFilterError("gpu_node_nccl_tests_plan: %s" % exc) from exc


class FilterModule:
    """gpuserve.vllm gpu_node filters."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"gpu_node_acceptance_plan": gpu_node_acceptance_plan, "gpu_node_driver_plan": gpu_node_driver_plan,
                "gpu_node_driver_next_problems": gpu_node_driver_next_problems,
                "gpu_node_driver_fallback": gpu_node_driver_fallback,
                "gpu_node_nccl_tests_plan": gpu_node_nccl_tests_plan,
                "gpu_node_kernel_cmdline_plan": gpu_node_kernel_cmdline_plan}
