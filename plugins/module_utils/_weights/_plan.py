# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The vllm_weights role's decisions: its checkpoint list, and who copies from whom.

Fan-out: a tree that doubles the holders every round.

One host (the staging host) fetches the checkpoint from its origin once; after that, every host
holding a verified copy sends it to ``per_source`` hosts per round, so 16 nodes are served in
ceil(log2(17)) = 5 rounds of one copy time each, where a star (every node from the staging host)
takes 16 copy times through one uplink. A round is planned from who holds a copy *now*, so a
host that failed is simply not a source in the next round.

Stdlib only, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

ORIGIN = ""  # the source of the staging host when no host holds a copy yet


def plan_round(hosts: t.Sequence[str], holders: t.Collection[str], staging: str,
               mode: str = "tree", per_source: int = 1) -> dict[str, str]:
    """Next round's copies, destination -> source host (ORIGIN: fetch from the origin).

    Destinations and sources are taken in ``hosts`` order (the inventory's), so every host
    computes the same plan. A staging host outside ``hosts`` (left out with --limit) fetches
    nothing: the hosts can only copy from each other.
    """
    if mode not in ("tree", "star"):
        raise ValueError(f"fan-out mode {mode!r} is not tree or star")
    if per_source < 1:
        raise ValueError(f"per_source is {per_source}, must be at least 1")
    held = [h for h in hosts if h in holders]
    needing = [h for h in hosts if h not in holders]
    if not needing:
        return {}
    if not held:
        return {staging: ORIGIN} if staging in hosts else {}
    if mode == "star":
        if staging in needing:
            return {staging: held[0]}
        sources, per_source = [staging if staging in held else held[0]], len(needing)
    else:
        sources = held
    slots = sources * per_source
    return dict(zip(needing, slots))


def round_count(hosts: int, per_source: int = 1, mode: str = "tree") -> int:
    """Rounds needed from nothing (one origin fetch, then copies) for `hosts` hosts in all."""
    if hosts <= 1:
        return hosts
    if mode == "star":
        return 2
    held, rounds = 1, 1
    while held < hosts:
        held += held * per_source
        rounds += 1
    return rounds


CHECKPOINT_KEYS = {"name", "repo", "revision", "source", "mirror_dir", "hub_tree_file", "base_url",
                   "exclude"}


def checkpoints(items: t.Any, variable: str = "vllm_weights_checkpoints") -> tuple[list[dict[str, t.Any]], list[str]]:
    """The checkpoint list with its defaults filled in, and every problem found in it."""
    if not isinstance(items, list):
        return [], [f"{variable} must be a list of checkpoints, found {type(items).__name__}"]
    out: list[dict[str, t.Any]] = []
    problems: list[str] = []
    for number, item in enumerate(items):
        where = f"{variable}[{number}]"
        if not isinstance(item, dict):
            problems.append(f"{where} must be a mapping (name, repo, revision, ...), found {item!r}")
            continue
        where = f"{variable}[{number}] ({item.get('name', '?')})"
        unknown = sorted(set(item) - CHECKPOINT_KEYS)
        if unknown:
            problems.append(f"{where}: unknown key(s) {', '.join(unknown)} (known: "
                            f"{', '.join(sorted(CHECKPOINT_KEYS))})")
        c = {"source": "hub", "mirror_dir": "", "hub_tree_file": "", "base_url": "", "exclude": []}
        c.update({k: v for k, v in item.items() if k in CHECKPOINT_KEYS and v is not None})
        name, repo, revision = str(c.get("name", "")), str(c.get("repo", "")), str(c.get("revision", ""))
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name):
            problems.append(f"{where}: name {name!r} must be a plain directory name (it becomes "
                            f"<vllm_weights_root>/<name>)")
        if not re.match(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$", repo):
            problems.append(f"{where}: repo {repo!r} must be the Hub repository, owner/name")
        if not revision:
            problems.append(f"{where}: revision is empty; pin the commit you validated (40 hex digits)")
        if c["source"] not in ("hub", "mirror", "url"):
            problems.append(f"{where}: source {c['source']!r} is not hub, mirror or url")
        if c["source"] == "mirror":
            if not c["mirror_dir"]:
                problems.append(f"{where}: source mirror needs mirror_dir (the directory on the staging host)")
            if not re.match(r"^[0-9a-f]{40}$", revision):
                problems.append(f"{where}: source mirror needs revision to be the 40-hex commit the "
                                f"mirror holds (found {revision!r})")
        if c["source"] == "url" and not c["base_url"]:
            problems.append(f"{where}: source url needs base_url (files are fetched from <base_url>/<path>)")
        if not isinstance(c["exclude"], list) or not all(isinstance(p, str) for p in c["exclude"]):
            problems.append(f"{where}: exclude must be a list of patterns, found {c['exclude']!r}")
        c.update(name=name, repo=repo, revision=revision,
                 manifest_source="mirror" if c["source"] == "mirror" else "hub")
        out.append(c)
    names = [c["name"] for c in out]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{variable}: the name {name!r} is used twice")
    return out, problems
