#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build (once per commit) the manifest every copy of a checkpoint is verified against."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_weights_manifest
short_description: The manifest of a checkpoint revision - its commit, every file's size and hash
version_added: 0.2.0
description:
  - Resolves O(revision) to a commit and writes C(<dest_dir>/<commit>.manifest.json), the list of
    the checkpoint's files with their size and hash, which gpuserve.vllm.vllm_weights_verify and
    gpuserve.vllm.vllm_weights_sync judge every copy by.
  - With O(source=hub), from the Hub's own metadata - the tree listing
    C(GET <endpoint>/api/models/<repo>/tree/<commit>?recursive=true) (what huggingface_hub's
    C(list_repo_tree) reads), all pages. LFS files (the shards) carry their sha256 there, the other
    files their git blob id; both are checked. A branch or tag in O(revision) is resolved with
    C(GET <endpoint>/api/models/<repo>/revision/<revision>) to the commit it names today.
  - With O(source=mirror), from a directory the operator already has (O(mirror_dir)). When
    O(hub_tree_file) is given (the Hub's tree listing saved on a connected machine, for example
    C(curl -s https://huggingface.co/api/models/<repo>/tree/<commit>?recursive=true)), the manifest
    is the Hub's and the mirror is verified against it; otherwise every file of the mirror is
    hashed (sha256) and the manifest trusts the mirror.
  - A manifest already written for the commit is reused as it is (no Hub request for the tree, no
    hashing), so re-runs cost one request at most (resolving a branch).
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reads the Hub or the mirror and returns the manifest it would write; writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: The manifest of a commit is written once; later runs read it.
  platform:
    platforms: posix
options:
  repo:
    description: The Hub repository (C(owner/name)), recorded in the manifest.
    type: str
    required: true
  revision:
    description:
      - The commit to stage (40 hex digits). With O(source=hub) a branch or tag is accepted and
        resolved to its commit (the result says so; pin the commit for a fleet).
      - With O(source=mirror), the commit the mirror holds; a 40-hex id is required.
    type: str
    required: true
  source:
    description: Where the manifest comes from.
    type: str
    choices: [hub, mirror]
    default: hub
  dest_dir:
    description: Directory of the manifests (created, 0755); the file is C(<dest_dir>/<commit>.manifest.json).
    type: path
    required: true
  mirror_dir:
    description: The operator's copy of the checkpoint (O(source=mirror)).
    type: path
  hub_tree_file:
    description:
      - A saved response of the Hub's tree API (a JSON list of entries) to build the manifest
        from instead of asking the Hub.
    type: path
  exclude:
    description: C(fnmatch) patterns of repository paths to leave out (for example V(*.md), V(figures/*)).
    type: list
    elements: str
    default: []
  endpoint:
    description: The Hub's address.
    type: str
    default: https://huggingface.co
  token:
    description: Hugging Face token for gated or private repositories; sent only to O(endpoint).
    type: str
    default: ""
  timeout:
    description: Seconds to wait for each Hub response.
    type: int
    default: 60
  workers:
    description: Files hashed at once when a mirror is hashed.
    type: int
    default: 4
seealso:
  - module: gpuserve.vllm.vllm_weights_verify
  - module: gpuserve.vllm.vllm_weights_sync
"""

EXAMPLES = r"""
- name: Manifest of Kimi-K2.5 at the pinned commit, from the Hub's metadata
  gpuserve.vllm.vllm_weights_manifest:
    repo: moonshotai/Kimi-K2.5
    revision: 3a8a1c4e5f6b7d8e9f0a1b2c3d4e5f6a7b8c9d0e
    dest_dir: /var/lib/gpuserve/weights
    token: "{{ vault_hf_token }}"
  register: manifest

- name: Manifest of a mirror on NFS, verified against the Hub's listing saved elsewhere
  gpuserve.vllm.vllm_weights_manifest:
    repo: moonshotai/Kimi-K2.5
    revision: 3a8a1c4e5f6b7d8e9f0a1b2c3d4e5f6a7b8c9d0e
    source: mirror
    mirror_dir: /mnt/models/Kimi-K2.5
    hub_tree_file: /mnt/models/Kimi-K2.5.tree.json
    dest_dir: /var/lib/gpuserve/weights
"""

RETURN = r"""
commit:
  description: The 40-hex commit of the manifest.
  returned: success
  type: str
  sample: 3a8a1c4e5f6b7d8e9f0a1b2c3d4e5f6a7b8c9d0e
resolved_from:
  description: The branch or tag O(revision) named, when it was not a commit; empty otherwise.
  returned: success
  type: str
  sample: main
path:
  description: The manifest file.
  returned: success
  type: str
  sample: /var/lib/gpuserve/weights/3a8a1c4e5f6b7d8e9f0a1b2c3d4e5f6a7b8c9d0e.manifest.json
manifest:
  description: The manifest (C(repo), C(commit), C(source), C(exclude), C(total_bytes), C(file_count), C(files)).
  returned: success
  type: dict
manifest_text:
  description: The manifest file's exact content (for copying it to other hosts byte for byte).
  returned: success
  type: str
total_bytes:
  description: Bytes of all its files.
  returned: success
  type: int
  sample: 595000000000
file_count:
  description: How many files it lists.
  returned: success
  type: int
  sample: 78
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _hub as hub
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _manifest as wm


def _saved_tree(path: str) -> list:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except OSError as exc:
        raise wm.ManifestError(f"hub_tree_file: cannot read {path} ({exc.strerror})") from None
    except ValueError as exc:
        raise wm.ManifestError(f"hub_tree_file: {path} is not JSON ({exc})") from None


def _build(p: dict, commit: str) -> wm.Manifest:
    exclude = p["exclude"]
    if p["hub_tree_file"]:
        return wm.from_hub_tree(_saved_tree(p["hub_tree_file"]), p["repo"], commit, exclude,
                                where=f"hub_tree_file {p['hub_tree_file']}")
    if p["source"] == "mirror":
        return wm.from_directory(p["mirror_dir"], p["repo"], commit, exclude, p["workers"])
    entries = hub.list_tree(p["endpoint"], p["repo"], commit, p["token"], p["timeout"])
    return wm.from_hub_tree(entries, p["repo"], commit, exclude,
                            where=f"the Hub's tree of {p['repo']}@{commit}")


def main() -> None:
    """Resolve the commit, reuse or build the manifest, write it atomically."""
    module = AnsibleModule(
        argument_spec={
            "repo": {"type": "str", "required": True},
            "revision": {"type": "str", "required": True},
            "source": {"type": "str", "choices": ["hub", "mirror"], "default": "hub"},
            "dest_dir": {"type": "path", "required": True},
            "mirror_dir": {"type": "path"},
            "hub_tree_file": {"type": "path"},
            "exclude": {"type": "list", "elements": "str", "default": []},
            "endpoint": {"type": "str", "default": hub.DEFAULT_ENDPOINT},
            "token": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "int", "default": 60},
            "workers": {"type": "int", "default": 4},
        },
        required_if=[("source", "mirror", ("mirror_dir",))],
        supports_check_mode=True,
    )
    p = module.params
    revision = p["revision"].strip()
    try:
        if p["source"] == "mirror" and not wm.HEX40.match(revision):
            raise wm.ManifestError(f"revision: {revision!r} is not a 40-hex commit; a mirror "
                                   f"directory cannot resolve a branch, name the commit it holds")
        commit = hub.resolve_commit(p["endpoint"], p["repo"], revision, p["token"], p["timeout"])
        path = os.path.join(p["dest_dir"], f"{commit}.manifest.json")
        existing = None
        if os.path.exists(path):
            existing = wm.load(path)
            if existing.repo != p["repo"] or list(existing.exclude) != p["exclude"]:
                existing = None  # another repository or other exclusions: build it again
        manifest = existing or _build(p, commit)
    except (wm.ManifestError, hub.HubError) as exc:
        module.fail_json(msg=str(exc))
    changed = existing is None
    if changed and not module.check_mode:
        wm.write(path, manifest)
    module.exit_json(changed=changed, commit=commit, path=path,
                     resolved_from="" if revision == commit else revision,
                     manifest=manifest.to_dict(), manifest_text=manifest.dumps(),
                     total_bytes=manifest.total_bytes,
                     file_count=len(manifest.files))


if __name__ == "__main__":
    main()
