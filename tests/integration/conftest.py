"""Tests that drive ansible-playbook (slow; they need `source tests/env.sh` for ansible-playbook
and ANSIBLE_COLLECTIONS_PATH). They import the collection and tests.support the way the unit
tests do, so the unit tests' conftest does the set-up for both."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = str(Path(__file__).resolve().parents[2])
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tests.unit import conftest as _unit_conftest  # noqa: E402,F401  (sys.path set-up on import)
