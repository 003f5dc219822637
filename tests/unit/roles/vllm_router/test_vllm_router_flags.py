"""The vllm_router role's command line against the REAL vllm-router it pins.

The pinned release (roles/vllm_router/defaults/main.yml) is installed once, with its
dependencies, into a venv under $GPUSERVE_CACHE (outside the repo). The role's argv is rendered
by ansible-playbook from the role's own defaults and vars, then every flag is looked up in the
real router's --help and the whole argv is parsed by the router's own argument parser. Needs
tests/env.sh (ansible-playbook) and the package index once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.vllm_router_bin import router_bin as installed_router_bin

REPO = Path(__file__).resolve().parents[4]
ROLE = REPO / "roles" / "vllm_router"

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="needs ansible-playbook (source tests/env.sh)")


@pytest.fixture(scope="module")
def router_bin() -> Path:
    return installed_router_bin()


@pytest.fixture(scope="module")
def help_text(router_bin: Path) -> str:
    return subprocess.run([str(router_bin), "--help"], check=True, capture_output=True, text=True).stdout


def render_argv(tmp_path: Path, extra_vars: dict) -> list[str]:
    """The argv the role checks with the router's parser (its unit's flags plus the worker URLs
    systemd passes from workers.env), for a three-node inventory."""
    (tmp_path / "hosts.ini").write_text(
        "[gpu_nodes]\ngpu01 ansible_host=10.0.0.1 vllm_server_port=8001\n"
        "gpu02 vllm_router_worker_address=gpu02.internal\ngpu03\n"
        "[vllm_routers]\nlocalhost ansible_connection=local\n")
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml")],
        "tasks": [{"ansible.builtin.debug": {"var": "__vllm_router_checked_argv"}}]}]))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    out = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.ini"), str(tmp_path / "play.yml"),
                          "-e", json.dumps(extra_vars)], check=True, capture_output=True, text=True, env=env)
    result = json.loads(out.stdout[out.stdout.index("{"):])
    return result["plays"][0]["tasks"][0]["hosts"]["localhost"]["__vllm_router_checked_argv"]


def parse_with_router(router_bin: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """The router's own parser on argv[1:] (what the role checks before writing the unit)."""
    python = router_bin.parent / "python"
    code = ("import sys; from vllm_router.launch_router import parse_router_args; "
            "a = parse_router_args(sys.argv[1:]); print(a.worker_urls, a.policy)")
    return subprocess.run([str(python), "-c", code, *argv[1:]], capture_output=True, text=True,
                          check=False)


CASES = {
    "defaults": {},
    "all options set": {
        "vllm_router_policy": "power_of_two", "vllm_router_disable_retries": True,
        "vllm_router_host": "0.0.0.0", "vllm_router_log_level": "debug",
        "vllm_router_extra_flags": {"max-concurrent-requests": 64, "queue-size": 0,
                                    "request-id-headers": ["x-request-id", "x-trace-id"],
                                    "cors-allowed-origins": False, "enable-igw": None},
    },
}


@pytest.mark.parametrize("case", CASES)
def test_every_rendered_flag_is_in_the_real_routers_help(case, tmp_path, router_bin, help_text):
    argv = render_argv(tmp_path, CASES[case])
    known = set(re.findall(r"(--[a-z0-9-]+)", help_text))
    used = [a for a in argv if a.startswith("--")]
    assert len(used) >= 14
    assert sorted(set(used) - known) == []
    parsed = parse_with_router(router_bin, argv)
    assert parsed.returncode == 0, parsed.stderr
    assert "['http://10.0.0.1:8001', 'http://gpu02.internal:8000', 'http://gpu03:8000']" in parsed.stdout


def run_with_help(router_bin: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """What the role runs before writing the unit: the flags, then --help."""
    return subprocess.run([str(router_bin), *argv[1:], "--help"], capture_output=True, text=True,
                          check=False)


def test_a_bad_value_is_refused_before_help(tmp_path, router_bin):
    argv = render_argv(tmp_path, {"vllm_router_extra_flags": {"queue-size": "many"}})
    done = run_with_help(router_bin, argv)
    assert done.returncode == 2 and "argument --queue-size: invalid int value: 'many'" in done.stderr


@pytest.mark.parametrize("flag", ["no-such-flag", "worker-url"])
def test_unknown_names_pass_help_so_the_role_checks_names_exactly(flag, tmp_path, router_bin, help_text):
    """argparse reports unknown flags after --help has exited, and takes abbreviations
    (--worker-url for --worker-urls): only an exact lookup in --help catches both."""
    argv = render_argv(tmp_path, {"vllm_router_extra_flags": {flag: "http://x:8000"}})
    assert run_with_help(router_bin, argv).returncode == 0
    assert f"--{flag}" not in set(re.findall(r"(--[a-z0-9-]+)", help_text))
    if flag == "no-such-flag":
        assert parse_with_router(router_bin, argv).returncode == 2


def test_policy_choices_match_the_real_router(help_text):
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    choices = spec["argument_specs"]["main"]["options"]["vllm_router_policy"]["choices"]
    real = re.search(r"--policy \{([a-z_,]+)\}", help_text).group(1).split(",")
    assert choices == real
