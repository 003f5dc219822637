# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Facts about a Python environment, read without importing anything installed in it.

Why: later roles (vllm_install, eagle3_patches) must know which vLLM is installed without
importing vllm (importing it pulls torch and CUDA, takes seconds and may fail on a node without a
GPU). importlib.metadata only reads the dist-info folders. The small script below runs under the
environment's own interpreter; everything else here is pure functions for the module and tests.

Root runs these interpreters, so every run goes through isolated_call: a clean command line and
environment, and a refusal of an interpreter whose files another user could change.

Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import re
import stat
import typing as t

# Runs as `<env python> -I -B -c INSPECT_SCRIPT` (isolated_call): -I ignores PYTHONPATH and the user
# site, so the answer is about the environment itself. Only importlib.metadata is used: nothing installed in the
# environment is imported.
INSPECT_SCRIPT = r"""
import json, sys
from importlib import metadata
pkgs = {}
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    if name:
        pkgs.setdefault(name, dist.version)
print(json.dumps({
    "python_version": "%d.%d.%d" % sys.version_info[:3],
    "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "executable": sys.executable,
    "packages": pkgs,
}))
"""

_NAME_SEP = re.compile(r"[-_.]+")
_SPEC = re.compile(r"^\s*(===|~=|==|!=|<=|>=|<|>)\s*([0-9][0-9A-Za-z.*+!-]*)\s*$")
_RELEASE = re.compile(r"^(?:\d+!)?(\d+(?:\.\d+)*)")


class SpecifierError(ValueError):
    """A version specifier this module cannot evaluate (the message says which)."""


def normalize_name(name: str) -> str:
    """PEP 503 name: 'Flash_Attn' and 'flash-attn' are the same distribution."""
    return _NAME_SEP.sub("-", name).lower()


def normalize_packages(packages: t.Mapping[str, str]) -> dict[str, str]:
    """Map every distribution name to its PEP 503 form (first seen wins, as on sys.path)."""
    out: dict[str, str] = {}
    for name, version in packages.items():
        out.setdefault(normalize_name(name), version)
    return out


