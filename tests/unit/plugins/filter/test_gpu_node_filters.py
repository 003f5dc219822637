"""The gpu_node filters: registered names, the role's inputs as Ansible passes them."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.gpu_node import FilterModule

FILTERS = FilterModule().filters()
KEY = {"version": 1, "driver": "580.95.05", "kernel": "6.8.0-60-generic", "gpus": [], "iommu_args": [], "nccl_env": {}}
OBSERVED = {"changed": False, "key": KEY, "previous": {"verdict": "pass", "time": "t", "key": KEY},
            "record_error": None, "record": "/var/lib/gpuserve/gpu_node.acceptance.json"}


@pytest.mark.parametrize("force, run", [(False, False), ("false", False), (True, True), ("yes", True), ("True", True)])
def test_plan_from_the_observe_result(force: object, run: bool) -> None:
    assert FILTERS["gpu_node_acceptance_plan"](OBSERVED, force)["run"] is run


def test_plan_names_the_record() -> None:
    plan = FILTERS["gpu_node_acceptance_plan"](dict(OBSERVED, previous=None))
    assert plan["reason"] == "never run on this node (no /var/lib/gpuserve/gpu_node.acceptance.json)"


@pytest.mark.parametrize("observed", [None, {}, {"key": None}, "pass"])
def test_plan_refuses_what_is_not_an_observe_result(observed: object) -> None:
    with pytest.raises(AnsibleFilterError, match="expected the result of gpuserve.vllm.gpu_node_acceptance with observe: true"):
        FILTERS["gpu_node_acceptance_plan"](observed)


def test_driver_plan_from_what_driver_yml_reads() -> None:
    # As the role hands it over: apt's check, nvidia_driver_facts, systemctl's ActiveState (stripped).
    observed = {"install_wanted": True, "packages_change": True, "loaded": "580.82.07", "installed": "580.82.07",
                "server_state": "active", "reboot_allowed": True, "marker": True,
                "packages": ["nvidia-driver-580-server-open"]}
    assert FILTERS["gpu_node_driver_plan"](observed)["install"] == "stage"
    assert FILTERS["gpu_node_driver_plan"](dict(observed, server_state="inactive"))["install"] == "now"
    # systemctl could not answer: taken as serving
    assert FILTERS["gpu_node_driver_plan"](dict(observed, server_state=""))["install"] == "stage"
    assert FILTERS["gpu_node_driver_plan"](dict(observed, loaded=None, installed="", reboot_allowed="false",
                                                server_state="failed"))["checks"] == "deferred"


def test_driver_plan_refuses_what_is_not_a_dict() -> None:
    with pytest.raises(AnsibleFilterError, match="gpu_node_driver_plan: expected a dict"):
        FILTERS["gpu_node_driver_plan"]("active")


APT_CHECK = {"changed": True, "stdout": "Inst nvidia-open [570.172.08-1] (550.163.01-1 NVIDIA:cuda/debian12 [amd64])\n"}


def test_next_driver_problems_reads_the_apt_result() -> None:
    assert FILTERS["gpu_node_driver_next_problems"](APT_CHECK, ["nvidia-open"], "570") == [
        "nvidia-open 550.163.01-1 is branch 550, below the required branch 570"]
    assert FILTERS["gpu_node_driver_next_problems"](APT_CHECK, ["nvidia-open"], None) == []


@pytest.mark.parametrize(("apt_check", "packages", "minimum", "says"), [
    (None, ["nvidia-open"], 570, "expected ansible.builtin.apt's check-mode result"),
    (APT_CHECK, "nvidia-open", 570, "expected ansible.builtin.apt's check-mode result"),
    (APT_CHECK, ["nvidia-open"], "five-seventy", "min_branch must be a number"),
])
def test_next_driver_problems_refuses_what_it_cannot_read(apt_check: object, packages: object, minimum: object, says: str) -> None:
    with pytest.raises(AnsibleFilterError, match=says):
        FILTERS["gpu_node_driver_next_problems"](apt_check, packages, minimum)


NCCL_TESTS = {"method": "auto", "host": "gpu-07", "binary": "/opt/nccl-tests/build/all_reduce_perf", "binary_ok": False,
              "packages": [], "apt_policy": None, "version": "2.17.6", "sha256": "a" * 64,
              "source": "/srv/nccl-tests-2.17.6.tar.gz", "install_dir": "/opt/nccl-tests-2.17.6", "record": None,
              "built_ok": False, "cuda_home": "/usr/local/cuda", "nvcc": True,
              "nvcc_output": "Cuda compilation tools, release 12.8, V12.8.93", "nccl_home": "/usr", "nccl_header": True,
              "make": True, "gencode": "", "compute_capability": "12.0", "build_packages": ["libnccl-dev"]}


def test_nccl_tests_plan_derives_the_gencode_from_the_compute_capability() -> None:
    got = FILTERS["gpu_node_nccl_tests_plan"](NCCL_TESTS)
    assert (got["action"], got["record"]["gencode"]) == ("build", "-gencode=arch=compute_120,code=sm_120")
    given = FILTERS["gpu_node_nccl_tests_plan"](dict(NCCL_TESTS, gencode="-gencode=arch=compute_90,code=sm_90"))
    assert given["record"]["gencode"] == "-gencode=arch=compute_90,code=sm_90"


@pytest.mark.parametrize("flags, action", [({"nvcc": "false"}, "refuse"), ({"binary_ok": "true"}, "present"),
                                           ({"record": "not a dict"}, "build")])
def test_nccl_tests_plan_takes_the_role_s_values(flags: dict[str, object], action: str) -> None:
    assert FILTERS["gpu_node_nccl_tests_plan"](dict(NCCL_TESTS, **flags))["action"] == action


@pytest.mark.parametrize("observed, match", [
    (None, "expected a dict"), ({"method": "auto", "gencode": "-gencode=arch=compute_120,code=sm_120"}, "'binary' missing"),
    (dict(NCCL_TESTS, packages="nccl-tests"), "gpu_node_nccl_tests_packages must be a list"),
    (dict(NCCL_TESTS, apt_fetch_failures="http://127.0.0.1:9/"), "apt_fetch_failures must be a list"),
    (dict(NCCL_TESTS, method="apt"), "gpu_node_nccl_tests_install must be one of"),
    (dict(NCCL_TESTS, compute_capability="sm_120"), "gpu_node_expected_compute_capability must read like 12.0")])
def test_nccl_tests_plan_refuses_bad_input(observed: object, match: str) -> None:
    with pytest.raises(AnsibleFilterError, match=match):
        FILTERS["gpu_node_nccl_tests_plan"](observed)


POLICY = "nccl-tests:\n  Installed: (none)\n  Candidate: 2.17.6-1\n  Version table:\n     2.17.6-1 500\n"


@pytest.mark.parametrize("packages, policy, action", [
    (["nccl-tests"], POLICY, "packages"), (["nccl-tests"], POLICY.replace("2.17.6-1\n  Version", "(none)\n  Version"), "build"),
    (["nccl-tests", "other"], POLICY, "build"), (["nccl-tests"], "", "build")])
def test_nccl_tests_plan_reads_apt_s_candidates(packages: list[str], policy: str, action: str) -> None:
    assert FILTERS["gpu_node_nccl_tests_plan"](dict(NCCL_TESTS, packages=packages, apt_policy=policy))["action"] == action


def test_kernel_cmdline_plan_from_what_the_role_passes() -> None:
    observed = {"args": ["iommu=pt"], "cmdline": "BOOT_IMAGE=/boot/vmlinuz ro quiet\n",
                "files": "1796461900.5 /etc/default/grub.d/90-gpuserve-vllm.cfg\n",
                "dropin": "/etc/default/grub.d/90-gpuserve-vllm.cfg", "grub_cfg": "/boot/grub/grub.cfg",
                "proc_stat": "cpu  1 2 3\nbtime 1796461926\n"}
    plan = FILTERS["gpu_node_kernel_cmdline_plan"](observed)
    assert (plan["update_grub"], plan["reboot"], plan["missing"]) == (True, True, ["iommu=pt"])
    with pytest.raises(AnsibleFilterError, match="gpu_node_kernel_cmdline_plan: 'grub_cfg' missing"):
        FILTERS["gpu_node_kernel_cmdline_plan"]({k: v for k, v in observed.items() if k != "grub_cfg"})
    with pytest.raises(AnsibleFilterError, match="expected a dict of what the node shows"):
        FILTERS["gpu_node_kernel_cmdline_plan"]("iommu=pt")


@pytest.mark.parametrize("server_state, here, where", [
    (None, False, "now"),  # not read: the role alone, no serve play takes a request
    ("active", False, "serve_play"), ("activating", False, "serve_play"), ("", False, "serve_play"),
    ("inactive", False, "now"), ("failed", False, "now"), ("active", "true", "now"),
])
def test_acceptance_plan_where_from_the_server_state(server_state: object, here: object, where: str) -> None:
    assert FILTERS["gpu_node_acceptance_plan"](OBSERVED, True, server_state, here)["where"] == where


def test_driver_fallback_reads_the_registered_results() -> None:
    listing = {"rc": 0, "stdout": "ii \tnvidia-open\t580.82.07-1\n"}
    observed = {"host": "gpu07", "failure": "E: Could not get lock", "marker": "/m", "packages": ["nvidia-open"],
                "dpkg_before": listing, "dpkg_after": listing,
                "driver": {"kernel_module": {"version": "580.82.07", "source": "/proc/driver/nvidia/version"}},
                "userland": {"rc": 0, "stdout": "580.82.07", "stderr": ""}}
    assert FILTERS["gpu_node_driver_fallback"](observed)["restart"] is True
    served = FILTERS["gpu_node_driver_fallback"](observed, {"ok": True})["message"]
    assert "gpu07 serves again on the old driver 580.82.07" in served
    # a read that failed or was skipped is not "unchanged"; nvidia-smi missing is its rc, not a pass
    assert FILTERS["gpu_node_driver_fallback"](dict(observed, dpkg_after={"rc": 2, "stdout": ""}))["reasons"] == [
        "dpkg-query could not list the packages after the failure"]
    assert FILTERS["gpu_node_driver_fallback"](dict(observed, dpkg_before={"skipped": True}))["restart"] is False
    missing = {"rc": 2, "msg": "[Errno 2] No such file or directory: b'nvidia-smi'"}
    assert FILTERS["gpu_node_driver_fallback"](dict(observed, userland=missing))["reasons"] == [
        "nvidia-smi (the driver's userland) fails (rc 2: [Errno 2] No such file or directory: b'nvidia-smi')"]
    with pytest.raises(AnsibleFilterError, match="gpu_node_driver_fallback: expected a dict"):
        FILTERS["gpu_node_driver_fallback"]({"host": "gpu07"})
