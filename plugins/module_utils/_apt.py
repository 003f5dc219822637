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
