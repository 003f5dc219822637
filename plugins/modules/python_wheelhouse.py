#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build a wheelhouse for air-gapped nodes (pip download per install set), or verify one on a node."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: python_wheelhouse
short_description: Build a wheelhouse for air-gapped nodes, or verify it on a node before installing
version_added: 0.2.0
description:
  - O(state=built), on a connected host (the controller or a staging host) - for every install set
    (requirement lines, for example C(uv==0.13.9) or vLLM with its companions), C(pip download)
    of wheels only, for the nodes' platform and Python (O(python_version), O(glibc),
    O(machine)), into O(path); then C(SHA256SUMS) and a manifest (C(gpuserve-wheelhouse.json))
    naming each set's files, both written atomically. A file already there is not fetched again,
    so a new pin set fetches only what differs. Wheels no set needs any more are removed
    (O(prune)). Every new file is opened as a zip, and a download cut short is removed and fetched again.
  - O(state=verified), on the node, before anything is installed from it - the platform of
    O(host_python) must be the wheelhouse's, the wheelhouse's folder,
    the folders above it and its files may be changed by no other user than root (root installs
    from it), each set of O(sets) must be in the manifest (else the pins it lacks are named), and
    each of those sets' files must have the size and sha256 of C(SHA256SUMS). Any wheel in the
    folder that the manifest does not list is refused too (pip would see it). Nothing is changed
    but the folder's hash record (see RV(hashed)).
  - O(state=hashed), on a host, read-only - the sha256 of each of O(files) the folder holds
    (RV(sums)), for the gpuserve.vllm.wheelhouse role to decide what to send; from the hash record
    where it vouches for a file.
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: O(state=built) reports whether the manifest's sets differ, without running pip; no hash record is written.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A rebuild with the same sets fetches nothing and leaves the manifest as it was.
  platform:
    platforms: posix
options:
  path:
    description: The wheelhouse folder (created by O(state=built)).
    type: path
    required: true
  state:
    description: V(built) downloads and describes; V(verified) checks on the node; V(hashed) reads hashes.
    type: str
    choices: [built, verified, hashed]
    default: verified
  files:
    description: O(state=hashed) - the file names (in O(path)) to hash; a file the folder lacks is left out of RV(sums).
    type: list
    elements: str
    default: []
  sets:
    description:
      - The install sets. Each is C(name) (what installs it, for example V(uv), V(ml_env), V(vllm)),
        C(requirements) (pinned requirement lines) and C(no_deps) (the set is installed with
        C(--no-deps); only the listed wheels are fetched).
      - Two sets with the same name and different lines are two sets (a fleet mid-upgrade).
      - Required with O(state=built) and O(state=verified).
    type: list
    elements: dict
  python:
    description: O(state=built) - the interpreter whose pip downloads (default - the one running this module).
    type: path
  host_python:
    description:
      - O(state=verified) - the interpreter this host builds its envs on (gpuserve.vllm.ml_env's
        C(ml_env_python)); its Python, machine and glibc must be those the wheelhouse was built for
        (a newer glibc is fine).
    type: path
    default: /usr/bin/python3
  python_version:
    description: O(state=built) - the nodes' Python (C(major.minor)), for wheel tags and Requires-Python.
    type: str
    default: "3.11"
  glibc:
    description: O(state=built) - the nodes' glibc (C(ldd --version)); every manylinux tag it accepts is asked for.
    type: str
    default: "2.36"
  machine:
    description: O(state=built) - the nodes' CPU architecture.
    type: str
    choices: [x86_64, aarch64]
    default: x86_64
  find_links:
    description: O(state=built) - more places pip looks (a local wheel cache).
    type: list
    elements: str
    default: []
  index_url:
    description: O(state=built) - the index (a mirror); empty means pip's configuration.
    type: str
    default: ""
  no_index:
    description: O(state=built) - only O(find_links) (a mirror folder), no index.
    type: bool
    default: false
  prune:
    description: O(state=built) - remove wheels no set of this build needs.
    type: bool
    default: true
