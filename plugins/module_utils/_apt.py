# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What the host's apt sources offer, read from ``apt-cache policy``: the roles install a package
from a repository the operator configured (NVIDIA's, Grafana's) only after asking whether it has
one, and refuse by name otherwise.

Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import typing as t


def without_candidate(packages: t.Sequence[str], apt_policy: str) -> list[str]:
    """The packages ``apt-cache policy <packages>`` gives no candidate for (not in any configured repository).

    apt-cache prints a block per package it knows ('name:' then '  Candidate: 2.x' or '(none)') and
    nothing for a name no repository has.
    """
    candidates: dict[str, str] = {}
    name = None
    for line in (apt_policy or "").splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            name = line.strip()[:-1]
        elif name and line.strip().startswith("Candidate:"):
            candidates[name] = line.split(":", 1)[1].strip()
    return [pkg for pkg in packages if candidates.get(pkg, "(none)") == "(none)"]


# apt's own record of its last successful `update` where a package keeps one (Ubuntu's
# update-notifier-common), else the lists directory: what ansible.builtin.apt's cache_valid_time reads.
UPDATE_STAMP = "/var/lib/apt/periodic/update-success-stamp"
LISTS_DIR = "/var/lib/apt/lists"


def package_name(spec: str) -> str:
    """The package of an apt spec: `name`, `name=1.2-1`, `name:amd64`, `name>=1` -> name (what apt-cache policy takes)."""
    name = spec.strip()
    for sep in ("=", ">", "<"):
        name = name.split(sep, 1)[0]
    return name.split(":", 1)[0].strip()


def fetch_failures(stdout: str) -> list[str]:
    """The sources `apt-get update -q` could not fetch, from its stdout: ['SOURCE (why)', ...].

    Each is an "Err:N SOURCE" line followed by the reason, indented. apt exits 0 when a source
    missed only its InRelease file (a warning) and 100 when no Release file came either; the
    lists stay as they were in both cases, which is what a role needs to know.
    """
    failures: list[str] = []
    lines = (stdout or "").splitlines()
    for index, line in enumerate(lines):
        if line.startswith("Err:") and " " in line:
            source = line.split(" ", 1)[1].strip()
            why = lines[index + 1].strip() if index + 1 < len(lines) and lines[index + 1][:1].isspace() else ""
            failures.append(f"{source} ({why})" if why else source)
    return failures


def refresh_reason(missing: t.Sequence[str], age: float | None, valid_time: int) -> str:
    """Why apt's lists must be refreshed now ("" when not).

    A package without a candidate is refreshed for at once, whatever the lists' time says: apt's
    cache_valid_time trusts the lists directory's modification time, which `rm -rf
    /var/lib/apt/lists/*` (as images are made) or an edit under sources.list.d leaves recent
    while the lists offer nothing, or not what was just configured. Otherwise the lists are
    refreshed when older than valid_time seconds (age None: never refreshed that apt can tell).
    """
    if missing:
        return f"no candidate for {', '.join(missing)} in apt's lists"
    if age is None:
        return "apt's lists were never refreshed"
    if age >= valid_time:
        return f"apt's lists are {int(age)} s old (valid for {valid_time} s)"
    return ""
