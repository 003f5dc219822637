# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""When a node out of its routers has drained: vLLM's gauges, bounded for stale values.

vLLM's `vllm:num_requests_running` / `_waiting` gauges can keep their last value after every
request was aborted, until the engine's next step (vllm #29928, #22545). A running request
makes the token counters grow (`vllm:prompt_tokens_total`, `vllm:generation_tokens_total`),
so gauges above zero with no change of gauges or counters for `stale_after` seconds are taken
for stale: the drain ends with a warning saying what it saw.

A reading that failed is not "drained": only a process known to be gone ends the drain at once
(nothing to drain). While the process runs, or it cannot be told, a failed reading waits, and
`unread_after` seconds of failed readings in a row fail the drain: the node is not stopped on a
guess. Stdlib only, no Ansible imports.
"""

from __future__ import annotations

import typing as t


class DrainWatch:
    """Feed it one /metrics reading per poll; `verdict` says whether to stop waiting."""

    def __init__(self, timeout: float, stale_after: float, unread_after: float = 60.0) -> None:
        if timeout <= 0:
            raise ValueError(f"the drain timeout must be positive, got {timeout!r}")
        if stale_after <= 0:
            raise ValueError(f"the stale-gauge bound must be positive, got {stale_after!r}")
        if unread_after <= 0:
            raise ValueError(f"the unread bound must be positive, got {unread_after!r}")
        self.timeout = float(timeout)
        self.stale_after = float(stale_after)
        self.unread_after = float(unread_after)
        self.unread_since: float | None = None
        self.started: float | None = None
        self.last_change: float | None = None
        self.last: tuple[float, float, float | None] | None = None
        self.polls = 0
        self.max_in_flight = 0.0
        # A request can be on its way (routed just before the removal, not yet counted by the
        # server): the node is drained only after two confirmed readings with nothing running or
        # waiting and no token produced between them. A failed read between the two tells
        # nothing either way, so it neither confirms nor breaks them: the unchanged token
        # counters show that nothing ran in between (a /metrics failing every other read still
        # ends a drain).
        self.quiet: tuple[float, float | None] | None = None

    def feed(self, now: float, reading: t.Mapping[str, t.Any] | None,
             alive: bool | None = None) -> dict[str, t.Any]:
        """One poll. reading: {running, waiting, progress}, or None when /metrics gave no gauges;
        alive: whether the server's process runs (None: cannot be told).

        Returns {done, outcome, ...}: outcome drained | stale | gone | unread | timeout | waiting.
        """
        if self.started is None:
            self.started = self.last_change = now
        self.polls += 1
        elapsed = now - self.started
        if reading is None:
            if alive is False:
                return self._verdict(True, "gone", elapsed, 0.0, 0.0)
            if self.unread_since is None:
                self.unread_since = now
            if now - self.unread_since >= self.unread_after:
                return self._verdict(True, "unread", elapsed, 0.0, 0.0)
            if elapsed >= self.timeout:
                return self._verdict(True, "timeout", elapsed, 0.0, 0.0)
            return self._verdict(False, "waiting", elapsed, 0.0, 0.0)
        self.unread_since = None
        running, waiting = float(reading.get("running") or 0), float(reading.get("waiting") or 0)
        progress = reading.get("progress")
        current = (running, waiting, None if progress is None else float(progress))
        self.max_in_flight = max(self.max_in_flight, running + waiting)
        if self.last is None or current != self.last:
            self.last_change = now
        self.last = current
        if running + waiting == 0:
            if self.quiet is not None and self.quiet[1] == current[2]:
                return self._verdict(True, "drained", elapsed, running, waiting)
            self.quiet = (now, current[2])
            return self._verdict(False, "waiting", elapsed, running, waiting)
        self.quiet = None
        if self.last_change is not None and now - self.last_change >= self.stale_after:
            return self._verdict(True, "stale", elapsed, running, waiting)
        if elapsed >= self.timeout:
            return self._verdict(True, "timeout", elapsed, running, waiting)
        return self._verdict(False, "waiting", elapsed, running, waiting)

    def _verdict(self, done: bool, outcome: str, elapsed: float, running: float,
                 waiting: float) -> dict[str, t.Any]:
        return {"done": done, "outcome": outcome, "elapsed": round(elapsed, 2), "polls": self.polls,
                "running": running, "waiting": waiting, "max_in_flight": self.max_in_flight,
                "msg": message(outcome, elapsed, running, waiting, self.stale_after, self.timeout,
                               self.unread_after)}


def message(outcome: str, elapsed: float, running: float, waiting: float, stale_after: float,
            timeout: float, unread_after: float = 60.0) -> str:
    """The line the drain reports."""
    gauges = f"{running:g} running, {waiting:g} waiting"
    if outcome == "drained":
        return f"drained after {elapsed:.1f} s (no request running or waiting, no token produced, two readings)"
    if outcome == "stale":
        return (f"WARNING: the gauges stayed at {gauges} for {stale_after:g} s with no token "
                f"produced (vllm_router_drain_stale_after): taken for stale values (vllm #29928), "
                f"drain ended after {elapsed:.1f} s")
    if outcome == "gone":
        return "the server's process is gone: nothing to drain"
    if outcome == "unread":
        return (f"/metrics gave no reading for {unread_after:g} s while the server's process runs (or "
                f"its state could not be read): whether requests are in flight is unknown, so the "
                f"node is not stopped; drain ended unconfirmed after {elapsed:.1f} s")
    if outcome == "timeout" and running + waiting == 0:
        return (f"did not drain within {timeout:g} s (vllm_router_drain_timeout): no second reading "
                f"confirmed it empty (/metrics kept failing)")
    if outcome == "timeout":
        return (f"did not drain within {timeout:g} s (vllm_router_drain_timeout): {gauges}, "
                f"tokens still being produced")
    return f"draining: {gauges} after {elapsed:.1f} s"
