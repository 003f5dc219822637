# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Node acceptance: does a provisioned GPU node work as a whole? (gpu_node_acceptance)

Three kinds of evidence, each read elsewhere: an all-reduce over every GPU (_nccl_tests), the
GPUs' own diagnostics (_dcgmi, or the nvidia-smi facts of _facts when DCGM is absent), and the
PCIe links of the GPUs (sysfs, read here). This module derives the bus-bandwidth floor from the
links and turns the evidence into one verdict. Unknown is not pass: evidence that could not be
read makes the verdict "unknown", never "pass".
Pure functions; stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _pci as pci
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _nccl_tests as nccl
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _verdicts as verdicts

PASS, FAIL, UNKNOWN, NOT_RUN = "pass", "fail", "unknown", "not_run"

# Fractions of the slowest link's raw per-direction bandwidth that a healthy ring all-reduce
# reaches at large sizes (busbw is what each link carries per direction in a ring).
# With P2P, data goes GPU to GPU; TLP headers on 256-byte payloads leave ~85-90 % of the raw
# rate, and NCCL's ring over PCIe adds its own protocol and the root complex's. Measured: 8x RTX
# 4090 on Gen4 x16, every pair across the SMP interconnect (SYS), P2P on: 20.64 GB/s = 0.655 of
# 31.5 GB/s (blog.chlc.cc, see tests/fixtures/gpu_acceptance). 0.55 leaves ~15 % for a slower
# platform and still refuses a link trained at half its width or one generation down (<= 0.33).
P2P_FRACTION = 0.55
# Without P2P (NCCL_P2P_DISABLE=1, or GPUs that cannot), NCCL stages through host memory (SHM):
# each byte crosses PCIe twice and host memory bandwidth bounds it. Measured: the same box with
# P2P off, 14.45 GB/s = 0.46; 8x RTX 5090 on Gen5, 28 GB/s = 0.44 (NVIDIA/nccl#1639). 0.35
# leaves ~20 % margin and still refuses a halved link (~0.23).
NO_P2P_FRACTION = 0.35

# Line encoding per transfer rate (GT/s): 8b/10b up to Gen2, 128b/130b Gen3-5, Gen6 FLIT
# (242 payload bytes of a 256-byte flit).
_ENCODING = {2.5: 8 / 10, 5.0: 8 / 10, 8.0: 128 / 130, 16.0: 128 / 130, 32.0: 128 / 130, 64.0: 242 / 256}
_GENERATION = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_SPEED_RE = re.compile(r"^\s*(?P<rate>\d+(?:\.\d+)?)\s*GT/s")
# sysfs attributes of a PCI device read for its link (the GPU's, then its upstream port's).
LINK_ATTRIBUTES = ("max_link_speed", "max_link_width", "current_link_speed", "current_link_width")


def parse_speed(text: str | None) -> float | None:
    """sysfs link speed '32.0 GT/s PCIe' (or '8 GT/s') -> 32.0; 'Unknown' or junk -> None."""
    match = _SPEED_RE.match(text or "")
    if not match:
        return None
    rate = float(match.group("rate"))
    return rate if rate in _ENCODING else None


def _width(text: str | None) -> int | None:
    text = (text or "").strip().lstrip("x")
    return int(text) if text.isdigit() and int(text) > 0 else None


def link_bandwidth(rate_gts: float, width: int) -> float:
    """Raw per-direction bandwidth in GB/s: GT/s x lanes x encoding / 8 (Gen5 x16: 63.0)."""
    return rate_gts * width * _ENCODING[rate_gts] / 8


def gpu_link(label: str, gpu: dict[str, str | None], upstream: dict[str, str | None] | None) -> dict[str, t.Any]:
    """The link a GPU can run at: the lower of its own and its upstream port's maximum.

    ``gpu`` and ``upstream`` map LINK_ATTRIBUTES to sysfs text. The current values are kept for
    the report only: an idle GPU drops its link speed to save power, so they prove nothing.
    """
    speeds = [parse_speed(source.get("max_link_speed")) for source in (gpu, upstream or {})]
    widths = [_width(source.get("max_link_width")) for source in (gpu, upstream or {})]
    known_speeds = [speed for speed in speeds if speed is not None]
    known_widths = [width for width in widths if width is not None]
    link: dict[str, t.Any] = {
        "gpu": label,
        "rate_gts": min(known_speeds) if speeds[0] is not None else None,
        "width": min(known_widths) if widths[0] is not None else None,
        "current_rate_gts": parse_speed(gpu.get("current_link_speed")),
        "current_width": _width(gpu.get("current_link_width")),
    }
    link["generation"] = _GENERATION.get(link["rate_gts"]) if link["rate_gts"] else None
    link["gbps"] = (round(link_bandwidth(link["rate_gts"], link["width"]), 2)
                    if link["rate_gts"] and link["width"] else None)
    return link


