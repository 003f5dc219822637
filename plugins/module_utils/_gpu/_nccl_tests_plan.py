# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Where node acceptance gets nccl-tests' all_reduce_perf: the decision, from what the node shows.

Four ways, as an operations team has them: the binary already there (``present``), the packages of
a configured apt repository (``packages``), a build from a pinned source tarball with the node's
own CUDA and NCCL (``build``; ``built`` when the record of the last build says it is this very
build), or a refusal that names what is missing (``refuse``). The build is pinned by version and
the sha256 of its tarball; an empty checksum is never built. What was built is decided by what is
on disk: the record the build writes last into its versioned directory (version, sha256, CUDA
version, CUDA_HOME, NCCL_HOME, NVCC_GENCODE, MPI).
Pure functions; stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

METHODS = ("auto", "packages", "source", "present")
PRESENT, PACKAGES, BUILD, BUILT, REFUSE = "present", "packages", "build", "built", "refuse"
RECORD_FILE = ".gpuserve-nccl-tests.json"
RECORD_KEYS = ("version", "sha256", "cuda_version", "cuda_home", "nccl_home", "gencode", "mpi")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CAPABILITY = re.compile(r"^(\d{1,2})\.(\d)$")
_NVCC_RELEASE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+(?:\.\d+)?)")
_SKIP = "or skip acceptance knowingly with gpu_node_acceptance: false"


class NcclTestsPlanError(ValueError):
    """An input is not what the role passes (the message names the variable)."""


def gencode_for(compute_capability: str) -> str:
    """'12.0' -> '-gencode=arch=compute_120,code=sm_120' (nvcc's flag for the GPUs of the node)."""
    match = _CAPABILITY.match(str(compute_capability).strip())
    if not match:
        raise NcclTestsPlanError("gpu_node_expected_compute_capability must read like 12.0 to derive "
                                 "gpu_node_nccl_tests_gencode, got %r" % (compute_capability,))
    arch = match.group(1) + match.group(2)
    return "-gencode=arch=compute_%s,code=sm_%s" % (arch, arch)


def cuda_version(nvcc_output: str) -> str | None:
    """The CUDA version of ``nvcc --version`` ('Cuda compilation tools, release 12.8, V12.8.93' -> '12.8.93')."""
    match = _NVCC_RELEASE.search(nvcc_output or "")
    return match.group(2) if match else None


def _describe(record: t.Mapping[str, t.Any], wanted: t.Mapping[str, t.Any]) -> str:
    names = {"version": "version", "sha256": "sha256", "cuda_version": "CUDA", "cuda_home": "CUDA_HOME",
             "nccl_home": "NCCL_HOME", "gencode": "NVCC_GENCODE", "mpi": "MPI"}
    diffs = ["%s %s -> %s" % (names[key], record.get(key, "?"), wanted[key])
             for key in RECORD_KEYS if record.get(key) != wanted[key]]
    return "built with " + ", ".join(diffs)


