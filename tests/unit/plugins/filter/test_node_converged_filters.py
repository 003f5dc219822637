"""The fast path's controller half: option names from the roles' specs; an inputs digest that
moves with any value, any byte of the collection and the controller's wheelhouse."""

from __future__ import annotations

import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.filter.node_converged import FilterModule
from ansible_collections.gpuserve.vllm.plugins.module_utils._node import _inputs

FILTERS = FilterModule().filters()


def test_the_options_are_the_roles_main_entry_points():
    names = FILTERS["node_converged_options"](["gpu_node", "ml_env"])
    assert {"gpu_node_nccl_conf_path", "ml_env_dir", "ml_env_python"} <= set(names)
    assert "ml_env_packages" not in names  # a fact the role sets, not an option
    assert names == sorted(names) and not any(n.startswith("vllm_install_") for n in names)
    with pytest.raises(AnsibleFilterError, match="no_such_role/meta/argument_specs.yml"):
        FILTERS["node_converged_options"](["no_such_role"])


def test_the_inputs_move_with_a_value_and_the_wheelhouse(tmp_path):
    digest = FILTERS["node_converged_inputs"]
    assert digest({"a": 1}) == digest({"a": 1}) != digest({"a": 2})
    (tmp_path / "vllm.whl").write_bytes(b"x")
    with_house = digest({"a": 1}, str(tmp_path))
    assert with_house != digest({"a": 1})
    (tmp_path / "vllm.whl").write_bytes(b"xy")
    assert digest({"a": 1}, str(tmp_path)) != with_house
    missing = digest({"a": 1}, str(tmp_path / "missing"))
    assert missing not in (digest({"a": 1}), with_house)


def test_the_collection_digest_moves_with_a_byte_not_with_python_caches(tmp_path):
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    task = tmp_path / "roles" / "r" / "tasks" / "main.yml"
    task.write_text("---\n")
    before = _inputs.collection_digest(str(tmp_path))
    (tmp_path / "plugins" / "filter" / "__pycache__").mkdir(parents=True)
    (tmp_path / "plugins" / "filter" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert _inputs.collection_digest(str(tmp_path)) == before
    task.write_text("--- \n")
    assert _inputs.collection_digest(str(tmp_path)) != before
    os.rename(task, task.with_name("other.yml"))
    assert _inputs.collection_digest(str(tmp_path)) != before