def parse_inspect_output(text: str) -> dict[str, t.Any]:
    """Decode INSPECT_SCRIPT's output; the last non-empty line is the JSON document."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the interpreter printed nothing")
    data = json.loads(lines[-1])
    data["packages"] = normalize_packages(data.get("packages") or {})
    return data


def release_tuple(version: str) -> tuple[int, ...]:
    """The numeric release part of a version: '3.12.3' -> (3, 12, 3), '2.10.0rc1' -> (2, 10, 0)."""
    match = _RELEASE.match(version.strip())
    if not match:
        raise SpecifierError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def _pad(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def _clause_allows(op: str, target: str, version: tuple[int, ...]) -> bool:
    if target.endswith(".*"):
        if op not in ("==", "!="):
            raise SpecifierError(f"a wildcard is only allowed with == or !=: {op}{target}")
        prefix = release_tuple(target[:-2])
        same = version[: len(prefix)] == prefix
        return same if op == "==" else not same
    wanted = release_tuple(target)
    if op == "~=":
        if len(wanted) < 2:
            raise SpecifierError(f"~= needs at least two release parts: ~={target}")
        lo, ver = _pad(wanted, version)
        return ver >= lo and version[: len(wanted) - 1] == wanted[:-1]
    ver, want = _pad(version, wanted)
    return {
        "==": ver == want,
        "===": ver == want,
        "!=": ver != want,
        "<=": ver <= want,
        ">=": ver >= want,
        "<": ver < want,
        ">": ver > want,
    }[op]


def specifier_allows(specifier: str, version: str) -> bool:
    """Whether a release such as '3.11.2' satisfies a Requires-Python specifier such as
    '>=3.10,<3.14' (PEP 440 comparison of the numeric release; enough for interpreter versions).
    An empty specifier allows everything."""
    ver = release_tuple(version)
    for clause in specifier.split(","):
        if not clause.strip():
            continue
        match = _SPEC.match(clause)
        if not match:
            raise SpecifierError(f"cannot read the version specifier clause {clause.strip()!r}")
        if not _clause_allows(match.group(1), match.group(2), ver):
            return False
    return True


def select_packages(packages: t.Mapping[str, str],
                    wanted: t.Iterable[str] | None) -> tuple[dict[str, str], list[str]]:
    """Limit the package map to the wanted names (any spelling); also return the missing ones."""
    if wanted is None:
        return dict(packages), []
    selected: dict[str, str] = {}
    missing: list[str] = []
    for name in wanted:
        key = normalize_name(name)
        if key in packages:
            selected[key] = packages[key]
        else:
            missing.append(key)
    return selected, missing


def pin_name(requirement: str) -> str:
    """Distribution name of a requirement line: 'vllm[audio]==0.17.0' -> 'vllm'."""
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise ValueError(f"not a requirement: {requirement!r}")
    return normalize_name(match.group(1))


# --- running an environment's interpreter as root

# -I: PYTHON* variables, the user site and the script's (or the working) directory are ignored;
# -B: nothing is written into the environment's __pycache__ folders.
ISOLATED_FLAGS = ("-I", "-B")
# Set for the interpreter's children too (they do not inherit -I; vLLM starts
# `sys.executable -m vllm.model_executor.models.registry`): no script or working directory on
# sys.path, no user site, no bytecode written.
_ISOLATED_ENV = {"PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
# The only PYTHON* variables extra_env may set: they change how output is encoded or shown, never
# which code runs. Every other one (PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, PYTHONUSERBASE,
# PYTHONPYCACHEPREFIX, PYTHONEXECUTABLE, PYTHONPLATLIBDIR, PYTHONBREAKPOINT, ...) names code or
# bytecode to load; a child without -I would honour it while the parent (-I) did not.
HARMLESS_PYTHON_ENV = frozenset({"PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8",
                                 "PYTHONFAULTHANDLER", "PYTHONWARNINGS", "PYTHONHASHSEED"})


def isolated_environment(extra_env: t.Mapping[str, str] | None = None,
                         environ: t.Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The environment changes of isolated_call, and the names of extra_env it dropped.

    Every PYTHON* variable of the caller is blanked (an empty one counts as unset), the
    isolation's own are set, and extra_env is added except the PYTHON* variables that could
    decide which code a child interpreter runs: those are dropped, always (nothing root runs
    needs them, and the caller's own are blanked the same way).
    """
    environ = os.environ if environ is None else environ
    changes = {name: "" for name in environ if name.startswith("PYTHON")}
    dropped = []
    for name, value in (extra_env or {}).items():
        if name.startswith("PYTHON") and name not in HARMLESS_PYTHON_ENV:
            dropped.append(name)
            continue
        changes[name] = value
    changes.update(_ISOLATED_ENV)
    return changes, sorted(dropped)


class UntrustedInterpreter(ValueError):
    """Another user could change what an interpreter runs; the message names the path and owner."""


def _user(uid: int) -> str:
    try:
        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except KeyError:
        return "uid %d" % uid


def _entry_problem(path: str, info: os.stat_result, trusted: t.Collection[int],
                   ancestor: bool) -> str:
    """Why another user could change what path holds ('' when nobody but the trusted can)."""
    if info.st_uid not in trusted:
        return "%s is owned by %s" % (path, _user(info.st_uid))
    if stat.S_ISLNK(info.st_mode):
        return ""  # a link's own mode means nothing; its owner was checked, its target is next
    sticky_dir = ancestor and stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
    if info.st_mode & stat.S_IWOTH and not sticky_dir:
        return "%s is writable by every user (mode %04o)" % (path, stat.S_IMODE(info.st_mode))
    if info.st_mode & stat.S_IWGRP and info.st_gid != 0 and not sticky_dir:
        return "%s is writable by group %d (mode %04o)" % (path, info.st_gid,
                                                           stat.S_IMODE(info.st_mode))
    return ""


def path_problem(path: str, trusted: t.Collection[int] | None = None) -> str:
    """The first folder from / down to path, or path itself, that another user (not root, not
    this process's user, unless trusted says who) could change; '' when there is none."""
    trusted = {0, os.geteuid()} if trusted is None else trusted
    names = [name for name in os.path.abspath(path).split(os.sep) if name]
    chain = [os.sep] + [os.sep + os.sep.join(names[:end]) for end in range(1, len(names) + 1)]
    for index, current in enumerate(chain):
        try:
            info = os.lstat(current)  # folders above are followed: their targets are checked
        except FileNotFoundError:
            return ""  # nothing there to run
        problem = _entry_problem(current, info, trusted, ancestor=index < len(chain) - 1)
        if problem:
            return problem
    return ""