def describe_link(link: dict[str, t.Any]) -> str:
    if not link.get("gbps"):
        return "%s (link unknown)" % link["gpu"]
    return "%s, PCIe Gen%s x%d (%.4g GT/s x %d lanes x %s / 8 = %.1f GB/s per direction)" % (
        link["gpu"], link["generation"], link["width"], link["rate_gts"], link["width"],
        "8/10" if link["rate_gts"] <= 5 else ("242/256" if link["rate_gts"] >= 64 else "128/130"), link["gbps"])


def bus_floor(links: list[dict[str, t.Any]], p2p: bool, *, override: float | None = None,
              p2p_fraction: float = P2P_FRACTION, no_p2p_fraction: float = NO_P2P_FRACTION) -> dict[str, t.Any]:
    """The lowest acceptable all-reduce busbw (GB/s): fraction x the slowest GPU link.

    The ring is as fast as its slowest link, so the floor follows from that one. An explicit
    override (the inventory's figure) wins. No link read and no override: floor None (unknown).
    """
    fraction = p2p_fraction if p2p else no_p2p_fraction
    known = [link for link in links if link.get("gbps")]
    slowest = min(known, key=lambda link: link["gbps"]) if known else None
    floor: dict[str, t.Any] = {"floor": None, "source": None, "fraction": fraction, "p2p": p2p,
                               "slowest": slowest, "formula": None,
                               "unknown_links": [link["gpu"] for link in links if not link.get("gbps")],
                               "narrow_now": ["%s at x%d of x%d" % (link["gpu"], link["current_width"], link["width"])
                                              for link in known if (link.get("current_width") or link["width"]) < link["width"]]}
    if override is not None:
        floor.update(floor=float(override), source="override", formula="set explicitly: %.2f GB/s" % override)
    elif slowest is not None:
        value = round(fraction * slowest["gbps"], 2)
        floor.update(floor=value, source="topology", formula="%.2f (%s) x %s = %.2f GB/s" % (
            fraction, "P2P" if p2p else "no P2P", describe_link(slowest), value))
    return floor


def p2p_from_env(env: dict[str, str] | None) -> bool:
    """NCCL uses P2P unless NCCL_P2P_DISABLE is set to a true value (or NCCL_P2P_LEVEL to LOC/0)."""
    env = env or {}
    if str(env.get("NCCL_P2P_DISABLE", "0")).strip().lower() in ("1", "true", "yes", "on"):
        return False
    return str(env.get("NCCL_P2P_LEVEL", "")).strip().upper() not in ("LOC", "0")


def gpu_labels(gpus: list[dict[str, t.Any]]) -> dict[str, str]:
    """PCI key -> 'GPU3 (00000000:41:00.0)' for the GPUs nvidia-smi listed."""
    return {pci.pci_key(gpu["bus_id"]) or "": "GPU%s (%s)" % (gpu["index"], gpu["bus_id"]) for gpu in gpus}


def smi_health(facts: dict[str, t.Any], expected_gpus: int) -> tuple[list[str], list[str]]:
    """The check without DCGM: every expected GPU present, none in an error state, no fatal Xid.

    Reuses gpu_preflight's verdicts on the facts of _facts.collect (nvidia-smi, lspci, kernel log).
    """
    expect = {"require_gpu": True, "expected_gpu_count": expected_gpus, "acs": "ignore",
              "allow_mig": True, "health_action": "fail", "ignore_xids": []}
    problems, advisories = verdicts.evaluate(facts, expect)
    wanted = ("no_gpu", "gpus_not_served", "gpu_count", "gpu_error", "gpu_unreadable", "xid", "kernel_module")
    return [p["message"] for p in problems if p["code"] in wanted], advisories


