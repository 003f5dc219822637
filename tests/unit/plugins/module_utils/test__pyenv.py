"""Tables for the pure helpers behind python_env_facts, plus one run of the real script."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _pyenv


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("vllm", "vllm"),
        ("Flash_Attn", "flash-attn"),
        ("flashinfer.python", "flashinfer-python"),
        ("a-_.b", "a-b"),
    ],
)
def test_normalize_name(name: str, expected: str) -> None:
    assert _pyenv.normalize_name(name) == expected


@pytest.mark.parametrize(
    ("specifier", "version", "expected"),
    [
        # vLLM 0.16-0.18 declare Requires-Python: <3.14,>=3.10
        ("<3.14,>=3.10", "3.11.2", True),
        ("<3.14,>=3.10", "3.12.3", True),
        ("<3.14,>=3.10", "3.9.18", False),
        ("<3.14,>=3.10", "3.14.0", False),
        ("<3.14,>=3.10", "3.13.9", True),
        ("", "2.7.18", True),
        (">=3.10", "3.10", True),
        (">3.10", "3.10.0", False),
        (">3.10", "3.10.1", True),
        ("<=3.12", "3.12.0", True),
        ("<=3.12", "3.12.1", False),
        ("==3.11.*", "3.11.9", True),
        ("==3.11.*", "3.12.0", False),
        ("!=3.11.*", "3.11.9", False),
        ("!=3.12.0", "3.12.1", True),
        ("~=3.11", "3.12.0", True),
        ("~=3.11", "4.0.0", False),
        ("~=3.11.2", "3.11.9", True),
        ("~=3.11.2", "3.12.0", False),
        ("==3.11", "3.11.0", True),
        (" >= 3.10 , < 3.14 ", "3.12.3", True),
    ],
)
def test_specifier_allows(specifier: str, version: str, expected: bool) -> None:
    assert _pyenv.specifier_allows(specifier, version) is expected


@pytest.mark.parametrize(
    ("specifier", "version"),
    [("python3", "3.11.2"), (">=3.*", "3.11.2"), ("~=3", "3.11.2"), (">=3.10", "abc")],
)
def test_specifier_errors(specifier: str, version: str) -> None:
    with pytest.raises(_pyenv.SpecifierError):
        _pyenv.specifier_allows(specifier, version)


@pytest.mark.parametrize(
    ("version", "expected"),
    [("3.12.3", (3, 12, 3)), ("2.10.0rc1", (2, 10, 0)), ("1!2.0", (2, 0)), ("0.17.0+cu129", (0, 17, 0))],
)
def test_release_tuple(version: str, expected: tuple[int, ...]) -> None:
    assert _pyenv.release_tuple(version) == expected


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        ("vllm==0.17.0", "vllm"),
        ("vllm[audio] == 0.17.0", "vllm"),
        ("flashinfer_python>=0.6", "flashinfer-python"),
        ("Six", "six"),
        ("  idna ; python_version > '3'", "idna"),
    ],
)
def test_pin_name(requirement: str, expected: str) -> None:
    assert _pyenv.pin_name(requirement) == expected


def test_pin_name_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        _pyenv.pin_name("==1.0")


@pytest.mark.parametrize(
    ("wanted", "expected", "missing"),
    [
        (None, {"vllm": "0.17.0", "six": "1.16.0"}, []),
        ([], {}, []),
        (["VLLM"], {"vllm": "0.17.0"}, []),
        (["vllm", "torch"], {"vllm": "0.17.0"}, ["torch"]),
    ],
)
def test_select_packages(wanted: list[str] | None, expected: dict[str, str],
                         missing: list[str]) -> None:
    packages = {"vllm": "0.17.0", "six": "1.16.0"}
    assert _pyenv.select_packages(packages, wanted) == (expected, missing)


def test_parse_inspect_output_normalises_and_takes_last_line() -> None:
    doc = {"python_version": "3.11.2", "prefix": "/opt/ml-env", "base_prefix": "/usr",
           "executable": "/opt/ml-env/bin/python",
           "packages": {"Flash_Attn": "2.8.0", "flash-attn": "0.1", "six": "1.16.0"}}
    out = "a warning printed by a sitecustomize\n" + json.dumps(doc) + "\n\n"
    data = _pyenv.parse_inspect_output(out)
    assert data["packages"] == {"flash-attn": "2.8.0", "six": "1.16.0"}
    assert data["python_version"] == "3.11.2"


def test_parse_inspect_output_empty() -> None:
    with pytest.raises(ValueError):
        _pyenv.parse_inspect_output("\n \n")


def test_inspect_script_on_this_interpreter() -> None:
    """The script must run on a real interpreter and find a distribution we know is installed."""
    out = subprocess.run([sys.executable, "-I", "-c", _pyenv.INSPECT_SCRIPT], check=True,
                         capture_output=True, text=True).stdout
    data = _pyenv.parse_inspect_output(out)
    assert data["python_version"] == "%d.%d.%d" % sys.version_info[:3]
    assert data["prefix"] == sys.prefix
    assert data["packages"]["pytest"] == pytest.__version__
