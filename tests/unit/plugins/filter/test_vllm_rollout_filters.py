"""The rollout filter: registered name, the stat of the env link as Ansible returns it."""

from __future__ import annotations

from ansible_collections.gpuserve.vllm.plugins.filter.vllm_rollout import FilterModule

FILTERS = FilterModule().filters()


def test_registered_and_reads_the_link_stat():
    plan = FILTERS["vllm_restart_plan"]
    link = {"exists": True, "islnk": True, "lnk_source": "/opt/ml-env.d/a"}
    assert plan({"link_stat": link, "link": "/opt/ml-env", "target": "/opt/ml-env.d/a",
                 "marker": False, "unit_changed": False, "env_changed": False, "active": True})["restart"] is False
    assert plan({"link_stat": link, "link": "/opt/ml-env", "target": "/opt/ml-env.d/b"})["restart"] is True
