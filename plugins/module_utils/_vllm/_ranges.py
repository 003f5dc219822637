# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Ranges of the vllm_server role's numbers, checked before anything is rendered.

The role's argument spec checks types only; a port of 99999 or a tensor-parallel size of 0
passes it, renders a unit, and restarts a healthy server into a crash loop. These checks
refuse such values first, each message naming the variable, what it must be, what it is.

Stdlib only, Python 3.9+, no Ansible imports: modules run this on the managed node
and plugins on the controller.
"""

from __future__ import annotations

import math
import typing as t


class Range(t.NamedTuple):
    """kind 'int' or 'float'; low/high bounds (None: open); low_open: low itself refused;
    optional: None or "" means "not set" (the flag is left out) and passes."""

    kind: str
    low: float | None
    high: float | None = None
    low_open: bool = False
    optional: bool = False


RANGES: dict[str, Range] = {
    "vllm_server_port": Range("int", 1, 65535),
    "vllm_server_tensor_parallel_size": Range("int", 1),
    "vllm_server_draft_tensor_parallel_size": Range("int", 1, optional=True),
    "vllm_server_num_speculative_tokens": Range("int", 1),
    "vllm_server_max_model_len": Range("int", 1, optional=True),
    "vllm_server_gpu_memory_utilization": Range("float", 0, 1, low_open=True),
    "vllm_server_restart_sec": Range("int", 0),
    "vllm_server_start_limit_burst": Range("int", 1),
    "vllm_server_start_limit_interval_sec": Range("int", 1),
    "vllm_server_limit_nofile": Range("int", 1),
    "vllm_server_start_timeout": Range("int", 1),
    "vllm_server_progress_interval": Range("int", 0),
    "vllm_server_unhealthy_grace": Range("int", 0),
    "vllm_server_check_max_tokens": Range("int", 1),
}


def _expected(spec: Range) -> str:
    noun = "an integer" if spec.kind == "int" else "a number"
    if spec.high is not None:
        low = f"above {spec.low:g}" if spec.low_open else f"from {spec.low:g}"
        return f"{noun} {low} {'up ' if spec.low_open else ''}to {spec.high:g}"
    return f"{noun} {'>' if spec.low_open else '>='} {spec.low:g}"


def _number(value: t.Any, kind: str) -> float | None:
    """The value as a number of the kind, or None (bools, fractions for ints, junk)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value) if kind == "float" else float(int(str(value).strip()))
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def range_problems(values: t.Mapping[str, t.Any]) -> list[str]:
    """One sentence per value outside its range (empty: all fine); unknown names are ignored."""
    problems = []
    for name, value in values.items():
        spec = RANGES.get(name)
        if spec is None or (spec.optional and value in (None, "")):
            continue
        number = _number(value, spec.kind)
        fine = number is not None and (
            spec.low is None or (number > spec.low if spec.low_open else number >= spec.low)
        ) and (spec.high is None or number <= spec.high)
        if not fine:
            unset = " (or empty to leave the flag out)" if spec.optional else ""
            problems.append(f"{name} must be {_expected(spec)}{unset}, found {value!r}: "
                            f"set it in the inventory (group_vars/host_vars) or the play")
    return problems
