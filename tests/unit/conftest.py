"""Make the checkout importable as ansible_collections.gpuserve.vllm, and tests.support importable.

The checkout's committed link tree collections/ansible_collections/gpuserve/vllm (the one
ansible.cfg and tests/env.sh use) points back at it, so the unit tests import the collection's
code exactly the way Ansible does.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

for entry in (str(REPO), str(REPO / "collections")):
    if entry not in sys.path:
        sys.path.insert(0, entry)
