"""Which boundaries molecule/fleet's kill cycles kill at (tests/support/fleet_kill_cycles.py `chosen`).

CI kills at two boundaries per plan, rotated by a seed that changes each day: over as many days
as a plan has boundaries, every boundary is killed at, and the nodes never share one.
"""

from __future__ import annotations

import pytest

from tests.support.fleet_kill_cycles import chosen


@pytest.mark.parametrize("boundaries", [2, 7, 9, 16])
@pytest.mark.parametrize("sample", [1, 2, 3])
def test_the_seeds_cover_every_boundary(boundaries: int, sample: int) -> None:
    covered = set()
    for seed in range(boundaries):
        picked = chosen(boundaries, sample, 0, 1, seed)
        assert len(picked) == min(sample, boundaries) and all(1 <= k <= boundaries for k in picked), (seed, picked)
        covered.update(picked)
    assert covered == set(range(1, boundaries + 1))


def test_the_nodes_share_them_out() -> None:
    for seed in range(9):
        shares = [chosen(9, 2, index, 2, seed) for index in range(2)]
        assert sorted(shares[0] + shares[1]) == chosen(9, 2, 0, 1, seed) and len(shares[0]) == len(shares[1]) == 1


def test_sample_zero_or_all_is_every_boundary() -> None:
    assert chosen(9, 0, 0, 1, 5) == chosen(9, 9, 0, 1, 5) == list(range(1, 10))
