"""The prepare play's prune keeps the envs the serve plan's records name: site.yml hands ml_env
the journal and hold paths, which must stay the ones roles/vllm_server writes (rendered here with
the same values, defaults and others)."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
SERVER_VARS = yaml.safe_load((REPO / "roles" / "vllm_server" / "vars" / "main.yml").read_text())


def _values(node, key):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from ([v] if k == key else _values(v, key))
    elif isinstance(node, list):
        for item in node:
            yield from _values(item, key)


def handed_to_ml_env() -> list[str]:
    """ml_env_prune_protect_records wherever the playbooks set it (site.yml or a file it imports)."""
    found = []
    for path in sorted((REPO / "playbooks").rglob("*.yml")):
        for value in _values(yaml.safe_load(path.read_text()), "ml_env_prune_protect_records"):
            found += value
    return found


@pytest.mark.parametrize("values", [{}, {"vllm_server_state_dir": "/srv/state", "vllm_server_service_name": "llm"}])
def test_site_hands_ml_env_the_paths_vllm_server_writes(values):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    defaults = {"vllm_server_state_dir": "/var/lib/gpuserve", "vllm_server_service_name": "vllm"}
    handed = [env.from_string(p).render(**values) for p in handed_to_ml_env()]
    written = [env.from_string(SERVER_VARS[k]).render(**dict(defaults, **values))
               for k in ("__vllm_server_journal_path", "__vllm_server_hold_path")]
    assert handed == written
