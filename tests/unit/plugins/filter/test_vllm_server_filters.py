"""The vllm_server filters: registered names, argument order, errors as AnsibleFilterError."""

from __future__ import annotations

import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.vllm_server import FilterModule
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _unit_boundary as ub

FILTERS = FilterModule().filters()


def test_registered_names() -> None:
    assert set(FILTERS) == {"vllm_serve_argv", "vllm_speculative_config", "systemd_exec_line",
                            "systemd_env_lines", "vllm_is_loopback", "vllm_bare_host",
                            "vllm_server_range_problems", "systemd_unit_directives",
                            "systemd_unit_properties", "vllm_unit_boundary_id"}


def test_role_pipeline_renders_valid_json() -> None:
    spec = FILTERS["vllm_speculative_config"]("/d/it's \"x\"", "eagle3", 3, 8, {"note": "$HOME 5%"})
    argv = FILTERS["vllm_serve_argv"]({"speculative_config": spec, "trust_remote_code": True},
                                      "/opt/ml-env/bin/vllm", "/srv/m", {"port": 9000})
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == spec
    line = FILTERS["systemd_exec_line"](argv)
    assert "$$HOME 5%%" in line and line.startswith("/opt/ml-env/bin/vllm serve /srv/m ")


@pytest.mark.parametrize("name, args", [
    ("vllm_speculative_config", ("", "eagle3", 3)),
    ("vllm_serve_argv", ({}, "/x", "")),
    ("systemd_exec_line", (["relative"],)),
    ("systemd_env_lines", ({"A-B": "1"},)),
])
def test_errors_become_filter_errors(name: str, args: tuple) -> None:
    with pytest.raises(AnsibleFilterError, match=name):
        FILTERS[name](*args)


def test_the_boundary_id_is_the_one_the_read_returns_and_holds_no_secret() -> None:
    """checks.yml compares the filter's id of the run's environment with vllm_node_state's
    boundary.id: the same function on both sides, over the judged variables only."""
    lines = FILTERS["systemd_env_lines"]({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2", "VLLM_API_KEY": "s3cret"})
    extra = {"Environment": "OPENSSL_CONF=/etc/ssl/vllm.cnf"}
    judged = FILTERS["vllm_unit_boundary_id"](lines, extra)
    assert judged == ub.judged_id(lines, extra)
    rotated = FILTERS["systemd_env_lines"]({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2", "VLLM_API_KEY": "rotated"})
    assert FILTERS["vllm_unit_boundary_id"](rotated, extra) == judged
    assert FILTERS["vllm_unit_boundary_id"](lines) != judged  # unit_extra is judged too
