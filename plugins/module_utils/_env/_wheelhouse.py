# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The wheelhouse of an air-gapped fleet: every wheel its nodes and routers install, one place.

Why: a node behind strict egress must never need a package index. The wheelhouse is built once
per pin set on a connected host (pip download for the nodes' platform and Python: uv has no
download command), described by SHA256SUMS and a manifest that names, per install set, the files
pip chose, and checked again on the node before anything is installed from it: a missing wheel
is named with its package before the node changes, a changed byte is found before pip reads it.

Pure functions and small file helpers; the pip run itself is the module's. Stdlib only, Python
3.9+, no Ansible imports.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._env._pyenv import normalize_name, path_problem
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._manifest import write_text_atomic

MANIFEST = "gpuserve-wheelhouse.json"
SUMS = "SHA256SUMS"
MANIFEST_FORMAT = 1

# pip's own lines for each file of a `pip download` (unchanged since pip 10): a new file is
# "Saved <path>", one the destination already holds is "File was already downloaded <path>".
_PIP_FILE_LINE = re.compile(r"^\s*(?:Saved|File was already downloaded)\s+(\S.*\.whl)\s*$")
_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")
_REQUIREMENT_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)\s*(?:;.*)?$")
_GLIBC = re.compile(r"^2\.(\d+)$")
_PYTHON = re.compile(r"^3\.(\d+)$")
MACHINES = ("x86_64", "aarch64")


class WheelhouseError(ValueError):
    """Bad input or a wheelhouse that does not hold what it says; the message names what."""


def wheel_name_version(filename: str) -> tuple[str, str]:
    """('vllm', '0.17.0') from 'vllm-0.17.0-cp38-abi3-manylinux_2_31_x86_64.whl' (PEP 427)."""
    match = _WHEEL_NAME.match(os.path.basename(filename))
    if not match:
        raise WheelhouseError(f"{filename!r} is not a wheel file name (name-version-python-abi-platform.whl)")
    return normalize_name(match["name"]), match["version"]


def platform_tags(glibc: str, machine: str) -> list[str]:
    """pip's --platform values for a glibc Linux: every manylinux tag the node's glibc accepts.

    pip does not widen an explicit --platform (manylinux_2_36 does not admit a manylinux_2_17
    wheel), so the list is spelled out, newest first, with the legacy aliases of PEP 599/571/513.
    """
    match = _GLIBC.match(str(glibc))
    if not match:
        raise WheelhouseError(f"glibc must be a version like 2.35, not {glibc!r}")
    if machine not in MACHINES:
        raise WheelhouseError(f"machine must be one of {', '.join(MACHINES)}, not {machine!r}")
    minor = int(match.group(1))
    if minor < 17:
        raise WheelhouseError(f"glibc {glibc} is older than any wheel vLLM's dependencies ship (2.17)")
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for m in range(minor, 4, -1):
        if machine == "aarch64" and m < 17:
            break
        tags.append(f"manylinux_2_{m}_{machine}")
        if m in legacy and (machine == "x86_64" or m == 17):
            tags.append(f"{legacy[m]}_{machine}")
    return tags + [f"linux_{machine}"]


def python_version(value: str) -> str:
    """'3.11' -> '3.11'; a clear error for anything pip's --python-version would misread."""
    if not _PYTHON.match(str(value)):
        raise WheelhouseError(f"python must be a version like 3.11, not {value!r}")
    return str(value)


def download_argv(python: str, dest: str, requirements: t.Sequence[str], *, platforms: t.Sequence[str],
                  python_version_: str, no_deps: bool = False, find_links: t.Sequence[str] = (),
                  index_url: str = "", no_index: bool = False) -> list[str]:
    """The `pip download` of one install set for the nodes' platform (no shell, wheels only)."""
    if not requirements:
        raise WheelhouseError("an install set needs at least one requirement line")
    argv = [python, "-m", "pip", "download", "--disable-pip-version-check", "--dest", dest,
            "--only-binary=:all:", "--implementation", "cp", "--python-version", python_version_]
    for tag in platforms:
        argv += ["--platform", tag]
    argv += [f"--find-links={link}" for link in find_links]
    if index_url:
        argv.append(f"--index-url={index_url}")
    if no_index:
        argv.append("--no-index")
    if no_deps:
        argv.append("--no-deps")
    return argv + list(requirements)


def downloaded_files(pip_output: str) -> list[str]:
    """The wheel files one `pip download` chose, by base name, in pip's order, each once."""
    seen: list[str] = []
    for line in pip_output.splitlines():
        match = _PIP_FILE_LINE.match(line)
        if match:
            name = os.path.basename(match.group(1).strip())
            if name not in seen:
                seen.append(name)
    return seen


