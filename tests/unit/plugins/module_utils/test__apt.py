"""When apt's lists are refreshed before an install (plugins/module_utils/_apt.py, gpuserve.vllm.apt_lists)."""

from __future__ import annotations

from pathlib import Path

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


FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "apt"


def _recorded(name: str) -> tuple[str, str]:
    return (FIXTURES / f"{name}.stdout").read_text(), (FIXTURES / f"{name}.stderr").read_text()


def test_fetch_failures_of_an_update_that_resolved_no_name() -> None:
    """Recorded (tests/fixtures/apt/README.md): apt 2.6.1 exits 0, a warning per source."""
    assert (FIXTURES / "apt-get-update-no-network.rc").read_text().strip() == "0"
    assert _apt.fetch_failures(_recorded("apt-get-update-no-network")[0]) == [
        "http://deb.debian.org/debian bookworm InRelease (Temporary failure resolving 'deb.debian.org')",
        "http://deb.debian.org/debian bookworm-updates InRelease (Temporary failure resolving 'deb.debian.org')",
        "http://deb.debian.org/debian-security bookworm-security InRelease (Temporary failure resolving 'deb.debian.org')",
        "http://127.0.0.1:9 ./ InRelease (Could not connect to 127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused))",
    ]


def test_fetch_failures_of_an_update_with_no_route_out() -> None:
    """Recorded: apt 2.6.1 exits 100 ("does not have a Release file"); the lists stay as they were all the same."""
    assert (FIXTURES / "apt-get-update-no-route.rc").read_text().strip() == "100"
    unreachable = "Cannot initiate the connection to deb.debian.org:80 (203.0.113.80). - connect (101: Network is unreachable)"
    assert _apt.fetch_failures(_recorded("apt-get-update-no-route")[0]) == [
        f"http://deb.debian.org/debian bookworm Release ({unreachable})",
        f"http://deb.debian.org/debian bookworm-updates Release ({unreachable})",
        f"http://deb.debian.org/debian-security bookworm-security Release ({unreachable})",
    ]


def test_fetch_failures_of_a_file_repository_without_release() -> None:
    """Recorded: a flat repository without its Release file (apt exits 100)."""
    assert (FIXTURES / "apt-get-update-no-release.rc").read_text().strip() == "100"
    assert _apt.fetch_failures(_recorded("apt-get-update-no-release")[0]) == [
        "file:/opt/repo ./ Release (File not found - /opt/repo/./Release (2: No such file or directory))"]


@pytest.mark.parametrize("stdout", ["", "Hit:1 http://deb.debian.org/debian bookworm InRelease\nReading package lists...\n"])
def test_fetch_failures_none(stdout: str) -> None:
    assert _apt.fetch_failures(stdout) == []
