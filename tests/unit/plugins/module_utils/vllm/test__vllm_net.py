"""Tables for the loopback test of the bind address (plugins/module_utils/_vllm/_net.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _net as vn


@pytest.mark.parametrize("host, expected", [
    ("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("gpu01.example", False),
    # the role's former YAML test called these exposed
    ("LOCALHOST", True), ("ip6-localhost", True), ("ip6-loopback", True), (" [::1] ", True),
    ("0:0:0:0:0:0:0:1", True), ("::ffff:127.0.0.1", True), ("localhost.", True),
    ("", False), ("[::]", False), ("127.example.com", False), ("::ffff:10.0.0.1", False),
])
def test_is_loopback(host: str, expected: bool) -> None:
    assert vn.is_loopback(host) is expected


@pytest.mark.parametrize("host, bare", [("[::1]", "::1"), (" 127.0.0.1 ", "127.0.0.1"), ("::", "::"), ("gpu01", "gpu01")])
def test_bare_host(host: str, bare: str) -> None:
    assert vn.bare_host(host) == bare
