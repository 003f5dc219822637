#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: does the installed vLLM need the EAGLE-3-for-Kimi-K2.5 patches?"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_eagle3_facts
short_description: Decide whether the installed vLLM needs the EAGLE-3 patches for Kimi-K2.5
version_added: 0.1.0
description:
  - Finds the vLLM installed for O(python) without importing it (no torch, CUDA or GPU
    needed) - version and package directory from C(importlib.metadata) and
    C(importlib.util.find_spec), run as C(<python> -I -c <script>) - and reads the source files'
    AST for what EAGLE-3 with a Kimi-K2.5 target needs.
  - Compares each file of O(files) with the wheel's RECORD hash and with the records
    M(gpuserve.vllm.python_patch) keeps under O(state_dir), so files this collection patched
    are told apart from files edited by hand.
  - Returns the decision RV(action) - V(patch) (0.16.x/0.17.x), V(native) (0.18 and newer,
    nothing to do) or V(refuse) (not servable, not safely patchable, hand-edited files) - with
    RV(reasons) and a one-line RV(message) an operator can act on. The decision comes from the
    source; the version is a cross-check.
  - Reads only; the role gpuserve.vllm.eagle3_patches acts on the result.
options:
  python:
    description:
      - Interpreter of the environment vLLM is installed in, for example V(/opt/ml-env/bin/python).
      - The module fails naming this path when it does not exist.
    type: path
    required: true
  files:
    description:
      - Files of the patch set, relative to the C(vllm) package directory, for example
        V(config/speculative.py). Their states are in RV(files).
    type: list
    elements: str
    required: true
  state_dir:
    description:
      - M(gpuserve.vllm.python_patch)'s O(gpuserve.vllm.python_patch#module:state_dir), where
        its revert records are. Omit to judge files by their RECORD hashes alone.
    type: path
  model_config:
    description:
      - Path on the managed node of the target checkpoint's C(config.json). The allow-list
        entry (RV(model_types)) is its C(text_config.model_type), V(deepseek_v3) when
        C(text_config) has none (vLLM builds Kimi-K2.5's text config as C(DeepseekV3Config)),
        or the top-level C(model_type) when there is no C(text_config).
      - Omit (or empty) to use O(model_types_default).
    type: path
  model_types_default:
    description:
      - Allow-list entries when O(model_config) is not given.
    type: list
    elements: str
    default: [kimi_k2, deepseek_v3]
  allow_modified:
    description:
      - Decide V(patch) for files that differ from the wheel's RECORD (hand-edited) instead of
        refusing.
    type: bool
    default: false
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
  - gpuserve.vllm.attributes.read_only
notes:
  - No GPU is needed or used; the facts come from files only.
seealso:
  - module: gpuserve.vllm.python_patch
"""

EXAMPLES = r"""
- name: What does the installed vLLM need?
  gpuserve.vllm.vllm_eagle3_facts:
    python: /opt/ml-env/bin/python
    files:
      - model_executor/models/deepseek_v2.py
      - config/speculative.py
    state_dir: /var/lib/gpuserve/python_patch
    model_config: /models/Kimi-K2.5/config.json
  register: eagle3

- name: Stop when it cannot be served
  ansible.builtin.fail:
    msg: "{{ eagle3.message }}"
  when: eagle3.action == 'refuse'
"""

RETURN = r"""
action:
  description: V(patch), V(native) or V(refuse).
  returned: always
  type: str
  sample: patch
reasons:
  description: Why, one short phrase each (warnings start with C(WARNING:)).
  returned: always
  type: list
  elements: str
  sample: ["source lacks: deepseek_eagle3, kimi_eagle3"]
message:
  description: One sentence for the operator, naming the version and what to do.
  returned: always
  type: str
model_types:
  description: Allow-list entries for the checkpoint (from O(model_config) or O(model_types_default)).
  returned: always
  type: list
  elements: str
  sample: [kimi_k2, deepseek_v3]
installed:
  description: Whether O(python) sees a vllm distribution.
  returned: always
  type: bool
version:
  description: The installed vLLM version, null when none.
  returned: always
  type: str
  sample: 0.17.0
package_dir:
  description: Real path of the C(vllm) package directory, null when none.
  returned: always
  type: str
  sample: /opt/ml-env/lib/python3.11/site-packages/vllm
python_version:
  description: Version of O(python).
  returned: always
  type: str
dist_info:
  description: The distribution's metadata directory, null when unknown.
  returned: always
  type: str
files:
  description:
    - Per entry of O(files) - C(path) (real path), C(sha256), C(record_sha256) (from the
      wheel's RECORD) and C(state) - V(pristine), V(patched) (what python_patch wrote over the
      pristine bytes; C(python_patch_record) names its record), V(modified), V(unverified) (no
      RECORD hash) or V(missing).
  returned: always
  type: dict
markers:
  description: Which parts of EAGLE-3-for-Kimi support the source already has.
  returned: always
  type: dict
  sample: {"deepseek_eagle3": false, "deepseek_aux_capture": false, "kimi_eagle3": false,
           "proposer_kimi_branch": false}
shape:
  description: Other source facts - C(kimi_k25_present), C(kimi_wrapper), C(allow_list), C(unparsable).
  returned: always
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._eagle3 import _facts as ef
from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _pyenv


def _model_types(module: AnsibleModule) -> list:
    """Allow-list entries from the checkpoint's config.json, or the defaults without one."""
    path = module.params["model_config"]
    try:
        config = None
        if path:
            with open(path, "r", encoding="utf-8") as handle:
                config = json.load(handle)
        return ef.model_types(config, module.params["model_types_default"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg="model_config %s: %s. Point it at the checkpoint's config.json on the "
                             "node, or leave it empty to use model_types_default." % (path, exc))


def main() -> None:
    """Locate vLLM with its own interpreter, read the source, decide."""
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "str", "required": True},
            "state_dir": {"type": "path"},
            "model_config": {"type": "path"},
            "model_types_default": {"type": "list", "elements": "str",
                                    "default": ["kimi_k2", "deepseek_v3"]},
            "allow_modified": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    python = module.params["python"]
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        module.fail_json(msg="python=%s does not exist (or is not executable) on this node. Point it "
                             "(eagle3_patches_python in the role) at the interpreter of the "
                             "environment vLLM is installed in." % python)
    model_types = _model_types(module)
    try:
        argv, env = _pyenv.isolated_call(python, ["-c", ef.LOCATE_SCRIPT] + module.params["files"])
    except _pyenv.UntrustedInterpreter as exc:
        module.fail_json(msg=str(exc))
    rc, out, err = module.run_command(argv, environ_update=env)
    if rc != 0:
        module.fail_json(msg="%s could not report its vLLM installation (rc=%s): %s"
                             % (python, rc, err.strip()), rc=rc, stdout=out, stderr=err)
    try:
        located = ef.parse_locate_output(out)
    except ValueError as exc:
        module.fail_json(msg="%s printed something unexpected: %s" % (python, exc), stdout=out,
                         stderr=err)
    facts = ef.gather(located, module.params["files"], module.params["state_dir"])
    action, reasons, message = ef.decide(facts, module.params["allow_modified"], model_types)
    module.exit_json(changed=False, action=action, reasons=reasons, message=message,
                     model_types=model_types, **facts)


if __name__ == "__main__":
    main()
