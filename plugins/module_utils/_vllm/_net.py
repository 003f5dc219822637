# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Whether a bind address exposes the vLLM server beyond this machine.

The role and its tests use this one implementation (as the filter gpuserve.vllm.vllm_is_loopback).

Stdlib only, Python 3.9+, no Ansible imports: modules run this on the managed node
and plugins on the controller.
"""

from __future__ import annotations

import ipaddress

# Names Debian's /etc/hosts gives the loopback addresses.
_LOOPBACK_NAMES = ("localhost", "ip6-localhost", "ip6-loopback")


def bare_host(host: str) -> str:
    """The host without spaces and IPv6 brackets: '[::1]' -> '::1'."""
    host = str(host).strip()
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(host: str) -> bool:
    """True when binding `host` only exposes the server to this machine."""
    host = bare_host(host).lower().rstrip(".")
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))
