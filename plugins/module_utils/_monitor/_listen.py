# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Where the monitoring services listen: one address each, never every address by default.

Why: node_exporter, dcgm-exporter, Prometheus and Alertmanager on every interface answer anyone who
reaches the host (Alertmanager's API silences every alert). An exporter listens on the host's
address on the fleet's network, the one Prometheus scrapes it at; what only the monitoring host
itself asks (Prometheus, Alertmanager) on loopback. 0.0.0.0 only where an operator writes it.

A host's fleet address: monitoring_listen_address where set, else the address the inventory reaches
it at (monitoring_address, vllm_router_worker_address on a GPU node, ansible_host) when that is an
IP, else its default IPv4 from facts, else (no default route) its only address from facts. A name is never bound: Debian's /etc/hosts maps a host's own
name to 127.0.1.1, where nothing from outside would reach it.

Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import ipaddress
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._monitor._targets import host_port
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._net import bare_host

EVERY_ADDRESS = ("0.0.0.0", "::")


class ListenError(ValueError):
    """A listen address that is not an IP (or localhost), or a port out of range; names the variable."""


def _ip(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def check_host(value: t.Any, variable: str, shown: t.Any = None) -> str:
    """The host to bind: an IP ('localhost' is 127.0.0.1; 0.0.0.0 and :: are every address).
    shown: the variable's whole value, for the message (default: value)."""
    host = bare_host(str(value if value is not None else ""))
    if host.lower() == "localhost":
        return "127.0.0.1"
    address = _ip(host)
    if address is None:
        raise ListenError(f"{variable}: {value if shown is None else shown!r} is not an IP address (or localhost): a name is not bound, "
                          "give the address of the fleet's network, 127.0.0.1, or 0.0.0.0 for every address")
    return address


def check_listen(value: t.Any, variable: str) -> str:
    """'host:port' as the Go servers take it (--web.listen-address), its host checked; '' stays ''."""
    text = str(value if value is not None else "").strip()
    if not text:
        return ""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ListenError(f"{variable}: {value!r} is not host:port (for example 127.0.0.1:9093)")
    try:
        number = int(port)
    except ValueError:
        number = 0
    if not 0 < number < 65536:
        raise ListenError(f"{variable}: {value!r} has no port number (1-65535) after its last ':'")
    return host_port(check_host(host, variable, text), number)


def fleet_addresses(hosts: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, t.Any]:
    """{'addresses': {name: IP}, 'problems': [sentence], 'need_facts': [name]} for the hosts' exporters.

    hosts: [{name, explicit (monitoring_listen_address, '' or None when unset), candidates:
      [[variable, value], ...] in the order the inventory is read (the first that is set counts),
      facts_ipv4 (the default IPv4 from facts, '' when not gathered), facts_all_ipv4 (every IPv4 from
      facts: one that is not loopback or link-local is taken where there is no default route)}].
    need_facts: hosts whose inventory names them by a name and whose facts are not here yet.
    """
    addresses: dict[str, str] = {}
    problems: list[str] = []
    need_facts: list[str] = []
    for host in hosts:
        name = str(host.get("name") or "")
        if not name:
            raise ListenError(f"a host without a name: {dict(host)!r}")
        explicit = host.get("explicit")
        if explicit not in (None, ""):
            try:
                addresses[name] = check_host(explicit, f"{name}: monitoring_listen_address")
            except ListenError as exc:
                problems.append(str(exc))
            continue
        chosen = next(((str(var), str(val)) for var, val in host.get("candidates") or [] if val not in (None, "")),
                      ("inventory name", name))
        address = _ip(bare_host(chosen[1]))
        if address is not None:
            addresses[name] = address
            continue
        facts = _ip(str(host.get("facts_ipv4") or ""))
        if facts is not None:
            addresses[name] = facts
            continue
        # No default route (an air-gapped network has none): its one address, if it has only one.
        own = sorted({a for a in map(_ip, map(str, host.get("facts_all_ipv4") or [])) if a is not None
                      and not ipaddress.ip_address(a).is_loopback and not ipaddress.ip_address(a).is_link_local})
        if len(own) == 1:
            addresses[name] = own[0]
            continue
        if not own:  # nothing gathered yet (or no address at all): the role gathers network facts
            need_facts.append(name)
        seen = f"its addresses are {', '.join(own)}" if own else "no default IPv4 and no address were gathered from it"
        problems.append(f"{name}: its exporters need an address to listen on; its {chosen[0]} is {chosen[1]!r}, a name, "
                        f"and {seen}: set monitoring_listen_address (its IP on the fleet's network, the one Prometheus "
                        "reaches) or give ansible_host as an IP")
    return {"addresses": addresses, "problems": problems, "need_facts": need_facts}
