"""Tables for plugins/module_utils/_gpu/_nccl_tests_plan.py: where acceptance gets all_reduce_perf.

The invariants under every row: nothing is built from an unpinned source, a build is never
planned without nvcc and make, what a build is compared against is what the record on disk says.
"""

from __future__ import annotations

import itertools

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _apt
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nccl_tests_plan as ntp

SHA = "38974e70342150ede0e3fb8fd24bfe60ccbde90fa20241716ba8bb338e6b61a0"
NVCC = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
        "Built on Fri_Feb_21_20:23:50_PST_2025\nCuda compilation tools, release 12.8, V12.8.93\n"
        "Build cuda_12.8.r12.8/compiler.35583870_0\n")
GENCODE = "-gencode=arch=compute_120,code=sm_120"
RECORD = {"version": "2.17.6", "sha256": SHA, "cuda_version": "12.8.93", "cuda_home": "/usr/local/cuda",
          "nccl_home": "/usr", "gencode": GENCODE, "mpi": 0}
BUILT = "/opt/nccl-tests-2.17.6/build/all_reduce_perf"
# One line of _apt.fetch_failures on tests/fixtures/apt/apt-get-update-no-network.stdout (recorded).
UNREACHABLE = "http://127.0.0.1:9 ./ InRelease (Could not connect to 127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused))"


def plan(**kw: object) -> dict[str, object]:
    args: dict[str, object] = dict(
        method="auto", host="gpu-07", binary="/opt/nccl-tests/build/all_reduce_perf", binary_ok=False,
        packages=[], packages_missing=[], version="2.17.6", sha256=SHA,
        source="https://github.com/NVIDIA/nccl-tests/archive/v2.17.6.tar.gz", install_dir="/opt/nccl-tests-2.17.6",
        record=None, built_ok=False, cuda_home="/usr/local/cuda", nvcc=True, nvcc_output=NVCC, nccl_home="/usr",
        nccl_header=True, make=True, gencode=GENCODE, build_packages=["libnccl-dev"])
    args.update(kw)
    return ntp.plan(**args)


@pytest.mark.parametrize("kw, action, binary", [
    # what is there is used, whatever else is configured
    ({"binary_ok": True}, "present", "/opt/nccl-tests/build/all_reduce_perf"),
    ({"binary_ok": True, "packages": ["nccl-tests"]}, "present", "/opt/nccl-tests/build/all_reduce_perf"),
    ({"method": "present", "binary_ok": True}, "present", "/opt/nccl-tests/build/all_reduce_perf"),
    ({"method": "packages", "binary_ok": True, "packages": ["nccl-tests"]}, "present", "/opt/nccl-tests/build/all_reduce_perf"),
    # packages where the repository has them, before a build
    ({"packages": ["nccl-tests"]}, "packages", "/opt/nccl-tests/build/all_reduce_perf"),
    ({"method": "packages", "packages": ["nccl-tests"]}, "packages", "/opt/nccl-tests/build/all_reduce_perf"),
    # ... else (no candidate: the repository is not configured) the pinned build
    ({"packages": ["nccl-tests"], "packages_missing": ["nccl-tests"]}, "build", BUILT),
    ({}, "build", BUILT),
    ({"method": "source", "binary_ok": True}, "build", BUILT),
    # the record on disk says it is this very build: nothing to do
    ({"record": RECORD, "built_ok": True}, "built", BUILT),
    ({"method": "source", "record": RECORD, "built_ok": True}, "built", BUILT),
    ({"record": RECORD, "built_ok": True, "make": False}, "built", BUILT),
    ({"record": RECORD, "built_ok": True, "nccl_header": False, "build_packages": []}, "built", BUILT),
    # ... but a record whose binary is gone, or any part of it changed, is a build
    ({"record": RECORD, "built_ok": False}, "build", BUILT),
    ({"record": dict(RECORD, cuda_version="12.8.61"), "built_ok": True}, "build", BUILT),
    ({"record": dict(RECORD, sha256="0" * 64), "built_ok": True}, "build", BUILT),
    ({"record": dict(RECORD, gencode="-gencode=arch=compute_90,code=sm_90"), "built_ok": True}, "build", BUILT),
    ({"record": {"version": "2.17.6"}, "built_ok": True}, "build", BUILT),
    # refusals
    ({"sha256": ""}, "refuse", None),
    ({"method": "source", "sha256": ""}, "refuse", None),
    ({"nvcc": False}, "refuse", None),
    ({"nvcc": False, "record": RECORD, "built_ok": True}, "refuse", None),
    ({"nvcc_output": "nvcc: command failed"}, "refuse", None),
    ({"make": False}, "refuse", None),
    ({"nccl_header": False, "build_packages": []}, "refuse", None),
    ({"method": "present"}, "refuse", None),
    ({"method": "packages"}, "refuse", None),
    ({"method": "packages", "packages": ["nccl-tests"], "packages_missing": ["nccl-tests"]}, "refuse", None),
    ({"packages": ["nccl-tests"], "packages_missing": ["nccl-tests"], "sha256": ""}, "refuse", None),
])
def test_plan(kw: dict[str, object], action: str, binary: str | None) -> None:
    got = plan(**kw)
    assert (got["action"], got["binary"]) == (action, binary), got


