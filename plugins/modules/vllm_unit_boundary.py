#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Refuse a unit environment that would let the service user decide what root's ExecStartPre loads."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_unit_boundary
short_description: Refuse a vLLM unit environment that makes root load what another user can change
version_added: 0.2.0
description:
  - The vLLM unit runs commands as root before every start (C(ExecStartPre=+)) - the start record
    script with C(python3 -I -B) and C(nvidia-modprobe) through C(/bin/sh). systemd gives them
    the unit's C(Environment=) and C(EnvironmentFile=) variables, as it gives vLLM, and cannot
    unset a variable for one command (C(env -i) does not help, since the dynamic loader reads
    C(LD_PRELOAD) before C(env) runs).
  - So this module fails, naming the variable, its value and why, when a variable that makes the
    dynamic loader, glibc, OpenSSL or the shell load or write a file (C(LD_PRELOAD), C(LD_AUDIT),
    C(LD_LIBRARY_PATH), C(GCONV_PATH), C(LOCPATH), C(LD_DEBUG_OUTPUT), C(LD_PROFILE_OUTPUT),
    C(OPENSSL_CONF), C(OPENSSL_MODULES), C(OPENSSL_ENGINES), C(BASH_ENV), C(ENV)) names a path
    that a user other than root owns or could write, or a folder on the way to it (for a search
    folder also the entries in it), a relative path or an empty list entry (the working
    directory is the service user's home), or a C($) token the loader expands.
  - C(PYTHON*) variables are allowed (the role sets C(PYTHONPYCACHEPREFIX) for vLLM), since the start
    record's C(python3 -I) ignores every one, and nothing else run as root there is Python.
  - Also fails when an C(EnvironmentFile=) of O(unit_extra) could be changed by another user, or
    cannot be read as C(NAME=value) lines; its variables are judged as above.
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
  - gpuserve.vllm.attributes.read_only
options:
  environment:
    description:
      - The lines of the unit's C(EnvironmentFile=) (C(NAME="value"), as the C(systemd_env_lines)
        filter renders them). May hold secrets, so it is never logged; a refusal names only the
        variables listed above.
    type: list
    elements: str
    default: []
  environment_variable:
    description: The role variable the environment comes from, named in a refusal.
    type: str
    default: vllm_server_env
  unit_extra:
    description:
      - More C([Service]) directives of the unit, name -> value or list of values
        (C(vllm_server_unit_extra)); its C(Environment=) and C(EnvironmentFile=) are judged too.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Refuse a unit environment that would make root load what the service user can write
  gpuserve.vllm.vllm_unit_boundary:
    environment: "{{ __vllm_server_env_all | gpuserve.vllm.systemd_env_lines }}"
    unit_extra: "{{ vllm_server_unit_extra }}"
"""

RETURN = r"""
checked:
  description: The variables of the list above that are set, and were found safe.
  returned: success
  type: list
  elements: str
  sample: [LD_PRELOAD]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._env._pyenv import folder_problem, resolved_problem
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _unit_boundary


def main() -> None:
    """Fail with every refusal, or return the loader variables that were judged safe."""
    module = AnsibleModule(
        argument_spec={
            "environment": {"type": "list", "elements": "str", "default": [], "no_log": True},
            "environment_variable": {"type": "str", "default": "vllm_server_env"},
            "unit_extra": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        problems, checked = _unit_boundary.judge(params["environment"], params["environment_variable"],
                                                 params["unit_extra"], resolved_problem, folder_problem)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if problems:
        module.fail_json(msg="; ".join(problems), problems=problems)
    module.exit_json(changed=False, checked=checked)


if __name__ == "__main__":
    main()
