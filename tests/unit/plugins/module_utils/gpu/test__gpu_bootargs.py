"""What the kernel arguments still need (_gpu/_bootargs.py): update-grub, a reboot, nothing, or a person.

The /proc/stat text is this machine's (Linux, read by the test, so its btime is real); the `find
-printf '%T@ %p\\n'` lines are GNU find's format (tests/unit/plugins/module_utils/vllm's router
tables record it); /proc/cmdline lines are as the kernel prints them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _bootargs

BOOT = 1796461926.0
ARGS = ["iommu=pt", "pci=noacs"]
WITH = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-37-amd64 root=UUID=ffa49137 ro quiet iommu=pt pci=noacs"
WITHOUT = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-37-amd64 root=UUID=ffa49137 ro quiet"


@pytest.mark.parametrize(("cmdline", "dropin", "grub", "update", "reboot", "says"), [
    # First run: the drop-in is new, grub.cfg is older (or there is none).
    (WITHOUT, BOOT + 100, BOOT + 50, True, True, "update-grub: the drop-in changed after grub.cfg"),
    (WITHOUT, BOOT + 100, None, True, True, "grub.cfg does not exist"),
    # A run killed after writing the drop-in: the same, found again by the next run.
    (WITH, BOOT + 100, BOOT + 50, True, False, "update-grub"),
    # A run killed after update-grub, before the reboot: the reboot is still owed.
    (WITHOUT, BOOT + 100, BOOT + 150, False, True, "a reboot for iommu=pt pci=noacs"),
    (WITHOUT.replace("quiet", "quiet iommu=pt"), BOOT + 100, BOOT + 150, False, True, "a reboot for pci=noacs"),
    # Rebooted into it: nothing, every run.
    (WITH, BOOT - 100, BOOT - 50, False, False, "the running kernel has iommu=pt pci=noacs"),
    # Booted after grub.cfg got them and still without: not GRUB's default entry. Never a reboot loop.
    (WITHOUT, BOOT - 100, BOOT - 50, False, False, "does not boot from /boot/grub/grub.cfg"),
    # Arguments after '--' go to init, not the kernel.
    (WITHOUT + " -- iommu=pt pci=noacs", BOOT - 100, BOOT - 50, False, False, "does not boot from"),
])
def test_plan(cmdline: str, dropin: float, grub: float | None, update: bool, reboot: bool, says: str) -> None:
    plan = _bootargs.plan(ARGS, cmdline, dropin, grub, BOOT)
    assert (plan["update_grub"], plan["reboot"]) == (update, reboot), plan
    assert says in plan["msg"], plan


def test_an_unknown_boot_time_is_no_reason_to_reboot() -> None:
    plan = _bootargs.plan(ARGS, WITHOUT, BOOT + 100, BOOT + 150, None)
    assert not plan["reboot"] and "not rebooting" in plan["msg"]


def test_from_what_the_node_shows() -> None:
    proc_stat = Path("/proc/stat").read_text()
    booted = _bootargs.boot_time(proc_stat)
    assert booted is not None and booted > 1.0e9
    files = (f"{booted + 100:.10f} /etc/default/grub.d/90-gpuserve-vllm.cfg\n"
             f"{booted + 150:.10f} /boot/grub/grub.cfg\n")
    plan = _bootargs.plan_from(ARGS, WITHOUT, files, "/etc/default/grub.d/90-gpuserve-vllm.cfg", "/boot/grub/grub.cfg",
                               proc_stat)
    assert (plan["update_grub"], plan["reboot"]) == (False, True)
    # find printed only the drop-in (grub.cfg not there yet: its rc 1, the role's task accepts it)
    plan = _bootargs.plan_from(ARGS, WITHOUT, files.splitlines()[0], "/etc/default/grub.d/90-gpuserve-vllm.cfg",
                               "/boot/grub/grub.cfg", proc_stat)
    assert plan["update_grub"] and "grub.cfg does not exist" in plan["msg"]
    assert _bootargs.boot_time("cpu  1 2 3\nintr 5\n") is None
