# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Whether the kernel arguments gpu_node writes into GRUB's drop-in still need update-grub, a
reboot, or a person, from what the node shows: the drop-in's and grub.cfg's modification times,
the running kernel's /proc/cmdline and when it booted (/proc/stat's btime).

Read on every run, not carried by handlers: a run killed after it wrote the drop-in leaves it
newer than grub.cfg, and the next run runs update-grub; one killed after update-grub, before the
reboot, leaves a grub.cfg newer than the boot with the running kernel lacking the arguments, and
the next run asks for the reboot again. A node that booted after grub.cfg was regenerated and
still lacks them does not boot from that grub.cfg (another boot loader or entry): rebooting again
would change nothing, so it is said, not done.
Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._router_restart import file_times


def boot_time(proc_stat: str) -> float | None:
    """The `btime` line of /proc/stat: when the running kernel booted (Unix time)."""
    for line in (proc_stat or "").splitlines():
        key, _sep, value = line.partition(" ")
        if key == "btime":
            try:
                return float(value.strip())
            except ValueError:
                return None
    return None


def plan(args: t.Sequence[str], cmdline: str, dropin_mtime: float | None, grub_mtime: float | None,
         booted: float | None) -> dict[str, t.Any]:
    """{update_grub, reboot, missing, msg}: what the node needs for the running kernel to have args."""
    running = set((cmdline or "").split("--", 1)[0].split())
    missing = [arg for arg in args if arg not in running]
    stale = dropin_mtime is None or grub_mtime is None or dropin_mtime > grub_mtime
    if stale:
        why = ("grub.cfg does not exist" if grub_mtime is None
               else "the drop-in changed after grub.cfg was last generated")
        return {"update_grub": True, "reboot": bool(missing), "missing": missing,
                "msg": f"update-grub: {why}" + (f"; then a reboot for {' '.join(missing)}" if missing else "")}
    if not missing:
        return {"update_grub": False, "reboot": False, "missing": [],
                "msg": "the running kernel has " + " ".join(args)}
    if booted is None:
        return {"update_grub": False, "reboot": False, "missing": missing,
                "msg": f"the running kernel lacks {' '.join(missing)}; when it booted could not be read "
                       "(/proc/stat has no btime), so whether a reboot would bring them is unknown: not rebooting"}
    if grub_mtime > booted:
        return {"update_grub": False, "reboot": True, "missing": missing,
                "msg": f"a reboot for {' '.join(missing)}: grub.cfg has them since after the running kernel booted"}
    return {"update_grub": False, "reboot": False, "missing": missing,
            "msg": f"the running kernel lacks {' '.join(missing)} although it booted after grub.cfg got them: "
                   "this node does not boot from /boot/grub/grub.cfg's default entry (another boot loader, "
                   "GRUB_DEFAULT, or the arguments removed at the boot prompt). Not rebooting again; "
                   "add them where this node's boot loader reads them."}


def plan_from(args: t.Sequence[str], cmdline: str, files: str, dropin: str, grub_cfg: str, proc_stat: str) -> dict[str, t.Any]:
    """plan() from the reads: `find <dropin> <grub_cfg> -maxdepth 0 -printf '%T@ %p\\n'`, /proc/stat."""
    times = {path: mtime for mtime, path in file_times(files)}
    return plan(args, cmdline, times.get(dropin), times.get(grub_cfg), boot_time(proc_stat))
