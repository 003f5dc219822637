#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Let the installed vLLM judge the serve command line before the unit is touched."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_serve_preflight
short_description: Have the installed vLLM judge a C(vllm serve) command line before it runs
version_added: 0.1.0
description:
  - Runs a probe with the interpreter of the environment vLLM is installed in (O(python)); the
    probe makes vLLM's own C(vllm serve) argument parser parse exactly O(argv) (then the serve
    subcommand's own C(validate)), builds vLLM's model config from the checkpoint's
    C(config.json) and its C(SpeculativeConfig) with the drafter's C(config.json), without
    reading any weights, and goes on to C(create_engine_config) as far as the machine allows.
  - Checks that the EAGLE drafter was built for the target's hidden size (vLLM sizes the
    drafter's C(fc) layer from the drafter's C(target_hidden_size), else its C(hidden_size)).
  - Derives what only fails on the GPUs from the installed vLLM's code, with no table kept here;
    the attention backends vLLM's CUDA platform would choose between for the node's compute
    capability are asked, through their own C(validate_configuration), whether they take the
    model's attention (MLA or not, head size, dtype) with the requested KV-cache dtype; with
    none left, vLLM would stop with "No valid attention backend found". The target and the
    drafter are checked.
  - A refusal names the variable(s), the vLLM version and the fix. It takes seconds (vLLM's
    import dominates), and it starts, stops and changes nothing, so a running server is left
    alone.
  - Every check is reported on its own in RV(checks) as passed, refused, or not run with the
    reason (RV(not_run)), e.g. the attention backends on a machine with neither an NVIDIA driver
    library nor the CUDA stub library; the other verdicts stand. On a GPU node every check runs,
    and a check that does not is a warning.
  - The probe runs with the unit's environment (O(unit_environment)) over the module's own, so
    what vLLM reads from it (C(VLLM_ALLOW_LONG_MAX_MODEL_LEN), C(VLLM_ATTENTION_BACKEND), ...) is
    judged as the server would see it. The values reach the probe through its environment only,
    never its command line.
  - Root never reads what the service user may write. The caches the unit points into the
    service's directory (C(XDG_CACHE_HOME), C(VLLM_CACHE_ROOT), C(HF_HOME) and the other Hugging
    Face caches, C(TRITON_CACHE_DIR), C(TORCHINDUCTOR_CACHE_DIR), C(CUDA_CACHE_PATH), ...) are
    root's own under O(scratch_dir) in the probe; C(PYTHONPYCACHEPREFIX) and the other
    C(PYTHON*) variables that name code are left out (the env's own root-owned bytecode is read);
    any other variable naming a path another user could change is left out. RV(boundary) lists
    both. A model or drafter that is not a local directory would be read from the service's
    Hugging Face cache, so the checks that need its C(config.json) are reported as not run.
  - A Python file vLLM imports (C(--tool-parser-plugin), C(--reasoning-parser-plugin), on the
    command line or in the C(--config) file) is refused before the probe when a user other than
    root owns or could write it or a folder above it; the message names the variable, the file
    and the owner or mode found.
  - With C(--trust-remote-code), a model or drafter directory that another user owns or could
    write, or whose files directly in it (C(config.json), the checkpoint's C(*.py)) another user
    owns or could write, is not read, since vLLM would import the checkpoint's Python as root. The
    checks that build its configs are reported as not run, with the reason, and RV(boundary)
    lists the directory in C(untrusted_checkpoints); the parser check still runs. Give the
    checkpoint to root for those checks to run.
  - When vLLM is installed without its dependencies (rehearsals with C(vllm_install_no_deps)),
    it says that it was skipped and why, and does not fail.
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
  - gpuserve.vllm.attributes.read_only
options:
  python:
    description: Interpreter of the environment vLLM is installed in (the ml-env's C(bin/python)).
    type: path
    required: true
  argv:
    description:
      - The command line the unit runs, program first (C([/opt/ml-env/bin/vllm, serve, MODEL,
        --flag, value, ...])), exactly as rendered for C(ExecStart=).
    type: list
    elements: str
    required: true
  compute_capability:
    description:
      - The node's GPU compute capability (C(12.0) on RTX PRO 6000 Blackwell), used when the probe
        cannot ask the GPU itself (no GPU or no driver). A detected GPU wins.
      - Empty, with no GPU detected, skips the attention-backend check (and says so).
    type: str
    default: ""
  extra_flags:
    description: Flags that came from C(vllm_server_extra_flags), so refusals name that variable.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds the probe may take before the module fails.
    type: int
    default: 300
  fail_on_problems:
    description: Fail when vLLM would refuse the configuration. V(false) only returns the problems.
    type: bool
    default: true
  unit_environment:
    description:
      - The lines of the unit's C(EnvironmentFile=) (C(NAME="value"), as the C(systemd_env_lines)
        filter renders them), which the probe runs with. May hold secrets (API key, tokens), so
        it is never logged; a secret's value (a name with C(TOKEN), C(KEY), C(SECRET) or C(PASSWORD)) never
        enters the verdict cache key, only that it is set.
    type: list
    elements: str
    default: []
  cuda_stub:
    description:
      - Without an NVIDIA driver library (C(libcuda.so.1) cannot be loaded, as in CI or a
        rehearsal with all dependencies), load vLLM's compiled ops against NVIDIA's CUDA stub library when the
        env ships one (a C(libcuda) whose C(cuInit) answers C(CUDA_ERROR_STUB_LIBRARY), e.g. the
        one in C(pynvvideocodec), a vLLM 0.33 dependency), so that the attention-backend check
        can run; RV(notes) names it. Nothing runs on a GPU either way.
      - V(false), or no stub in the env, reports the attention-backend check as not run there
        when vLLM's CUDA platform needs the driver library at import (vLLM >= 0.33).
      - Ignored where C(libcuda.so.1) loads (a GPU node).
    type: bool
    default: true
  scratch_dir:
    description:
      - Root's own cache directory for the probe (vLLM's C(modelinfos), Hugging Face, triton,
        ...), in place of the service's caches the unit environment names. Created 0700, kept
        between runs; the module fails when another user owns or could change it or a folder
        above it. Check mode creates nothing; while it does not exist, a temporary directory
        stands in.
    type: path
    default: /var/cache/gpuserve/preflight
  cache_dir:
    description:
      - Directory of the verdict cache (created 0700, owned by the user running the module). An
        accepted verdict is stored there; a later run with the same O(argv), O(extra_flags),
        O(compute_capability), the same vLLM install (every file of the vLLM package by path,
        size, mtime and inode; every installed distribution's C(RECORD)), the same C(*.json) and
        C(*.py)/C(*.jinja) files in the model's and drafter's directories (also when named inside
        a JSON argument such as C(--speculative-config)), the same bytes of every file the argv
        names (C(--chat-template), C(--config) and what it names at any depth, read as YAML,
        C(--tool-parser-plugin)), the
        same interpreter, unit environment, environment and GPUs, and the same collection code
        returns it in well under a second (RV(cached)). Any change judges again.
      - Refusals, skips, crashes and verdicts with a check not run are never stored. Check mode reads the cache but never
        writes it. Empty disables the cache. Remove the directory to force a new judgement.
    type: path
    default: ""
notes:
  - The CUDA buffers some attention backend modules allocate at import go to torch's C(meta)
    device, so the probe takes no GPU memory next to a running server.
  - Without a GPU the probe uses vLLM's CPU platform to build the parser (as C(vllm bench)
    does) and reads only the backend priority list of vLLM's CUDA platform module (its compiled
    ops loaded against the CUDA stub library, see O(cuda_stub), or stubbed as a Python module
    where the release allows it). Every such stand-in is listed in RV(notes).
  - On a machine without a GPU, C(create_engine_config) may stop on CPU-only limits; that is
    reported in RV(notes), not as a refusal.
