#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: switch the stable env path (a symlink) to another env, crash-safe."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ml_env_switch
short_description: Point the stable env path at another side-by-side env, or roll back
version_added: 0.2.0
description:
  - The stable path O(link) (for example V(/opt/ml-env), which the vLLM unit runs from) is a
    symlink to the env that serves; envs live side by side in O(store_dir). This module points
    O(link) at O(target) and C(<link>.previous) at the env it named before, or, with
    O(rollback=true), swaps the two.
  - Each link is replaced atomically (a new symlink under a temporary name in the same directory,
    the directory fsynced, C(os.replace) over the link, fsynced again), so O(link) names a whole
    env at every instant. The previous link is written first, so a run killed half-way leaves
    O(link) on the old env and the next run finishes the switch.
  - A running process is never affected, because an env's scripts name its real directory in their
    shebang, so only a (re)start follows the link.
  - A real directory at O(link) (an env made by an older release of this collection) counts as
    the current env; at the first switch it is renamed into O(store_dir) as
    C(legacy-<YYYYmmddHHMMSS>) and becomes the previous env. Between that rename and the new link
    (microseconds, once per node) O(link) does not exist.
options:
  link:
    description: The stable path, a symlink (or absent, or a legacy real directory).
    type: path
    required: true
  target:
    description:
      - The env to serve (a directory with C(bin/python)), normally C(<store_dir>/<name>).
      - In check mode a target that does not exist yet (not built in check mode) is reported, not refused.
    type: path
  rollback:
    description: Switch to the env C(<link>.previous) names (and make the current env the previous one).
    type: bool
    default: false
  previous:
    description:
      - With O(target), point C(<link>.previous) at this env instead of the env O(link) named
        before - puts both links back exactly as they were before a switch whose start failed.
      - The link is pointed first, then C(<link>.previous).
    type: path
    default: ""
  store_dir:
    description:
      - Where envs live side by side; a legacy directory at O(link) is moved here.
      - Must be on the same filesystem as O(link) for that move (it is a rename).
    type: path
    default: ""
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reports the links it would write and the legacy directory it would move; writes nothing.
  diff_mode:
    support: full
    details: The real paths O(link) and C(<link>.previous) name before and after.
  idempotent:
    support: partial
    details: With O(target), a second run changes nothing. Each O(rollback=true) run swaps again.
  platform:
    platforms: posix
notes:
  - Compare envs by the returned real paths (O(store_dir) itself may be a symlink); run the module
    in check mode to learn whether a switch is needed (C(changed)).
seealso:
  - module: gpuserve.vllm.ml_env_prune
"""

EXAMPLES = r"""
- name: Serve the env this run built
  gpuserve.vllm.ml_env_switch:
    link: /opt/ml-env
    target: /opt/ml-env.d/vllm-0.17.0-3f2a9c1b7d40
    store_dir: /opt/ml-env.d
  register: switch

- name: Roll back to the env that served before
  gpuserve.vllm.ml_env_switch:
    link: /opt/ml-env
    rollback: true

- name: Put both links back as they were before a switch whose start failed
  gpuserve.vllm.ml_env_switch:
    link: /opt/ml-env
    target: /opt/ml-env.d/vllm-0.17.0-3f2a9c1b7d40
    previous: /opt/ml-env.d/vllm-0.16.0-8c01d2e3f4a5
"""

RETURN = r"""
current:
  description: Real path of the env O(link) names after the run (in check mode, would name).
  returned: always
  type: str
  sample: /opt/ml-env.d/vllm-0.17.0-3f2a9c1b7d40
previous:
  description: Real path C(<link>.previous) names after the run; empty when there is none.
  returned: always
  type: str
  sample: /opt/ml-env.d/vllm-0.16.0-8c01d2e3f4a5
switched_from:
  description: Real path O(link) named before a switch; empty when nothing switched or O(link) was absent.
  returned: always
  type: str
switched_to:
  description: Real path O(link) names after a switch; empty when nothing switched.
  returned: always
  type: str
adopted_legacy:
  description: Where a legacy directory at O(link) was (or would be) moved; empty otherwise.
  returned: always
  type: str
  sample: /opt/ml-env.d/legacy-20261130183000
msg:
  description: One line saying what was (or would be) done.
  returned: always
  type: str
  sample: switched /opt/ml-env from /opt/ml-env.d/vllm-0.16.0-8c01d2e3f4a5 to /opt/ml-env.d/vllm-0.17.0-3f2a9c1b7d40
