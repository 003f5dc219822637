# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""After a staged driver install failed on the stopped node: may vLLM start again on the old driver?

The serve play stops a drained node's server, installs the driver packages gpu_node staged, and
reboots (roles/vllm_server/tasks/steps/reboot.yml). When apt fails between the stop and the
reboot (dpkg's lock held by unattended-upgrades, a staged .deb gone, a repository that does not
answer), the old driver may be untouched: then the node serves again on it rather than staying
stopped and out of its routers until someone looks. That is decided from what is read after the
failure, never assumed from where apt failed:

- dpkg: every driver package (a name with nvidia or cuda in it, or one of the staged ones) shows
  the same status and version as right before the stop, and none is half-way (unpacked,
  half-installed, half-configured, triggers pending, reinstall required);
- the driver: the NVIDIA kernel module's version is known, and nvidia-smi (NVML, the userland)
  answers with that same version (a userland that changed under the loaded module fails with
  "Driver/library version mismatch").

Anything else, or anything that could not be read, keeps the node stopped, saying why.
Stdlib only, Python 3.9+, no Ansible imports: a filter plugin runs this on the controller.
"""

from __future__ import annotations

import re
import typing as t

# Packages whose change can touch the driver the server loads (NVIDIA's and distributions' names).
DRIVER_PACKAGE = re.compile(r"nvidia|cuda", re.IGNORECASE)
# dpkg's current-state letters (the second of db:Status-Abbrev) of a package left half-way.
HALF_WAY = {"H": "half-installed", "U": "unpacked", "F": "half-configured", "W": "triggers awaited",
            "t": "triggers pending"}
# Where dpkg-query's listing comes from (its format, so that the role and the tests agree).
DPKG_FORMAT = "${db:Status-Abbrev}\\t${binary:Package}\\t${Version}\\n"
SHOWN = 5  # rows named in a message, the rest counted


def first_line(*texts: t.Any, limit: int = 300) -> str:
    """The first non-blank line of the first text that has one, cut to `limit` characters."""
    for text in texts:
        for row in str(text or "").splitlines():
            if row.strip():
                row = row.strip()
                return row if len(row) <= limit else row[:limit - 3] + "..."
    return ""


def dpkg_rows(text: str, packages: t.Sequence[str]) -> dict[str, tuple[str, str]]:
    """dpkg-query's listing (DPKG_FORMAT) -> {package: (status, version)} of the driver's packages."""
    staged = {name.split(":")[0] for name in packages}
    rows: dict[str, tuple[str, str]] = {}
    for row in (text or "").splitlines():
        parts = row.split("\t")
        if len(parts) != 3:
            continue
        status, name, version = parts
        if name.split(":")[0] in staged or DRIVER_PACKAGE.search(name):
            rows[name] = (status.rstrip(), version)
    return rows


def _half_way(status: str) -> str:
    if len(status) > 2 and status[2] == "R":
        return "reinstall required"
    return HALF_WAY.get(status[1:2], "")


def _shown(items: list[str]) -> str:
    more = len(items) - SHOWN
    return ", ".join(items[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def _row(row: tuple[str, str] | None) -> str:
    return "absent" if row is None else f"{row[0]} {row[1]}"


def unsafe_reasons(*, packages: t.Sequence[str], dpkg_before: str | None, dpkg_after: str | None,
                   kernel_module: t.Mapping[str, t.Any], userland_rc: int | None,
                   userland_out: str, userland_err: str) -> tuple[list[str], str | None]:
    """(why vLLM must not start on the old driver -- empty when it may --, the old driver's version)."""
    reasons: list[str] = []
    if dpkg_before is None:
        reasons.append("the driver's packages were not read before the stop")
    if dpkg_after is None:
        reasons.append("dpkg-query could not list the packages after the failure")
    if dpkg_before is not None and dpkg_after is not None:
        before, after = dpkg_rows(dpkg_before, packages), dpkg_rows(dpkg_after, packages)
        changed = [f"{name} {_row(before.get(name))} -> {_row(after.get(name))}"
                   for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]
        if changed:
            reasons.append("dpkg changed driver packages since the stop: " + _shown(changed))
        half = [f"{name} ({_half_way(status)}, {status})" for name, (status, _version) in sorted(after.items())
                if _half_way(status)]
        if half:
            reasons.append("driver packages are left half-way: " + _shown(half))
    kernel = str(kernel_module.get("version") or "")
    source = str(kernel_module.get("source") or "")
    if not kernel:
        reasons.append("no NVIDIA kernel module version could be read (/proc/driver/nvidia/version, modinfo)")
    userland = ""
    if userland_rc is None:
        reasons.append("nvidia-smi was not run")
    elif userland_rc != 0:
        reasons.append(f"nvidia-smi (the driver's userland) fails (rc {userland_rc}: "
                       f"{first_line(userland_err, userland_out) or 'no output'})")
    else:
        userland = first_line(userland_out)
        if not userland:
            reasons.append("nvidia-smi printed no driver version")
        elif kernel and userland != kernel:
            reasons.append(f"the userland (nvidia-smi) reports driver {userland}, the kernel module ({source}) {kernel}")
    return reasons, (kernel or None)


def decide(*, host: str, failure: str, marker: str, packages: t.Sequence[str], dpkg_before: str | None,
           dpkg_after: str | None, kernel_module: t.Mapping[str, t.Any], userland_rc: int | None,
           userland_out: str = "", userland_err: str = "",
           started: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
    """restart (start the server again on the old driver), driver (its version), reasons (why not) and
    the message the failed step ends with; `started` (the start's outcome: ok, stage, msg) once it ran."""
    reasons, driver = unsafe_reasons(packages=packages, dpkg_before=dpkg_before, dpkg_after=dpkg_after,
                                     kernel_module=kernel_module, userland_rc=userland_rc,
                                     userland_out=userland_out, userland_err=userland_err)
    head = f"the driver install failed ({first_line(failure) or 'no message'})"
    retry = (f"The reboot request stays ({marker}): every later run takes {host} out of its routers, drains it "
             "and tries the install again until it succeeds. Clear the cause (another apt or dpkg holding its "
             "lock, such as unattended-upgrades; a package its repository no longer offers), or remove "
             f"{marker} and set gpu_node_driver_install: false to keep driver {driver or 'the old driver'}.")
    if reasons:
        message = (f"{head}; {host} stays stopped and out of its routers, not safe to start on the old driver: "
                   + "; ".join(reasons) + ". Repair its packages (dpkg --audit, apt-get --fix-broken install) "
                   "and reboot it, then run site.yml again.")
    elif started is None:
        message = f"{head}; the old driver {driver} is untouched: {host} starts again on it"
    elif started.get("ok"):
        message = (f"{head}; {host} serves again on the old driver {driver} (dpkg shows its driver packages as "
                   f"before the stop, its userland answers for kernel module {driver}). {retry}")
    else:
        message = (f"{head}; starting {host} again on the old driver {driver} failed ({started.get('stage', '?')}: "
                   f"{first_line(started.get('msg')) or 'no message'}): it stays stopped and out of its routers. "
                   f"{retry}")
    return {"restart": not reasons, "driver": driver, "reasons": reasons, "message": message}
