# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What root's ExecStartPre commands of the vLLM unit load from the unit's environment, decided.

Why: the unit runs two commands as root before every start (ExecStartPre=+): the start record
script (`python3 -I -B`) and `/bin/sh -c nvidia-modprobe`. systemd gives them the unit's
Environment= and EnvironmentFile= as it gives vLLM, and cannot unset a variable for one command;
`env -i` does not help either, since the dynamic loader reads LD_PRELOAD before `env` runs. So a
variable that makes the loader, libc, OpenSSL or the shell load a file is refused when the file,
or a folder on the way to it, is one another user (the service user) could change. PYTHON*
variables are not among them: `python3 -I` ignores every one, and nothing else root runs there is
Python. The caller says which paths another user could change (predicates), so the decision is a
pure function; judge() reads only the EnvironmentFile=s it is told of. Stdlib only, no Ansible
imports: gpuserve.vllm.vllm_unit_boundary and gpuserve.vllm.vllm_node_state (the serve plan's one
read of the node) both judge with it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._preflight import unit_environment

# name -> (what reads it, whether it names folders whose entries are loaded, separators)
ROOT_LOADED: dict[str, tuple[str, bool, str]] = {
    "LD_PRELOAD": ("the dynamic loader loads these libraries into every root command", False, ": "),
    "LD_AUDIT": ("the dynamic loader loads these audit libraries into every root command", False, ":"),
    "LD_LIBRARY_PATH": ("the dynamic loader looks for every library of a root command here first", True, ":;"),
    "GCONV_PATH": ("glibc loads character set converters (shared objects) from here", True, ":"),
    "LOCPATH": ("glibc reads locale data from here", True, ":"),
    "LD_DEBUG_OUTPUT": ("the dynamic loader writes its debug output here, as root", False, ""),
    "LD_PROFILE_OUTPUT": ("the dynamic loader writes its profile here, as root", False, ""),
    "OPENSSL_CONF": ("OpenSSL reads this configuration (it can load any module) in Python's hashlib", False, ""),
    "OPENSSL_MODULES": ("OpenSSL loads provider modules (shared objects) from here", True, ""),
    "OPENSSL_ENGINES": ("OpenSSL loads engines (shared objects) from here", True, ""),
    "BASH_ENV": ("a bash /bin/sh runs this file before nvidia-modprobe", False, ""),
    "ENV": ("a POSIX /bin/sh may run this file before nvidia-modprobe", False, ""),
}
_ENVIRONMENT_ITEM = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.DOTALL)


def extra_environment(unit_extra: t.Mapping[str, t.Any]) -> tuple[dict[str, str], list[str]]:
    """The variables vllm_server_unit_extra's Environment= lines set, and its EnvironmentFile=s.

    Environment= values are split as systemd does for the usual quoting (shlex: whitespace,
    double and single quotes); an EnvironmentFile= loses its leading '-' (a missing file is fine).
    """
    found: dict[str, str] = {}
    files: list[str] = []
    for name, value in unit_extra.items():
        values = value if isinstance(value, list) else [value]
        if name == "Environment":
            for line in values:
                for item in shlex.split(str(line)):
                    match = _ENVIRONMENT_ITEM.match(item)
                    if match:
                        found[match.group("name")] = match.group("value")
        elif name == "EnvironmentFile":
            files += [str(line).lstrip("-") for line in values if str(line).strip("-")]
    return found, files


def _entries(value: str, separators: str) -> list[str]:
    """The entries of a list variable, empty ones kept (they mean the working directory)."""
    if not separators:
        return [value]
    return re.split("[" + re.escape(separators) + "]", value)


