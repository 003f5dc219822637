# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Read what nccl-tests' ``all_reduce_perf`` prints, and take the figure acceptance judges.

The header names the binary (nccl-tests 2.17+: ``# Collective test starting: all_reduce_perf``)
and one ``#  Rank N Group G Pid P on <host> device D [<bus>] <name>`` line per rank; the table
has size, count, type, redop, root, then time/algbw/busbw/#wrong out-of-place and in-place
(``N/A`` in #wrong when run with ``-c 0``, which checks nothing); the footer has
``# Out of bounds values : N OK|FAILED`` and ``# Avg bus bandwidth : X``. The average runs over
every size, mostly latency-bound small ones, so acceptance reads the busbw of the largest sizes.
Pure functions over text; stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _pci as pci

BINARY = "all_reduce_perf"

_RANK_RE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device\s+(?P<device>\d+)"
    r"\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.*?)\s*$")
_COLLECTIVE_RE = re.compile(r"^#\s*Collective test (?:starting|concluded):\s*(?P<name>\S+)")
_VERSION_RE = re.compile(r"^#\s*nccl-tests version\s+(?P<version>\S+)")
_PARAMS_RE = re.compile(r"^#\s*nThread\s+\d+\s+nGpus\s+(?P<ngpus>\d+).*?validation:\s*(?P<validation>\d+)")
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<status>\w+)")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>[0-9.eE+-]+)")
_HEADER_RE = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw\s+#wrong")
_ROW_RE = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)"
    r"\s+(?P<o_time>\S+)\s+(?P<o_algbw>\S+)\s+(?P<o_busbw>\S+)\s+(?P<o_wrong>\S+)"
    r"(?:\s+(?P<i_time>\S+)\s+(?P<i_algbw>\S+)\s+(?P<i_busbw>\S+)\s+(?P<i_wrong>\S+))?\s*$")
_FAILURE_RE = re.compile(r"Test (?:CUDA |NCCL )?failure|NCCL failure|NCCL WARN")
# Reduction operators all_reduce_perf runs (-o); "none" is what the data-movement tests print.
_REDOPS = frozenset(("sum", "prod", "min", "max", "avg", "mulsum", "all"))


class NcclTestsError(Exception):
    """Output that is not a result of all_reduce_perf; the message says what was found instead."""


def _number(text: str) -> float:
    return float(text)


def _wrong(text: str) -> int | None:
    """#wrong: an integer, N/A when the run checked nothing (-c 0); old builds print 0e+00."""
    if text.upper() == "N/A":
        return None
    return int(float(text))


def rank_pci_key(bus: str) -> str | None:
    """The rank line's device: '0000:06:00' -> '0000:06:00', '0x41' (bus byte only) -> '0000:41:00'."""
    bus = bus.strip()
    if bus.lower().startswith("0x"):
        try:
            return "0000:%02x:00" % int(bus, 16)
        except ValueError:
            return None
    return pci.pci_key(bus)


def _row(match: re.Match[str]) -> dict[str, t.Any]:
    row: dict[str, t.Any] = {key: match.group(key) for key in ("type", "redop")}
    row.update(size=int(match.group("size")), count=int(match.group("count")), root=int(match.group("root")))
    for side, prefix in (("out_of_place", "o_"), ("in_place", "i_")):
        if match.group(prefix + "time") is None:
            row[side] = None
            continue
        row[side] = {
            "time_us": _number(match.group(prefix + "time")),
            "algbw": _number(match.group(prefix + "algbw")),
            "busbw": _number(match.group(prefix + "busbw")),
            "wrong": _wrong(match.group(prefix + "wrong")),
        }
    return row


