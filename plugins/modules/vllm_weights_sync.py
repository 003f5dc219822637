#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stage one checkpoint revision on this host: resumable, verified, published atomically."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_weights_sync
short_description: Stage a checkpoint revision from a peer, a mirror or the Hub - resumable, verified, atomic
version_added: 0.2.0
description:
  - Makes C(<store_dir>/<name>/<commit>) a complete copy verified against the manifest and
    C(<root>/<name>) (the path vLLM is given) a symlink to it. Nothing is fetched when the copy is
    already verified (the stat cache of gpuserve.vllm.vllm_weights_verify keeps that cheap).
  - "Otherwise, in order: the free space is compared with the bytes still missing, before the
    first byte (a clear error naming the path, the space needed and the space free); the files
    are fetched into C(<commit>.partial) - only the missing ones, a short file continued from
    where it stopped (rsync C(--append-verify), or an HTTP range), a file of the right size with
    wrong bytes deleted and fetched again alone; the copy is verified against the manifest (a
    second attempt fetches what is still wrong); the manifest is written beside the files
    (C(.gpuserve/manifest.json)); C(.partial) is renamed to C(<commit>) and the link switched,
    both atomically. vLLM never sees half a checkpoint."
  - A published copy that fails verification is first renamed back to C(.partial), so the link
    never names a copy known to be broken. A real directory at C(<root>/<name>) (an earlier
    per-node download) is adopted without ever leaving that path - its good files hard-linked into
    a new C(.partial) (no byte copied, none of its files written), the rest fetched there, and once
    the copy is verified and published the directory is swapped for the link in one step
    (C(renameat2) C(RENAME_EXCHANGE); two renames where the kernel cannot), then removed. A staging
    that fails leaves the directory vLLM reads as it was.
  - Sources - O(source=peer) another host's verified copy over SSH (the peer's
    C(authorized_keys) restricts the key to C(rrsync -ro <store_dir>)); O(source=mirror) a local
    directory; O(source=hub) the Hub's resolve URLs at the commit; O(source=url) an HTTP mirror
    laid out as C(<base_url>/<path>).
  - The transfer runs as O(owner), who owns the staged files; the module itself runs as root.
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Verifies (reading the cache, not writing it) and reports what it would fetch.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A verified copy behind the link is left as it is (C(changed=false)).
  platform:
    platforms: posix