notes:
  - uv has no download command (astral-sh/uv#3163), hence C(pip download).
  - Installing from the wheelhouse is the roles' part - C(--no-index --find-links) this folder
    (gpuserve.vllm.ml_env's C(ml_env_wheelhouse)).
"""

EXAMPLES = r"""
- name: Build the fleet's wheelhouse on the controller
  gpuserve.vllm.python_wheelhouse:
    path: /srv/gpuserve/wheelhouse
    state: built
    python_version: "3.12"
    glibc: "2.39"
    sets:
      - {name: uv, requirements: ["uv==0.13.9"]}
      - {name: vllm, requirements: ["vllm==0.17.0"]}
  delegate_to: localhost
  run_once: true

- name: Refuse a wheelhouse that lacks this node's pins or holds a changed byte
  gpuserve.vllm.python_wheelhouse:
    path: /var/lib/gpuserve/wheelhouse
    sets:
      - {name: vllm, requirements: ["vllm==0.17.0"]}
"""

RETURN = r"""
path:
  description: The wheelhouse folder.
  returned: always
  type: str
  sample: /srv/gpuserve/wheelhouse
sets:
  description: The distinct install sets, each with its key (name and a digest of its lines) and files.
  returned: always
  type: list
  elements: dict
  sample: [{"key": "uv-1a2b3c4d5e6f", "name": "uv", "requirements": ["uv==0.13.9"], "no_deps": false,
            "files": ["uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"]}]
fetched:
  description: O(state=built) - the files this run downloaded (empty - everything was there).
  returned: always
  type: list
  elements: str
removed:
  description: O(state=built) - the wheels O(prune) removed.
  returned: always
  type: list
  elements: str
files:
  description: How many files the manifest lists.
  returned: always
  type: int
size_bytes:
  description: Their total size.
  returned: always
  type: int
hashed:
  description:
    - O(state=verified) - the files whose bytes were read and hashed this time. A file the
      wheelhouse's root-only record (C(.gpuserve-sha256-record.json)) vouches for - same size,
      modification and status-change times, inode and device as when it was hashed - is not
      read again; empty on a re-run where nothing changed.
  returned: when O(state=verified) or O(state=hashed)
  type: list
  elements: str
sums:
  description: O(state=hashed) - file name to sha256, for each of O(files) the folder holds.
  returned: when O(state=hashed)
  type: dict
  sample: {"SHA256SUMS": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
"""

import json
import os
import sys
import zipfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _hashrecord, _pyenv
from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _wheelhouse as wh


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _is_whole_wheel(path: str) -> bool:
    """A download cut short has no central directory: zipfile cannot open it."""
    try:
        with zipfile.ZipFile(path):
            return True
    except (zipfile.BadZipFile, OSError):
        return False


def _sets(module: AnsibleModule) -> list[dict]:
    try:
        return wh.distinct_sets(module.params["sets"])
    except wh.WheelhouseError as exc:
        module.fail_json(msg=f"python_wheelhouse: sets: {exc}")
        raise  # unreachable; fail_json exits


def _previous(path: str) -> dict | None:
    try:
        return wh.load_manifest(path)
    except wh.WheelhouseError:
        return None


def _download(module: AnsibleModule, set_: dict, platforms: list[str]) -> list[str]:
    """pip download of one set; a wheel cut short is removed and the set fetched once more."""
    p = module.params
    argv = wh.download_argv(p["python"] or sys.executable, p["path"], set_["requirements"],
                            platforms=platforms, python_version_=p["python_version"],
                            no_deps=set_["no_deps"], find_links=p["find_links"], index_url=p["index_url"],
                            no_index=p["no_index"])
    for _attempt in (1, 2):
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"python_wheelhouse: pip download of set {set_['key']} "
                             f"({', '.join(set_['requirements'])}) into {p['path']} failed (rc {rc}): {_tail(err or out)}",
                             cmd=argv, stdout=out, stderr=err)
        files = wh.downloaded_files(out)
        broken = [f for f in files if not _is_whole_wheel(os.path.join(p["path"], f))]
        if not broken:
            return files
        for name in broken:
            os.unlink(os.path.join(p["path"], name))
    module.fail_json(msg=f"python_wheelhouse: set {set_['key']}: {', '.join(broken)} still not a whole wheel "
                     "after a second download", cmd=argv)
    return []


def _platform(params: dict) -> dict:
    return {"python": params["python_version"], "glibc": params["glibc"], "machine": params["machine"]}


def _host_platform(module: AnsibleModule) -> dict:
    """The platform of the interpreter the envs are built on, asked of it (isolated)."""
    python = module.params["host_python"]
    try:
        argv, changes = _pyenv.isolated_call(python, ["-c", wh.PLATFORM_SCRIPT])
    except _pyenv.UntrustedInterpreter as exc:
        module.fail_json(msg=f"python_wheelhouse: host_python: {exc}")
    rc, out, err = module.run_command(argv, environ_update=changes)
    try:
        return json.loads(out)
    except ValueError:
        module.fail_json(msg=f"python_wheelhouse: {python} could not say its platform (rc {rc}): {_tail(err or out)}")
    return {}


def _build(module: AnsibleModule, sets: list[dict]) -> None:
    p = module.params
    try:
        platforms = wh.platform_tags(p["glibc"], p["machine"])
        wh.python_version(p["python_version"])
    except wh.WheelhouseError as exc:
        module.fail_json(msg=f"python_wheelhouse: {exc}")
    previous = _previous(p["path"])
    wanted = {s["key"] for s in sets}
    if module.check_mode:
        changed = previous is None or set(previous["sets"]) != wanted or previous["platform"] != _platform(p)
        module.exit_json(path=p["path"], changed=changed, sets=sets, fetched=[], removed=[],
                         files=len(previous["files"]) if previous else 0,
                         size_bytes=sum(f["size"] for f in previous["files"].values()) if previous else 0)
    os.makedirs(p["path"], mode=0o755, exist_ok=True)
    before = set(os.listdir(p["path"]))
    for set_ in sets:
        set_["files"] = sorted(_download(module, set_, platforms))  # pip's order differs when files are there
    needed = {name for s in sets for name in s["files"]}
    old_hashes = previous["files"] if previous else {}
    hashes = {}
    for name in sorted(needed):
        path = os.path.join(p["path"], name)
        meta = old_hashes.get(name)
        # A file the last build hashed, still there and of its size, is the same download.
        if name in before and meta and os.path.getsize(path) == meta["size"]:
            hashes[name] = meta["sha256"]
        else:
            hashes[name] = wh.sha256_file(path)
    manifest = wh.build_manifest(p["path"], sets, hashes, _platform(p))
    changed = previous != manifest
    if changed:
        wh.write(p["path"], manifest)
    removed = []  # after the manifest: a run killed here leaves a wheel it does not list, refused until the next build
    if p["prune"]:
        for name in sorted(os.listdir(p["path"])):
            if name.endswith(".whl") and name not in needed:
                os.unlink(os.path.join(p["path"], name))
                removed.append(name)
    module.exit_json(path=p["path"], changed=changed or bool(removed), sets=sets, fetched=sorted(needed - before), removed=removed,
                     files=len(manifest["files"]), size_bytes=sum(f["size"] for f in manifest["files"].values()))


def _verify(module: AnsibleModule, sets: list[dict]) -> None:
    path = module.params["path"]
    fail = []
    try:
        manifest = wh.load_manifest(path)
        sums_path = os.path.join(path, wh.SUMS)
        with open(sums_path, encoding="utf-8") as handle:
            sums = wh.parse_sums(handle.read(), sums_path)
    except (wh.WheelhouseError, OSError) as exc:
        module.fail_json(msg=f"python_wheelhouse: {exc}. Nothing was changed on this host; build it with "
                         "gpuserve.vllm.build_wheelhouse and copy it to this path.")
    problem = wh.platform_problem(manifest["platform"], _host_platform(module))
    if problem:
        fail.append(problem)
    for set_ in sets:
        found = manifest["sets"].get(set_["key"])
        if found is None:
            missing = wh.missing_requirements(manifest, set_["requirements"])
            what = f"no wheel of {', '.join(missing)}" if missing else \
                f"no set {set_['name']} with exactly {', '.join(set_['requirements'])}"
            fail.append(f"{what} (set {set_['key']})")
        else:
            set_["files"] = found["files"]
    names = sorted({n for s in sets for n in s.get("files", [])})
    extra = sorted(n for n in os.listdir(path) if n.endswith(".whl") and n not in manifest["files"])
    fail += [f"{n}: a wheel the manifest does not list (pip would see it)" for n in extra]
    fail += wh.trust_problems(path, names)
    sub_manifest = {"files": {n: manifest["files"][n] for n in names}}
    record = _hashrecord.HashRecord(path)
    fail += wh.verify(path, sub_manifest, {n: sums.get(n, "") for n in names}, hasher=record.sha256)
    if not module.check_mode:
        record.save()
    if fail:
        module.fail_json(msg=f"python_wheelhouse: the wheelhouse {path} cannot serve this host: "
                         f"{'; '.join(fail)}. Nothing was changed on this host; rebuild it with "
                         "gpuserve.vllm.build_wheelhouse for this inventory and copy it here.", sets=sets, problems=fail)
    module.exit_json(path=path, changed=False, sets=sets, fetched=[], removed=[], files=len(names),
                     size_bytes=sum(manifest["files"][n]["size"] for n in names), hashed=record.hashed)


def _hashed(module: AnsibleModule) -> None:
    """The sha256 of each named file the folder holds (a regular file, not followed through a link)."""
    path = module.params["path"]
    record = _hashrecord.HashRecord(path)
    sums = {}
    for name in sorted(set(module.params["files"])):
        if os.path.basename(name) != name or name in ("", ".", ".."):
            module.fail_json(msg=f"python_wheelhouse: files: {name!r} is not a file name in {path}")
        full = os.path.join(path, name)
        if os.path.isfile(full) and not os.path.islink(full):
            sums[name] = record.sha256(full)
    if not module.check_mode:
        record.save()
    module.exit_json(path=path, changed=False, sums=sums, hashed=record.hashed)


def main() -> None:
    """Build or verify, per state."""
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["built", "verified", "hashed"], "default": "verified"},
            "sets": {"type": "list", "elements": "dict"},
            "files": {"type": "list", "elements": "str", "default": []},
            "python": {"type": "path"},
            "host_python": {"type": "path", "default": "/usr/bin/python3"},
            "python_version": {"type": "str", "default": "3.11"},
            "glibc": {"type": "str", "default": "2.36"},
            "machine": {"type": "str", "choices": list(wh.MACHINES), "default": "x86_64"},
            "find_links": {"type": "list", "elements": "str", "default": []},
            "index_url": {"type": "str", "default": ""},
            "no_index": {"type": "bool", "default": False},
            "prune": {"type": "bool", "default": True},
        },
        required_if=[("state", "built", ["sets"]), ("state", "verified", ["sets"])],
        supports_check_mode=True,
    )
    if module.params["state"] == "hashed":
        _hashed(module)
    sets = _sets(module)
    if module.params["state"] == "built":
        _build(module, sets)
    else:
        _verify(module, sets)


if __name__ == "__main__":
    main()
