# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Run node acceptance again, or not: the key of what was accepted, and the decision.

Acceptance (an all-reduce over every GPU and their diagnostics, _acceptance) takes minutes and
loads every GPU, so the gpu_node role runs it once per change of what it proved: the driver, the
kernel, the GPUs' bus ids and PCIe links, the kernel's IOMMU/ACS switches and the NCCL settings the
server uses. ``acceptance_key`` builds that key from what is observed on the node;
``plan`` compares it with the key of the last record. A record that cannot be read, or whose
verdict was not pass, never counts as accepted. Acceptance that is due on a node whose vLLM
server runs is not run under its load: ``plan`` leaves it to site.yml's serve play (``where``),
which runs it on the node out of its routers, drained and stopped, one batch at a time.
Pure functions; stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _pci as pci

# Bumped when the key's shape changes: a record with another version is acceptance to redo.
KEY_VERSION = 1
_PARTS = (("driver", "driver"), ("kernel", "kernel"), ("gpus", "GPUs and PCIe links"),
          ("iommu_args", "IOMMU/ACS kernel arguments"), ("nccl_env", "NCCL settings"))


def acceptance_key(*, driver_versions: t.Iterable[str | None], kernel_release: str | None,
                   links: t.Iterable[dict[str, t.Any]], iommu_args: t.Iterable[str],
                   nccl_env: dict[str, t.Any]) -> dict[str, t.Any]:
    """What an acceptance proved something about, in one JSON-stable dict.

    ``links`` are _acceptance.gpu_link results with the GPU's ``bus_id`` added; only the maximum
    link (rate, width) counts, the current one changes with the GPU's power state.
    """
    versions = sorted({version for version in driver_versions if version})
    gpus = sorted(({"bus_id": pci.pci_key(link.get("bus_id")) or str(link.get("bus_id")),
                    "rate_gts": link.get("rate_gts"), "width": link.get("width")} for link in links),
                  key=lambda gpu: gpu["bus_id"])
    return {
        "version": KEY_VERSION,
        "driver": ",".join(versions) or None,
        "kernel": kernel_release or None,
        "gpus": gpus,
        "iommu_args": sorted(iommu_args),
        "nccl_env": {str(name): str(value) for name, value in sorted(nccl_env.items())},
    }


def _links_text(gpus: list[dict[str, t.Any]]) -> str:
    counts: dict[str, int] = {}
    for gpu in gpus:
        link = ("%g GT/s x%d" % (gpu["rate_gts"], gpu["width"])) if gpu.get("rate_gts") and gpu.get("width") \
            else "link unknown"
        counts[link] = counts.get(link, 0) + 1
    return ", ".join("%d x %s" % (count, link) for link, count in sorted(counts.items()))


def key_summary(key: dict[str, t.Any]) -> str:
    """One line: 'driver 580.95.05, kernel 6.8.0-60-generic, 8 GPUs (8 x 32 GT/s x16), ...'."""
    gpus = key.get("gpus") or []
    nccl = key.get("nccl_env") or {}
    return "driver %s, kernel %s, %d GPU(s)%s, IOMMU/ACS args %s, NCCL %s" % (
        key.get("driver") or "unknown", key.get("kernel") or "unknown", len(gpus),
        (" (%s)" % _links_text(gpus)) if gpus else "", " ".join(key.get("iommu_args") or []) or "none",
        " ".join("%s=%s" % item for item in sorted(nccl.items())) or "from /etc/nccl.conf")