def _source_plan(ctx: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    where = "%s on %s" % (ctx["version"], ctx["host"])
    binary = ctx["install_dir"].rstrip("/") + "/build/all_reduce_perf"
    if not ctx["sha256"]:
        return _refuse("gpu_node_nccl_tests_sha256 is empty: nccl-tests %s is never built from an unpinned source. "
                       "Set gpu_node_nccl_tests_sha256 to the sha256 of %s (sha256sum of the tarball you checked), "
                       "%s." % (where, ctx["source"], _SKIP))
    nvcc = ctx["cuda_home"].rstrip("/") + "/bin/nvcc"
    if not ctx["nvcc"]:
        return _refuse("cannot build nccl-tests %s: %s does not exist (no CUDA toolkit at gpu_node_nccl_tests_cuda_home "
                       "%s). Install the CUDA toolkit (cuda-toolkit-<major>-<minor> of NVIDIA's CUDA repository) or set "
                       "gpu_node_nccl_tests_cuda_home to where it is; or name the packages that provide all_reduce_perf "
                       "in gpu_node_nccl_tests_packages; %s." % (where, nvcc, ctx["cuda_home"], _SKIP))
    cuda = cuda_version(ctx["nvcc_output"])
    if cuda is None:
        return _refuse("cannot build nccl-tests %s: %s --version does not name a CUDA release (it printed %r)"
                       % (where, nvcc, (ctx["nvcc_output"] or "")[:200]))
    wanted = {"version": ctx["version"], "sha256": ctx["sha256"], "cuda_version": cuda,
              "cuda_home": ctx["cuda_home"], "nccl_home": ctx["nccl_home"], "gencode": ctx["gencode"], "mpi": 0}
    record = ctx["record"]
    if isinstance(record, dict) and all(record.get(key) == wanted[key] for key in RECORD_KEYS) and ctx["built_ok"]:
        reason = "nccl-tests %s already built in %s with CUDA %s (%s)" % (
            ctx["version"], ctx["install_dir"], cuda, ctx["gencode"])
        return {"action": BUILT, "binary": binary, "record": wanted, "build_packages": [], "reason": reason}
    if not ctx["make"]:
        return _refuse("cannot build nccl-tests %s: make is not on PATH (install build-essential, which nvcc needs "
                       "as its host compiler too); %s." % (where, _SKIP))
    build_packages: list[str] = []
    if not ctx["nccl_header"]:
        if not ctx["build_packages"]:
            return _refuse("cannot build nccl-tests %s: %s/include/nccl.h does not exist (gpu_node_nccl_tests_nccl_home "
                           "%s) and gpu_node_nccl_tests_build_packages is empty. Install libnccl-dev of NVIDIA's CUDA "
                           "repository, name it in gpu_node_nccl_tests_build_packages or set "
                           "gpu_node_nccl_tests_nccl_home; %s." % (where, ctx["nccl_home"].rstrip("/"),
                                                                   ctx["nccl_home"], _SKIP))
        build_packages = list(ctx["build_packages"])
    if not isinstance(record, dict):
        why = "no build record in %s" % ctx["install_dir"]
    elif all(record.get(key) == wanted[key] for key in RECORD_KEYS):
        why = "%s lacks an executable all_reduce_perf" % ctx["install_dir"]
    else:
        why = _describe(record, wanted)
    return {"action": BUILD, "binary": binary, "record": wanted, "build_packages": build_packages,
            "reason": "building nccl-tests %s from %s with CUDA %s (%s, MPI=0): %s"
                      % (ctx["version"], ctx["source"], cuda, ctx["gencode"], why)}


def _refuse(message: str) -> dict[str, t.Any]:
    return {"action": REFUSE, "binary": None, "record": None, "build_packages": [], "reason": message}


def _missing_binary(ctx: t.Mapping[str, t.Any], tail: str) -> str:
    return ("%s (gpu_node_acceptance_all_reduce_perf) is not an executable file on %s%s. Install nccl-tests: name "
            "its packages in gpu_node_nccl_tests_packages (a package of NVIDIA's CUDA repository or your own), or "
            "build it from https://github.com/NVIDIA/nccl-tests at a pinned tag (gpu_node_nccl_tests_install: source "
            "with gpu_node_nccl_tests_version and gpu_node_nccl_tests_sha256), or set gpu_node_acceptance_all_reduce_perf "
            "to its all_reduce_perf; %s." % (ctx["binary"], ctx["host"], tail, _SKIP))


def plan(**ctx: t.Any) -> dict[str, t.Any]:
    """action (present, packages, build, built, refuse), binary (what acceptance runs), record, build_packages, reason.

    ``ctx``: method, host, binary, binary_ok, packages, packages_missing (those apt has no candidate for),
    apt_fetch_failures (optional: the sources apt-get update could not fetch, named where a package has none),
    version, sha256, source, install_dir, record (the last build's, None when absent or unreadable),
    built_ok (the build's all_reduce_perf is executable), cuda_home, nvcc (it exists), nvcc_output,
    nccl_home, nccl_header (nccl.h exists), make (on PATH), gencode, build_packages.
    """
    method = ctx["method"]
    if method not in METHODS:
        raise NcclTestsPlanError("gpu_node_nccl_tests_install must be one of %s, got %r" % (", ".join(METHODS), method))
    if ctx["sha256"] and not _SHA256.match(ctx["sha256"]):
        raise NcclTestsPlanError("gpu_node_nccl_tests_sha256 must be 64 lower-case hex digits (or empty), got %r"
                                 % (ctx["sha256"],))
    packages, missing = list(ctx["packages"]), list(ctx["packages_missing"])
    present = {"action": PRESENT, "binary": ctx["binary"], "record": None, "build_packages": [],
               "reason": "using %s (gpu_node_acceptance_all_reduce_perf)" % ctx["binary"]}
    installable = {"action": PACKAGES, "binary": ctx["binary"], "record": None, "build_packages": [],
                   "reason": "installing %s with apt for %s" % (", ".join(packages), ctx["binary"])}
    fetch_failures = list(ctx.get("apt_fetch_failures") or [])
    no_candidate = ("apt has no candidate for %s (%s)" % (
        ", ".join(missing), ("apt-get update could not fetch " + "; ".join(fetch_failures)) if fetch_failures
        else "is NVIDIA's or your repository configured?") if missing else "")
    if method == "present":
        return present if ctx["binary_ok"] else _refuse(_missing_binary(ctx, " (gpu_node_nccl_tests_install: present)"))
    if method == "packages":
        if ctx["binary_ok"]:
            return present
        if not packages:
            return _refuse("gpu_node_nccl_tests_install is packages but gpu_node_nccl_tests_packages is empty: "
                           "name the apt packages that provide %s" % ctx["binary"])
        if missing:
            return _refuse("cannot install nccl-tests on %s (gpu_node_nccl_tests_install: packages): %s; "
                           "gpu_node_nccl_tests_packages names %s" % (ctx["host"], no_candidate, ", ".join(packages)))
        return installable
    if method == "source":
        return _source_plan(ctx)
    if ctx["binary_ok"]:
        return present
    if packages and not missing:
        return installable
    if ctx["sha256"]:
        built = _source_plan(ctx)
        if no_candidate and built["action"] != REFUSE:
            built["reason"] += "; " + no_candidate
        return built
    tail = "; " + no_candidate if no_candidate else ""
    tail += (", and gpu_node_nccl_tests_sha256 is empty: nccl-tests %s is never built from an unpinned source"
             % ctx["version"])
    return _refuse(_missing_binary(ctx, tail))
