#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify a staged checkpoint against its manifest (hashes once, stat on re-runs), and its disk space."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_weights_verify
short_description: Verify a checkpoint copy against its manifest, and whether what is missing fits
version_added: 0.2.0
description:
  - Judges the copy of one checkpoint revision on this host, in the layout of
    gpuserve.vllm.vllm_weights_sync - C(<store_dir>/<name>/<commit>) (published),
    C(<commit>.partial) (being staged), or a directory an earlier per-node download left at
    C(<root>/<name>).
  - Every file of the manifest - present, its size, for C(*.safetensors) the size its header
    gives (a truncated shard is reported in milliseconds), then its hash (sha256 of LFS files,
    git blob id of the others). A file whose hash matched is remembered by its size, mtime, ctime
    and inode in C(<commit>.<path hash>.verified.json) beside the manifest, so a re-run hashes only the
    files whose stat changed. Any write to a file changes its ctime, which no tool can set back;
    O(full=true) hashes everything again (corruption below the filesystem keeps the stat).
  - Compares the bytes still missing with the free space of the filesystem they go to, and fails
    (O(fail_on_space)) with the path, the space needed and the space free, before any transfer.
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reads the verification cache but does not write it.
  diff_mode:
    support: none
    details: The checkpoint is never changed.
  idempotent:
    support: full
    details: C(changed) is always false; only the verification cache (bookkeeping) is written.
  platform:
    platforms: posix
options:
  name:
    description: The checkpoint's directory name (C(<root>/<name>) is the path vLLM is given).
    type: str
    required: true
  root:
    description: Directory of the links vLLM is given.
    type: path
    default: /srv/models
  store_dir:
    description: Where the revisions live; same filesystem as O(root). Default C(<root>/.gpuserve-weights).
    type: path
  manifest:
    description: The manifest file (written by gpuserve.vllm.vllm_weights_manifest).
    type: path
    required: true
  full:
    description: Hash every file, ignoring the verification cache.
    type: bool
    default: false
  reserve_bytes:
    description: Bytes that must stay free on the filesystem after the missing bytes are written.
    type: int
    default: 0
  fail_on_space:
    description: Fail when the missing bytes (plus O(reserve_bytes)) do not fit.
    type: bool
    default: true
  fail_on_problems:
    description: Fail when the copy is not complete and verified (for an operator's check).
    type: bool
    default: false
  workers:
    description: Files hashed at once.
    type: int
    default: 4
seealso:
  - module: gpuserve.vllm.vllm_weights_sync
  - module: gpuserve.vllm.vllm_weights_check
"""

EXAMPLES = r"""
- name: Re-hash every file of the staged Kimi-K2.5 (after a disk error, or monthly)
  gpuserve.vllm.vllm_weights_verify:
    name: Kimi-K2.5
    manifest: /var/lib/gpuserve/weights/3a8a1c4e5f6b7d8e9f0a1b2c3d4e5f6a7b8c9d0e.manifest.json
    full: true
    fail_on_problems: true
"""

RETURN = r"""
holder:
  description: A complete copy verified against the manifest is at C(<store_dir>/<name>/<commit>).
  returned: always
  type: bool
current:
  description: RV(holder), and C(<root>/<name>) is the link to it.
  returned: always
  type: bool
where:
  description: The copy that was judged; empty when this host has none.
  returned: always
  type: str
  sample: /srv/models/.gpuserve-weights/Kimi-K2.5/3a8a1c4e5f6b7d8e9f0a1b2c3d4e5f6a7b8c9d0e
problems:
  description: One sentence per file that is not right.
  returned: always
  type: list
  elements: str
  sample:
    - "/srv/models/.gpuserve-weights/Kimi-K2.5/3a8a...partial/model-00002-of-00064.safetensors: short: 4831838208 of 9663676416 bytes (4831838208 missing)"
verify:
  description: Counts - C(files), C(statuses) (status -> files), C(hashed_files), C(hashed_bytes), C(cached_files).
  returned: always
  type: dict
needed_bytes:
  description: Bytes still to fetch.
  returned: always
  type: int
free_bytes:
  description: Free bytes of the filesystem they go to.
  returned: always
  type: int
space_problem:
  description: Why the missing bytes do not fit; empty when they do.
  returned: always
  type: str
commit:
  description: The manifest's commit.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _layout as wl
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _manifest as wm
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _stage as ws


def main() -> None:
    """Judge the copy, measure the space, report (and fail only when asked to)."""
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "root": {"type": "path", "default": "/srv/models"},
            "store_dir": {"type": "path"},
            "manifest": {"type": "path", "required": True},
            "full": {"type": "bool", "default": False},
            "reserve_bytes": {"type": "int", "default": 0},
            "fail_on_space": {"type": "bool", "default": True},
            "fail_on_problems": {"type": "bool", "default": False},
            "workers": {"type": "int", "default": 4},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        manifest = wm.load(p["manifest"])
        lay = wl.layout(p["root"], p["store_dir"] or f"{p['root']}/.gpuserve-weights", p["name"], manifest.commit)
        state = ws.inspect(lay, manifest, ws.cache_path(p["manifest"], lay), p["full"],
                           p["workers"], save=not module.check_mode)
    except (wm.ManifestError, ws.StageError) as exc:
        module.fail_json(msg=str(exc))
    if state.report is None:
        problems = [f"{lay.link}: no copy of {manifest.repo}@{manifest.commit} on this host"]
    else:
        problems = state.report.problems() or [
            f"{state.where}: complete and verified, not yet published at {lay.final} (the next sync does it)"]
    space = state.space_problem(manifest, p["reserve_bytes"]) or ""
    result = {
        "changed": False, "holder": state.holder, "current": state.current, "where": state.where,
        "problems": [] if state.holder else problems, "verify": state.report.summary() if state.report else {},
        "needed_bytes": 0 if state.holder else state.needed_bytes, "free_bytes": state.free_bytes,
        "space_problem": space, "commit": manifest.commit,
    }
    if space and p["fail_on_space"]:
        module.fail_json(msg=space, **result)
    if not state.holder and p["fail_on_problems"]:
        module.fail_json(msg=f"{len(problems)} problem(s) in {lay.final}: " + "; ".join(problems[:20]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
