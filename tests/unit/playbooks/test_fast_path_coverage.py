"""site.yml's fast path covers everything the prepare play converges.

The fast path skips gpu_node, ml_env, vllm_install, eagle3_patches and the wheelhouse copy when
the node reads as the last full run left it. That is only true if the read covers every place
those roles write. This test parses their task files: each task that can change the node names
its target (dest/path/creates, or the module's own target parameters), and each target's
variable must be read by the fast path (playbooks/vars/fast_path.yml), or be listed below with where it lies
within something read. A module this test does not know fails it: say what it changes first.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PREPARE_ROLES = ("gpu_node", "ml_env", "vllm_install", "eagle3_patches", "wheelhouse")
FAST_PATH = REPO / "playbooks" / "vars" / "fast_path.yml"

# Built-in modules and the parameters that name a path on the node (read or written).
BUILTIN_PATHS = {
    "file": ("path",), "copy": ("dest",), "template": ("dest",), "get_url": ("dest",),
    "unarchive": ("dest",), "command": ("creates", "removes", "chdir"), "stat": ("path",),
    "slurp": ("src",), "find": ("paths",),
}
# Built-in modules that name no path on the node.
BUILTIN_NO_PATH = {
    "assert", "debug", "fail", "set_fact", "include_tasks", "include_vars", "include_role",
    "import_tasks", "setup", "service_facts", "meta", "tempfile",
    # the running kernel, not a file: a reboot gpu_node_kernel_cmdline_plan owes is decided from
    # gpu_node_grub_cfg and the drop-in, which are read
    "reboot",
}
# Modules whose target is not a path: the artefact that shows their change.
SYSTEM_TARGETS = {
    "apt": "/var/lib/dpkg/status", "package": "/var/lib/dpkg/status",
    # refreshes apt's lists only so that a package can be installed: what is installed shows there
    "apt_lists": "/var/lib/dpkg/status",
    "user": "/etc/passwd", "group": "/etc/group",
    "systemd_service": "gpu_node_persistenced_service",
}
# Paths within something the fast path reads, or that decide nothing a converged node needs, and why.
COVERED_ELSEWHERE = {
    "ml_env_build_dir": "an env in ml_env_store_dir, read as a tree",
    "__ml_env_requirements_path": "in the env being built, inside ml_env_store_dir",
    "__vllm_install_python": "vllm_install_env_dir's interpreter: the env this run builds, in ml_env_store_dir",
    "vllm_install_env_dir": "site.yml wires it to ml_env_build_dir, inside ml_env_store_dir",
    "eagle3_patches_python": "site.yml wires it to ml_env_build_dir/bin/python, inside ml_env_store_dir",
    "__ml_env_link": "the condition of ml_env_dir's protection (a folder, not a link); ml_env_dir is read",
    "gpu_node_nccl_tests_tmp": "a temporary folder, removed by the same task file",
    "wheelhouse_path": "site.yml wires it to ml_env_wheelhouse, read as a tree",
    "item": "the wheelhouse role's loop over files in wheelhouse_path (ml_env_wheelhouse)",
    "/usr/sbin/update-grub": "part of the grub package: /var/lib/dpkg/status",
    "gpu_node_reboot_marker": "site.yml wires it to __gpuserve_reboot_marker, whose existence turns the fast path off (unless_exists)",
    "gpu_node_acceptance_marker": "site.yml wires it to __gpuserve_acceptance_marker, whose existence turns the fast path off (unless_exists)",
    "/proc/stat": "the running kernel's boot time: decides only whether a reboot is owed for gpu_node_grub_cfg, which is read",
    "gpu_node_nccl_tests_cuda_home": "nvcc, from a package (/var/lib/dpkg/status)",
    "gpu_node_nccl_tests_nccl_home": "nccl.h, from a package (/var/lib/dpkg/status)",
    "ml_env_uv_cache_dir": "uv's download cache: what is installed from it is in the env",
    "vllm_install_uv_cache_dir": "site.yml wires it to ml_env_uv_cache_dir (a cache)",
    "vllm_install_uv": "site.yml wires it to ml_env_tools_dir/bin/uv, read as a tree",
    "vllm_install_wheelhouse": "site.yml wires it to ml_env_wheelhouse, read as a tree",
    "__ml_env_hashes_from": "ml_env_wheelhouse (its SHA256SUMS), read as a tree",
    "__vllm_install_hashes_from": "vllm_install_wheelhouse = ml_env_wheelhouse (its SHA256SUMS), read as a tree",
    "wheelhouse_source": "on the controller (delegated): gpuserve_wheelhouse_source's listing is in the inputs",
}
# Module parameters that name a path only a guard reads: vllm_node_state tells whether a running
# vLLM uses an env, to refuse changing it; on a node as recorded there is no change to refuse.
# ml_env_prune's records only keep envs from its removal: a node the fast path leaves prunes nothing.
GUARDS = {("vllm_node_state", "link"), ("ml_env_prune", "protect_records")}
# Commands that change something without `creates`, and where what they change lies.
COMMANDS = {
    "Build nccl-tests (MPI=0, the node's CUDA and NCCL, the GPUs' architecture)": "gpu_node_nccl_tests_tmp",
    "Install the build into its versioned directory": "gpu_node_nccl_tests_install_dir",
    "Regenerate the GRUB configuration": "gpu_node_grub_cfg",
}
# Task files never run on a node the fast path leaves (and why).
NEVER_ON_FAST_PATH = {
    "gpu_node/driver.yml": "gpu_node_driver_install: true turns the fast path off",
    "gpu_node/after_reboot.yml": "the serve plays run it after their reboot",
}


def _collection_paths(module: str) -> tuple:
    """A gpuserve.vllm module's options of type path (or lists of paths), from its DOCUMENTATION."""
    source = (REPO / "plugins" / "modules" / f"{module}.py").read_text()
    documentation = yaml.safe_load(re.search(r'DOCUMENTATION = r"""(.*?)"""', source, re.S).group(1))
    return tuple(name for name, option in (documentation.get("options") or {}).items()
                 if "path" in (option.get("type"), option.get("elements")))


