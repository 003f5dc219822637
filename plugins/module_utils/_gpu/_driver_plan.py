# Copyright: contributors to gpuserve.vllm
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What gpu_node does about the NVIDIA driver on one node, decided from what the node shows.

A driver's userland must never change under a running server (every later CUDA call of that
process, and every restart before a reboot, fails with "Driver/library version mismatch"), and a
node that serves can only reboot drained. So the packages are installed now only where nothing
runs; where the server runs (or nobody could tell), they are only downloaded ("staged") and the
serve play installs them on the stopped, drained node right before its reboot.

The reboot need is observed, not remembered: a kernel module on disk (``modinfo``) that is not the
one the driver reports (``/proc/driver/nvidia/version``, else nvidia-smi) is a reboot to come,
whatever run installed it.
"""

from __future__ import annotations

import re
import typing as t

SERVING_STATES = ("active", "inactive", "unknown")
INSTALL_NOW, INSTALL_STAGE, INSTALL_HELD, INSTALL_NO = "now", "stage", "held", "no"
REBOOT_NOW, REBOOT_SERVE_PLAY, REBOOT_OPERATOR, REBOOT_NO = "now", "serve_play", "operator", "no"
# How the preflight judges the node: the driver it runs ("now"), or -- its new driver not loaded
# and no reboot in this run -- only what it will boot into ("deferred").
CHECKS_NOW, CHECKS_DEFERRED = "now", "deferred"


class DriverPlanError(ValueError):
    """The inputs are not what the role reads from the node."""


def _reboot_where(idle: bool, allowed: bool, marker: bool) -> str:
    if not allowed:
        return REBOOT_OPERATOR
    if idle:
        return REBOOT_NOW
    return REBOOT_SERVE_PLAY if marker else REBOOT_OPERATOR


def plan(*, install_wanted: bool, packages_change: bool, loaded: str | None, installed: str | None,
         serving: str, reboot_allowed: bool, marker: bool, packages: t.Sequence[str] = ()) -> dict[str, t.Any]:
    """install, reboot, checks, pending (a reboot into another driver is due) and the message.

    ``serving``: the server unit's state, ``unknown`` when it could not be read (treated as
    serving: unknown is not idle). ``marker``: a later serve play reboots drained (site.yml).
    """
    if serving not in SERVING_STATES:
        raise DriverPlanError("serving must be one of %s, got %r" % (", ".join(SERVING_STATES), serving))
    idle = serving == "inactive"
    mismatch = bool(installed) and installed != loaded
    install = INSTALL_NO
    if install_wanted and packages_change:
        install = INSTALL_NOW if idle else INSTALL_STAGE
    reboot = _reboot_where(idle, reboot_allowed, marker) if mismatch or install != INSTALL_NO else REBOOT_NO
    # Staged packages are installed only by the serve play's drained reboot; with no such play
    # (the role alone, or reboots not allowed) they are held and the node keeps its driver.
    if install == INSTALL_STAGE and reboot == REBOOT_OPERATOR:
        install = INSTALL_HELD
        reboot = REBOOT_OPERATOR if mismatch else REBOOT_NO
    # A new kernel module on disk that this run does not boot into: only it can be judged.
    on_disk = install == INSTALL_NOW or mismatch
    checks = CHECKS_DEFERRED if on_disk and reboot != REBOOT_NOW else CHECKS_NOW
    pending = reboot in (REBOOT_SERVE_PLAY, REBOOT_OPERATOR) or install == INSTALL_HELD
    return {"install": install, "reboot": reboot, "checks": checks, "pending": pending,
            "message": _message(install, reboot, mismatch, loaded, installed, serving, packages)}


def _message(install: str, reboot: str, mismatch: bool, loaded: str | None, installed: str | None,
             serving: str, packages: t.Sequence[str]) -> str:
    names = " ".join(packages) or "the driver packages"
    who = {"active": "the server runs", "unknown": "the server's state could not be read (taken as running)",
           "inactive": "nothing serves"}[serving]
    now = "driver %s loaded" % loaded if loaded else "no NVIDIA driver loaded"
    if install == INSTALL_NO and reboot == REBOOT_NO:
        return "NVIDIA driver up to date (%s)" % now
    parts: list[str] = []
    if install == INSTALL_NOW:
        parts.append("installing %s now (%s)" % (names, who))
    elif install == INSTALL_STAGE:
        parts.append("%s: %s downloaded only (staged); the serve play installs them on the stopped server, out "
                     "of its routers and drained, right before its reboot" % (who, names))
    elif install == INSTALL_HELD:
        parts.append("%s change, but %s: held, nothing installed (the userland never changes under a running "
                     "server); set gpu_node_reboot_allowed: true and run site.yml (it installs them on the drained "
                     "node and reboots it), or stop the server and run again" % (names, who))
    if mismatch:
        parts.append("kernel module %s is installed, %s: a reboot is due" % (installed, now))
    parts.append("" if install == INSTALL_STAGE else {
        REBOOT_NOW: "rebooting now (nothing to drain), the checks then judge the new driver",
        REBOOT_SERVE_PLAY: "the serve play reboots it, out of its routers and drained",
        REBOOT_OPERATOR: ("reboot it in a maintenance window, or set gpu_node_reboot_allowed: true (site.yml then "
                          "reboots a serving node drained)"),
        REBOOT_NO: "",
    }[reboot])
    return "; ".join(part for part in parts if part)


def serving_from(active_state: str) -> str:
    """systemd's ActiveState of the server's unit as plan()'s ``serving`` ("" = not read)."""
    state = (active_state or "").strip()
    if not state:
        return "unknown"
    return "inactive" if state in ("inactive", "failed") else "active"


# apt's simulate lines (what ansible.builtin.apt's check mode prints): "Inst <name> [<installed>]
# (<candidate> <release> [<arch>])", the bracket only for an upgrade.
_APT_INST = re.compile(r"^Inst (\S+) (?:\[(\S+)\] )?\((\S+) ")


def next_driver_problems(apt_check_stdout: str, packages: t.Sequence[str], min_branch: int | None) -> list[str]:
    """The driver packages apt would install (its check of ``packages``) that are below the
    minimum branch: judged before anything is installed or staged, so a serving node is never
    drained and rebooted into a driver its GPUs cannot use. A version without a numeric branch
    is named too (unknown is not "new enough")."""
    if min_branch is None:
        return []
    planned = {m.group(1).split(":")[0]: m.group(3)
               for m in (_APT_INST.match(line) for line in (apt_check_stdout or "").splitlines()) if m}
    problems = []
    for name in packages:
        version = planned.get(name)
        if version is None:
            continue  # not changed by this run
        upstream = version.split(":", 1)[-1]
        head = upstream.split(".", 1)[0]
        if not head.isdigit():
            problems.append("%s %s: no driver branch in its version (expected <branch>.<minor>...)" % (name, version))
        elif int(head) < min_branch:
            problems.append("%s %s is branch %s, below the required branch %d" % (name, version, head, min_branch))
    return problems
