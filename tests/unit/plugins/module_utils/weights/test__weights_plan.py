"""The vllm_weights role's decisions: fan-out rounds and the checkpoint list (_weights/_plan.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _plan as wp

HOSTS = ["stage", "n1", "n2", "n3", "n4", "n5", "n6"]


@pytest.mark.parametrize("holders, mode, per_source, expected", [
    ([], "tree", 1, {"stage": ""}),  # nobody has it: the staging host fetches from the origin
    (["stage"], "tree", 1, {"n1": "stage"}),
    (["stage", "n1"], "tree", 1, {"n2": "stage", "n3": "n1"}),
    (["stage", "n1", "n2", "n3"], "tree", 1, {"n4": "stage", "n5": "n1", "n6": "n2"}),
    (["stage"], "tree", 2, {"n1": "stage", "n2": "stage"}),
    (["stage", "n1"], "tree", 2, {"n2": "stage", "n3": "n1", "n4": "stage", "n5": "n1"}),
    (["n3"], "tree", 1, {"stage": "n3"}),  # the staging host lost its copy: a node sends it back
    (["stage", "n4"], "tree", 1, {"n1": "stage", "n2": "n4"}),
    (HOSTS, "tree", 1, {}),
    (["stage"], "star", 1, {h: "stage" for h in HOSTS[1:]}),
    (["stage", "n1"], "star", 1, {h: "stage" for h in HOSTS[2:]}),
    (["n2"], "star", 1, {"stage": "n2"}),
])
def test_plan_round(holders: list[str], mode: str, per_source: int, expected: dict[str, str]) -> None:
    assert wp.plan_round(HOSTS, holders, "stage", mode, per_source) == expected


@pytest.mark.parametrize("holders, mode, expected", [
    ([], "tree", {}),  # --limit left the staging host out and nobody holds a copy: nothing to do
    (["n1"], "tree", {"n2": "n1"}),
    (["n1"], "star", {"n2": "n1", "n3": "n1"}),
])
def test_staging_host_outside_the_play(holders: list[str], mode: str, expected: dict[str, str]) -> None:
    assert wp.plan_round(["n1", "n2", "n3"], holders, "stage", mode) == expected


def test_tree_serves_sixteen_nodes_in_five_copy_rounds() -> None:
    hosts = ["stage"] + [f"n{i:02d}" for i in range(1, 17)]
    held: set[str] = set()
    rounds = 0
    while True:
        plan = wp.plan_round(hosts, held, "stage")
        if not plan:
            break
        held |= set(plan)
        rounds += 1
        assert all(source in held or source == "" for source in plan.values())
    assert rounds == 6 == wp.round_count(17)  # the origin fetch, then 2, 4, 8, 16 holders and done


@pytest.mark.parametrize("hosts, per_source, mode, rounds", [
    (0, 1, "tree", 0), (1, 1, "tree", 1), (2, 1, "tree", 2), (4, 1, "tree", 3), (5, 1, "tree", 4),
    (17, 1, "tree", 6), (17, 3, "tree", 4), (17, 1, "star", 2),
])
def test_round_count(hosts: int, per_source: int, mode: str, rounds: int) -> None:
    assert wp.round_count(hosts, per_source, mode) == rounds


@pytest.mark.parametrize("args, message", [
    ((HOSTS, [], "stage", "ring"), "fan-out mode 'ring' is not tree or star"),
    ((HOSTS, [], "stage", "tree", 0), "per_source is 0"),
])
def test_plan_round_refuses(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        wp.plan_round(*args)


C = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("items, fragments", [
    ([{"name": "K", "repo": "o/K", "revision": C}], []),
    ([{"name": "K", "repo": "o/K", "revision": "main"}], []),
    ("K", ["must be a list of checkpoints, found str"]),
    (["K"], ["vllm_weights_checkpoints[0] must be a mapping"]),
    ([{"name": "K", "repo": "o/K", "revison": C}], ["unknown key(s) revison", "revision is empty"]),
    ([{"name": "../K", "repo": "K", "revision": C}],
     ["name '../K' must be a plain directory name", "repo 'K' must be the Hub repository"]),
    ([{"name": "K", "repo": "o/K", "revision": "main", "source": "mirror"}],
     ["needs mirror_dir", "needs revision to be the 40-hex commit the mirror holds (found 'main')"]),
    ([{"name": "K", "repo": "o/K", "revision": C, "source": "url"}], ["source url needs base_url"]),
    ([{"name": "K", "repo": "o/K", "revision": C, "source": "s3"}], ["source 's3' is not hub, mirror or url"]),
    ([{"name": "K", "repo": "o/K", "revision": C, "exclude": "*.md"}], ["exclude must be a list of patterns"]),
    ([{"name": "K", "repo": "o/K", "revision": C}, {"name": "K", "repo": "o/D", "revision": C}],
     ["the name 'K' is used twice"]),
])
def test_checkpoints(items, fragments: list[str]) -> None:
    normalized, problems = wp.checkpoints(items)
    assert len(problems) == len(fragments), problems
    for problem, fragment in zip(problems, fragments):
        assert fragment in problem


def test_checkpoint_defaults() -> None:
    (hub,), _problems = wp.checkpoints([{"name": "K", "repo": "o/K", "revision": C}])
    assert hub == {"name": "K", "repo": "o/K", "revision": C, "source": "hub", "mirror_dir": "",
                   "hub_tree_file": "", "base_url": "", "exclude": [], "manifest_source": "hub"}
    (mirror,), _problems = wp.checkpoints([{"name": "K", "repo": "o/K", "revision": C, "source": "mirror", "mirror_dir": "/m"}])
    assert mirror["manifest_source"] == "mirror"
    (url,), _problems = wp.checkpoints([{"name": "K", "repo": "o/K", "revision": C, "source": "url", "base_url": "http://m"}])
    assert url["manifest_source"] == "hub"
