"""Build TEST DOUBLE vLLM wheels: the real release's Python files, the fleet-node double as `vllm`.

    python3 tests/support/double_vllm_wheel.py OUTDIR 0.17.0 0.18.0 0.18.0.post1=crash-at-start ...

Each wheel is made from the real vLLM wheel of that release in $GPUSERVE_WHEEL_CACHE (the
`.post<N>` variants from the release before it): every `.py`, `.json`, template and data file
of the `vllm` package as the release ships it (so site.yml's real eagle3_patches inspects and
patches the real source), without the compiled libraries (no GPU here, and 400 MB a wheel),
plus the package `gpuserve_test_double` (tests/doubles/fake_vllm_server.py and
fake_vllm_fleet_node.py) and a `vllm` console script that runs it. Installed by the real
ml_env / vllm_install roles with --no-deps, such an env's bin/vllm is the double under the
env's own interpreter, named by its real path in the shebang, exactly as uv writes real envs.

MODE (after `=`) is baked into the entry point: ok (default), crash-at-start (every start dies
with a vLLM-style traceback: a canary that fails), crash-unless-canary (a start without
`--load-format dummy` dies: the canary passes, the real start fails). A wheel is rebuilt only
when missing or when the doubles it carries changed. Prints the wheels' paths. Tests only.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOUBLES = HERE.parent / "doubles"
MODES = ("ok", "crash-at-start", "crash-unless-canary")
DOUBLE_FILES = ("fake_vllm_server.py", "fake_vllm_fleet_node.py")
KEEP = re.compile(r"\.(py|pyi|json|jinja|txt|typed|md|js|css)$")

ENTRY = '''"""TEST DOUBLE `vllm` console script (tests/support/double_vllm_wheel.py): not vLLM."""
import os
import sys

MODE = {mode!r}


def main():
    argv = sys.argv[1:]
    canary = "--load-format" in argv and argv[argv.index("--load-format") + 1:][:1] == ["dummy"]
    if MODE == "crash-at-start" or (MODE == "crash-unless-canary" and not canary):
        os.environ["FAKE_VLLM_MODE"] = "crash-at-start"
    from gpuserve_test_double import fake_vllm_fleet_node
    return fake_vllm_fleet_node.main(argv)
'''


def record_row(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def source_wheel(cache: Path, version: str) -> Path:
    release = re.sub(r"\.post\d+$", "", version)
    found = sorted(cache.glob(f"vllm-{release}-*.whl"))
    if not found:
        raise SystemExit(f"double_vllm_wheel: no vllm-{release} wheel in {cache} "
                         f"(python3 tests/support/vllm_wheels.py {release})")
    return found[0]


def _holds(wheel: Path, members: dict[str, bytes]) -> bool:
    """Whether a wheel built earlier carries these doubles and entry point as they are now (else it is rebuilt)."""
    try:
        with zipfile.ZipFile(wheel) as zin:
            return all(zin.read(name) == data for name, data in members.items())
    except (KeyError, OSError, zipfile.BadZipFile):
        return False


def build(out: Path, cache: Path, version: str, mode: str) -> Path:
    if mode not in MODES:
        raise SystemExit(f"double_vllm_wheel: mode {mode!r} is not one of {', '.join(MODES)}")
    src = source_wheel(cache, version)
    release = re.sub(r"\.post\d+$", "", version)
    target = out / f"vllm-{version}-py3-none-any.whl"
    doubles = {f"gpuserve_test_double/{name}": (DOUBLES / name).read_bytes() for name in DOUBLE_FILES}
    doubles["gpuserve_test_double/entry.py"] = ENTRY.format(mode=mode).encode()
    if target.exists() and _holds(target, doubles):
        return target
    dist_old, dist_new = f"vllm-{release}.dist-info/", f"vllm-{version}.dist-info/"
    records: list[list[str]] = []
    fd, tmp = tempfile.mkstemp(dir=out, suffix=".whl.tmp")
    os.close(fd)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
        def put(name: str, data: bytes) -> None:
            zout.writestr(name, data)
            records.append(record_row(name, data))

        for info in zin.infolist():
            name = info.filename
            if name.startswith(dist_old):
                continue
            if name.startswith("vllm/") and KEEP.search(name):
                put(name, zin.read(info))
        meta = zin.read(dist_old + "METADATA").decode()
        meta = re.sub(r"(?m)^Version: .*$", f"Version: {version}", meta, count=1)
        meta = re.sub(r"(?m)^Requires-Dist: .*\n", "", meta)  # installed --no-deps anyway
        put(dist_new + "METADATA", meta.encode())
        put(dist_new + "WHEEL", b"Wheel-Version: 1.0\nGenerator: gpuserve-test-double\n"
                                b"Root-Is-Purelib: true\nTag: py3-none-any\n")
        put(dist_new + "entry_points.txt",
            b"[console_scripts]\nvllm = gpuserve_test_double.entry:main\n")
        put(dist_new + "top_level.txt", b"gpuserve_test_double\nvllm\n")
        put("gpuserve_test_double/__init__.py", b'"""TEST DOUBLE of vLLM\'s server (not vLLM)."""\n')
        for name, data in doubles.items():
            put(name, data)
        records.append([f"{dist_new}RECORD", "", ""])
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(records)  # names hold commas (E=1,N=14336,...)
        zout.writestr(dist_new + "RECORD", text.getvalue())
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return target


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(os.environ.get("GPUSERVE_WHEEL_CACHE", Path.home() / ".cache/gpuserve/wheels"))
    for spec in argv[1:]:
        version, _sep, mode = spec.partition("=")
        print(build(out, cache, version, mode or "ok"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
