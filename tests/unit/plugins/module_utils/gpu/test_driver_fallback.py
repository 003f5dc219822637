"""Tables for plugins/module_utils/_gpu/_driver_fallback.py: after a staged driver install failed on
the stopped node, vLLM starts again on the old driver only when the node shows it untouched.

The invariant under every row: `restart` is true only when dpkg shows the driver's packages as
before the stop, none half-way, and the userland answers with the kernel module's version.
"""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu import _driver_fallback as df

OLD = "580.82.07"
STAGED = ("nvidia-driver-580-server-open",)
# dpkg-query -W -f DPKG_FORMAT on a node serving on the old driver, with one unrelated package.
BEFORE = ("ii \tnvidia-driver-580-server-open\t580.82.07-0ubuntu1\n"
          "ii \tlibnvidia-compute-580-server:amd64\t580.82.07-0ubuntu1\n"
          "ii \tlibnvidia-compute-580-server:i386\t580.82.07-0ubuntu1\n"
          "ii \tcuda-keyring\t1.1-1\n"
          "ii \tlibc6:amd64\t2.39-0ubuntu8.3\n")
LOADED = {"version": OLD, "source": "/proc/driver/nvidia/version", "installed_version": OLD}
LOCK = ("'/usr/bin/apt-get -y install nvidia-driver-580-server-open' failed: E: Could not get lock "
        "/var/lib/dpkg/lock-frontend. It is held by process 2412 (unattended-upgr)\nN: Be aware ...")


def decide(**kw: t.Any) -> dict[str, t.Any]:
    args: dict[str, t.Any] = dict(host="gpu07", failure=LOCK, marker="/var/lib/gpuserve/reboot-pending",
                                  packages=STAGED, dpkg_before=BEFORE, dpkg_after=BEFORE, kernel_module=LOADED,
                                  userland_rc=0, userland_out=f"{OLD}\n{OLD}\n", userland_err="")
    args.update(kw)
    return df.decide(**args)


@pytest.mark.parametrize("kw, why", [
    # apt never got to dpkg (its lock held, a .deb gone, a fetch that failed): the old driver serves
    ({}, None),
    # an unrelated package changed meanwhile (unattended-upgrades held the lock for it): still safe
    ({"dpkg_after": BEFORE.replace("2.39-0ubuntu8.3", "2.39-0ubuntu8.4")}, None),
    # the double's node: no /proc (a container), the module on disk, nvidia-smi answers
    ({"kernel_module": {"version": OLD, "source": "modinfo nvidia"}}, None),
    # dpkg unpacked the new userland, or installed it: not what the loaded module serves with
    ({"dpkg_after": BEFORE.replace("ii \tnvidia-driver-580-server-open\t580.82.07-0ubuntu1",
                                   "iU \tnvidia-driver-580-server-open\t580.95.05-0ubuntu1")},
     "dpkg changed driver packages since the stop: nvidia-driver-580-server-open ii 580.82.07-0ubuntu1 -> "
     "iU 580.95.05-0ubuntu1; driver packages are left half-way: nvidia-driver-580-server-open (unpacked, iU)"),
    ({"dpkg_after": BEFORE.replace("libnvidia-compute-580-server:i386\t580.82.07",
                                   "libnvidia-compute-580-server:i386\t580.95.05")},
     "dpkg changed driver packages since the stop: libnvidia-compute-580-server:i386 ii 580.82.07-0ubuntu1 -> "
     "ii 580.95.05-0ubuntu1"),
    # a staged package that was not there before, now installed (another name than the old driver's)
    ({"packages": ["gpuserve-test-double-open"], "dpkg_after": BEFORE + "ii \tgpuserve-test-double-open\t1\n"},
     "dpkg changed driver packages since the stop: gpuserve-test-double-open absent -> ii 1"),
    # half-way before the stop already (a broken earlier install): not a driver to start on
    ({"dpkg_before": BEFORE.replace("ii \tcuda-keyring", "iF \tcuda-keyring"),
      "dpkg_after": BEFORE.replace("ii \tcuda-keyring", "iF \tcuda-keyring")},
     "driver packages are left half-way: cuda-keyring (half-configured, iF)"),
    ({"dpkg_after": BEFORE.replace("ii \tcuda-keyring", "iiR\tcuda-keyring"),
      "dpkg_before": BEFORE.replace("ii \tcuda-keyring", "iiR\tcuda-keyring")},
     "driver packages are left half-way: cuda-keyring (reinstall required, iiR)"),
    # unread is not unchanged
    ({"dpkg_after": None}, "dpkg-query could not list the packages after the failure"),
    ({"dpkg_before": None}, "the driver's packages were not read before the stop"),
    # the userland does not answer for the loaded module, or answers another version
    ({"userland_rc": 18, "userland_out": "", "userland_err": "Failed to initialize NVML: Driver/library version mismatch\n"},
     "nvidia-smi (the driver's userland) fails (rc 18: Failed to initialize NVML: Driver/library version mismatch)"),
    ({"userland_out": "580.95.05\n"},
     "the userland (nvidia-smi) reports driver 580.95.05, the kernel module (/proc/driver/nvidia/version) 580.82.07"),
    ({"userland_rc": None}, "nvidia-smi was not run"),
    ({"userland_out": "\n"}, "nvidia-smi printed no driver version"),
    ({"kernel_module": {"version": None, "source": None}},
     "no NVIDIA kernel module version could be read (/proc/driver/nvidia/version, modinfo)"),
])
def test_restart_only_on_an_untouched_old_driver(kw: dict[str, t.Any], why: str | None) -> None:
    out = decide(**kw)
    assert out["restart"] is (why is None)
    assert "; ".join(out["reasons"]) == (why or "")
    if why:
        assert "gpu07 stays stopped and out of its routers, not safe to start on the old driver: " + why in out["message"]


def test_the_message_says_how_the_start_went_and_that_the_next_run_tries_again() -> None:
    served = decide(started={"ok": True, "stage": "done"})["message"]
    assert served.startswith("the driver install failed ('/usr/bin/apt-get -y install nvidia-driver-580-server-open' "
                             "failed: E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 2412 "
                             "(unattended-upgr)); gpu07 serves again on the old driver 580.82.07 ")
    assert "every later run takes gpu07 out of its routers, drains it and tries the install again" in served
    assert "set gpu_node_driver_install: false to keep driver 580.82.07" in served
    failed = decide(started={"ok": False, "stage": "start", "msg": "vLLM died: CUDA error\nmore"})["message"]
    assert "; starting gpu07 again on the old driver 580.82.07 failed (start: vLLM died: CUDA error): it stays " \
           "stopped and out of its routers. The reboot request stays" in failed
    assert decide()["message"].endswith("the old driver 580.82.07 is untouched: gpu07 starts again on it")


def test_long_listings_are_counted_not_printed() -> None:
    before = "".join(f"ii \tlibnvidia-x{i}\t1\n" for i in range(8))
    out = decide(dpkg_before=before, dpkg_after=before.replace("\t1\n", "\t2\n"))
    assert out["reasons"][0].endswith("libnvidia-x4 ii 1 -> ii 2 and 3 more")


def test_first_line_cuts_what_it_cannot_print() -> None:
    assert df.first_line("", "\n  \nfirst\nsecond") == "first"
    assert df.first_line("x" * 400) == "x" * 297 + "..."
    assert df.first_line(None) == ""
