# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""vLLM's /metrics: the speculative-decoding counters and their growth between scrapes.

Stdlib only, Python 3.9+, no Ansible imports: modules run this on the managed node
and plugins on the controller.
"""

from __future__ import annotations

import re
import typing as t


_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+"
                     r"(?P<value>[-+]?(?:[0-9.]+(?:[eE][-+]?\d+)?|Inf|NaN))(?:\s+\d+)?$")
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')

SPEC_PREFIX = "vllm:spec_decode_"
SPEC_DRAFTS = SPEC_PREFIX + "num_drafts_total"
SPEC_DRAFT_TOKENS = SPEC_PREFIX + "num_draft_tokens_total"
SPEC_ACCEPTED = SPEC_PREFIX + "num_accepted_tokens_total"
SPEC_PER_POS = SPEC_PREFIX + "num_accepted_tokens_per_pos_total"


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition: name -> [(labels, value)], comments skipped."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = {m.group("key"): m.group("value") for m in _LABEL.finditer(match.group("labels") or "")}
        samples.setdefault(match.group("name"), []).append((labels, float(match.group("value"))))
    return samples


def spec_decode_counters(text: str) -> dict[str, t.Any]:
    """The spec-decode counters summed over engines/models; `present` False if none exported."""
    samples = parse_prometheus(text)

    def total(name: str) -> float:
        return sum(value for _labels, value in samples.get(name, []))

    per_pos: dict[str, float] = {}
    for labels, value in samples.get(SPEC_PER_POS, []):
        pos = labels.get("position", "?")
        per_pos[pos] = per_pos.get(pos, 0.0) + value
    return {
        "present": any(name in samples for name in (SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED)),
        "drafts": total(SPEC_DRAFTS),
        "draft_tokens": total(SPEC_DRAFT_TOKENS),
        "accepted_tokens": total(SPEC_ACCEPTED),
        "accepted_per_position": dict(sorted(per_pos.items(), key=lambda kv: _pos_key(kv[0]))),
    }


def _pos_key(pos: str) -> tuple[int, str]:
    return (int(pos), "") if pos.isdigit() else (1 << 30, pos)


def spec_decode_delta(before: t.Mapping[str, t.Any], after: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """Counter growth between two scrapes, with acceptance rate and mean acceptance length.

    acceptance rate = accepted / draft tokens; mean acceptance length = 1 + accepted / drafts
    (vLLM's own definitions). Rates are None when there was nothing to divide by.
    """
    drafts = after["drafts"] - before["drafts"]
    draft_tokens = after["draft_tokens"] - before["draft_tokens"]
    accepted = after["accepted_tokens"] - before["accepted_tokens"]
    per_pos = {}
    for pos, value in after.get("accepted_per_position", {}).items():
        grown = value - before.get("accepted_per_position", {}).get(pos, 0.0)
        per_pos[pos] = round(grown / drafts, 4) if drafts > 0 else None
    return {
        "drafts": int(drafts),
        "draft_tokens": int(draft_tokens),
        "accepted_tokens": int(accepted),
        "grew": drafts > 0 and draft_tokens > 0,
        "acceptance_rate": round(accepted / draft_tokens, 4) if draft_tokens > 0 else None,
        "mean_acceptance_length": round(1 + accepted / drafts, 4) if drafts > 0 else None,
        "per_position_acceptance_rate": per_pos,
    }