def sha256_file(path: str) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def set_key(requirements: t.Sequence[str], no_deps: bool) -> str:
    """An install set's identity: its requirement lines (order-free) and --no-deps."""
    canonical = json.dumps({"requirements": sorted(r.strip() for r in requirements), "no_deps": bool(no_deps)},
                           sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def distinct_sets(items: t.Sequence[t.Mapping[str, t.Any]]) -> list[dict[str, t.Any]]:
    """The distinct install sets of every host's list ({name, requirements, no_deps}), each with
    its key; a fleet mid-upgrade has both releases' sets, and a set many hosts share comes once."""
    merged: dict[str, dict[str, t.Any]] = {}
    for number, item in enumerate(items):
        if not isinstance(item, t.Mapping):
            raise WheelhouseError(f"set {number} is {type(item).__name__} {item!r}, not a mapping")
        name = str(item.get("name") or "")
        raw = item.get("requirements") or []
        if isinstance(raw, str) or not isinstance(raw, t.Sequence):
            raise WheelhouseError(f"set {number} ({name or 'no name'}): requirements must be a list of lines")
        requirements = [str(r).strip() for r in raw if str(r).strip()]
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or not requirements:
            raise WheelhouseError(f"set {number}: needs a name (lower case, e.g. vllm) and requirement "
                                  f"lines, got {dict(item)!r}")
        no_deps = bool(item.get("no_deps", False))
        key = f"{name}-{set_key(requirements, no_deps)}"
        merged.setdefault(key, {"key": key, "name": name, "requirements": requirements, "no_deps": no_deps})
    return [merged[k] for k in sorted(merged)]


# Runs as `<the interpreter envs are built on> -I -c PLATFORM_SCRIPT` on the node: what pip's
# --python-version, --platform and the glibc check of manylinux wheels are about.
PLATFORM_SCRIPT = r"""
import json, platform, sys
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "glibc": platform.libc_ver()[1],
                  "machine": platform.machine()}))
"""


def platform_problem(built_for: t.Mapping[str, str], host: t.Mapping[str, str]) -> str:
    """Why wheels built for one platform would not install on a host ('' when they do): the same
    Python and machine, and a glibc at least the wheelhouse's (manylinux wheels run on newer)."""
    for field in ("python", "machine"):
        if str(built_for.get(field)) != str(host.get(field)):
            return (f"the wheelhouse is for {field} {built_for.get(field)}, this host's interpreter has "
                    f"{host.get(field)}")
    want, have = _GLIBC.match(str(built_for.get("glibc"))), _GLIBC.match(str(host.get("glibc")))
    if not want or not have:
        return f"glibc {host.get('glibc')!r} of this host or {built_for.get('glibc')!r} of the wheelhouse is not 2.N"
    if int(have.group(1)) < int(want.group(1)):
        return f"the wheelhouse is for glibc {built_for['glibc']}, this host has {host['glibc']}"
    return ""


def build_manifest(directory: str, sets: t.Sequence[t.Mapping[str, t.Any]], hashes: t.Mapping[str, str],
                   platform: t.Mapping[str, str]) -> dict[str, t.Any]:
    """The manifest: the platform, every file with its sha256 and size, every set with the files pip chose."""
    files = {}
    for set_ in sets:
        for name in set_["files"]:
            if name not in hashes:
                raise WheelhouseError(f"{directory}: set {set_['key']} names {name}, which has no hash")
    for name in sorted(hashes):
        files[name] = {"sha256": hashes[name], "size": os.path.getsize(os.path.join(directory, name))}
    return {
        "format": MANIFEST_FORMAT,
        "platform": {k: str(platform[k]) for k in ("python", "glibc", "machine")},
        "files": files,
        "sets": {s["key"]: {"name": s["name"], "requirements": list(s["requirements"]),
                            "no_deps": bool(s["no_deps"]), "files": list(s["files"])} for s in sets},
    }


def sums_text(manifest: t.Mapping[str, t.Any]) -> str:
    """SHA256SUMS in sha256sum's format (`sha256sum -c SHA256SUMS` checks it by hand)."""
    return "".join(f"{meta['sha256']}  {name}\n" for name, meta in sorted(manifest["files"].items()))


def parse_sums(text: str, path: str) -> dict[str, str]:
    """file name -> sha256 from a SHA256SUMS; WheelhouseError naming the file and line."""
    sums = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(None, 1)
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-f]{64}", parts[0]):
            raise WheelhouseError(f"{path} line {number}: not '<sha256>  <file>': {line!r}")
        sums[parts[1].strip().lstrip("*")] = parts[0]
    return sums


def load_manifest(directory: str) -> dict[str, t.Any]:
    """The wheelhouse's manifest; WheelhouseError naming the file when absent or malformed."""
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError as exc:
        raise WheelhouseError(f"{path} does not exist: {directory} is not a wheelhouse built by "
                              "gpuserve.vllm.build_wheelhouse") from exc
    except ValueError as exc:
        raise WheelhouseError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or \
            not isinstance(data.get("files"), dict) or not isinstance(data.get("sets"), dict) or \
            not isinstance(data.get("platform"), dict):
        raise WheelhouseError(f"{path}: not a format-{MANIFEST_FORMAT} wheelhouse manifest")
    return data


