"""The monitoring filters: registered names, argument order, errors as AnsibleFilterError."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.monitoring import FilterModule

FILTERS = FilterModule().filters()


def test_registered_names() -> None:
    assert set(FILTERS) == {"monitoring_scrape_configs", "fleet_status_table"}


def test_scrape_configs_from_what_the_role_passes() -> None:
    nodes = [{"name": "gpu01", "address": "gpu01", "vllm_host": "0.0.0.0", "vllm_port": "8000"}]  # ports arrive as strings
    result = FILTERS["monitoring_scrape_configs"](nodes, None, {"monitoring_host": "mon01"})
    assert result["scrape_configs"][0] == {"job_name": "vllm",
                                           "static_configs": [{"targets": ["gpu01:8000"], "labels": {"instance": "gpu01"}}]}


def test_errors_are_filter_errors() -> None:
    with pytest.raises(AnsibleFilterError, match="monitoring_scrape_configs: a GPU node without a name"):
        FILTERS["monitoring_scrape_configs"]([{}], [], {})


def test_fleet_status_table_takes_now_as_ansible_gives_it() -> None:
    result = FILTERS["fleet_status_table"]([{"name": "gpu01", "error": "unreachable"}], "1796300000.25")
    assert result["summary"] == "1 node(s): 0 healthy, 0 not healthy, 1 unknown; 0 with a restart pending"
    with pytest.raises(AnsibleFilterError, match="fleet_status_table: now must be epoch seconds, found 'soon'"):
        FILTERS["fleet_status_table"]([], "soon")
