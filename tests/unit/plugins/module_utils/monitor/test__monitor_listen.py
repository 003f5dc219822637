"""Where the monitoring services listen (module_utils/_monitor/_listen.py), as tables."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._monitor import _listen as ml


@pytest.mark.parametrize(("value", "expected"), [
    ("10.0.0.11", "10.0.0.11"), (" 10.0.0.11 ", "10.0.0.11"), ("localhost", "127.0.0.1"), ("0.0.0.0", "0.0.0.0"),
    ("[fd00::1]", "fd00::1"), ("::", "::"), ("FD00:0::1", "fd00::1"),
])
def test_check_host(value: str, expected: str) -> None:
    assert ml.check_host(value, "v") == expected


@pytest.mark.parametrize("value", ["gpu01.example.internal", "", None, "10.0.0.300", "10.0.0.1:9100"])
def test_check_host_refuses_what_is_not_an_ip(value) -> None:
    with pytest.raises(ml.ListenError, match=r"^monitoring_listen_address: .* is not an IP address \(or localhost\)"):
        ml.check_host(value, "monitoring_listen_address")


@pytest.mark.parametrize(("value", "expected"), [
    ("127.0.0.1:9093", "127.0.0.1:9093"), ("localhost:9090", "127.0.0.1:9090"), ("[::1]:9093", "[::1]:9093"),
    ("0.0.0.0:9090", "0.0.0.0:9090"), ("", ""), (None, ""),
])
def test_check_listen(value, expected: str) -> None:
    assert ml.check_listen(value, "v") == expected


@pytest.mark.parametrize(("value", "message"), [
    (":9093", "is not host:port"),
    ("9093", "is not host:port"),
    ("127.0.0.1:http", "has no port number"),
    ("127.0.0.1:70000", "has no port number"),
    ("mon01:9093", "is not an IP address"),
])
def test_check_listen_refuses(value: str, message: str) -> None:
    with pytest.raises(ml.ListenError, match=rf"^monitoring_alertmanager_listen_address: '{value}' {message}"):
        ml.check_listen(value, "monitoring_alertmanager_listen_address")


def _host(name: str, explicit=None, facts: str = "", every: tuple = (), **candidates) -> dict:
    return {"name": name, "explicit": explicit, "facts_ipv4": facts, "facts_all_ipv4": list(every),
            "candidates": [[k, v] for k, v in candidates.items()]}


@pytest.mark.parametrize(("host", "address"), [
    # The inventory's IP, in its order: monitoring_address before ansible_host.
    (_host("gpu01", monitoring_address="10.1.0.11", ansible_host="192.168.0.11"), "10.1.0.11"),
    (_host("gpu01", monitoring_address=None, ansible_host="192.168.0.11"), "192.168.0.11"),
    # An explicit address wins, checked; 0.0.0.0 only when written.
    (_host("gpu01", explicit="10.2.0.11", ansible_host="192.168.0.11"), "10.2.0.11"),
    (_host("gpu01", explicit="0.0.0.0", ansible_host="192.168.0.11"), "0.0.0.0"),
    (_host("gpu01", explicit="localhost"), "127.0.0.1"),
    # A name in the inventory: the default IPv4 from facts; an IP as the inventory name itself.
    (_host("gpu01", facts="10.3.0.11", ansible_host="gpu01.example.internal"), "10.3.0.11"),
    (_host("gpu01", facts="10.3.0.11"), "10.3.0.11"),
    (_host("10.4.0.11"), "10.4.0.11"),
    (_host("gpu01", ansible_host="[fd00::11]"), "fd00::11"),
    # No default route (an air-gapped network, molecule's internal podman network): its only address.
    (_host("gpu01", every=("10.89.0.5",), ansible_host="gpu01"), "10.89.0.5"),
    (_host("gpu01", every=("127.0.0.1", "169.254.3.1", "10.89.0.5")), "10.89.0.5"),
    (_host("gpu01", facts="10.3.0.11", every=("10.89.0.5", "10.3.0.11")), "10.3.0.11"),
])
def test_fleet_address(host: dict, address: str) -> None:
    result = ml.fleet_addresses([host])
    assert result == {"addresses": {"gpu01" if host["name"] == "gpu01" else host["name"]: address}, "problems": [],
                      "need_facts": []}


def test_a_name_without_facts_needs_facts_and_is_a_problem() -> None:
    result = ml.fleet_addresses([_host("gpu01", ansible_host="gpu01.example.internal"), _host("gpu02", ansible_host="10.0.0.12")])
    assert result["addresses"] == {"gpu02": "10.0.0.12"}
    assert result["need_facts"] == ["gpu01"]
    assert result["problems"] == [
        "gpu01: its exporters need an address to listen on; its ansible_host is 'gpu01.example.internal', a name, and no "
        "default IPv4 and no address were gathered from it: set monitoring_listen_address (its IP on the fleet's network, "
        "the one Prometheus reaches) or give ansible_host as an IP"]


def test_several_addresses_without_a_default_route_are_not_guessed() -> None:
    """Which of two networks Prometheus reaches a host on is the inventory's to say."""
    result = ml.fleet_addresses([_host("gpu01", every=("10.89.0.5", "192.168.7.5"), ansible_host="gpu01")])
    assert result["addresses"] == {} and result["need_facts"] == []
    assert "its addresses are 10.89.0.5, 192.168.7.5: set monitoring_listen_address" in result["problems"][0]


def test_a_bad_explicit_address_is_a_problem_naming_the_host_and_variable() -> None:
    result = ml.fleet_addresses([_host("gpu01", explicit="gpu01.lan", ansible_host="10.0.0.11")])
    assert result["addresses"] == {} and result["need_facts"] == []
    assert result["problems"][0].startswith("gpu01: monitoring_listen_address: 'gpu01.lan' is not an IP address")


def test_a_host_without_a_name_is_an_error() -> None:
    with pytest.raises(ml.ListenError, match="a host without a name"):
        ml.fleet_addresses([{"candidates": []}])
