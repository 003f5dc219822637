"""Make the checkout importable as ansible_collections.gpuserve.vllm, and tests.support importable.

`source tests/env.sh` links the checkout at $GPUSERVE_CACHE/self-<hash of its path>/ansible_collections/gpuserve/vllm;
without it (a plain clone, an IDE) a link in a temporary directory does the same, so the unit
tests import the collection's code exactly the way Ansible does.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _collections_root() -> Path:
    cache = Path(os.environ.get("GPUSERVE_CACHE", Path.home() / ".cache" / "gpuserve"))
    linked = cache / f"self-{hashlib.sha256(str(REPO).encode()).hexdigest()[:12]}"
    if (linked / "ansible_collections" / "gpuserve" / "vllm").resolve() == REPO:
        return linked
    root = Path(tempfile.mkdtemp(prefix="gpuserve-collections-"))
    (root / "ansible_collections" / "gpuserve").mkdir(parents=True)
    (root / "ansible_collections" / "gpuserve" / "vllm").symlink_to(REPO)
    return root


for entry in (str(REPO), str(_collections_root())):
    if entry not in sys.path:
        sys.path.insert(0, entry)
