#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: facts about a Python environment without importing what is installed."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: python_env_facts
short_description: Read the Python version and installed distributions of an interpreter or venv
version_added: 0.1.0
description:
  - Runs the given interpreter with C(-I -c) and a short script that reads
    C(importlib.metadata); nothing installed in the environment is imported, so asking which
    vLLM is installed does not import vLLM, torch or CUDA.
  - Optionally checks the interpreter's version against a Requires-Python style specifier
    (for example the one the pinned vLLM wheel declares).
  - A missing interpreter is not an error; the result says O(python) does not exist, so a role
    can decide (for example in check mode before the environment is created).
options:
  python:
    description:
      - Path of the interpreter, for example V(/opt/ml-env/bin/python) for a virtual environment.
    type: path
    required: true
  packages:
    description:
      - Limit RV(packages) to these distributions. Entries are names or requirement strings
        (V(vllm==0.17.0) means V(vllm)); any spelling (V(Flash_Attn), V(flash-attn)) matches.
      - Omit to report every installed distribution. An empty list reports none.
    type: list
    elements: str
  python_requires:
    description:
      - A specifier such as V(>=3.10,<3.14). RV(python_requires_satisfied) says whether the
        interpreter's version satisfies it. The numeric release is compared (PEP 440 operators
        C(==), C(!=), C(<), C(<=), C(>), C(>=), C(~=), C(==X.*)).
    type: str
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
  - gpuserve.vllm.attributes.read_only
notes:
  - Distribution names in the result are normalised as in PEP 503 (lower case, runs of
    C(-_.) become C(-)).
"""

EXAMPLES = r"""
- name: Which vLLM is in the ml-env?
  gpuserve.vllm.python_env_facts:
    python: /opt/ml-env/bin/python
    packages: [vllm, torch]
  register: env_facts

- name: Refuse an interpreter the pinned vLLM does not support
  gpuserve.vllm.python_env_facts:
    python: /usr/bin/python3
    packages: []
    python_requires: ">=3.10,<3.14"
  register: base_python
  failed_when: not base_python.python_requires_satisfied
"""

RETURN = r"""
exists:
  description: Whether O(python) exists and is executable. When false the other values are empty.
  returned: always
  type: bool
path_exists:
  description: Whether anything is at O(python), a dangling symlink included (a venv whose base
    interpreter was removed by a distribution upgrade has one).
  returned: always
  type: bool
python_version:
  description: The interpreter's version (major.minor.micro).
  returned: when exists
  type: str
  sample: 3.11.2
prefix:
  description: The interpreter's C(sys.prefix) (the venv directory for a venv).
  returned: when exists
  type: str
base_prefix:
  description: The C(sys.base_prefix) (the distribution's prefix for a venv).
  returned: when exists
  type: str
is_venv:
  description: Whether the interpreter runs inside a virtual environment (prefix != base_prefix).
  returned: when exists
  type: bool
packages:
  description: Installed distributions, PEP 503 name -> version, limited to O(packages) if given.
  returned: always
  type: dict
  sample: {"vllm": "0.17.0", "six": "1.16.0"}
missing:
  description: Names from O(packages) that are not installed.
  returned: always
  type: list
  elements: str
python_requires_satisfied:
  description: Whether the version satisfies O(python_requires); null when that is not given or
    the interpreter does not exist.
  returned: always
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _pyenv


def main() -> None:
    """Run the interpreter once, decode its answer, filter and check it."""
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "packages": {"type": "list", "elements": "str"},
            "python_requires": {"type": "str"},
        },
        supports_check_mode=True,
    )
    python = module.params["python"]
    wanted = module.params["packages"]
    requires = module.params["python_requires"]
    try:
        names = None if wanted is None else [_pyenv.pin_name(item) for item in wanted]
    except ValueError as exc:
        module.fail_json(msg=f"packages: {exc}")

    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        module.exit_json(changed=False, exists=False, path_exists=os.path.lexists(python),
                         packages={}, missing=list(names or []), python_requires_satisfied=None)

    try:
        argv, env = _pyenv.isolated_call(python, ["-c", _pyenv.INSPECT_SCRIPT])
    except _pyenv.UntrustedInterpreter as exc:
        module.fail_json(msg=str(exc))
    rc, out, err = module.run_command(argv, environ_update=env)
    if rc != 0:
        module.fail_json(msg=f"{python} exists but could not report its packages (rc={rc}); "
                             f"the environment may be broken (for example its base interpreter "
                             f"was removed by a distribution upgrade): {err.strip()}",
                         rc=rc, stdout=out, stderr=err)
    try:
        data = _pyenv.parse_inspect_output(out)
    except ValueError as exc:
        module.fail_json(msg=f"{python} printed something unexpected: {exc}", stdout=out,
                         stderr=err)

    satisfied = None
    if requires:
        try:
            satisfied = _pyenv.specifier_allows(requires, data["python_version"])
        except _pyenv.SpecifierError as exc:
            module.fail_json(msg=f"python_requires: {exc}")

    packages, missing = _pyenv.select_packages(data["packages"], names)
    module.exit_json(
        changed=False,
        exists=True,
        path_exists=True,
        python_version=data["python_version"],
        prefix=data["prefix"],
        base_prefix=data["base_prefix"],
        is_venv=data["prefix"] != data["base_prefix"],
        packages=packages,
        missing=missing,
        python_requires_satisfied=satisfied,
    )


if __name__ == "__main__":
    main()