seealso:
  - module: gpuserve.vllm.vllm_weights_check
"""

EXAMPLES = r"""
- name: Let vLLM judge the command line before the unit changes
  gpuserve.vllm.vllm_serve_preflight:
    python: /opt/ml-env/bin/python
    argv: "{{ __vllm_server_argv }}"
    compute_capability: "12.0"
    extra_flags: "{{ vllm_server_extra_flags | list }}"
"""

RETURN = r"""
skipped:
  description: True when the probe could not run vLLM (not installed, or without its dependencies).
  returned: always
  type: bool
  sample: false
skip_reason:
  description: Why nothing was checked.
  returned: when skipped
  type: str
  sample: "vLLM 0.17.0 is installed without its dependencies (No module named 'torch'); ..."
vllm_version:
  description: The installed vLLM's version.
  returned: when vLLM is installed
  type: str
  sample: "0.17.0"
compute_capability:
  description: The compute capability the backends were judged for.
  returned: when not skipped
  type: str
  sample: "12.0"
checks:
  description:
    - Every check with its C(status) (V(passed), V(refused) or V(not run)) and what vLLM said or
      why it could not run; C(ok) is true when passed, false when refused, null when not run.
  returned: when not skipped
  type: list
  elements: dict
  sample:
    - name: attention-backend-target
      ok: true
      status: passed
      detail: "target (KimiK25Config, MLA, head size 576, KV cache auto): TRITON_MLA on compute capability 12.0"