def _all_reduce_findings(parsed: dict[str, t.Any], gpus: list[dict[str, t.Any]], expected_gpus: int,
                         floor: dict[str, t.Any], min_bytes: int | None) -> tuple[list[str], list[str], list[str], dict]:
    """(problems, advisories, unknowns, measured figure) of a parsed all_reduce_perf run."""
    problems: list[str] = []
    advisories: list[str] = []
    unknowns: list[str] = []
    ranks = parsed["ranks"]
    if len(ranks) < expected_gpus:
        seen = {rank["pci_key"] for rank in ranks}
        absent = [label for key, label in gpu_labels(gpus).items() if key not in seen]
        problems.append("all_reduce_perf ran on %d rank(s), the node has %d GPUs%s: the all-reduce did not "
                        "span the node" % (len(ranks), expected_gpus,
                                           (" (absent: %s)" % ", ".join(absent)) if absent else ""))
    for row in nccl.wrong_rows(parsed):
        counts = ", ".join("%d %s" % (row[side]["wrong"], side.replace("_", "-")) for side in ("out_of_place", "in_place")
                           if row[side] and row[side]["wrong"])
        problems.append("all_reduce_perf found wrong values at %d bytes (%s): the GPUs or the links between them "
                        "corrupt data; run dcgmi diag -r 3 and check the kernel log for Xid errors" % (row["size"], counts))
    if parsed["out_of_bounds_ok"] is False:
        problems.append("all_reduce_perf reports %d out-of-bounds value(s) (FAILED)" % parsed["out_of_bounds"])
    for failure in parsed["failures"][:3]:
        problems.append("all_reduce_perf reported: %s" % failure)
    if parsed["validation"] is False:
        advisories.append("all_reduce_perf ran without checking results (-c 0): #wrong reads N/A, correctness unproven")
    figure = nccl.measure(parsed, min_bytes)
    if floor["floor"] is None:
        unknowns.append("no bus-bandwidth floor: the PCIe links of %s could not be read and none was set "
                        "explicitly; measured %.2f GB/s at %d bytes cannot be judged" % (
                            ", ".join(floor["unknown_links"]) or "the GPUs", figure["busbw"], figure["size"]))
    elif figure["busbw"] < floor["floor"]:
        problems.append("all_reduce_perf bus bandwidth %.2f GB/s at %d bytes (%s) is below the floor %.2f GB/s [%s]%s" % (
            figure["busbw"], figure["size"], figure["side"].replace("_", "-"), floor["floor"], floor["formula"],
            ("; links narrower than they can be: %s" % ", ".join(floor["narrow_now"])) if floor["narrow_now"] else ""))
    return problems, advisories, unknowns, figure


def decide(*, nccl_text: str | None, gpus: list[dict[str, t.Any]], expected_gpus: int, floor: dict[str, t.Any],
           health: tuple[list[str], list[str]] | None, health_source: str | None, min_bytes: int | None = None,
           nccl_rc: int | None = None, nccl_reason: str | None = None, health_reason: str | None = None) -> dict[str, t.Any]:
    """The verdict of one acceptance run: pass, fail or unknown, with every reason as a sentence.

    ``nccl_text`` None means all_reduce_perf did not run (``nccl_reason`` says why); ``health``
    None means no health check ran (``health_reason``). Either makes the verdict unknown at best:
    what was not run was not proven.
    """
    problems: list[str] = []
    advisories: list[str] = []
    unknowns: list[str] = []
    figure = parsed = None
    if nccl_rc:
        problems.append("all_reduce_perf exited with status %d" % nccl_rc)
    if nccl_text is None:
        unknowns.append(nccl_reason or "all_reduce_perf did not run")
    else:
        try:
            parsed = nccl.parse_all_reduce(nccl_text)
        except nccl.NcclTestsError as exc:
            problems.append(str(exc))
        else:
            found, advised, undecided, figure = _all_reduce_findings(parsed, gpus, expected_gpus, floor, min_bytes)
            problems += found
            advisories += advised
            unknowns += undecided
    if health is None:
        unknowns.append(health_reason or "no GPU health check ran")
    else:
        problems += health[0]
        advisories += health[1]
    verdict = FAIL if problems else (UNKNOWN if unknowns else PASS)
    return {
        "verdict": verdict, "problems": problems, "unknowns": unknowns, "advisories": advisories,
        "busbw": figure, "floor": floor, "health_source": health_source,
        "ranks": len(parsed["ranks"]) if parsed else None, "expected_gpus": expected_gpus,
        "avg_busbw": parsed["avg_busbw"] if parsed else None,
        "message": summary(verdict, problems, unknowns),
    }


def summary(verdict: str, problems: list[str], unknowns: list[str]) -> str:
    if verdict == PASS:
        return "node accepted"
    head = "node rejected" if verdict == FAIL else "node not accepted: acceptance could not be decided"
    return head + ":\n- " + "\n- ".join(problems + unknowns)
