"""The vLLM unit's hardening with an operator's directives: what renders, what is refused and why."""

from __future__ import annotations

import typing as t

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.vllm_server import FilterModule
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _unit_hardening as uh

BASE = [
    {"name": "NoNewPrivileges", "value": True},
    {"name": "RestrictAddressFamilies", "value": "AF_INET AF_INET6 AF_UNIX AF_NETLINK",
     "why": "The API; ZMQ ipc:// and NCCL's handles over AF_UNIX; NCCL and Gloo list the network "
            "interfaces through AF_NETLINK, which this sentence wraps after many words."},
    {"name": "CapabilityBoundingSet", "value": ""},
    {"name": "UMask", "value": "0077"},
]
V = "vllm_server_unit_extra"
FILTERS = FilterModule().filters()


def test_base_alone_renders_reasons_above_their_directive() -> None:
    assert uh.unit_lines(BASE, {}, V) == [
        "NoNewPrivileges=yes",
        "# The API; ZMQ ipc:// and NCCL's handles over AF_UNIX; NCCL and Gloo list the network "
        "interfaces",
        "# through AF_NETLINK, which this sentence wraps after many words.",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK",
        "CapabilityBoundingSet=",
        "UMask=0077",
    ]


def test_extra_replaces_in_place_and_adds_after() -> None:
    lines = uh.unit_lines(BASE, {"UMask": "0027", "CPUAffinity": "0-31",
                                 "DeviceAllow": ["char-nvidia rw", "char-nvidia-uvm rw",
                                                 "char-nvidia-caps rw"],
                                 "DevicePolicy": "closed", "Dropped": None}, V)
    assert lines[-11:] == [
        "CapabilityBoundingSet=",
        "# replaced by vllm_server_unit_extra", "UMask=0027",
        "# added by vllm_server_unit_extra", "CPUAffinity=0-31",
        "# added by vllm_server_unit_extra", "DeviceAllow=char-nvidia rw",
        "DeviceAllow=char-nvidia-uvm rw", "DeviceAllow=char-nvidia-caps rw",
        "# added by vllm_server_unit_extra", "DevicePolicy=closed",
    ]
    assert not any(line.startswith("Dropped") for line in lines)


