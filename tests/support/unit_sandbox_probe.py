"""What a process of the hardened vLLM unit may do, run inside it on a test node (molecule).

    systemd-run --wait --pipe <the canary's properties> python3 -I unit_sandbox_probe.py PATH...

Prints JSON: the privileges the kernel reports (NoNewPrivs, effective capabilities), for every
PATH whether a new file can be written there, whether 32 MiB fit into /dev/shm and its device
number (NCCL's shm transport needs every rank on the same, large /dev/shm), which socket families
can be opened, and the cache variables the unit's environment file set.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys

FAMILIES = ("AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK", "AF_PACKET")
CACHE_VARIABLES = ("XDG_CACHE_HOME", "VLLM_CACHE_ROOT", "HF_HOME", "TRITON_CACHE_DIR",
                   "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "FLASHINFER_WORKSPACE_BASE",
                   "PYTHONPYCACHEPREFIX")


def _error(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc))


def can_write(folder: str) -> str:
    path = os.path.join(folder, ".gpuserve-sandbox-probe-%d" % os.getpid())
    try:
        with open(path, "x", encoding="utf-8") as handle:
            handle.write("probe\n")
    except OSError as exc:
        return _error(exc)
    os.unlink(path)
    return "ok"


def shm() -> dict:
    path = "/dev/shm/gpuserve-sandbox-probe-%d" % os.getpid()
    try:
        with open(path, "wb") as handle:
            handle.write(b"\0" * (32 << 20))
            handle.flush()
            os.fsync(handle.fileno())
        written = "ok"
    except OSError as exc:
        written = _error(exc)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return {"write_32MiB": written, "st_dev": os.stat("/dev/shm").st_dev}


def families() -> dict:
    found = {}
    for name in FAMILIES:
        kind = socket.SOCK_RAW if name in ("AF_NETLINK", "AF_PACKET") else socket.SOCK_STREAM
        try:
            socket.socket(getattr(socket, name), kind).close()
            found[name] = "ok"
        except OSError as exc:
            found[name] = _error(exc)
    return found


def status() -> dict:
    with open("/proc/self/status", encoding="utf-8") as handle:
        fields = dict(line.rstrip("\n").split(":\t", 1) for line in handle if ":\t" in line)
    return {"uid": os.getuid(), "NoNewPrivs": fields.get("NoNewPrivs"), "CapEff": fields.get("CapEff")}


def main() -> None:
    print(json.dumps({"status": status(), "write": {p: can_write(p) for p in sys.argv[1:]},
                      "shm": shm(), "families": families(),
                      "environment": {k: os.environ.get(k, "") for k in CACHE_VARIABLES}},
                     sort_keys=True))


if __name__ == "__main__":
    main()