not_run:
  description: The checks that could not run on this machine, each with C(name) and C(reason).
  returned: when not skipped
  type: list
  elements: dict
  sample:
    - name: attention-backend-target
      reason: "vLLM 0.33.0's CUDA platform needs the NVIDIA driver library: libcuda.so.1: cannot open shared object file"
problems:
  description: The refusals, each with the variables, vLLM's message and the fix.
  returned: when not skipped
  type: list
  elements: dict
notes:
  description: What could not be judged on this machine, and the stand-ins used without a GPU.
  returned: when not skipped
  type: list
  elements: str
timings:
  description: Seconds per stage of the probe (import vllm, parser, configs, attention backends).
  returned: when not skipped
  type: dict
  sample: {"import vllm": 8.8, "parser": 8.6, "configs": 12.1, "attention backends": 3.2}
seconds:
  description: Wall time of the probe (of the cache lookup for a cached verdict).
  returned: always
  type: float
  sample: 12.4
cached:
  description: True when the verdict came from O(cache_dir) instead of a new judgement by vLLM.
  returned: always
  type: bool
  sample: false
cache:
  description: What the verdict cache did (cached verdict and when it was judged, stored, or why not).
  returned: when O(cache_dir) is set
  type: str
  sample: "stored in /var/lib/gpuserve/vllm_preflight/3f5c....json"
boundary:
  description:
    - What of the unit environment the probe did not take as it is. C(redirected) lists the cache
      variables (C(name), the C(service) value, the C(probe) value under O(scratch_dir)),
      C(left_out) the variables the probe ran without (C(name), C(reason)). A secret's value is
      never shown.
    - C(untrusted_checkpoints) lists the model and drafter (C(role), C(reason)) whose configs
      were not built because C(--trust-remote-code) would import their Python as root and
      another user could change it.
  returned: always, except when the module fails before the probe
  type: dict
  sample:
    scratch_dir: /var/cache/gpuserve/preflight
    redirected:
      - name: VLLM_CACHE_ROOT
        service: /var/cache/vllm/vllm
        probe: /var/cache/gpuserve/preflight/vllm
    left_out:
      - name: PYTHONPYCACHEPREFIX
        reason: "PYTHONPYCACHEPREFIX=/var/cache/vllm/pycache names code or bytecode a child interpreter would load; root's interpreters never take it"
    untrusted_checkpoints:
      - role: model
        reason: "/srv/models/Kimi-K2.5 (/srv/models/Kimi-K2.5 is owned by vllm (uid 990))"
