#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: observe what the node's vLLM runs, read-only (input of the serve plan)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_node_state
short_description: Observe which env the node's vLLM runs, and everything a serve plan needs
version_added: 0.3.0
description:
  - Reads, without changing anything, what site.yml's serve plan (filter
    M(gpuserve.vllm.vllm_node_plan)) decides from - the unit's state and main PID, the env the
    running process uses, when it started, the env link and C(<link>.previous) as real paths,
    the target env, which of these envs are built, the mtimes of the unit, the env file and the
    restart request, the journal a killed run left, a rollback hold, a pending reboot or node
    acceptance, and the server's C(/health) and C(/metrics).
  - The running env comes from the process, not from the link - C(/proc/<MainPID>/cmdline)'s
    first word is the interpreter the env's script named in its shebang (uv and venv write the
    env's real directory there), resolved to a real path. So a run killed between an env switch
    and the restart is seen for what it is - the link names the new env, the process the old one.
  - What the server started with is read from its start record (O(start_record)), which the unit
    writes as root at every start (gpuserve.vllm.vllm_server's C(ExecStartPre)) - digests of the
    unit, the env file and the NCCL configuration, of the vLLM code in the env it runs, and the
    model and drafter revisions. The same fingerprint of what is on disk now says what changed since
    (C(start_record.changed)) - a restart is observed, not remembered, and a file put back with its
    old time reads as changed.
  - The start record holds the unit as systemd loaded it - a start while systemd reported
    C(NeedDaemonReload) (a run wrote the unit and was killed before its daemon-reload, then vLLM
    crashed and systemd restarted the old unit from memory), or while that could not be read, is
    recorded so that C(start_record.changed) names C(unit). The unit's C(NeedDaemonReload) now is
    returned too (C(unit.need_daemon_reload)).
  - A record of another start (systemd's C(InvocationID) differs - it could not be written) or
    none falls back to times - a file written after systemd's C(ExecMainStartTimestampMonotonic)
    is a change (C(files)).
  - Whether the files the role renders (the unit, the env file) already hold what the controller
    rendered (O(rendered) - their digests, compared here, not a check-mode render per file), and
    whether the unit's environment would let another user decide what root's C(ExecStartPre)
    loads (O(unit_environment), O(unit_extra); judged as M(gpuserve.vllm.vllm_unit_boundary)
    does) - one read of the node for the whole serve plan.
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
  - gpuserve.vllm.attributes.READ_ONLY
options:
  service:
    description: The systemd unit of the server.
    type: str
    default: vllm.service
  unit_path:
    description: The unit file (its mtime).
    type: path
    default: /etc/systemd/system/vllm.service
  env_file:
    description: The unit's environment file (its mtime).
    type: path
    default: /etc/vllm/vllm.env
  link:
    description:
      - The stable env path the unit runs from (a symlink to the env that serves).
      - Empty when the server does not run from a managed env (nothing about envs is observed).
    type: path
    default: ""
  target:
    description: The env this run's pins describe (the prepare play's build dir); empty for none.
    type: path
    default: ""
  canary_service:
    description:
      - The transient unit the serve play's canary runs in; empty for none. One still running when
        this run starts was left by a killed run - it holds GPU memory a start needs.
    type: str
    default: ""
  restart_marker:
    description: The restart request file an earlier play leaves.
    type: path
    default: /var/lib/gpuserve/vllm_server.restart-pending
  nccl_conf:
    description:
      - NCCL's configuration file, read by every NCCL process at its start (its mtime); a change
        after the server started is a restart reason (the fleet would run mixed NCCL settings).
    type: path
    default: /etc/nccl.conf
  model_path:
    description:
      - The model path the server loads (a link gpuserve.vllm.vllm_weights switches, or a directory).
        Its own time (not its target's) after the server started is a restart reason - the server
        still runs the revision it loaded. Empty for none.
    type: path
    default: ""
  drafter_path:
    description: The same for the speculative drafter's path; empty for none.
    type: path
    default: ""
  start_record:
    description:
      - The start record the unit writes at every start (JSON, root-owned); empty to read only times.
    type: path
    default: /var/lib/gpuserve/vllm_server.start.json
  journal:
    description: The serve plan's journal (JSON) a run writes before it changes anything.
    type: path
    default: /var/lib/gpuserve/vllm_server.plan.json
  hold:
    description: The record a rollback on demand leaves (JSON).
    type: path
    default: /var/lib/gpuserve/vllm_server.rollback.json
  switch_record:
    description:
      - The record of the env link's last switches (JSON, root-owned), written by the serve plan's
        switch step before the link moves; what a rollback undoes is read from it. Empty to read none.
    type: path
    default: ""
  reboot_marker:
    description: The file gpuserve.vllm.gpu_node leaves when the node needs a reboot; empty for none.
    type: path
    default: ""
  acceptance_marker:
    description:
      - The file gpuserve.vllm.gpu_node leaves when node acceptance is due while the server runs
        (C(gpu_node_acceptance_marker)); empty for none.
    type: path
    default: ""
  health_url:
    description:
      - The server's C(/health) as this run configures it; empty to not ask.
      - A running server is read where its own argv says it listens (RV(listen)), with this URL's path.
    type: str
    default: http://127.0.0.1:8000/health
  metrics_url:
    description: The server's C(/metrics); empty to not ask.
    type: str
    default: http://127.0.0.1:8000/metrics
  timeout:
    description: Seconds for each HTTP request.
    type: int
    default: 3
  tries:
    description:
      - How many times C(/health) and C(/metrics) are read (1 s apart) while nothing answers in
        O(timeout) - a refused connection is an answer (nothing listens), a time-out is not.
      - A read still unanswered is returned as unknown (C(known) false), never as "not serving".
    type: int
    default: 3
  gpu_memory:
    description: Also read each GPU's total and free memory with nvidia-smi (for a canary beside the server).
    type: bool
    default: false
  nvidia_smi:
    description: The nvidia-smi command.
    type: str
    default: nvidia-smi
  rendered:
    description:
      - Files the role writes from templates, each compared with what the controller rendered -
        a regular file owned by root:root with O(rendered[].mode) and the content whose SHA-256
        is O(rendered[].sha256). Returned in RV(rendered).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The name it is returned under.
        type: str
        required: true
      path:
        description: The file.
        type: path
        required: true
      sha256:
        description: SHA-256 (hex) of the rendered content. Not logged (the env file holds secrets).
        type: str
        required: true
      mode:
        description: Its mode, octal (V(0600)).
        type: str
        required: true
  unit_environment:
    description:
      - The lines of the unit's C(EnvironmentFile=) (C(NAME="value"), as the C(systemd_env_lines)
        filter renders them), judged as M(gpuserve.vllm.vllm_unit_boundary) judges them. Never
        logged (secrets); a refusal names only the loader variables.
    type: list
    elements: str
    default: []
  unit_extra:
    description: More C([Service]) directives of the unit (C(vllm_server_unit_extra)); its C(Environment=) and C(EnvironmentFile=) are judged too.
    type: dict
    default: {}
notes:
  - Run it with become - reading another user's process and the state files needs root.
seealso:
  - module: gpuserve.vllm.vllm_health_wait
"""

EXAMPLES = r"""
- name: Observe the node
  gpuserve.vllm.vllm_node_state:
    link: /opt/ml-env
    target: /opt/ml-env.d/vllm-0.18.0-1a2b3c4d5e6f
  register: node

- name: Say which env runs
  ansible.builtin.debug:
    msg: "{{ node.process.env or 'nothing runs' }}"
"""

RETURN = r"""
unit:
  description:
    - C(load_state), C(active_state), C(sub_state), C(main_pid), C(n_restarts), C(started) (epoch seconds or null).
    - C(invocation) - systemd's C(InvocationID) of the running start (empty when none).
    - C(need_daemon_reload) - systemd's C(NeedDaemonReload) - true when the unit file or a drop-in
      on disk is not what systemd loaded; a running server then runs the unit systemd had in memory,
      a restart reason for the serve plan.
    - C(systemd) is false on a host systemd does not run (no C(/run/systemd/system)); the unit is then C(not-found) and nothing runs.
  returned: always
  type: dict
canary:
  description: The canary unit's C(load_state), C(active_state), C(sub_state), C(main_pid) (all empty or 0 without O(canary_service) or systemd).
  returned: always
  type: dict
process:
  description: C(pid), C(argv0), C(env) (real path of the env the running process uses, empty when none or unknown), C(note), C(started).
  returned: always
  type: dict
link:
  description: C(path), C(kind) (link, dangling, dir, absent, other), C(env) (real path).
  returned: always
  type: dict
previous:
  description: The same for C(<link>.previous).
  returned: always
  type: dict
target:
  description: C(path), C(env) (real path, empty when none), C(exists).
  returned: always
  type: dict
envs:
  description: For each env named above or in the journal (real path) - C(exists), C(built) (bin/vllm exists).
  returned: always
  type: dict
files:
  description:
    - mtimes (epoch seconds or null) of C(unit), C(env_file), C(restart_marker), C(nccl_conf), C(model) and
      C(drafter) (the paths themselves, a link's own time).
    - C(env_code) - when the vLLM code of the env the process runs last changed (its packages' C(*.dist-info)
      directories and the files under C(vllm/), bytecode left out); null when nothing runs or the
      start record is current (it is compared instead).
  returned: always
  type: dict
start_record:
  description:
    - C(path), C(present), C(current) (the record is the running start's own - the same systemd
      InvocationID), C(at) (when it was written, epoch seconds), C(env), C(vllm_version), C(model) and
      C(drafter) (the revisions that start loaded - real path and manifest digest or commits), C(error)
      (why a record found could not be read). Only a running server's own record is C(current).
    - C(changed) - with C(current), the names whose fingerprint now differs from the start's, of
      C(unit), C(env_file), C(nccl_conf), C(env_code), C(model), C(drafter); C(unreadable) - those
      whose file could not be read now (with why), neither changed nor unchanged.
  returned: always
  type: dict
journal:
  description: The journal a run left (null when none).
  returned: always
  type: dict
hold:
  description: The rollback hold (null when none).
  returned: always
  type: dict
switches:
  description:
    - The switches O(switch_record) holds, oldest first - C(from), C(to) (real paths), C(at) (epoch
      seconds, the controller's clock), C(rollback) (bool); empty without a record.
  returned: always
  type: list
  elements: dict
reboot:
  description: C(pending), C(reason), C(install) (the driver packages gpu_node staged; the serve play installs them on the stopped node before the reboot).
  returned: always
  type: dict
acceptance:
  description: C(pending), C(reason) - node acceptance gpu_node left for the serve play, which runs it on the drained, stopped node.
  returned: always
  type: dict
listen:
  description:
    - Where the running server was read - C(host) and C(port) from its own argv (C(--host), C(--port);
      vLLM's defaults when unset) with C(source) V(process), else O(health_url)'s with C(source)
      V(configured) - and the C(health_url) and C(metrics_url) read there. A server started before
      its port or host changed serves on the old address until its restart; it is read there, so
      it is seen serving (and drained) rather than taken for one that does not answer.
  returned: always
  type: dict
  sample: {host: "0.0.0.0", port: 8000, source: process, health_url: "http://127.0.0.1:8000/health", metrics_url: "http://127.0.0.1:8000/metrics"}
health:
  description: C(status) (HTTP status, null when nothing answered), C(error), C(known) (false when nothing could be told - a time-out, not a refusal), C(tries).
  returned: always
  type: dict
metrics:
  description:
    - C(reachable) (the gauges were read), C(known) (read, or known to have nothing - nothing listens or no gauges).
    - C(running), C(waiting), C(progress) (token counters summed), C(error), C(tries).
    - C(kv_cache_usage) (the fullest engine's, a fraction; null when not exported) and C(spec_decode)
      (C(drafts), C(draft_tokens), C(accepted_tokens) since the server started, summed over engines;
      null without speculative decoding).
  returned: always
  type: dict
rendered:
  description:
    - For each of O(rendered), by its name - C(same) (the file holds that content, owner and mode)
      and C(why) (what differs, empty when the same).
  returned: always
  type: dict
  sample: {unit: {same: true, why: ""}, env_file: {same: false, why: "content differs"}}
boundary:
  description:
    - C(problems) - one sentence for each variable of O(unit_environment) or O(unit_extra) that would
      let another user decide what root's C(ExecStartPre) commands load (empty when none); C(checked) -
      those variables that are set and were found safe; C(id) - a digest of what was judged (the
      loader variables O(unit_environment) sets, and O(unit_extra); never its other lines), so that a
      later check can tell that this read judged the environment it now has (the C(gpuserve.vllm.vllm_unit_boundary_id)
      filter names that one).
  returned: always
  type: dict
gpus:
  description: With O(gpu_memory), C(index), C(total_mib), C(free_mib) per GPU; empty otherwise or without nvidia-smi.
  returned: always
  type: list
  elements: dict
"""

import os
import stat
import time
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._env._pyenv import folder_problem, resolved_problem
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _nodestate as ns
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _startrecord as sr
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _unit_boundary
from ansible_collections.gpuserve.vllm.plugins.module_utils._gpu._nvidia_smi import memory_query_argv, parse_memory_csv
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._http import http_request
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._unit import parse_systemctl_show


# sd_booted(3): systemd runs the host exactly when this directory exists.
SYSTEMD_RUNTIME = "/run/systemd/system"


def _unit(module: AnsibleModule, service: str) -> dict:
    if not service or not os.path.isdir(SYSTEMD_RUNTIME):  # no systemd (a build container): no unit can run
        return dict(ns.unit_view({"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead"}, 0, 0),
                    systemd=False)
    argv = ["systemctl", "show", service] + [f"--property={p}" for p in ns.UNIT_FIELDS]
    rc, out, err = module.run_command(argv)
    mono, wall = ns.clocks()
    if rc != 0:
        module.fail_json(msg=f"systemctl show {service} failed (rc {rc}): {err.strip() or out.strip()}")
    return dict(ns.unit_view(parse_systemctl_show(out), mono, wall), systemd=True)


def _gpus(module: AnsibleModule, nvidia_smi: str) -> list:
    path = module.get_bin_path(nvidia_smi)
    if not path:
        return []
    rc, out, _err = module.run_command(memory_query_argv(path))
    return parse_memory_csv(out) if rc == 0 else []


def _read(url: str, timeout: int, tries: int, view: t.Callable[..., dict]) -> dict:
    """One of the server's endpoints, read again while nothing answers; not asked when empty."""
    if not url:
        return view(None, "not asked", "refused", 0)
    return view(*ns.probe(lambda: http_request(url, timeout=timeout), tries, lambda: time.sleep(1)))


def _rendered(path: str, sha256: str, mode: str) -> dict:
    """Whether path is a root:root regular file with this mode and content (what differs)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"same": False, "why": "missing"}
    except OSError as exc:
        return {"same": False, "why": f"unreadable: {exc.strerror}"}
    if not stat.S_ISREG(info.st_mode):
        return {"same": False, "why": "not a regular file"}
    digest = sr.file_digest(path)  # the start record's digest of the same files
    if not digest.startswith("sha256:"):
        return {"same": False, "why": "missing" if digest == "absent" else digest}
    whys = ["content differs"] if digest != "sha256:" + sha256.lower() else []
    if (info.st_uid, info.st_gid) != (0, 0):
        whys.append(f"owner {info.st_uid}:{info.st_gid}, not root:root")
    if stat.S_IMODE(info.st_mode) != int(mode, 8):
        whys.append(f"mode {stat.S_IMODE(info.st_mode):04o}, not {mode}")
    return {"same": not whys, "why": "; ".join(whys)}


def _boundary(environment: list, unit_extra: dict) -> dict:
    try:
        problems, checked = _unit_boundary.judge(environment, "vllm_server_env", unit_extra,
                                                 resolved_problem, folder_problem)
    except ValueError as exc:
        problems, checked = [str(exc)], []
    return {"problems": problems, "checked": checked, "id": _unit_boundary.judged_id(environment, unit_extra)}


def main() -> None:
    """Read everything, change nothing."""
    module = AnsibleModule(
        argument_spec={
            "service": {"type": "str", "default": "vllm.service"},
            "unit_path": {"type": "path", "default": "/etc/systemd/system/vllm.service"},
            "env_file": {"type": "path", "default": "/etc/vllm/vllm.env"},
            "link": {"type": "path", "default": ""},
            "target": {"type": "path", "default": ""},
            "canary_service": {"type": "str", "default": ""},
            "restart_marker": {"type": "path", "default": "/var/lib/gpuserve/vllm_server.restart-pending"},
            "nccl_conf": {"type": "path", "default": "/etc/nccl.conf"},
            "model_path": {"type": "path", "default": ""},
            "drafter_path": {"type": "path", "default": ""},
            "start_record": {"type": "path", "default": "/var/lib/gpuserve/vllm_server.start.json"},
            "journal": {"type": "path", "default": "/var/lib/gpuserve/vllm_server.plan.json"},
            "hold": {"type": "path", "default": "/var/lib/gpuserve/vllm_server.rollback.json"},
            "switch_record": {"type": "path", "default": ""},
            "reboot_marker": {"type": "path", "default": ""},
            "acceptance_marker": {"type": "path", "default": ""},
            "health_url": {"type": "str", "default": "http://127.0.0.1:8000/health"},
            "metrics_url": {"type": "str", "default": "http://127.0.0.1:8000/metrics"},
            "timeout": {"type": "int", "default": 3},
            "tries": {"type": "int", "default": 3},
            "gpu_memory": {"type": "bool", "default": False},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "rendered": {"type": "list", "elements": "dict", "default": [], "options": {
                "name": {"type": "str", "required": True},
                "path": {"type": "path", "required": True},
                "sha256": {"type": "str", "required": True, "no_log": True},
                "mode": {"type": "str", "required": True},
            }},
            "unit_environment": {"type": "list", "elements": "str", "default": [], "no_log": True},
            "unit_extra": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    for rendered in p["rendered"]:
        if not rendered["mode"].isdigit() or set(rendered["mode"]) - set("01234567"):
            module.fail_json(msg=f"rendered: {rendered['name']}: mode {rendered['mode']!r} is not octal (such as 0600)")
    link_path = os.path.abspath(p["link"]).rstrip("/") if p["link"] else ""
    unit = _unit(module, p["service"])
    canary = _unit(module, p["canary_service"])
    link = ns.link_view(link_path) if link_path else {"path": "", "kind": "absent", "env": ""}
    previous = ns.link_view(link_path + ".previous") if link_path else {"path": "", "kind": "absent", "env": ""}
    target_path = p["target"] or ""
    target = {"path": target_path, "exists": bool(target_path) and os.path.isdir(target_path),
              "env": os.path.realpath(target_path) if target_path and os.path.exists(target_path)
              else (os.path.normpath(target_path) if target_path else "")}
    try:
        journal = ns.read_record(p["journal"])
        hold = ns.read_record(p["hold"])
        switched = ns.read_record(p["switch_record"]) or {}
    except ns.StateError as exc:
        module.fail_json(msg=str(exc))
    process = {"pid": unit["main_pid"], "argv0": "", "env": "", "note": "", "started": unit["started"]}
    argv = ns.read_cmdline(unit["main_pid"]) if unit["main_pid"] > 0 else []
    if argv and link_path:
        process["argv0"] = argv[0]
        try:
            link_changed = os.lstat(link_path).st_mtime
        except OSError:
            link_changed = None
        process["env"], process["note"] = ns.process_env(argv, link_path, link_changed, unit["started"])
    named = [link["env"], previous["env"], target["env"], process["env"]]
    named += [str((journal or {}).get(k) or "") for k in ("from", "to", "previous", "rollback_to")]
    named += [str((hold or {}).get(k) or "") for k in ("from", "to")]
    switches = switched.get("switches") if isinstance(switched.get("switches"), list) else []
    named += [str(entry.get(k) or "") for entry in switches if isinstance(entry, dict) for k in ("from", "to")]
    listen = ns.listen_view(argv, p["health_url"], p["metrics_url"])
    health = _read(listen["health_url"], p["timeout"], p["tries"], ns.health_view)
    metrics = _read(listen["metrics_url"], p["timeout"], p["tries"], ns.metrics_view)
    alive = unit["main_pid"] > 0
    start_record = ns.start_view(p["start_record"], unit["invocation"] if alive else "", p["model_path"],
                                 p["drafter_path"], p["unit_path"], p["env_file"], p["nccl_conf"])
    module.exit_json(
        changed=False, unit=unit, canary={k: canary[k] for k in ("load_state", "active_state", "sub_state", "main_pid")},
        process=process, link=link, previous=previous, target=target,
        envs=ns.envs_view(named),
        files={"unit": ns.mtime(p["unit_path"]), "env_file": ns.mtime(p["env_file"]),
               "restart_marker": ns.mtime(p["restart_marker"]), "nccl_conf": ns.mtime(p["nccl_conf"]),
               "model": ns.link_mtime(p["model_path"]) if p["model_path"] else None,
               "drafter": ns.link_mtime(p["drafter_path"]) if p["drafter_path"] else None,
               "env_code": ns.code_mtime(process["env"]) if process["env"] and not start_record["current"] else None},
        start_record=start_record, journal=journal, hold=hold, switches=switches, reboot=ns.reboot_view(p["reboot_marker"]),
        acceptance=ns.acceptance_view(p["acceptance_marker"]),
        listen=listen, health=health, metrics=metrics, gpus=_gpus(module, p["nvidia_smi"]) if p["gpu_memory"] else [],
        rendered={r["name"]: _rendered(r["path"], r["sha256"], r["mode"]) for r in p["rendered"]},
        boundary=_boundary(p["unit_environment"], p["unit_extra"]),
    )


if __name__ == "__main__":
    main()