"""

import datetime
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _store as es


def _choose_target(module: AnsibleModule, link: es.LinkState, previous: es.LinkState) -> str:
    """The env to switch to, refused with the path and the next step when it is not one."""
    p = module.params
    if p["rollback"]:
        if previous.kind == "absent":
            module.fail_json(msg=f"rollback: {previous.path} does not exist, so there is no env to "
                                 f"roll back to; switch with target: <an env in the store> instead")
        if previous.kind != "link" or not es.is_env(previous.target):
            module.fail_json(msg=f"rollback: {previous.path} names "
                                 f"{os.path.realpath(previous.path)}, which is missing or has no "
                                 f"bin/python; rebuild that env or switch with target: instead")
        return previous.target
    target = os.path.abspath(p["target"])
    if not es.is_env(target):
        if module.check_mode and not os.path.exists(target):
            return target
        module.fail_json(msg=f"target: {target} is not an env (no bin/python there); build it "
                             f"first (gpuserve.vllm.ml_env) or name an existing env")
    return target


def _diff(link: str, before: tuple[str, str], after: tuple[str, str]) -> dict[str, str]:
    def text(pair: tuple[str, str]) -> str:
        return f"{link} -> {pair[0] or '(absent)'}\n{es.previous_path(link)} -> {pair[1] or '(absent)'}\n"
    return {"before": text(before), "after": text(after), "before_header": link, "after_header": link}


def main() -> None:
    """Plan from the links as they are, apply step by step, report real paths."""
    module = AnsibleModule(
        argument_spec={
            "link": {"type": "path", "required": True},
            "target": {"type": "path"},
            "rollback": {"type": "bool", "default": False},
            "previous": {"type": "path", "default": ""},
            "store_dir": {"type": "path", "default": ""},
        },
        mutually_exclusive=[("target", "rollback"), ("previous", "rollback")],
        required_one_of=[("target", "rollback")],
        supports_check_mode=True,
    )
    link_path = os.path.abspath(module.params["link"]).rstrip("/")
    store_dir = module.params["store_dir"]
    link = es.read_link(link_path)
    previous = es.read_link(es.previous_path(link_path))
    target = _choose_target(module, link, previous)
    if link.kind == "dir" and store_dir and not es.same_filesystem(link_path, store_dir):
        module.fail_json(msg=f"store_dir: {store_dir} is on another filesystem than the legacy env "
                             f"{link_path}, which must be moved there by a rename; put the store "
                             f"beside it (for example {link_path}.d)")
    try:
        plan = es.plan_switch(link, previous, target, store_dir,
                              datetime.datetime.now(datetime.timezone.utc), module.params["rollback"],
                              module.params["previous"] or "")
    except ValueError as exc:
        module.fail_json(msg=f"link: {exc}")
    before = (link.target, previous.target)
    result = {
        "changed": plan.changed, "current": plan.current_after, "previous": plan.previous_after,
        "switched_from": plan.switched_from if plan.changed else "",
        "switched_to": plan.current_after if plan.changed else "",
        "adopted_legacy": plan.adopted_legacy,
        "diff": _diff(link_path, before, (plan.current_after, plan.previous_after)),
    }
    if not plan.changed:
        stale = es.stale_temp_links(link_path)
        result["msg"] = f"{link_path} already names {plan.current_after}"
        if stale:
            note = f"; removed the temporary link(s) {', '.join(stale)} of a killed run"
            result.update(changed=True, msg=result["msg"] + note)
            if not module.check_mode:
                for tmp in stale:
                    os.unlink(tmp)
        module.exit_json(**result)
    verb = "would switch" if module.check_mode else "switched"
    if es.same_path(link.target, plan.current_after):
        result["msg"] = (f"{'would point' if module.check_mode else 'pointed'} "
                         f"{es.previous_path(link_path)} at {plan.previous_after}; {link_path} "
                         f"already names {plan.current_after}")
    else:
        result["msg"] = (f"{verb} {link_path} from {plan.switched_from or '(nothing)'} to "
                         f"{plan.current_after}"
                         + (f"; the legacy env moves to {plan.adopted_legacy}" if plan.adopted_legacy else ""))
    if not module.check_mode:
        if plan.adopted_legacy:
            os.makedirs(os.path.dirname(plan.adopted_legacy), mode=0o755, exist_ok=True)
        for step in plan.steps:
            try:
                es.apply_step(step)
            except OSError as exc:
                module.fail_json(msg=f"could not {step.describe()}: {exc}; {link_path} names "
                                     f"{os.path.realpath(link_path)}; fix the cause and re-run "
                                     f"(the switch resumes)", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
