"""Tables for when a drain ends (plugins/module_utils/_vllm/_drain.py): fed timed readings."""

from __future__ import annotations

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._drain import DrainWatch


def feed(watch: DrainWatch, readings, alive=None):
    verdict = None
    for now, reading in readings:
        verdict = watch.feed(now, reading, alive)
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
])
def test_outcomes(readings, outcome, elapsed):
    verdict = feed(DrainWatch(timeout=30, stale_after=10), readings)
    assert verdict["outcome"] == outcome and verdict["elapsed"] == elapsed


@pytest.mark.parametrize("readings, alive, outcome, elapsed", [
    # The process is gone: nothing to drain, at once.
    ([(0, r(1, 0, 5)), (1, None)], False, "gone", 1),
    ([(0, None)], False, "gone", 0),
    # A failed reading while it runs (or that cannot be told) is not "drained": it waits, and
    # readings failing for unread_after (5 s here) in a row fail the drain.
    ([(t, None) for t in range(0, 10)], True, "unread", 5),
    ([(t, None) for t in range(0, 10)], None, "unread", 5),
    ([(0, r(1, 0, 5))] + [(t, None) for t in range(1, 10)], True, "unread", 6),
    # /metrics failing every other read: a failed read neither confirms nor breaks two empty
    # readings; the unchanged token counters show nothing ran in the gap.
    ([(t, None if t % 2 else r(0, 0, 5)) for t in range(0, 40)], True, "drained", 2),
    # ... but tokens produced in the gap (a request came and went): the next two count.
    ([(0, r(0, 0, 5)), (1, None), (2, r(0, 0, 9)), (3, None), (4, r(0, 0, 9))], True, "drained", 4),
    # ... and a stream still running between failed reads keeps it waiting until it ends.
    ([(t, None if t % 2 else r(1 if t < 20 else 0, 0, min(t, 20))) for t in range(0, 40)], True, "drained", 22),
    # One empty reading, then only failures: never drained on one reading.
    ([(0, r(0, 0, 5))] + [(t, None) for t in range(1, 10)], True, "unread", 6),
    # A gap shorter than the bound, then readings again: the bound starts over.
    ([(0, None), (4, r(1, 0, 5)), (5, None), (9, None), (10, r(0, 0, 9)), (11, r(0, 0, 9))], True, "drained", 11),
])
def test_a_failed_reading_is_not_drained(readings, alive, outcome, elapsed):
    verdict = feed(DrainWatch(timeout=30, stale_after=10, unread_after=5), readings, alive)
    assert (verdict["outcome"], verdict["elapsed"]) == (outcome, elapsed), verdict["msg"]


def test_a_drain_that_never_confirmed_says_so():
    verdict = feed(DrainWatch(4, 10, 5), [(0, r(0, 0, 5))] + [(t, None) for t in range(1, 9)], True)
    assert verdict["msg"] == ("did not drain within 4 s (vllm_router_drain_timeout): no second reading "
                              "confirmed it empty (/metrics kept failing)")


def test_unread_says_the_node_was_not_stopped():
    verdict = feed(DrainWatch(30, 10, 5), [(t, None) for t in range(0, 6)], True)
    assert verdict["msg"] == ("/metrics gave no reading for 5 s while the server's process runs (or its state "
                              "could not be read): whether requests are in flight is unknown, so the node is "
                              "not stopped; drain ended unconfirmed after 5.0 s")


def test_messages_say_what_was_seen():
    stale = feed(DrainWatch(30, 10), [(t, r(1, 0, 7)) for t in range(0, 12)])
    assert stale["msg"].startswith("WARNING: the gauges stayed at 1 running, 0 waiting for 10 s with no "
                                   "token produced (vllm_router_drain_stale_after)")
    timeout = feed(DrainWatch(5, 10), [(t, r(2, 1, t)) for t in range(0, 7)])
    assert timeout["msg"] == ("did not drain within 5 s (vllm_router_drain_timeout): 2 running, 1 waiting, "
                              "tokens still being produced")
    assert timeout["max_in_flight"] == 3


@pytest.mark.parametrize("timeout, stale, unread", [(0, 10, 5), (10, 0, 5), (10, 10, 0)])
def test_bad_bounds(timeout, stale, unread):
    with pytest.raises(ValueError, match="must be positive"):
        DrainWatch(timeout, stale, unread)


def test_one_empty_reading_is_not_yet_drained():
    verdict = DrainWatch(30, 10).feed(0, r(0, 0, 5))
    assert (verdict["done"], verdict["outcome"]) == (False, "waiting")
