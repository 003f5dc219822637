# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Side-by-side Python envs behind one stable symlink (private to gpuserve.vllm; stdlib only).

The stable path (e.g. /opt/ml-env) is a symlink to the env that serves; envs live side by side
in a store (/opt/ml-env.d/<name>); `<link>.previous` names the env that served before the last
switch. A switch replaces links with os.replace of a symlink made under a temporary name in the
same directory, so the stable path always names a whole env, and the directory is fsynced.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import re
import shutil
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._atomic import fsync_dir

RECORD = "gpuserve-env.json"
PREVIOUS_SUFFIX = ".previous"
REMOVING_SUFFIX = ".removing"


# --- names -------------------------------------------------------------------------------------

def content_id(content: t.Mapping[str, t.Any]) -> str:
    """12 hex of sha256 over the canonical JSON of the env's content (sorted keys)."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def env_label(content: t.Mapping[str, t.Any]) -> str:
    """Readable hint: `vllm-<version>` when content.content.vllm.version (or content.vllm.version) is set."""
    inner = content.get("content", content)
    vllm = inner.get("vllm") if isinstance(inner, t.Mapping) else None
    version = str(vllm.get("version", "")) if isinstance(vllm, t.Mapping) else ""
    version = re.sub(r"[^A-Za-z0-9._+-]", "_", version)
    return f"vllm-{version}" if version else "env"


def env_name(content: t.Mapping[str, t.Any]) -> str:
    """`<label>-<12 hex>`: the same content always gives the same name."""
    if not isinstance(content, t.Mapping):
        raise ValueError(f"the env content must be a dict, got {type(content).__name__}")
    return f"{env_label(content)}-{content_id(content)}"


def previous_path(link: str) -> str:
    return link + PREVIOUS_SUFFIX


def legacy_name(now: datetime.datetime) -> str:
    return "legacy-" + now.strftime("%Y%m%d%H%M%S")


# --- reading -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LinkState:
    """What a path is: absent, a symlink (target = its real path, "" when dangling), a real dir."""

    path: str
    kind: str  # absent | link | dangling | dir | other
    target: str = ""


def read_link(path: str) -> LinkState:
    if not os.path.lexists(path):
        return LinkState(path, "absent")
    if os.path.islink(path):
        real = os.path.realpath(path)
        return LinkState(path, "link", real) if os.path.isdir(real) else LinkState(path, "dangling")
    if os.path.isdir(path):
        return LinkState(path, "dir", os.path.abspath(path))
    return LinkState(path, "other")


def is_env(path: str) -> bool:
    """An env has an interpreter at bin/python (a venv's is a link to the base interpreter)."""
    return os.path.exists(os.path.join(path, "bin", "python"))


def same_path(a: str, b: str) -> bool:
    return bool(a) and bool(b) and os.path.realpath(a) == os.path.realpath(b)


# --- switching ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Step:
    """One crash-safe action: `link` (point path at target) or `adopt` (rename path to target)."""

    action: str
    path: str
    target: str

    def describe(self) -> str:
        if self.action == "adopt":
            return f"move the legacy env {self.path} to {self.target}"
        return f"point {self.path} at {self.target}"


@dataclasses.dataclass(frozen=True)
class SwitchPlan:
    steps: tuple[Step, ...]
    current_after: str
    previous_after: str
    switched_from: str
    adopted_legacy: str

    @property
    def changed(self) -> bool:
        return bool(self.steps)


def plan_switch(link: LinkState, previous: LinkState, target: str, store_dir: str,
                now: datetime.datetime, rollback: bool = False, previous_to: str = "") -> SwitchPlan:
    """Steps that make `link` name `target` and `<link>.previous` name the env it named before
    (or `previous_to`, which puts back the links exactly as they were before a failed switch).

    Forward order: previous first, then the link, so a crash in between leaves the link on the
    old env and the next run redoes both. A rollback points the link first: a crash then leaves
    it on the env rolled back to, which is what was asked for. A legacy real directory at the
    link is moved into the store (it cannot be replaced by a symlink in one rename).
    """
    target = os.path.abspath(target)
    if link.kind in ("other",):
        raise ValueError(f"{link.path} is neither a symlink nor a directory; move it away and re-run")
    if previous_to:
        previous_to = os.path.realpath(previous_to)
        if link.kind == "dir":
            raise ValueError(f"{link.path} is a real directory: it cannot be restored with previous_to")
        steps = [Step("link", link.path, target)] if not same_path(link.target, target) else []
        if not same_path(previous.target, previous_to):
            steps.append(Step("link", previous.path, previous_to))
        return SwitchPlan(tuple(steps), os.path.realpath(target), previous_to,
                          link.target if steps and steps[0].path == link.path else "", "")
    if link.kind == "link" and same_path(link.target, target):
        return SwitchPlan((), link.target, previous.target, "", "")
    steps: list[Step] = []
    adopted = ""
    old = link.target if link.kind == "link" else ""
    if link.kind == "dir":
        if not store_dir:
            raise ValueError(f"{link.path} is a real directory (an env of an older release); "
                             f"store_dir is needed to move it aside")
        adopted = os.path.join(os.path.abspath(store_dir), legacy_name(now))
        steps += [Step("link", previous.path, adopted), Step("adopt", link.path, adopted)]
        old = adopted
    elif old:
        steps.append(Step("link", previous.path, old))
    link_step = Step("link", link.path, target)
    if rollback and not adopted:
        steps.insert(0, link_step)
    else:
        steps.append(link_step)
    return SwitchPlan(tuple(steps), os.path.realpath(target), old or previous.target, old, adopted)


def temp_link(path: str) -> str:
    directory, base = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{base}.switching")


def stale_temp_links(link: str) -> list[str]:
    """Temporary links a killed switch left beside the link and its previous link."""
    return [tmp for tmp in (temp_link(link), temp_link(previous_path(link))) if os.path.islink(tmp)]


def replace_symlink(path: str, target: str) -> None:
    """Make `path` a symlink to `target` atomically: temp link beside it, fsync, os.replace, fsync."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = temp_link(path)
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    fsync_dir(directory)
    os.replace(tmp, path)
    fsync_dir(directory)


def apply_step(step: Step) -> None:
    if step.action == "link":
        replace_symlink(step.path, step.target)
    elif step.action == "adopt":
        os.rename(step.path, step.target)
        fsync_dir(os.path.dirname(step.target))
        fsync_dir(os.path.dirname(os.path.abspath(step.path)))
    else:
        raise ValueError(f"unknown step {step.action}")


def same_filesystem(path: str, store_dir: str) -> bool:
    """Whether a rename from path into store_dir stays on one filesystem (store may not exist yet)."""
    probe = os.path.abspath(store_dir)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    return os.stat(path).st_dev == os.stat(probe).st_dev


# --- pruning -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class StoredEnv:
    name: str
    path: str
    created: float


def _created(path: str) -> float:
    """The record's created time (ISO 8601), else the directory's mtime (legacy envs)."""
    try:
        with open(os.path.join(path, RECORD), encoding="utf-8") as handle:
            text = str(json.load(handle).get("created", ""))
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (OSError, ValueError, AttributeError):
        return os.stat(path).st_mtime


def list_store(store_dir: str) -> tuple[list[StoredEnv], list[str]]:
    """Envs (real directories not starting with a dot) and leftovers of a killed removal."""
    envs, leftovers = [], []
    if not os.path.isdir(store_dir):
        return envs, leftovers
    for entry in sorted(os.listdir(store_dir)):
        path = os.path.join(store_dir, entry)
        if os.path.islink(path) or not os.path.isdir(path):
            continue
        if entry.startswith("."):
            if entry.endswith(REMOVING_SUFFIX):
                leftovers.append(path)
            continue
        envs.append(StoredEnv(entry, path, _created(path)))
    return envs, leftovers


def plan_prune(envs: t.Sequence[StoredEnv], keep: int, protect: t.Iterable[str]) -> tuple[list[StoredEnv], list[StoredEnv]]:
    """(remove, kept): never a protected env; the newest `keep` envs, protected ones counted, stay."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    guarded = {os.path.realpath(p) for p in protect if p}
    newest_first = sorted(envs, key=lambda e: (e.created, e.name), reverse=True)
    kept = [e for e in newest_first if os.path.realpath(e.path) in guarded]
    remove = []
    for env in newest_first:
        if env in kept:
            continue
        if len(kept) < keep:
            kept.append(env)
        else:
            remove.append(env)
    return remove, sorted(kept, key=lambda e: (e.created, e.name), reverse=True)


def removing_path(path: str) -> str:
    directory, base = os.path.split(path)
    return os.path.join(directory, f".{base}{REMOVING_SUFFIX}")


def remove_env(path: str) -> None:
    """Rename to a dot-dir first (no longer an env to anyone), then delete it."""
    doomed = path if os.path.basename(path).startswith(".") else removing_path(path)
    if doomed != path:
        os.rename(path, doomed)
        fsync_dir(os.path.dirname(path))
    shutil.rmtree(doomed)
