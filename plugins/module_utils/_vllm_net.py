# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Whether a bind address exposes the vLLM server beyond this machine.

Stdlib only, Python 3.9+, no Ansible imports: modules run this on the managed node
and plugins on the controller.
"""

from __future__ import annotations


def is_loopback(host: str) -> bool:
    """True when binding `host` only exposes the server to this machine."""
    host = str(host).strip().strip("[]").lower()
    return host in ("localhost", "::1", "ip6-localhost") or host.startswith("127.")
