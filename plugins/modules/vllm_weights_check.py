#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check checkpoint directories before a 30-minute model load instead of after it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_weights_check
short_description: Check that model checkpoint directories hold what vLLM needs
version_added: 0.1.0
description:
  - For each directory, checks that C(config.json) exists and is not empty, and that every shard
    named by C(model.safetensors.index.json) exists and is not empty. Without an index, at least
    one non-empty C(*.safetensors) file must be there (single-file drafters).
  - Fails at once with every missing or empty file listed, so an incomplete download is found in
    seconds rather than when vLLM reaches the missing shard half an hour into the load.
  - Reads only; never changes anything.
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
  - gpuserve.vllm.attributes.read_only
options:
  paths:
    description: Checkpoint directories to check (the target model and its drafter).
    type: list
    elements: path
    required: true
  headers:
    description:
      - Also read every shard's safetensors header and require the exact size it gives
        (C(8 + header length + end of the last tensor)). A truncated but non-empty shard is then
        found in milliseconds, without hashing.
      - Off by default so that directories of placeholder files (test doubles) still pass;
        gpuserve.vllm.vllm_weights checks headers on every node it stages.
    type: bool
    default: false
    version_added: 0.2.0
  fail_on_problems:
    description:
      - Fail when a directory is incomplete. With V(false) the problems are only returned, e.g.
        to decide whether to download the weights.
    type: bool
    default: true
notes:
  - Does not hash the shards. With O(headers=true) a truncated shard is caught by its header; a
    shard of the right size with wrong bytes is caught only by gpuserve.vllm.vllm_weights_verify
    (sha256 against the manifest).
seealso:
  - module: gpuserve.vllm.vllm_weights_verify
  - module: gpuserve.vllm.vllm_health_wait
"""

EXAMPLES = r"""
- name: Check the Kimi-K2.5 and EAGLE-3 checkpoints
  gpuserve.vllm.vllm_weights_check:
    paths:
      - /srv/models/Kimi-K2.5
      - /srv/models/Kimi-K2.5-eagle3

- name: Also catch a truncated shard by its safetensors header (seconds, no hashing)
  gpuserve.vllm.vllm_weights_check:
    paths: [/srv/models/Kimi-K2.5]
    headers: true

- name: See whether a download is needed
  gpuserve.vllm.vllm_weights_check:
    paths: [/srv/models/Kimi-K2.5]
    fail_on_problems: false
  register: weights
"""

RETURN = r"""
complete:
  description: Whether every directory holds everything vLLM needs.
  returned: always
  type: bool
  sample: false
problems:
  description: Every missing or empty file, one sentence each.
  returned: always
  type: list
  elements: str
  sample:
    - "/srv/models/Kimi-K2.5/model-00061-of-00064.safetensors: missing (named by model.safetensors.index.json)"
    - "/srv/models/Kimi-K2.5/model-00002-of-00064.safetensors: truncated: its header says 9663676416 bytes, the file has 4831838208 (4831838208 missing)"
directories:
  description: Per directory, its path, the shards checked and its problems.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/srv/models/Kimi-K2.5-eagle3", "shards": ["model.safetensors"], "problems": []}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._check import check_weights_dir


def main() -> None:
    """Check every directory and fail listing the missing files."""
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "required": True},
            "headers": {"type": "bool", "default": False},
            "fail_on_problems": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    directories = [check_weights_dir(path, module.params["headers"]) for path in module.params["paths"]]
    problems = [problem for d in directories for problem in d["problems"]]
    result = {"changed": False, "complete": not problems, "problems": problems,
              "directories": directories}
    if problems and module.params["fail_on_problems"]:
        shown = problems[:40]
        more = f" (and {len(problems) - len(shown)} more)" if len(problems) > len(shown) else ""
        module.fail_json(
            msg=(f"{len(problems)} problem(s) in the model weights; vLLM would fail on them after "
                 f"loading for a long time. Complete the download (gpuserve.vllm.vllm_weights "
                 f"re-fetches only the broken files), then re-run: "
                 + "; ".join(shown) + more),
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
