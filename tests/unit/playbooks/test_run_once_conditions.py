"""No `run_once` task is reached through a static import under a condition.

A static import (import_role, import_tasks) hands its `when` to every task it imports, and a
`run_once` task judges that condition on the batch's first host alone: when that host's answer is
no, the task is skipped for the whole batch. worker_remove's router floor check is such a task: in
a batch whose first node needed no removal it would have been skipped for every node, and a
router could drop below its floor. A conditional step that holds a `run_once` task is included
dynamically (include_role, include_tasks): only the hosts whose condition holds run it, and the
`run_once` task runs on the first of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
IMPORTS = ("ansible.builtin.import_role", "import_role", "ansible.builtin.import_tasks", "import_tasks")
BLOCK_KEYS = ("block", "rescue", "always")


def imported_file(task: dict, here: Path) -> Path | None:
    """The task file a static import names, or None (not an import, or outside this collection)."""
    for key in IMPORTS:
        if key not in task:
            continue
        args = task[key]
        if key.endswith("import_tasks"):
            return (here.parent / (args if isinstance(args, str) else args["file"])).resolve()
        role = args["name"].removeprefix("gpuserve.vllm.")
        tasks_from = args.get("tasks_from", "main")
        return REPO / "roles" / role / "tasks" / (tasks_from if tasks_from.endswith(".yml") else f"{tasks_from}.yml")
    return None


def walk(tasks: list, here: Path, conditional: bool, trail: tuple[str, ...]):
    """Yield (trail, task name) for every run_once task reached under an inherited condition."""
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        cond = conditional or "when" in task
        name = task.get("name", "?")
        for key in BLOCK_KEYS:
            if key in task:
                yield from walk(task[key], here, cond, trail)
        target = imported_file(task, here)
        if target is not None and target.is_file():
            step = f"{here.relative_to(REPO)}: {name}"
            yield from walk(yaml.safe_load(target.read_text()), target, cond, trail + (step,))
        elif conditional and task.get("run_once") and target is None:
            yield trail, f"{here.relative_to(REPO)}: {name}"


def entry_files() -> list[Path]:
    return sorted((REPO / "playbooks").rglob("*.yml")) + sorted((REPO / "roles").glob("*/tasks/*.yml"))


def plays_and_task_lists(path: Path) -> list[list]:
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, list):
        return []
    if any(isinstance(item, dict) and "hosts" in item for item in doc):
        return [play.get(k) or [] for play in doc if isinstance(play, dict) for k in ("pre_tasks", "tasks", "post_tasks")]
    return [doc]


@pytest.mark.parametrize("path", entry_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_run_once_task_under_an_imported_condition(path):
    found = [f"{' -> '.join(trail)} -> {task}" for tasks in plays_and_task_lists(path)
             for trail, task in walk(tasks, path, False, ())]
    assert not found, ("run_once tasks that a conditional static import would skip for the whole batch when its "
                       "first host's condition is false (include them dynamically instead):\n" + "\n".join(found))


def test_the_check_finds_the_pattern_it_forbids():
    """serve_node.yml as it was: worker_remove (its floor check is run_once) imported under a when."""
    tasks = [{"name": "Take the node out of its routers", "when": "'remove' in steps",
              "ansible.builtin.import_role": {"name": "gpuserve.vllm.vllm_router", "tasks_from": "worker_remove"}}]
    found = list(walk(tasks, REPO / "playbooks" / "tasks" / "serve_node.yml", False, ()))
    assert [task for _trail, task in found] == [
        "roles/vllm_router/tasks/worker_remove.yml: Routers -- refuse a batch that would leave a router too few healthy workers"]