def resolved_problem(path: str, trusted: t.Collection[int] | None = None) -> str:
    """path_problem for path, then for what it resolves to (a link's target, wherever it is)."""
    return path_problem(path, trusted) or path_problem(os.path.realpath(path), trusted)


def folder_problem(path: str, trusted: t.Collection[int] | None = None) -> str:
    """resolved_problem(path), then, for a folder, each entry directly in it (the files a loader
    or an import picks from there; a link's target too): the first one another user could
    change; '' when none."""
    trusted = {0, os.geteuid()} if trusted is None else trusted
    problem = resolved_problem(path, trusted)
    if problem or not os.path.isdir(path):
        return problem
    with os.scandir(path) as found:
        entries = sorted(entry.path for entry in found)
    for entry in entries:
        try:
            info = os.lstat(entry)
        except FileNotFoundError:
            continue
        problem = _entry_problem(entry, info, trusted, ancestor=False)
        if not problem and stat.S_ISLNK(info.st_mode):  # what it picks up is the link's target
            problem = path_problem(os.path.realpath(entry), trusted)
        if problem:
            return problem
    return ""


def _site_dirs(prefix: str) -> list[str]:
    """The site-packages folders of the virtual environment at prefix."""
    found = glob.glob(os.path.join(glob.escape(prefix), "lib*", "python*", "site-packages"))
    return sorted({os.path.realpath(path) for path in found})


def untrusted_interpreter(python: str, trusted: t.Collection[int] | None = None) -> str:
    """Why root must not run python ('' when only root, or whoever runs this, could change it).

    Checks every folder from / down to the interpreter (its link and its target), and for a
    virtual environment its pyvenv.cfg, its site-packages folders and what is directly in them:
    the .pth files and start-up modules Python runs before any script, and the packages' top
    folders. The trees below those are kept root's by gpuserve.vllm.python_env_protect.
    """
    trusted = {0, os.geteuid()} if trusted is None else set(trusted)
    chains = [python, os.path.realpath(python)]
    folders: list[str] = []
    prefix = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(python))))
    if os.path.isfile(os.path.join(prefix, "pyvenv.cfg")):
        chains.append(os.path.join(prefix, "pyvenv.cfg"))
        folders = _site_dirs(prefix)
    problem = next(filter(None, [path_problem(path, trusted) for path in chains]
                          + [folder_problem(path, trusted) for path in folders]), "")
    if not problem:
        return ""
    return ("root does not run %s: %s, so another user could change what it runs. Give the "
            "environment back to root (gpuserve.vllm.ml_env does) and run again" % (python, problem))