def test_missing_nccl_header_installs_the_build_packages() -> None:
    got = plan(nccl_header=False)
    assert (got["action"], got["build_packages"]) == ("build", ["libnccl-dev"])
    assert plan()["build_packages"] == []


def test_the_record_is_what_the_build_used() -> None:
    assert plan()["record"] == RECORD
    assert plan(nvcc_output="Cuda compilation tools, release 13.0, V13.0.48")["record"]["cuda_version"] == "13.0.48"


@pytest.mark.parametrize("kw, fragments", [
    ({"method": "source", "sha256": ""},
     ["gpu_node_nccl_tests_sha256 is empty", "never built from an unpinned source", "2.17.6 on gpu-07",
      "https://github.com/NVIDIA/nccl-tests/archive/v2.17.6.tar.gz", "gpu_node_acceptance: false"]),
    ({"nvcc": False}, ["/usr/local/cuda/bin/nvcc does not exist", "gpu_node_nccl_tests_cuda_home", "CUDA toolkit",
                       "gpu_node_nccl_tests_packages"]),
    ({"nvcc_output": "garbage"}, ["does not name a CUDA release", "'garbage'"]),
    ({"make": False}, ["make is not on PATH", "build-essential"]),
    ({"nccl_header": False, "build_packages": []}, ["/usr/include/nccl.h does not exist", "libnccl-dev",
                                                    "gpu_node_nccl_tests_build_packages", "gpu_node_nccl_tests_nccl_home"]),
    ({"method": "present"}, ["/opt/nccl-tests/build/all_reduce_perf (gpu_node_acceptance_all_reduce_perf)",
                             "gpu_node_nccl_tests_install: present", "https://github.com/NVIDIA/nccl-tests"]),
    ({"method": "packages"}, ["gpu_node_nccl_tests_packages is empty"]),
    ({"method": "packages", "packages": ["nccl-tests"], "packages_missing": ["nccl-tests"]},
     ["apt has no candidate for nccl-tests", "repository configured"]),
    ({"packages": ["nccl-tests"], "packages_missing": ["nccl-tests"], "sha256": ""},
     ["is not an executable file on gpu-07", "apt has no candidate for nccl-tests",
      "gpu_node_nccl_tests_sha256 is empty", "gpu_node_nccl_tests_packages", "gpu_node_acceptance: false"]),
    ({"record": dict(RECORD, cuda_version="12.8.61"), "built_ok": True}, ["CUDA 12.8.61 -> 12.8.93"]),
    ({"record": None}, ["no build record in /opt/nccl-tests-2.17.6", "MPI=0", GENCODE]),
    # auto falls back to the pinned build and says why apt gave nothing: the sources it could not fetch
    ({"packages": ["nccl-tests"], "packages_missing": ["nccl-tests"], "apt_fetch_failures": [UNREACHABLE]},
     ["building nccl-tests 2.17.6", "no build record", "apt has no candidate for nccl-tests (apt-get update could not fetch "
      + UNREACHABLE + ")"]),
    ({"packages": ["nccl-tests"], "packages_missing": ["nccl-tests"]},
     ["building nccl-tests 2.17.6", "apt has no candidate for nccl-tests (is NVIDIA's or your repository configured?)"]),
    ({"method": "packages", "packages": ["nccl-tests"], "packages_missing": ["nccl-tests"], "apt_fetch_failures": [UNREACHABLE]},
     ["cannot install nccl-tests on gpu-07 (gpu_node_nccl_tests_install: packages)", "could not fetch " + UNREACHABLE]),
])
def test_messages_name_what_is_missing(kw: dict[str, object], fragments: list[str]) -> None:
    reason = plan(**kw)["reason"]
    for fragment in fragments:
        assert fragment in reason, reason