_VARIABLE = re.compile(r"\b([a-z_][a-z0-9_]*)\b")
_JINJA = re.compile(r"{{(.*?)}}", re.S)
_NOT_VARIABLES = {"default", "dirname", "basename", "if", "else", "and", "or", "not", "is", "in",
                  "true", "false", "none", "omit", "path", "stat", "isdir", "islnk", "length", "bin", "python"}


def _variables(value) -> set:
    """The variables a parameter's value is made of ({{ ... }} expressions), or the literal path."""
    texts = value if isinstance(value, list) else [value]
    found = set()
    for text in texts:
        text = str(text)
        expressions = _JINJA.findall(text)
        if not expressions:
            found.add(text)
        for expression in expressions:
            found |= {name for name in _VARIABLE.findall(re.sub(r"'[^']*'", "", expression))
                      if name not in _NOT_VARIABLES}
    return found


def _tasks(node, where):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item, where)
    elif isinstance(node, dict):
        if any(key in node for key in ("block", "rescue", "always")):
            for key in ("block", "rescue", "always"):
                yield from _tasks(node.get(key, []), where)
        else:
            yield where, node


def _fast_path_reads():
    text = FAST_PATH.read_text()
    fast_path = yaml.safe_load(text)
    reads = set()
    for entry in fast_path["__gpuserve_converged_artefacts"]:
        reads |= _variables(entry.get("path") or entry.get("name"))
    for optional in ("__gpuserve_converged_wheelhouse", "__gpuserve_converged_eagle3"):
        reads |= _variables(fast_path[optional])
    return reads


def _changing_tasks():
    for role in PREPARE_ROLES:
        for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml")):
            where = f"{role}/{path.name}"
            if where in NEVER_ON_FAST_PATH:
                continue
            for file, task in _tasks(yaml.safe_load(path.read_text()) or [], where):
                yield file, task


def _paths_named(where, task):
    """(module, path variables or literal paths the task names on the node)."""
    key = next(k for k in task if "." in k and k.split(".")[0] in ("ansible", "gpuserve", "community"))
    namespace, module = key.rsplit(".", 1)
    args = task[key] if isinstance(task[key], dict) else {}
    if namespace == "gpuserve.vllm":
        parameters = _collection_paths(module)
    elif module in BUILTIN_PATHS:
        parameters = BUILTIN_PATHS[module]
    else:
        assert module in BUILTIN_NO_PATH or module in SYSTEM_TARGETS, (
            f"{where}: {task.get('name')!r} uses {key}, which this test does not know: say which of "
            "its parameters name paths on the node (BUILTIN_PATHS) or what it changes (SYSTEM_TARGETS)")
        parameters = ()
    named = set()
    for parameter in parameters:
        if args.get(parameter) and (module, parameter) not in GUARDS:
            named |= _variables(args[parameter])
    if module == "command" and task.get("changed_when") is not False and not args.get("creates"):
        assert task.get("name") in COMMANDS, (
            f"{where}: {task.get('name')!r} may change something and has no `creates`: say where (COMMANDS)")
        named.add(COMMANDS[task["name"]])
    return module, named


def test_every_path_the_prepare_roles_name_is_read_by_the_fast_path():
    """Written or read to decide: a change there is a change the next run must not skip."""
    reads = _fast_path_reads()
    missing = []
    for where, task in _changing_tasks():
        module, named = _paths_named(where, task)
        if module in SYSTEM_TARGETS and SYSTEM_TARGETS[module] not in reads:
            missing.append(f"{where}: {task.get('name')!r} ({module}) changes {SYSTEM_TARGETS[module]}, not read")
        for path in sorted(named - reads - set(COVERED_ELSEWHERE)):
            missing.append(f"{where}: {task.get('name')!r} ({module}) names {path}, which the fast path does not read")
    assert not missing, "\n".join(missing)


def test_what_is_said_to_be_covered_elsewhere_is_still_named():
    """No stale excuse: every entry above names a path some task still names."""
    named = set()
    for where, task in _changing_tasks():
        named |= _paths_named(where, task)[1]
    assert set(COVERED_ELSEWHERE) - named == set()


@pytest.mark.parametrize("removed", ["ml_env_store_dir", "gpu_node_nccl_conf_path", "/var/lib/dpkg/status"])
def test_a_read_left_out_of_fast_path_yml_is_caught(removed, monkeypatch):
    reads = _fast_path_reads()
    assert removed in reads
    monkeypatch.setattr(sys.modules[__name__], "_fast_path_reads", lambda: reads - {removed})
    with pytest.raises(AssertionError, match=re.escape(removed)):
        test_every_path_the_prepare_roles_name_is_read_by_the_fast_path()
