"""When apt's lists are refreshed before an install (plugins/module_utils/_apt.py, gpuserve.vllm.apt_lists)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _apt


@pytest.mark.parametrize(("missing", "age", "expected"), [
    # Lists emptied a minute ago (their directory's time is new): a missing package refreshes at once.
    (["nvidia-open"], 60.0, "no candidate for nvidia-open in apt's lists"),
    (["a", "b"], None, "no candidate for a, b in apt's lists"),
    ([], 60.0, ""),
    ([], 3599.0, ""),
    ([], 3600.0, "apt's lists are 3600 s old (valid for 3600 s)"),
    ([], None, "apt's lists were never refreshed"),
])
def test_refresh_reason(missing: list[str], age: float | None, expected: str) -> None:
    assert _apt.refresh_reason(missing, age, 3600) == expected


@pytest.mark.parametrize(("spec", "name"), [
    ("prometheus", "prometheus"),
    ("prometheus=2.42.0+ds-5+b5", "prometheus"),
    ("nvidia-open:amd64", "nvidia-open"),
    (" cuda-toolkit-12-9>=12.9 ", "cuda-toolkit-12-9"),
])
def test_package_name(spec: str, name: str) -> None:
    assert _apt.package_name(spec) == name
