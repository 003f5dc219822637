"""promtool and the prometheus server from Debian's package, fetched once into a cache outside the repo
(and, the same way, Alertmanager and node_exporter from theirs).

Usage: python3 tests/support/promtool.py [prometheus]  -> prints the path of promtool (or of the
prometheus server binary), fetching it first if needed.
Debian's `prometheus` package ships both; only the .deb is downloaded (`apt-get download`, no
install, so no prometheus service is started on the machine) and only `usr/bin/promtool` and
`usr/bin/prometheus` are extracted from it, into $GPUSERVE_CACHE/promtool (default
~/.cache/gpuserve/promtool). Both are static Go binaries: they need none of the package's
dependencies. On a machine without apt-get, set GPUSERVE_PROMTOOL (and GPUSERVE_PROMETHEUS) to the
binaries (2.x or newer).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

PACKAGE = "prometheus"


def cache_dir() -> Path:
    cache = Path(os.environ.get("GPUSERVE_CACHE", Path.home() / ".cache" / "gpuserve"))
    return cache / "promtool"


def _works(binary: Path) -> bool:
    try:
        return subprocess.run([str(binary), "--version"], capture_output=True, timeout=60, check=False).returncode == 0
    except OSError:
        return False


def _download_deb(workdir: Path, package: str = PACKAGE) -> Path:
    """apt-get download of the package into workdir; one `apt-get update` when the lists lack it."""
    if shutil.which("apt-get") is None:
        raise FileNotFoundError(
            f"promtool: this machine has no apt-get to fetch Debian's {package} package from; "
            "set GPUSERVE_PROMTOOL to a promtool binary (Prometheus 2.x or newer)")
    os.chmod(workdir, 0o755)  # apt's _apt user writes there when it can (else it warns, and runs as root)
    download = ["apt-get", "download", "-q", package]
    first = subprocess.run(download, cwd=workdir, capture_output=True, text=True, check=False)
    if first.returncode != 0:
        # A fresh machine's package lists may be empty or stale (the .deb's version gone).
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True, text=True)
        retry = subprocess.run(download, cwd=workdir, capture_output=True, text=True, check=False)
        if retry.returncode != 0:
            raise RuntimeError(f"promtool: `apt-get download {package}` failed after `apt-get update`:\n"
                               f"{first.stderr}{retry.stderr}")
    debs = sorted(workdir.glob(f"{package}_*.deb"))
    if not debs:
        raise FileNotFoundError(f"promtool: `apt-get download {package}` left no .deb in {workdir}")
    return debs[0]


BINARIES = ("promtool", "prometheus")
# The cache holds both binaries once this marker exists (.complete alone: an older cache, promtool only).
COMPLETE = ".complete-promtool-prometheus"


def _binary(name: str, override_var: str, package: str = PACKAGE, binaries: tuple[str, ...] = BINARIES,
            complete: str = COMPLETE) -> Path:
    """Path of a working `name`: $override_var, else the cached one, fetched on first use (`binaries` of `package`)."""
    override = os.environ.get(override_var)
    if override:
        if not _works(Path(override)):
            raise FileNotFoundError(f"{name}: {override_var}={override} does not run (`--version` failed)")
        return Path(override)
    cache = cache_dir()
    binary = cache / name
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:  # parallel test runs fetch it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (cache / complete).exists() and _works(binary):
            return binary
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            work = Path(tmp)
            deb = _download_deb(work, package)
            tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(work)] + [f"./usr/bin/{b}" for b in binaries], input=tar, check=True)
            for each in binaries:
                extracted = work / "usr" / "bin" / each
                if not _works(extracted):
                    raise RuntimeError(f"{each}: the {each} extracted from {deb.name} does not run")
                os.replace(extracted, cache / each)
            (cache / complete).write_text(deb.name + "\n")
        return binary


def promtool() -> Path:
    """Path of a working promtool: $GPUSERVE_PROMTOOL, else the cached one, fetched on first use."""
    return _binary("promtool", "GPUSERVE_PROMTOOL")


def prometheus() -> Path:
    """Path of a working prometheus server: $GPUSERVE_PROMETHEUS, else the cached one (same .deb)."""
    return _binary("prometheus", "GPUSERVE_PROMETHEUS")


def alertmanager() -> Path:
    """Path of a working Alertmanager: $GPUSERVE_ALERTMANAGER, else the cached one (Debian's prometheus-alertmanager)."""
    return _binary("prometheus-alertmanager", "GPUSERVE_ALERTMANAGER", "prometheus-alertmanager",
                   ("prometheus-alertmanager",), ".complete-alertmanager")


def alertmanager_share() -> Path:
    """Debian's /usr/share/prometheus/alertmanager (the templates its Alertmanager opens at that fixed path,
    patched in by Debian), extracted once into the cache; a test mounts it there in a mount namespace of its own."""
    cache = cache_dir()
    share = cache / "alertmanager-share"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (share / "default.tmpl").is_file():
            return share
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            work = Path(tmp)
            deb = _download_deb(work, "prometheus-alertmanager")
            tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(work), "./usr/share/prometheus/alertmanager"], input=tar, check=True)
            os.replace(work / "usr" / "share" / "prometheus" / "alertmanager", share)
        return share


def node_exporter() -> Path:
    """Path of a working node_exporter: $GPUSERVE_NODE_EXPORTER, else the cached one (Debian's prometheus-node-exporter)."""
    return _binary("prometheus-node-exporter", "GPUSERVE_NODE_EXPORTER", "prometheus-node-exporter",
                   ("prometheus-node-exporter",), ".complete-node-exporter")


if __name__ == "__main__":
    import sys

    print(prometheus() if sys.argv[1:] == ["prometheus"] else promtool())
