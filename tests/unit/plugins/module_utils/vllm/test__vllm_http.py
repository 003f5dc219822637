"""Tables for the HTTP helpers' duration formatting (plugins/module_utils/_vllm/_http.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _http as vh


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (12.4, "12s"), (754, "12m34s"), (3700, "1h01m40s")])
def test_format_duration(seconds: float, text: str) -> None:
    assert vh.format_duration(seconds) == text