@pytest.mark.parametrize("kw, match", [
    ({"method": "build"}, "gpu_node_nccl_tests_install must be one of auto, packages, source, present, got 'build'"),
    ({"sha256": "38974E70"}, "gpu_node_nccl_tests_sha256 must be 64 lower-case hex digits"),
])
def test_bad_input_names_the_variable(kw: dict[str, object], match: str) -> None:
    with pytest.raises(ntp.NcclTestsPlanError, match=match):
        plan(**kw)


@pytest.mark.parametrize("capability, gencode", [
    ("12.0", "-gencode=arch=compute_120,code=sm_120"), ("9.0", "-gencode=arch=compute_90,code=sm_90"),
    ("10.0", "-gencode=arch=compute_100,code=sm_100"), (" 8.9 ", "-gencode=arch=compute_89,code=sm_89")])
def test_gencode_for_the_gpus(capability: str, gencode: str) -> None:
    assert ntp.gencode_for(capability) == gencode


@pytest.mark.parametrize("capability", ["", "12", "sm_120", "12.0.1", None])
def test_gencode_refuses_what_is_no_compute_capability(capability: object) -> None:
    with pytest.raises(ntp.NcclTestsPlanError, match="gpu_node_expected_compute_capability"):
        ntp.gencode_for(capability)  # type: ignore[arg-type]


@pytest.mark.parametrize("output, version", [
    (NVCC, "12.8.93"), ("Cuda compilation tools, release 13.0, V13.0.48", "13.0.48"), ("", None), ("release 12.8", None)])
def test_cuda_version_from_nvcc(output: str, version: str | None) -> None:
    assert ntp.cuda_version(output) == version


@pytest.mark.parametrize("values", list(itertools.product(
    list(ntp.METHODS), [True, False], [[], ["nccl-tests"]], [True, False], ["", SHA], [None, RECORD], [True, False],
    [True, False], [True, False])))
def test_invariants_over_every_input(values: tuple[object, ...]) -> None:
    method, binary_ok, packages, candidate, sha, record, nvcc, make, header = values
    got = plan(method=method, binary_ok=binary_ok, packages=packages, packages_missing=[] if candidate else packages,
               sha256=sha, record=record, built_ok=record is not None, nvcc=nvcc, make=make, nccl_header=header)
    # Never built unpinned, without nvcc or without make; never a package apt has no candidate for.
    if got["action"] == "build":
        assert sha and nvcc and make
    if got["action"] == "built":
        assert sha and nvcc and record == RECORD
    if got["action"] == "packages":
        assert packages and candidate
    # The binary acceptance runs: what is there, or the build's; none when refused.
    assert (got["binary"] is None) == (got["action"] == "refuse")
    if method == "present":
        assert got["action"] in ("present", "refuse")
    assert got["reason"]


# apt-cache policy's format (apt 2.6) for NVIDIA's repository, written from the recorded answer below: a package
# it has, one known without candidate, one it does not know.
APT_POLICY = """libnccl-dev:
  Installed: (none)
  Candidate: 2.27.7-1+cuda12.9
  Version table:
     2.27.7-1+cuda12.9 600
        600 https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64  Packages
nccl-tests:
  Installed: (none)
  Candidate: (none)
  Version table:
"""


@pytest.mark.parametrize("packages, missing", [
    (["libnccl-dev"], []), (["nccl-tests"], ["nccl-tests"]), (["unknown-name"], ["unknown-name"]),
    (["libnccl-dev", "nccl-tests", "unknown-name"], ["nccl-tests", "unknown-name"]), ([], [])])
def test_without_candidate(packages: list[str], missing: list[str]) -> None:
    assert _apt.without_candidate(packages, APT_POLICY) == missing


# Recorded on a Debian 12 host (apt 2.6): `apt-cache policy -- make mail-transport-agent nosuchpkg-xyz`
# (a package with a candidate, a virtual one without, an unknown name: nothing printed, exit 0).
APT_POLICY_RECORDED = """make:
  Installed: 4.3-4.1
  Candidate: 4.3-4.1
  Version table:
 *** 4.3-4.1 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
        100 /var/lib/dpkg/status
mail-transport-agent:
  Installed: (none)
  Candidate: (none)
  Version table:
"""


def test_without_candidate_on_a_recorded_answer() -> None:
    assert _apt.without_candidate(["make", "mail-transport-agent", "nosuchpkg-xyz"], APT_POLICY_RECORDED) == [
        "mail-transport-agent", "nosuchpkg-xyz"]
