"""Tables for when a drain ends (plugins/module_utils/_vllm/_drain.py): fed timed readings."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._drain import DrainWatch


def feed(watch: DrainWatch, readings):
    verdict = None
    for now, reading in readings:
        verdict = watch.feed(now, reading)
        if verdict["done"]:
            break
    return verdict


def r(running, waiting=0, progress=None):
    return {"running": running, "waiting": waiting, "progress": progress}


@pytest.mark.parametrize("readings, outcome, elapsed", [
    # Drained only after two readings in a row with nothing in flight and no token produced.
    ([(0, r(0)), (1, r(0))], "drained", 1),
    ([(0, r(2, 1, 10)), (1, r(1, 0, 40)), (2, r(0, 0, 55)), (3, r(0, 0, 55))], "drained", 3),
    # A request routed just before the removal shows up after a first empty reading.
    ([(0, r(0, 0, 5)), (1, r(1, 0, 6)), (2, r(0, 0, 9)), (3, r(0, 0, 9))], "drained", 3),
    # One came and went between two readings: its tokens moved, so not yet.
    ([(0, r(0, 0, 5)), (1, r(0, 0, 8)), (2, r(0, 0, 8))], "drained", 2),
    # A long stream keeps producing tokens: never stale, the timeout ends it.
    ([(t, r(1, 0, 100 + 20 * t)) for t in range(0, 40)], "timeout", 30),
    # Gauges stuck with no token produced: stale after 10 s.
    ([(0, r(1, 0, 50))] + [(t, r(1, 0, 50)) for t in range(1, 20)], "stale", 10),
    # Counters absent (None): unchanged gauges alone count.
    ([(t, r(3)) for t in range(0, 20)], "stale", 10),
    ([(0, r(1, 0, 5)), (1, None)], "unreachable", 1),
    ([(0, None)], "unreachable", 0),
])
def test_outcomes(readings, outcome, elapsed):
    verdict = feed(DrainWatch(timeout=30, stale_after=10), readings)
    assert verdict["outcome"] == outcome and verdict["elapsed"] == elapsed


def test_messages_say_what_was_seen():
    stale = feed(DrainWatch(30, 10), [(t, r(1, 0, 7)) for t in range(0, 12)])
    assert stale["msg"].startswith("WARNING: the gauges stayed at 1 running, 0 waiting for 10 s with no "
                                   "token produced (vllm_router_drain_stale_after)")
    timeout = feed(DrainWatch(5, 10), [(t, r(2, 1, t)) for t in range(0, 7)])
    assert timeout["msg"] == ("did not drain within 5 s (vllm_router_drain_timeout): 2 running, 1 waiting, "
                              "tokens still being produced")
    assert timeout["max_in_flight"] == 3


@pytest.mark.parametrize("timeout, stale", [(0, 10), (10, 0)])
def test_bad_bounds(timeout, stale):
    with pytest.raises(ValueError, match="must be positive"):
        DrainWatch(timeout, stale)


def test_one_empty_reading_is_not_yet_drained():
    verdict = DrainWatch(30, 10).feed(0, r(0, 0, 5))
    assert (verdict["done"], verdict["outcome"]) == (False, "waiting")
