"""No role or playbook carries a restart, reload or reboot in a handler.

A handler runs at the end of the play only if nothing failed before it: a run that wrote a file
and then failed, or was killed, drops it, and the next run sees no change and never applies the
file. Every such step is decided from what the node shows instead (docs/operations.md, "What
makes a running server restart"). This keeps it so: no handlers file, no `notify:`.
"""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]


def _notifies(node, where: str):
    if isinstance(node, list):
        for item in node:
            yield from _notifies(item, where)
    elif isinstance(node, dict):
        if "notify" in node:
            yield f"{where}: {node.get('name', '(unnamed)')!r} notifies {node['notify']!r}"
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _notifies(node.get(key), where)


def test_no_role_has_handlers() -> None:
    assert sorted(str(p.relative_to(REPO)) for p in REPO.glob("roles/*/handlers/*")) == []


def test_no_task_notifies() -> None:
    found = []
    for path in sorted([*REPO.glob("roles/*/tasks/**/*.yml"), *REPO.glob("playbooks/**/*.yml")]):
        found += _notifies(yaml.safe_load(path.read_text()), str(path.relative_to(REPO)))
    assert found == []


def test_a_notify_would_be_found() -> None:
    task = [{"name": "x", "block": [{"name": "Write it", "ansible.builtin.copy": {}, "notify": "restart"}]}]
    assert list(_notifies(task, "t.yml")) == ["t.yml: 'Write it' notifies 'restart'"]
