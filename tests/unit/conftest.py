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


def pytest_terminal_summary(terminalreporter) -> None:
    """The model-based planner test's figures: how much it explored (a benchmark prints, never asserts)."""
    for name, module in list(sys.modules.items()):
        if name.endswith("test__vllm_nodeplan_model") and getattr(module, "STATS", {}).get("fleets"):
            stats = module.STATS
            terminalreporter.write_line(
                "planner model: {fleets} generated fleets, {rounds} rounds of events and faults ({moves} port moves, {readdressed} "
                "address changes), {runs} "
                "site.yml runs, {plans} plans, {steps} steps checked against the invariants; "
                "{held} held, {killed} killed, {failed} failed, {refused} refused; {fenced} stops refused by the "
                "executor's fresh router read; {concurrent} concurrent runs refused by the lock, {takeovers} locks of "
                "killed runs taken over; {put_back} put back after a failure ({put_back_old_port} under the old port "
                "they still served at); {accepted} drained acceptances passed, {rejected} rejected, {fell_back} failed "
                "driver installs served again on the old driver; {rolled_back} rollbacks of the last rollout, "
                "{stayed} nodes it never switched left where they were".format(**stats))