def missing_requirements(manifest: t.Mapping[str, t.Any], requirements: t.Sequence[str]) -> list[str]:
    """The pinned requirement lines (name==version) no wheel of the wheelhouse provides."""
    have = set()
    for name in manifest["files"]:
        try:
            have.add(wheel_name_version(name))
        except WheelhouseError:
            continue
    missing = []
    for line in requirements:
        match = _REQUIREMENT_PIN.match(line)
        if not match:
            raise WheelhouseError(f"requirement {line!r} is not pinned (name==version): a wheelhouse "
                                  "can only be checked for exact pins")
        if (normalize_name(match.group(1)), match.group(2)) not in have:
            missing.append(line.strip())
    return missing


def hashed_lock(manifest: t.Mapping[str, t.Any], resolved: t.Sequence[t.Mapping[str, str]], directory: str) -> str:
    """The requirements text that installs exactly what an offline resolution chose, each
    `name==version` with the sha256 of every wheel of it the manifest lists (--require-hashes).

    Why: the wheelhouse is checked against SHA256SUMS before the install; with these lines the
    installer checks each file again as it reads it, and takes nothing the builder did not hash.
    """
    hashes: dict[tuple[str, str], list[str]] = {}
    for name, meta in sorted(manifest["files"].items()):
        try:
            hashes.setdefault(wheel_name_version(name), []).append(meta["sha256"])
        except WheelhouseError:
            continue
    lines, unknown = [], []
    for dist in resolved:
        key = (normalize_name(dist["name"]), dist["version"])
        if key not in hashes:
            unknown.append(f"{key[0]}=={key[1]}")
            continue
        lines.append(f"{key[0]}=={key[1]} " + " ".join(f"--hash=sha256:{h}" for h in hashes[key]))
    if unknown:
        raise WheelhouseError(f"the install would take {', '.join(unknown)}, which the manifest of the "
                              f"wheelhouse {directory} does not list (a wheel from another find-links "
                              "folder?): only what the builder hashed is installed")
    return "".join(line + "\n" for line in sorted(lines))


def push_plan(manifest: t.Mapping[str, t.Any], control: t.Mapping[str, str], on_host: t.Mapping[str, str]) -> list[str]:
    """What a push must send: the wheels whose sha256 on the host (`on_host`, file name to
    sha256: python_wheelhouse state=hashed run there) is not the manifest's, then SHA256SUMS and
    the manifest when theirs differ from the controller's (`control`). They go last: a host never
    holds a manifest naming a wheel that has not arrived whole. A file the host lacks has no sum
    and is sent.
    """
    wheels = sorted(n for n, meta in manifest["files"].items() if on_host.get(n) != meta["sha256"])
    return wheels + [n for n in (SUMS, MANIFEST) if on_host.get(n) != control[n]]


def verify(directory: str, manifest: t.Mapping[str, t.Any], sums: t.Mapping[str, str],
           hasher: t.Callable[[str], str] = sha256_file) -> list[str]:
    """Every problem of the wheelhouse on this host: a file missing, of another size or hash, or
    SHA256SUMS disagreeing with the manifest. Empty: every byte is the one the builder saw."""
    problems = []
    files = manifest["files"]
    for name in sorted(set(files) | set(sums)):
        if name not in files or sums.get(name) != files[name]["sha256"]:
            problems.append(f"{name}: {SUMS} and {MANIFEST} disagree")
            continue
        path = os.path.join(directory, name)
        try:
            size = os.path.getsize(path)
        except OSError:
            problems.append(f"{name}: missing")
            continue
        if size != files[name]["size"]:
            problems.append(f"{name}: {size} bytes, the manifest says {files[name]['size']}")
        elif hasher(path) != files[name]["sha256"]:
            problems.append(f"{name}: sha256 differs from {SUMS}")
    return problems


def trust_problems(directory: str, names: t.Iterable[str]) -> list[str]:
    """Who else could change what root installs: the wheelhouse, a folder above it or a file
    another user may write (root never installs what the service user could swap)."""
    problem = path_problem(directory)
    if problem:
        return [problem]
    return [p for p in (path_problem(os.path.join(directory, name)) for name in sorted(names)) if p]


def write(directory: str, manifest: t.Mapping[str, t.Any]) -> None:
    """The manifest, then SHA256SUMS, each atomically: a builder killed between the two leaves
    files that disagree, which verify() reports and the next build replaces."""
    write_text_atomic(os.path.join(directory, MANIFEST), json.dumps(manifest, indent=1, sort_keys=True) + "\n",
                      ".gpuserve-wheelhouse.")
    write_text_atomic(os.path.join(directory, SUMS), sums_text(manifest), ".gpuserve-wheelhouse.")