def _difference(name: str, before: t.Any, after: t.Any) -> str:
    if name == "gpus":
        old = {gpu.get("bus_id"): gpu for gpu in before or [] if isinstance(gpu, dict)}
        new = {gpu["bus_id"]: gpu for gpu in after}
        parts = ["%s gone" % bus for bus in sorted(set(old) - set(new))]
        parts += ["%s new" % bus for bus in sorted(set(new) - set(old))]
        parts += ["%s %s -> %s" % (bus, _links_text([old[bus]]), _links_text([new[bus]]))
                  for bus in sorted(set(old) & set(new)) if old[bus] != new[bus]]
        return "GPUs and PCIe links: " + ", ".join(parts)
    if name == "nccl_env":
        before = before if isinstance(before, dict) else {}
        names = sorted(set(before) | set(after))
        return "NCCL settings: " + ", ".join("%s %s -> %s" % (n, before.get(n, "unset"), after.get(n, "unset"))
                                             for n in names if before.get(n) != after.get(n))
    label = dict(_PARTS)[name]
    if name == "iommu_args":
        return "%s %s -> %s" % (label, " ".join(before or []) or "none", " ".join(after) or "none")
    return "%s %s -> %s" % (label, before or "unknown", after or "unknown")


# Where acceptance that is due runs: here and now, or in the serve play (drained); "" = not due.
WHERE_NOW, WHERE_SERVE_PLAY = "now", "serve_play"


def plan(*, previous: t.Any, record_error: str | None, key: dict[str, t.Any], force: bool = False,
         record: str = "the acceptance record", serving: str = "inactive", marker: bool = False,
         here: bool = False) -> dict[str, t.Any]:
    """Run acceptance (``run``) or not, why (``reason``), and where (``where``), from the last record,
    the observed key and the server.

    ``previous`` is the record's content (None: no record), ``record_error`` why it could not be
    read. Skipped only when the record holds this very key and the verdict pass. ``serving``: the
    server unit as _driver_plan.serving_from reads it (unknown counts as serving); ``marker``: a
    serve play takes requests (site.yml); ``here``: the caller took the node out already (the
    serve play's own steps), so it runs now whatever the server's state.
    """
    decided = _due(previous=previous, record_error=record_error, key=key, force=force, record=record)
    if not decided["run"]:
        return dict(decided, where="")
    if here or not marker or serving == "inactive":
        return dict(decided, where=WHERE_NOW)
    who = "the server runs" if serving == "active" else "the server's state could not be read (taken as running)"
    return dict(decided, where=WHERE_SERVE_PLAY,
                reason=decided["reason"] + "; " + who + ": not under its load, the serve play runs it out of its "
                "routers, drained and stopped, one batch at a time")


def _due(*, previous: t.Any, record_error: str | None, key: dict[str, t.Any], force: bool,
         record: str) -> dict[str, t.Any]:
    summary = key_summary(key)
    if force:
        return {"run": True, "reason": "asked for (gpu_node_acceptance_force or --tags acceptance)", "summary": summary}
    if record_error:
        return {"run": True, "reason": "%s cannot be read (%s)" % (record, record_error), "summary": summary}
    if previous is None:
        return {"run": True, "reason": "never run on this node (no %s)" % record, "summary": summary}
    if not isinstance(previous, dict) or not isinstance(previous.get("key"), dict):
        return {"run": True, "reason": "%s holds no key of what it accepted (an older or foreign record)" % record,
                "summary": summary}
    when = previous.get("time") or "an unknown time"
    old = previous["key"]
    if old.get("version") != key["version"]:
        return {"run": True, "reason": "%s has key version %s, this collection writes %s" % (
            record, old.get("version"), key["version"]), "summary": summary}
    changed = [_difference(name, old.get(name), key[name]) for name, _label in _PARTS if old.get(name) != key[name]]
    if changed:
        return {"run": True, "reason": "changed since the acceptance at %s: %s" % (when, "; ".join(changed)),
                "summary": summary}
    verdict = previous.get("verdict")
    if verdict != "pass":
        return {"run": True, "reason": "the acceptance at %s for this node as it is now ended %s, not pass" % (
            when, verdict or "without a verdict"), "summary": summary}
    return {"run": False, "reason": "accepted at %s for %s" % (when, summary), "summary": summary}