options:
  name:
    description: The checkpoint's directory name.
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
    description: The manifest file (gpuserve.vllm.vllm_weights_manifest).
    type: path
    required: true
  owner:
    description: User who runs the transfer and owns the staged files (the role's transfer user).
    type: str
    required: true
  source:
    description: Where missing files come from.
    type: str
    choices: [peer, mirror, hub, url]
    required: true
  peer:
    description: The peer's address (O(source=peer)).
    type: str
  peer_user:
    description: The transfer user on the peer.
    type: str
    default: gpuserve-weights
  ssh_key:
    description: Private key of O(owner) for the peer.
    type: path
  known_hosts:
    description: The fleet's known_hosts file (host keys pinned, never accepted blindly).
    type: path
  ssh_port:
    description: The peer's SSH port.
    type: int
    default: 22
  mirror_dir:
    description: Local directory holding the checkpoint (O(source=mirror)); O(owner) must be able to read it.
    type: path
  endpoint:
    description: The Hub's address (O(source=hub)).
    type: str
    default: https://huggingface.co
  base_url:
    description: HTTP mirror; file C(p) is fetched from C(<base_url>/p) (O(source=url)).
    type: str
  token:
    description: Hugging Face token (O(source=hub)); sent only to O(endpoint), never to the CDN it redirects to.
    type: str
    default: ""
  rsync_extra_args:
    description: More rsync options (for example V(--bwlimit=200M) to spare a link).
    type: list
    elements: str
    default: []
  io_timeout:
    description: Seconds without data after which rsync gives up (C(--timeout)); HTTP read timeout.
    type: int
    default: 600
  attempts:
    description: Fetch-and-verify rounds before failing (the second fetches only what is still wrong).
    type: int
    default: 2
  full:
    description: Hash every file before deciding, ignoring the verification cache.
    type: bool
    default: false
  reserve_bytes:
    description: Bytes that must stay free after the checkpoint is staged.
    type: int
    default: 0
  workers:
    description: Files hashed (and fetched over HTTP) at once.
    type: int
    default: 4
seealso:
  - module: gpuserve.vllm.vllm_weights_verify
  - module: gpuserve.vllm.vllm_weights_manifest
"""

EXAMPLES = r"""
- name: Take Kimi-K2.5 from a node that holds it
  gpuserve.vllm.vllm_weights_sync:
    name: Kimi-K2.5
    manifest: /var/lib/gpuserve/weights/3a8a1c4e5f6b7d8e9f0a1b2c3d4e5f6a7b8c9d0e.manifest.json
    owner: gpuserve-weights
    source: peer
    peer: 10.0.0.11
    ssh_key: /var/lib/gpuserve-weights/.ssh/id_ed25519
    known_hosts: /var/lib/gpuserve-weights/.ssh/known_hosts
"""

RETURN = r"""
link:
  description: The path vLLM is given (a symlink to the verified copy).
  returned: always
  type: str
  sample: /srv/models/Kimi-K2.5
path:
  description: The verified copy the link names.
  returned: always
  type: str
  sample: /srv/models/.gpuserve-weights/Kimi-K2.5/3a8a1c4e5f6b7d8e9f0a1b2c3d4e5f6a7b8c9d0e
commit:
  description: The manifest's commit.
  returned: always
  type: str
switched:
  description: The link now names another revision than before (or did not exist); a running vLLM must restart to load it.
  returned: always
  type: bool
actions:
  description: What was done (or would be), in order.
  returned: always
  type: list
  elements: str
files_fetched:
  description: Files fetched (all attempts).
  returned: always
  type: list
  elements: str
bytes_fetched:
  description: File bytes that crossed the network (rsync's literal data; HTTP bodies).
  returned: always
  type: int
wire_bytes:
  description: All bytes received, protocol included (rsync's "Total bytes received").
  returned: always
  type: int
deleted:
  description: Files deleted because their bytes were wrong (then fetched again).
  returned: always
  type: list
  elements: str
transfers:
  description: Per attempt - C(source), C(paths), C(files), C(bytes), C(wire_bytes).
  returned: always
  type: list
  elements: dict
verify:
  description: The final verification's counts (see gpuserve.vllm.vllm_weights_verify).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _hub as hub
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _layout as wl
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _manifest as wm
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _stage as ws
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _transfer as wt


def _source(p: dict, manifest: wm.Manifest) -> wt.Source:
    if p["source"] == "peer":
        ssh = wt.ssh_command(p["ssh_key"], p["known_hosts"], p["ssh_port"])
        return wt.RsyncSource(f"{p['name']}/{manifest.commit}", p["peer"], p["peer_user"], ssh,
                              io_timeout=p["io_timeout"], extra=tuple(p["rsync_extra_args"]))
    if p["source"] == "mirror":
        return wt.RsyncSource(p["mirror_dir"], io_timeout=p["io_timeout"],
                              extra=tuple(p["rsync_extra_args"]))
    if p["source"] == "hub":
        base = hub.resolve_url(p["endpoint"], manifest.repo, manifest.commit, "").rstrip("/")
        return wt.HttpSource(base, p["token"], p["workers"], p["io_timeout"])
    return wt.HttpSource(p["base_url"], "", p["workers"], p["io_timeout"])


def main() -> None:
    """Stage (or confirm) the revision and report what crossed the network."""
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "root": {"type": "path", "default": "/srv/models"},
            "store_dir": {"type": "path"},
            "manifest": {"type": "path", "required": True},
            "owner": {"type": "str", "required": True},
            "source": {"type": "str", "choices": ["peer", "mirror", "hub", "url"], "required": True},
            "peer": {"type": "str"},
            "peer_user": {"type": "str", "default": "gpuserve-weights"},
            "ssh_key": {"type": "path"},
            "known_hosts": {"type": "path"},
            "ssh_port": {"type": "int", "default": 22},
            "mirror_dir": {"type": "path"},
            "endpoint": {"type": "str", "default": hub.DEFAULT_ENDPOINT},
            "base_url": {"type": "str"},
            "token": {"type": "str", "default": "", "no_log": True},
            "rsync_extra_args": {"type": "list", "elements": "str", "default": []},
            "io_timeout": {"type": "int", "default": 600},
            "attempts": {"type": "int", "default": 2},
            "full": {"type": "bool", "default": False},
            "reserve_bytes": {"type": "int", "default": 0},
            "workers": {"type": "int", "default": 4},
        },
        required_if=[("source", "peer", ("peer", "ssh_key", "known_hosts")),
                     ("source", "mirror", ("mirror_dir",)),
                     ("source", "url", ("base_url",))],
        supports_check_mode=True,
    )
    p = module.params
    result: dict = {"changed": False, "switched": False, "commit": "", "link": "", "path": "", "actions": [],
                    "files_fetched": [], "bytes_fetched": 0, "wire_bytes": 0, "deleted": [],
                    "transfers": [], "verify": {}}
    try:
        manifest = wm.load(p["manifest"])
        lay = wl.layout(p["root"], p["store_dir"] or os.path.join(p["root"], ".gpuserve-weights"),
                        p["name"], manifest.commit)
        result.update(commit=manifest.commit, link=lay.link, path=lay.final)
        owner = wt.Owner.named(p["owner"])
        outcome = ws.stage(lay, manifest, _source(p, manifest), owner,
                           ws.cache_path(p["manifest"], lay), full=p["full"],
                           reserve=p["reserve_bytes"], attempts=p["attempts"], workers=p["workers"],
                           check_mode=module.check_mode)
    except (wm.ManifestError, ws.StageError, hub.HubError) as exc:
        module.fail_json(msg=str(exc), **result)
    result.update(outcome.as_dict(), changed=outcome.changed)
    fetched = result["files_fetched"]
    result["msg"] = (f"{lay.link} -> {lay.final}: "
                     + (f"fetched {len(fetched)} file(s), {ws.human(result['bytes_fetched'])}, from "
                        f"{outcome.transfers[0]['source']}; " if outcome.transfers else "")
                     + ("; ".join(outcome.actions) if outcome.actions else "verified, nothing to do"))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