def _why_entry(entry: str, folders: bool, name: str,
               writable: t.Callable[[str], str], folder_writable: t.Callable[[str], str]) -> str:
    """Why this one entry lets another user decide what root loads ('' when it does not)."""
    if entry == "":  # in a search path, the working directory; between two libraries, nothing
        return "an empty entry means the working directory (the service user's home)" if folders else ""
    if "$" in entry:
        return f"{entry!r} holds a $ token the loader expands (such as $ORIGIN)"
    if not entry.startswith("/"):
        if name in ("LD_PRELOAD", "LD_AUDIT") and "/" not in entry:
            return ""  # a bare name is looked up on the loader's search path, checked on its own
        return f"{entry} is relative: ExecStartPre runs in the service user's home"
    return folder_writable(entry) if folders else writable(entry)


def root_command_problems(env: t.Mapping[str, str], writable: t.Callable[[str], str],
                          folder_writable: t.Callable[[str], str], source: str) -> list[str]:
    """The refusals for variables of env that would let another user decide what root's
    ExecStartPre commands load: one sentence each, naming the variable, its value and why.

    writable(path) says why another user could change path or a folder above it ('' when none
    can); folder_writable(path) the same, and also for the entries directly in a folder. source
    names where the variable was set (a role variable), for the fix.
    """
    problems = []
    for name in sorted(env):
        if name not in ROOT_LOADED or env[name] == "":
            continue
        reads, folders, separators = ROOT_LOADED[name]
        value = env[name]
        whys = [why for entry in _entries(value, separators)
                for why in [_why_entry(entry, folders, name, writable, folder_writable)] if why]
        if whys:
            problems.append(
                f"{name}={value} ({source}): {whys[0]}. The unit runs commands as root before every "
                f"start of vLLM with its environment, and {reads}: the service user could make "
                f"root run its code. Point {name} only at root-owned files in folders only root "
                "can write, or leave it out")
    return problems


def _environment_file(path: str, writable: t.Callable[[str], str], problems: list[str]) -> dict[str, str]:
    """The variables of an EnvironmentFile=, after refusing one another user could change."""
    why = writable(path)
    if why:
        problems.append(f"vllm_server_unit_extra's EnvironmentFile={path}: {why}. Root's "
                        "ExecStartPre commands take its variables: keep it root's, in folders "
                        "only root can write")
        return {}
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            return unit_environment(handle.read().splitlines())
    except (OSError, ValueError) as exc:
        problems.append(f"vllm_server_unit_extra's EnvironmentFile={path} cannot be judged: {exc}")
        return {}


def judge(environment: t.Sequence[str], environment_variable: str, unit_extra: t.Mapping[str, t.Any],
          writable: t.Callable[[str], str], folder_writable: t.Callable[[str], str]) -> tuple[list[str], list[str]]:
    """(problems, checked): the refusals for the unit's environment (its EnvironmentFile lines,
    from environment_variable) and unit_extra's Environment= and EnvironmentFile=s, and the
    root-loaded variables that were set and found safe. ValueError for a line that is not
    NAME=value (naming its number only: the line may hold a secret)."""
    env = unit_environment(environment)
    extra, files = extra_environment(unit_extra)
    problems: list[str] = []
    sources = [(env, environment_variable), (extra, "vllm_server_unit_extra's Environment")]
    sources += [(_environment_file(path, writable, problems), f"EnvironmentFile={path}") for path in files]
    checked: set[str] = set()
    for variables, source in sources:
        problems += root_command_problems(variables, writable, folder_writable, source)
        checked.update(name for name in variables if name in ROOT_LOADED)
    return problems, sorted(checked)


def judged_id(environment: t.Sequence[str], unit_extra: t.Mapping[str, t.Any]) -> str:
    """A name for what judge() decides from: the root-loaded variables the lines set, and
    unit_extra. The controller names the run's environment with it and the read returns it, so
    the checks can tell a read that judged another environment. Only what is judged goes in:
    the other lines (the API key, tokens) never reach the digest, shown as it is at -v."""
    try:
        judged: t.Any = {name: value for name, value in unit_environment(environment).items() if name in ROOT_LOADED}
    except ValueError:
        judged = None  # judge() refuses such lines; the id only has to be the same on both sides
    text = json.dumps([judged, dict(unit_extra)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