def parse_all_reduce(text: str) -> dict[str, t.Any]:
    """The ranks, the result rows and the footer of one ``all_reduce_perf`` run.

    Raises NcclTestsError for output of another program or of another nccl-tests binary, and
    for a run that printed no result row (it crashed or hung before measuring anything).
    """
    parsed: dict[str, t.Any] = {
        "version": None, "collective": None, "gpus_per_process": None, "validation": None,
        "ranks": [], "rows": [], "out_of_bounds": None, "out_of_bounds_ok": None,
        "avg_busbw": None, "failures": [],
    }
    header = False
    for line in text.splitlines():
        stripped = line.strip()
        for regex, handle in ((_VERSION_RE, lambda m: parsed.update(version=m.group("version"))),
                              (_COLLECTIVE_RE, lambda m: parsed.update(collective=parsed["collective"] or m.group("name")))):
            match = regex.match(stripped)
            if match:
                handle(match)
        params = _PARAMS_RE.match(stripped)
        if params:
            parsed.update(gpus_per_process=int(params.group("ngpus")), validation=params.group("validation") != "0")
        rank = _RANK_RE.match(stripped)
        if rank:
            parsed["ranks"].append({
                "rank": int(rank.group("rank")), "host": rank.group("host"), "device": int(rank.group("device")),
                "bus": rank.group("bus"), "pci_key": rank_pci_key(rank.group("bus")), "name": rank.group("name"),
            })
            continue
        header = header or bool(_HEADER_RE.match(stripped))
        oob = _OOB_RE.match(stripped)
        if oob:
            parsed.update(out_of_bounds=int(oob.group("count")), out_of_bounds_ok=oob.group("status") == "OK")
        avg = _AVG_RE.match(stripped)
        if avg:
            parsed["avg_busbw"] = float(avg.group("value"))
        row = _ROW_RE.match(line) if header and not stripped.startswith("#") else None
        if row:
            parsed["rows"].append(_row(row))
        elif _FAILURE_RE.search(stripped):
            parsed["failures"].append(stripped)
    _check_is_all_reduce(parsed, text)
    return parsed


def _check_is_all_reduce(parsed: dict[str, t.Any], text: str) -> None:
    collective = parsed["collective"]
    if collective is not None and collective != BINARY:
        raise NcclTestsError("expected the output of %s, found the output of %s" % (BINARY, collective))
    other = sorted({row["redop"] for row in parsed["rows"]} - _REDOPS)
    if other:
        raise NcclTestsError(
            "expected the output of %s, found a table whose redop column reads %s (a data-movement test such as "
            "all_gather_perf or alltoall_perf, not an all-reduce)" % (BINARY, ", ".join(other)))
    if not parsed["rows"]:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        if not parsed["ranks"]:
            raise NcclTestsError("expected the output of %s, found no rank and no result line; it begins: %r"
                                 % (BINARY, first[:200]))
        raise NcclTestsError("%s listed %d rank(s) but printed no result row%s" % (
            BINARY, len(parsed["ranks"]), (": " + parsed["failures"][0]) if parsed["failures"] else
            " (it stopped before measuring)"))


def wrong_rows(parsed: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    """Rows where the check found wrong values, out-of-place or in-place."""
    return [row for row in parsed["rows"]
            if any((row[side] or {}).get("wrong") for side in ("out_of_place", "in_place"))]


def measure(parsed: dict[str, t.Any], min_bytes: int | None = None) -> dict[str, t.Any]:
    """The bus bandwidth acceptance judges: the lowest busbw over the rows of size >= min_bytes.

    Small messages measure latency, not the links, so by default only the largest size counts;
    of a row, out-of-place and in-place both count (the lower one is the figure).
    """
    rows = parsed["rows"]
    threshold = max(row["size"] for row in rows) if min_bytes is None else min_bytes
    used = [row for row in rows if row["size"] >= threshold]
    if not used:
        raise NcclTestsError("no %s result row has a size of %d bytes or more (largest: %d)"
                             % (BINARY, threshold, max(row["size"] for row in rows)))
    figures = [(row[side]["busbw"], row["size"], side) for row in used
               for side in ("out_of_place", "in_place") if row[side] is not None]
    busbw, size, side = min(figures)
    return {"busbw": busbw, "size": size, "side": side, "min_bytes": threshold, "rows": len(used)}