cache_key:
  description: The key the verdict is (or would be) stored under.
  returned: when O(cache_dir) is set and the fingerprint could be taken
  type: str
"""

import inspect
import json
import os
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils import _saferead
from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _pyenv
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import (
    _preflight_backends,
    _preflight_boundary as boundary,
    _preflight_cache as cache,
    _preflight_key,
    _preflight_probe,
    _preflight_stub,
)
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._preflight import (
    flag_variables,
    refusal_message,
    unit_environment,
)

# The scripts' own sources (from the AnsiballZ payload on the node), run by the ml-env python;
# the probe imports its stages from files of their own names beside it, and both the probe's
# directory and the key's hold _saferead.py, through which the key reads the checkpoints.
PROBE = inspect.getsource(_preflight_probe)
STAGES = {f"{stage.__name__.rsplit('.', 1)[-1]}.py": inspect.getsource(stage)
          for stage in (_preflight_backends, _preflight_stub, _saferead)}
KEY = inspect.getsource(_preflight_key)


def run_probe(python: str, request: dict, timeout: int, source: str = PROBE,
              env: dict | None = None) -> dict:
    """Run a script's source with `python` on a request; its result, or a crash description.

    The script is a file in a 0700 temp directory, the probe's stages (STAGES) beside it (the
    probe may re-run itself with the CUDA stub library on its loader path); `env` (the unit's)
    goes over the module's environment.
    """
    with tempfile.TemporaryDirectory(prefix="gpuserve-preflight-") as tmp:
        request = dict(request, result_path=os.path.join(tmp, "result.json"))
        request_path = os.path.join(tmp, "request.json")
        script = os.path.join(tmp, "gpuserve_preflight.py")
        with open(request_path, "w", encoding="utf-8") as handle:
            json.dump(request, handle)
        with open(script, "w", encoding="utf-8") as handle:
            handle.write(source)
        for name, text in STAGES.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as handle:
                handle.write(text)
        argv, changes = _pyenv.isolated_call(python, [script, request_path],
                                             dict(env or {}, VLLM_LOGGING_LEVEL="ERROR"))
        started = time.monotonic()
        try:
            proc = subprocess.run(argv, env=dict(os.environ, **changes), cwd=tmp,
                                  capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"crashed": True, "error": f"the probe took longer than {timeout} s"}
        seconds = round(time.monotonic() - started, 2)
        if not os.path.exists(request["result_path"]):
            tail = proc.stderr.decode("utf-8", "replace")[-3000:]
            return {"crashed": True, "seconds": seconds,
                    "error": f"{python} exited {proc.returncode} without a result: {tail}"}
        with open(request["result_path"], encoding="utf-8") as handle:
            result = json.load(handle)
        result["seconds"] = seconds
        return result


def fingerprint(python: str, argv: list, timeout: int,
                env: dict | None = None) -> tuple[dict | None, str]:
    """What the verdict depends on, read by the ml-env python; (None, why) when that failed."""
    found = run_probe(python, {"argv": argv}, timeout, KEY, env)
    if found.pop("crashed", False):
        return None, f"verdict cache not used: the fingerprint failed: {found.get('error')}"
    found.pop("seconds", None)
    return found, ""


def store(module: AnsibleModule, key: str, before: dict, result: dict, env: dict) -> str:
    """Store an accepted verdict, unless check mode or the install changed while it was judged."""
    why = cache.why_not_cacheable(result, before)
    if why:
        return f"not stored: {why}"
    if module.check_mode:
        return "not stored: check mode never writes the verdict cache"
    params = module.params
    after, note = fingerprint(params["python"], params["argv"], params["timeout"], env)
    if after != before:
        return note or "not stored: vLLM's files or the checkpoints changed while vLLM judged"
    try:
        return f"stored in {cache.write_entry(params['cache_dir'], key, result)}"
    except (OSError, ValueError) as exc:
        module.warn(f"the verdict cache {params['cache_dir']} could not be written: {exc}")
        return f"not stored: {exc}"


def main() -> None:
    """Return a cached verdict, or run the probe; then fail with every refusal or return it."""
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "argv": {"type": "list", "elements": "str", "required": True},
            "compute_capability": {"type": "str", "default": ""},
            "extra_flags": {"type": "list", "elements": "str", "default": []},
            "timeout": {"type": "int", "default": 300},
            "fail_on_problems": {"type": "bool", "default": True},
            "cache_dir": {"type": "path", "default": ""},
            "unit_environment": {"type": "list", "elements": "str", "default": [],
                                 "no_log": True},
            "cuda_stub": {"type": "bool", "default": True},
            "scratch_dir": {"type": "path", "default": boundary.SCRATCH_DIR},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not os.access(params["python"], os.X_OK):
        module.fail_json(msg=f"python={params['python']} is not an executable interpreter: point "
                             "it at the ml-env's bin/python (ml_env_dir)")
    problem = _pyenv.untrusted_interpreter(params["python"])
    if problem:
        module.fail_json(msg=problem)
    argv = params["argv"]
    try:
        unit_env = unit_environment(params["unit_environment"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    config = _preflight_key.config_file(argv)
    problems = boundary.code_problems(boundary.code_files(argv, config), _pyenv.resolved_problem,
                                      flag_variables(argv, params["extra_flags"]))
    if problems:
        module.fail_json(msg="; ".join(problems))
    named = _preflight_key.checkpoints(argv, config)
    untrusted = (boundary.remote_code_models(named, _pyenv.folder_problem, os.path.isdir)
                 if boundary.trusts_remote_code(argv, config) else {})
    # Check mode creates nothing: without the scratch directory, this run's caches go to the
    # module's own temp directory (the verdict cache then misses: its key names the directory).
    scratch = params["scratch_dir"]
    if module.check_mode and not os.path.isdir(scratch):
        scratch = os.path.join(module.tmpdir, "scratch")
    try:
        boundary.prepare_scratch(scratch, _pyenv.path_problem)
    except boundary.ScratchError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"the preflight's scratch directory {scratch} cannot be created: {exc}")
    crossing = boundary.probe_environment(unit_env, _pyenv.path_problem, scratch)
    env = crossing.env
    started = time.monotonic()
    key, before, note = "", None, ""
    if params["cache_dir"]:
        before, note = fingerprint(params["python"], argv, params["timeout"], env)
        if before is not None:
            key = cache.cache_key(before, argv, params["extra_flags"], params["compute_capability"],
                                  cache.code_digest(PROBE, *STAGES.values(), KEY), env)
            entry, note = cache.read_entry(params["cache_dir"], key)
            if entry is not None:
                module.exit_json(changed=False, boundary=crossing.report(scratch, untrusted),
                                 **cache.cached_result(entry, key, time.monotonic() - started))
    request = {"argv": argv, "compute_capability": params["compute_capability"],
               "variables": flag_variables(argv, params["extra_flags"]),
               "cuda_stub": params["cuda_stub"],
               "unread_models": boundary.unread_models(named, os.path.isdir),
               "untrusted_models": untrusted}
    result = run_probe(params["python"], request, params["timeout"], PROBE, env)
    if params["cache_dir"]:
        stored = store(module, key, before, result, env) if key else note
        result.update(cache=(note + "; " if note and key else "") + stored, cache_key=key)
    result.update(changed=False, cached=False, boundary=crossing.report(scratch, untrusted))
    if result.pop("crashed", False):
        module.fail_json(msg=f"the vLLM preflight probe crashed: {result.get('error')}", **result)
    if result.get("skipped"):
        module.exit_json(**result)
    if result.get("gpu"):
        for check in result.get("not_run") or []:
            module.warn(f"vLLM preflight check {check['name']} did not run on this GPU node: "
                        f"{check['reason']}")
    if result.get("problems") and params["fail_on_problems"]:
        module.fail_json(msg=refusal_message(result), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