def test_properties_are_the_same_directives_for_systemd_run() -> None:
    props = uh.properties(BASE, {"DeviceAllow": ["char-nvidia* rw"], "DevicePolicy": "closed"}, V)
    assert props == {"NoNewPrivileges": "yes",
                     "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX AF_NETLINK",
                     "CapabilityBoundingSet": "", "UMask": "0077",
                     "DeviceAllow": "char-nvidia* rw", "DevicePolicy": "closed"}


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"PrivateDevices": True}, "PrivateDevices=yes gives vLLM a /dev without /dev/nvidia*"),
        ({"PrivateDevices": "on"}, "PrivateDevices=yes"),
        ({"DevicePolicy": "closed"},
         "DevicePolicy=closed with DeviceAllow=(nothing) leaves out nvidia, nvidia-uvm, nvidia-caps"),
        # a device list alone (policy auto) denies every other device too
        ({"DeviceAllow": "/dev/nvidiactl rw"},
         "DevicePolicy=auto with DeviceAllow=/dev/nvidiactl rw leaves out nvidia, nvidia-uvm, nvidia-caps"),
        # the name current drivers do not use for major 195 (confidential-os-builder PR #73)
        ({"DevicePolicy": "closed", "DeviceAllow": ["char-nvidia-frontend rw", "char-nvidia-uvm rw",
                                                    "char-nvidia-caps rw"]},
         "leaves out nvidia:"),
        ({"DevicePolicy": "closed", "DeviceAllow": ["char-nvidia r", "char-nvidia-uvm rw",
                                                    "char-nvidia-caps rw"]},
         "leaves out nvidia:"),
        ({"DevicePolicy": "strict", "DeviceAllow": "char-nvidia* rw"},
         "leaves out /dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom"),
        ({"MemoryDenyWriteExecute": "yes"}, "CUDA's PTX JIT, triton and torch.compile"),
        ({"RestrictAddressFamilies": "AF_INET AF_INET6"},
         "takes away AF_UNIX, which vLLM needs: vLLM's API server talks to its engine"),
        ({"RestrictAddressFamilies": "~AF_NETLINK AF_PACKET"}, "takes away AF_NETLINK"),
        ({"RestrictAddressFamilies": "none"}, "takes away AF_UNIX"),
        ({"RestrictAddressFamilies": "AF_UNIX AF_NETLINK"}, "takes away AF_INET, which"),
        ({"PrivateNetwork": True}, "clients and the routers could not reach its port"),
        ({"ProcSubset": "pid"}, "hides /proc/driver/nvidia"),
        ({"LimitMEMLOCK": "64M"}, "LimitMEMLOCK=64M: NCCL and CUDA lock their host buffers"),
    ],
)
def test_what_breaks_vllm_on_gpus_is_refused_with_the_reason(extra: dict[str, t.Any],
                                                             reason: str) -> None:
    with pytest.raises(uh.DirectiveError) as err:
        uh.unit_lines(BASE, extra, V)
    assert str(err.value).startswith("vllm_server_unit_extra: refused, this would break vLLM on "
                                     "its GPUs: ")
    assert reason in str(err.value)
    assert str(err.value).endswith("Nothing was rendered.")
    with pytest.raises(uh.DirectiveError):
        uh.properties(BASE, extra, V)  # the canary refuses the same


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"PrivateDevices": False},
        {"DevicePolicy": "closed", "DeviceAllow": ["char-nvidia rw", "char-nvidia-uvm rw",
                                                   "char-nvidia-caps rw"]},
        {"DevicePolicy": "closed", "DeviceAllow": "char-nvidia*"},  # no access letters = rwm
        {"DevicePolicy": "strict", "DeviceAllow": ["char-nvidia* rw", "char-mem rw"]},
        {"DeviceAllow": ["char-nvidia* rw", ""]},  # the empty assignment resets the list
        {"RestrictAddressFamilies": "AF_INET AF_UNIX AF_NETLINK"},  # v4 only
        {"RestrictAddressFamilies": "~AF_PACKET"},
        {"RestrictAddressFamilies": ""},
        {"MemoryDenyWriteExecute": "no", "LimitMEMLOCK": "infinity", "ProcSubset": "all"},
        {"SystemCallFilter": "@system-service", "CPUAffinity": "0-63"},
    ],
)
def test_what_keeps_the_gpus_is_accepted(extra: dict[str, t.Any]) -> None:
    assert uh.unit_lines(BASE, extra, V)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"protect_home": True}, "'protect_home' is not a systemd directive name"),
        ({"ExecStart": "/bin/true\nExecStartPre=/evil"}, "ExecStart has a line break"),
        ({"Environment": {"A": 1}}, "Environment must be a string, number, boolean or a list"),
    ],
)
def test_what_cannot_be_rendered_is_refused(extra: dict[str, t.Any], message: str) -> None:
    with pytest.raises(uh.DirectiveError, match=message):
        uh.unit_lines(BASE, extra, V, gpu=False)


def test_without_gpus_only_the_syntax_is_checked() -> None:
    # the router's unit: PrivateDevices is its own, and an operator may add more
    assert uh.unit_lines([], {"PrivateDevices": True, "MemoryDenyWriteExecute": True},
                         "vllm_router_unit_extra", gpu=False) == [
        "# added by vllm_router_unit_extra", "PrivateDevices=yes",
        "# added by vllm_router_unit_extra", "MemoryDenyWriteExecute=yes"]


def test_the_filters_raise_ansible_errors_naming_the_variable() -> None:
    with pytest.raises(AnsibleFilterError, match="systemd_unit_directives: vllm_server_unit_extra: "
                                                 "refused"):
        FILTERS["systemd_unit_directives"](BASE, {"PrivateDevices": True}, V)
    with pytest.raises(AnsibleFilterError, match="systemd_unit_properties: vllm_server_unit_extra"):
        FILTERS["systemd_unit_properties"](BASE, {"MemoryDenyWriteExecute": True}, V)
    assert FILTERS["systemd_unit_directives"]([], {"A": 1}, "x", gpu=False) == ["# added by x", "A=1"]
