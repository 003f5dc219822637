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
      - On by default. Set V(false) only for directories of placeholder files (test doubles),
        which hold no real safetensors header.
    type: bool
    default: true
    version_added: 0.2.0
  revision:
    description:
      - The commit the directories must hold (a per-node C(hf download --revision)), read from the
        metadata C(hf download --local-dir) keeps per file. Another commit, a mix, or no metadata
        is returned in C(revision_problems) (and fails with O(fail_on_problems)).
      - A branch or tag name is not judged (only the Hub can resolve it). Empty - not checked.
    type: str
    default: ""
    version_added: 0.3.0
  fail_on_problems:
    description:
      - Fail when a directory is incomplete. With V(false) the problems are only returned, e.g.
        to decide whether to download the weights.
    type: bool
    default: true
notes:
  - Does not hash the shards. With O(headers) a truncated shard is caught by its header; a
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

- name: Check only that the files are there and not empty (placeholder files in a test setup)
  gpuserve.vllm.vllm_weights_check:
    paths: [/srv/models/placeholder]
    headers: false

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
revision_problems:
  description: With O(revision), each directory that does not hold that commit (or cannot tell), one sentence each.
  returned: always
  type: list
  elements: str
  sample:
    - >-
      /srv/models/Kimi-K2.5: holds 1111111111111111111111111111111111111111 (64 file(s)); the pin is
      2222222222222222222222222222222222222222
directories:
  description:
    - Per directory, its path, the shards checked and its problems.
    - With O(revision), C(commits) - the commits its hf download metadata names, commit -> files.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/srv/models/Kimi-K2.5-eagle3", "shards": ["model.safetensors"], "problems": []}]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._check import (
    check_weights_dir,
    downloaded_commits,
    revision_problem,
)


def main() -> None:
    """Check every directory and fail listing the missing files."""
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "required": True},
            "headers": {"type": "bool", "default": True},
            "revision": {"type": "str", "default": ""},
            "fail_on_problems": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    directories = [check_weights_dir(path, module.params["headers"]) for path in module.params["paths"]]
    revision_problems = []
    if module.params["revision"]:
        for directory in directories:
            # A first download that stopped before any file completed has nothing to judge yet.
            if os.path.isdir(directory["path"]):
                directory["commits"] = downloaded_commits(directory["path"])
                if not directory["commits"] and directory["problems"]:
                    continue
                problem = revision_problem(directory["path"], module.params["revision"], directory["commits"])
                if problem:
                    revision_problems.append(problem)
    problems = [problem for d in directories for problem in d["problems"]]
    result = {"changed": False, "complete": not problems, "problems": problems,
              "revision_problems": revision_problems, "directories": directories}
    if revision_problems and module.params["fail_on_problems"]:
        module.fail_json(msg="the model weights are not the pinned revision: " + "; ".join(revision_problems), **result)
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