def isolated_call(python: str, args: t.Sequence[str] = (),
                  extra_env: t.Mapping[str, str] | None = None,
                  environ: t.Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The argv and the environment changes for running python as root, after refusing it when
    another user could change what it runs (UntrustedInterpreter).

    The changes (isolated_environment) blank every PYTHON* variable of the caller, keep the
    children of python (which do not get -I) isolated too, and add extra_env without the PYTHON*
    variables that name code: pass them as run_command's environ_update, or as
    env=dict(os.environ, **changes).
    """
    problem = untrusted_interpreter(python)
    if problem:
        raise UntrustedInterpreter(problem)
    changes, _dropped = isolated_environment(extra_env, environ)
    return [python, *ISOLATED_FLAGS, *args], changes


# --- installing into an environment: one command line for uv and pip, and their change reports

INSTALLERS = ("uv", "pip")
# uv never fetches an interpreter of its own, and prints no progress bars into the task result.
_UV_FIXED_ENV = {"UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
# uv (stderr): " + six==1.17.0", " - six==1.16.0", " ~ six==1.17.0", optionally "(from file://...)".
_UV_CHANGE = re.compile(r"^ ([-+~]) ([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
# pip (stdout): "Successfully installed a-1.0 b-2.0", "Would install a-1.0", "Successfully uninstalled a-1.0".
_PIP_CHANGE = re.compile(r"^\s*(Successfully installed|Would install|Successfully uninstalled) (.+)$")


def install_argv(installer: str, python: str, packages: t.Sequence[str] = (), *,
                 uv: str = "", requirements_files: t.Sequence[str] = (),
                 find_links: t.Sequence[str] = (), index_url: str = "",
                 extra_index_urls: t.Sequence[str] = (), no_index: bool = False,
                 no_deps: bool = False, dry_run: bool = False, require_hashes: bool = False) -> list[str]:
    """The `uv pip install` / `python -m pip install` argv for one transaction (no shell).

    uv is told the environment with --python; pip is the environment's own (python -m pip).
    uv is asked to compile bytecode, as pip does by default: root runs env interpreters with -B
    (they never write into an env), so without it every preflight and import check compiled
    torch and vLLM from source again (a 0.18.0 preflight: 76 s instead of 36 s on 2 cores).
    """
    if installer == "uv":
        if not uv:
            raise ValueError("installer uv needs the path of the uv executable")
        argv = [uv, "pip", "install", "--python", python]
        if not dry_run:
            argv.append("--compile-bytecode")
    elif installer == "pip":
        argv = [python, "-I", "-m", "pip", "install", "--disable-pip-version-check"]
    else:
        raise ValueError(f"installer must be one of {', '.join(INSTALLERS)}, not {installer!r}")
    argv += [f"--find-links={link}" for link in find_links]
    if index_url:
        argv.append(f"--index-url={index_url}")
    argv += [f"--extra-index-url={url}" for url in extra_index_urls]
    if no_index:
        argv.append("--no-index")
    if no_deps:
        argv.append("--no-deps")
    if require_hashes:
        argv.append("--require-hashes")
    if dry_run:
        argv.append("--dry-run")
    for path in requirements_files:
        argv += ["-r", path]
    if not packages and not requirements_files:
        raise ValueError("nothing to install: give requirement lines or a requirements file")
    return argv + list(packages)


def uv_environment(cache_dir: str = "", link_mode: str = "", native_tls: bool = True) -> dict[str, str]:
    """Environment variables of a uv run (UV_CACHE_DIR, UV_LINK_MODE, UV_NATIVE_TLS and the fixed ones)."""
    env = dict(_UV_FIXED_ENV)
    if cache_dir:
        env["UV_CACHE_DIR"] = cache_dir
    if link_mode:
        env["UV_LINK_MODE"] = link_mode
    env["UV_NATIVE_TLS"] = "1" if native_tls else "0"
    return env


def _pip_dist(token: str) -> dict[str, str]:
    """'huggingface-hub-0.36.0' -> name huggingface-hub, version 0.36.0 (versions hold no '-')."""
    name, version = token.rsplit("-", 1)
    return {"name": normalize_name(name), "version": version}


def parse_install_report(installer: str, stdout: str, stderr: str) -> dict[str, list[dict[str, str]]]:
    """What the installer says it changed (or, in a dry run, would change).

    uv lists every change on stderr (` + `, ` - `, ` ~ ` lines); pip prints "Successfully
    installed" / "Would install" / "Successfully uninstalled" lines on stdout. Nothing listed
    means nothing changed, which is the installer's own judgement, not ours.
    """
    report: dict[str, list[dict[str, str]]] = {"installed": [], "removed": [], "reinstalled": []}
    if installer == "uv":
        key = {"+": "installed", "-": "removed", "~": "reinstalled"}
        for line in stderr.splitlines():
            match = _UV_CHANGE.match(line)
            if match:
                report[key[match.group(1)]].append(
                    {"name": normalize_name(match.group(2)), "version": match.group(3)})
        return report
    for line in stdout.splitlines():
        match = _PIP_CHANGE.match(line)
        if match:
            where = "removed" if match.group(1).endswith("uninstalled") else "installed"
            report[where] += [_pip_dist(token) for token in match.group(2).split()]
    return report


def report_changed(report: t.Mapping[str, t.Sequence[t.Any]]) -> bool:
    """Whether an install report lists any change."""
    return any(report.get(key) for key in ("installed", "removed", "reinstalled"))
