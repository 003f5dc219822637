"""Tables for plugins/module_utils/_gpu/_driver_plan.py: what gpu_node does about the driver.

The invariant under every row: packages are installed now only where nothing serves, a serving
node reboots only in the serve play (drained), and unknown is treated as serving.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _driver_plan as dp

NEW, OLD = "580.95.05", "580.82.07"


def plan(**kw: object) -> dict[str, object]:
    args = dict(install_wanted=True, packages_change=False, loaded=OLD, installed=OLD, serving="inactive",
                reboot_allowed=True, marker=True, packages=("nvidia-driver-580-server-open",))
    args.update(kw)
    return dp.plan(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize("kw, install, reboot, checks, pending", [
    # nothing to do
    ({}, "no", "no", "now", False),
    ({"install_wanted": False, "packages_change": True}, "no", "no", "now", False),
    ({"loaded": None, "installed": None}, "no", "no", "now", False),
    # bare node (no driver loaded, none on disk), nothing serves: install and reboot now
    ({"packages_change": True, "loaded": None, "installed": None}, "now", "now", "now", False),
    # ... without leave to reboot: installed, checks judge the module on disk
    ({"packages_change": True, "loaded": None, "installed": None, "reboot_allowed": False},
     "now", "operator", "deferred", True),
    # a serving node: staged, the serve play installs and reboots drained
    ({"packages_change": True, "serving": "active"}, "stage", "serve_play", "now", True),
    ({"packages_change": True, "serving": "unknown"}, "stage", "serve_play", "now", True),
    # ... but nobody would install it (role alone, or no leave to reboot): held
    ({"packages_change": True, "serving": "active", "marker": False}, "held", "no", "now", True),
    ({"packages_change": True, "serving": "active", "reboot_allowed": False}, "held", "no", "now", True),
    # a module on disk that is not loaded (a killed run, an install by hand)
    ({"installed": NEW}, "no", "now", "now", False),
    ({"installed": NEW, "loaded": None}, "no", "now", "now", False),
    ({"installed": NEW, "reboot_allowed": False}, "no", "operator", "deferred", True),
    ({"installed": NEW, "serving": "active"}, "no", "serve_play", "deferred", True),
    ({"installed": NEW, "serving": "active", "marker": False}, "no", "operator", "deferred", True),
    # userland already swapped under a running server, and a new package on top: staged, drained
    ({"installed": NEW, "packages_change": True, "serving": "active"}, "stage", "serve_play", "deferred", True),
    ({"installed": NEW, "packages_change": True, "serving": "active", "marker": False},
     "held", "operator", "deferred", True),
])
def test_plan(kw: dict[str, object], install: str, reboot: str, checks: str, pending: bool) -> None:
    got = plan(**kw)
    assert (got["install"], got["reboot"], got["checks"], got["pending"]) == (install, reboot, checks, pending), got


@pytest.mark.parametrize("values", list(itertools.product(
    [True, False], [True, False], [None, OLD], [None, OLD, NEW], list(dp.SERVING_STATES), [True, False], [True, False])))
def test_invariants_over_every_input(values: tuple[object, ...]) -> None:
    wanted, change, loaded, installed, serving, allowed, marker = values
    got = plan(install_wanted=wanted, packages_change=change, loaded=loaded, installed=installed,
               serving=serving, reboot_allowed=allowed, marker=marker)
    idle = serving == "inactive"
    # The userland changes only where nothing serves; a serving node never reboots outside the serve play.
    assert got["install"] != "now" or idle
    assert got["reboot"] != "now" or (idle and allowed)
    assert got["reboot"] != "serve_play" or (allowed and marker and not idle)
    # Staged packages always have a serve play that installs them.
    assert got["install"] != "stage" or got["reboot"] == "serve_play"
    # Nothing asked, nothing different on disk: nothing happens.
    if not (wanted and change) and not (installed and installed != loaded):
        assert (got["install"], got["reboot"], got["pending"]) == ("no", "no", False)
    assert got["message"]


@pytest.mark.parametrize("kw, fragments", [
    ({"packages_change": True, "serving": "active"},
     ["the server runs", "nvidia-driver-580-server-open downloaded only (staged)", "drained"]),
    ({"packages_change": True, "serving": "unknown", "marker": False},
     ["could not be read (taken as running)", "held, nothing installed", "gpu_node_reboot_allowed: true and run site.yml"]),
    ({"installed": NEW, "reboot_allowed": False},
     ["kernel module 580.95.05 is installed, driver 580.82.07 loaded", "maintenance window"]),
    ({"packages_change": True, "loaded": None, "installed": None}, ["installing", "nothing serves", "rebooting now"]),
    ({}, ["up to date (driver 580.82.07 loaded)"]),
])
def test_message_says_what_and_why(kw: dict[str, object], fragments: list[str]) -> None:
    message = plan(**kw)["message"]
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize("state, serving", [
    ("active", "active"), ("activating", "active"), ("deactivating", "active"), ("reloading", "active"),
    ("inactive", "inactive"), ("failed", "inactive"), ("", "unknown"), ("  \n", "unknown"),
])
def test_serving_from_active_state(state: str, serving: str) -> None:
    assert dp.serving_from(state) == serving


def test_refuses_a_serving_state_it_does_not_know() -> None:
    with pytest.raises(dp.DriverPlanError, match="serving must be one of"):
        plan(serving="running")


# --- the next driver's branch, from apt's plan, before anything is installed or staged ---------
FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "gpu_node"


def _apt_line(name: str, new: str, old: str = "") -> str:
    """One line in the format of the recorded apt-check-*.txt (apt 2.6's simulate output)."""
    return "Inst %s %s(%s NVIDIA:cuda/debian12 [amd64])" % (name, "[%s] " % old if old else "", new)


def test_the_recorded_apt_plans_are_read_new_packages_and_upgrades():
    new = (FIXTURES / "apt-check-new-packages.txt").read_text()
    upgrade = (FIXTURES / "apt-check-upgrade.txt").read_text()
    assert dp.next_driver_problems(new, ["jq", "libonig5"], 2) == ["jq 1.6-2.1+deb12u3 is branch 1, below the required branch 2"]
    assert dp.next_driver_problems(upgrade, ["libexpat1", "ca-certificates"], 3) == [
        "libexpat1 2.5.0-1+deb12u5 is branch 2, below the required branch 3",  # the candidate, not [2.5.0-1+deb12u2]
        "ca-certificates 20250419~deb12u2: no driver branch in its version (expected <branch>.<minor>...)"]


@pytest.mark.parametrize(("lines", "packages", "minimum", "expected"), [
    ([_apt_line("nvidia-open", "580.95.05-1")], ["nvidia-open"], 570, []),
    ([_apt_line("nvidia-open", "580.95.05-1", old="570.172.08-1")], ["nvidia-open"], 580, []),
    ([_apt_line("nvidia-driver-550-server-open", "550.163.01-0ubuntu1")], ["nvidia-driver-550-server-open"], 570,
     ["nvidia-driver-550-server-open 550.163.01-0ubuntu1 is branch 550, below the required branch 570"]),
    ([_apt_line("nvidia-driver", "1:550.163.01-2")], ["nvidia-driver"], 570,
     ["nvidia-driver 1:550.163.01-2 is branch 550, below the required branch 570"]),  # an epoch
    ([_apt_line("nvidia-driver", "latest-1")], ["nvidia-driver"], 570,
     ["nvidia-driver latest-1: no driver branch in its version (expected <branch>.<minor>...)"]),
    ([_apt_line("libnvidia-compute-550", "550.163.01-1")], ["nvidia-open"], 570, []),  # not a package this run installs
    ([], ["nvidia-open"], 570, []),  # apt changes nothing: the preflight judges the driver there is
    ([_apt_line("nvidia-driver-550-server-open", "550.163.01-0ubuntu1")], ["nvidia-driver-550-server-open"], None, []),
])
def test_the_next_driver_below_the_branch_is_named(lines, packages, minimum, expected):
    assert dp.next_driver_problems("\n".join(["Reading package lists..."] + lines), packages, minimum) == expected
