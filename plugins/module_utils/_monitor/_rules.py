# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The fleet's alert rules as one fleet wants them: a `for:` of its own, or an alert left out.

Why: the shipped durations suit a fleet of 30-minute model loads (a server down 5 minutes,
an engine silent 10); a fleet with faster loads, a noisier network or a test fleet needs other
ones, and an alert a fleet does not want (no spec decode, no SLO yet) must be removable without
editing the collection's file. Every name given must be an alert of the file and every duration
Prometheus' own syntax, so a typo fails the run before Prometheus sees anything.

Pure function over the parsed rule file; stdlib only, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

# Prometheus' duration: one or more <number><unit>, units y w d h m s ms (e.g. 90s, 1h30m).
_DURATION = re.compile(r"^(?:\d+(?:ms|[ywdhms]))+$")


class RulesError(ValueError):
    """An override naming no alert of the rules, or a duration Prometheus would not read."""


def tune(files: t.Mapping[str, t.Any], alert_for: t.Mapping[str, str], disabled: t.Sequence[str]) -> dict[str, t.Any]:
    """Each parsed rules file (by name), copied with alert_for's durations set and the disabled
    alerts left out. The names are checked against the alerts of all the files together."""
    for name, rules in files.items():
        if not isinstance(rules, dict) or not isinstance(rules.get("groups"), list):
            raise RulesError("%s: expected a Prometheus rules file (a mapping with 'groups'), found %r" % (name, rules))
    alerts = {rule["alert"] for rules in files.values() for group in rules["groups"]
              for rule in group.get("rules", []) if "alert" in rule}
    unknown = sorted((set(alert_for) | set(disabled)) - alerts)
    if unknown:
        raise RulesError("no alert named %s in the fleet's rules (they are: %s)" % (", ".join(unknown), ", ".join(sorted(alerts))))
    bad = sorted("%s: %r" % (name, duration) for name, duration in alert_for.items()
                 if not isinstance(duration, str) or not _DURATION.match(duration))
    if bad:
        raise RulesError("not a Prometheus duration (e.g. 90s, 5m, 1h30m): %s" % "; ".join(bad))
    return {name: _tuned(rules, alert_for, disabled) for name, rules in files.items()}


def _plain(value: t.Any) -> t.Any:
    """A copy made of plain dicts and lists. Not copy.deepcopy: Ansible hands a filter lazy containers,
    whose deep copy drags the task's variables along (17 s a call in site.yml's context, 0.5 s alone)."""
    if isinstance(value, t.Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _tuned(rules: t.Mapping[str, t.Any], alert_for: t.Mapping[str, str], disabled: t.Sequence[str]) -> dict[str, t.Any]:
    tuned = _plain(rules)
    for group in tuned["groups"]:
        kept = []
        for rule in group.get("rules", []):
            if rule.get("alert") in disabled:
                continue
            if rule.get("alert") in alert_for:
                rule["for"] = alert_for[rule["alert"]]
            kept.append(rule)
        group["rules"] = kept
    tuned["groups"] = [group for group in tuned["groups"] if group["rules"]]
    return tuned
