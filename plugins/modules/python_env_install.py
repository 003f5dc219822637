#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: install pinned requirements into a Python environment with uv or pip."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: python_env_install
short_description: Install pinned requirements into a Python environment with uv or pip
version_added: 0.1.0
description:
  - Runs one C(uv pip install --python PYTHON ...) or C(PYTHON -m pip install ...) transaction
    for requirement lines and/or a requirements text, with the package sources given (find-links,
    index, no-index) and optionally without dependencies.
  - C(changed) is the installer's own report, read from its output (uv's C( + name==version),
    C( - ), C( ~ ) lines; pip's C(Successfully installed) / C(Successfully uninstalled)), so a
    second run with the same pins reports no change.
  - In check mode the installer runs with C(--dry-run) and the result says what it would change.
  - uv runs with C(--compile-bytecode), as pip compiles by default. The collection runs env
    interpreters with C(-B), so an env without bytecode would compile torch and vLLM from source on
    every preflight and import check.
  - The command is built from the options (no shell, no Jinja); the roles
    gpuserve.vllm.ml_env and gpuserve.vllm.vllm_install both install through this module.
options:
  python:
    description:
      - Interpreter of the environment to install into, for example V(/opt/ml-env/bin/python).
      - It must exist; the module does not create environments.
    type: path
    required: true
  installer:
    description:
      - V(uv) runs O(uv) with C(pip install --python) O(python); V(pip) runs the environment's
        own pip (C(python -m pip)).
    type: str
    choices: [uv, pip]
    default: uv
  uv:
    description: The uv executable. Required when O(installer=uv).
    type: path
  requirements:
    description: Requirement lines installed in the one transaction (for example V(vllm==0.17.0)).
    type: list
    elements: str
    default: []
  requirements_text:
    description:
      - Content of a requirements or lock file (C(uv pip compile --generate-hashes) output works),
        written to a temporary file on the node and passed with C(-r).
      - Lets check mode dry-run a file a template task has not written yet.
    type: str
  find_links:
    description: Directories or URLs passed as C(--find-links) (local wheel mirrors).
    type: list
    elements: str
    default: []
  index_url:
    description: C(--index-url); empty means the installer's default or its configuration.
    type: str
    default: ""
  extra_index_urls:
    description: C(--extra-index-url) values.
    type: list
    elements: str
    default: []
  no_index:
    description: C(--no-index); only O(find_links) are used (offline nodes).
    type: bool
    default: false
  no_deps:
    description: C(--no-deps); install the listed distributions only, not their dependencies.
    type: bool
    default: false
  hashes_from:
    description:
      - A wheelhouse built by gpuserve.vllm.python_wheelhouse (its C(gpuserve-wheelhouse.json)).
        The install is then two runs of the installer - an offline resolution (C(--dry-run)) says
        which distributions it takes, and those alone are installed with C(--no-deps
        --require-hashes), each pinned to the sha256 the manifest lists, so the installer checks
        every file as it reads it.
      - A distribution the resolution takes that the manifest does not list (another find-links
        folder, an index) fails the task before anything is installed, naming it.
      - Empty - the installer's own resolution and install, in one run.
    type: path
    default: ""
  uv_cache_dir:
    description: C(UV_CACHE_DIR) for uv; empty means uv's default.
    type: path
    default: ""
  uv_link_mode:
    description:
      - C(UV_LINK_MODE) for uv; empty means uv's default. V(copy) keeps in-place edits of
        installed files (gpuserve.vllm.python_patch) out of uv's cache.
    type: str
    choices: ["", copy, hardlink, symlink, clone]
    default: ""
  uv_native_tls:
    description: C(UV_NATIVE_TLS); trust the system CA store like pip does on Debian and Ubuntu.
    type: bool
    default: true
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: The installer runs with C(--dry-run) (pip 22.2 or later); nothing is written.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Exact pins are idempotent; an unpinned requirement may change when the index does.
  platform:
    platforms: posix
notes:
  - uv always runs with C(UV_PYTHON_DOWNLOADS=never) (it never fetches an interpreter of its own)
    and C(UV_NO_PROGRESS=1).
  - Removing a requirement does not uninstall the distribution.
"""

EXAMPLES = r"""
- name: Install the pinned vLLM into the ml-env with uv
  gpuserve.vllm.python_env_install:
    python: /opt/ml-env/bin/python
    uv: /opt/ml-env-tools/bin/uv
    requirements: ["vllm==0.17.0"]
    uv_cache_dir: /var/cache/gpuserve/uv
    uv_link_mode: copy

- name: Install vLLM from an air-gapped node's wheelhouse, every file checked against its manifest
  gpuserve.vllm.python_env_install:
    python: /opt/ml-env/bin/python
    uv: /opt/ml-env-tools/bin/uv
    requirements: [vllm==0.17.0]
    find_links: [/var/lib/gpuserve/wheelhouse]
    no_index: true
    hashes_from: /var/lib/gpuserve/wheelhouse

- name: Install a lock file's pins offline with the env's own pip
  gpuserve.vllm.python_env_install:
    python: /opt/ml-env/bin/python
    installer: pip
    requirements_text: "{{ lookup('ansible.builtin.file', 'requirements.lock') }}"
    find_links: [/srv/wheels]
    no_index: true
"""

RETURN = r"""
cmd:
  description:
    - The installer's command line (a temporary path stands for O(requirements_text)).
    - With O(hashes_from), the hashed install's (C(--require-hashes -r <lock>)), or the
      resolution's when it found nothing to install.
  returned: always
  type: list
  elements: str
  sample: ["/opt/ml-env-tools/bin/uv", "pip", "install", "--python", "/opt/ml-env/bin/python", "--compile-bytecode", "vllm==0.17.0"]
installed:
  description: Distributions installed (or, in check mode, that would be), PEP 503 names.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "vllm", "version": "0.17.0"}]
removed:
  description: Distributions removed, for example the old version of an upgrade.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "vllm", "version": "0.16.0"}]
reinstalled:
  description: Distributions uv reinstalled at the same version (its C( ~ ) lines).
  returned: always
  type: list
  elements: dict
stdout:
  description: The installer's standard output.
  returned: always
  type: str
stderr:
  description: The installer's standard error (uv's report is here).
  returned: always
  type: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _pyenv
from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _wheelhouse as wh


def _tail(text: str, lines: int = 8) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def main() -> None:
    """Build the command, run it (twice with hashes_from), report what the installer says it changed."""
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "installer": {"type": "str", "choices": list(_pyenv.INSTALLERS), "default": "uv"},
            "uv": {"type": "path"},
            "requirements": {"type": "list", "elements": "str", "default": []},
            "requirements_text": {"type": "str"},
            "find_links": {"type": "list", "elements": "str", "default": []},
            "index_url": {"type": "str", "default": ""},
            "extra_index_urls": {"type": "list", "elements": "str", "default": []},
            "no_index": {"type": "bool", "default": False},
            "no_deps": {"type": "bool", "default": False},
            "hashes_from": {"type": "path", "default": ""},
            "uv_cache_dir": {"type": "path", "default": ""},
            "uv_link_mode": {"type": "str", "default": "",
                             "choices": ["", "copy", "hardlink", "symlink", "clone"]},
            "uv_native_tls": {"type": "bool", "default": True},
        },
        required_if=[("installer", "uv", ("uv",))],
        supports_check_mode=True,
    )
    p = module.params
    python, installer = p["python"], p["installer"]
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        module.fail_json(msg=f"python: no interpreter at {python}; create the environment first "
                             f"(gpuserve.vllm.ml_env does) or point python at it")
    # uv runs the interpreter too (to ask it what it is), pip is the environment's own.
    problem = _pyenv.untrusted_interpreter(python)
    if problem:
        module.fail_json(msg=problem)
    if installer == "uv" and not (os.path.isfile(p["uv"]) and os.access(p["uv"], os.X_OK)):
        module.fail_json(msg=f"uv: no executable at {p['uv']}; gpuserve.vllm.ml_env installs uv "
                             f"there, or use installer: pip")

    env = _pyenv.uv_environment(p["uv_cache_dir"], p["uv_link_mode"], p["uv_native_tls"]) \
        if installer == "uv" else {}
    with tempfile.TemporaryDirectory(prefix="gpuserve-install-") as tmp:
        files = []
        if p["requirements_text"] is not None:
            files.append(os.path.join(tmp, "requirements.txt"))
            with open(files[0], "w", encoding="utf-8") as handle:
                handle.write(p["requirements_text"])
        hashed = bool(p["hashes_from"])
        argv, rc, out, err = _run(module, p["requirements"], files, dry_run=module.check_mode or hashed, env=env)
        report = _pyenv.parse_install_report(installer, out, err)
        if hashed and not module.check_mode and report["installed"]:
            try:
                lock = wh.hashed_lock(wh.load_manifest(p["hashes_from"]), report["installed"], p["hashes_from"])
            except wh.WheelhouseError as exc:
                module.fail_json(msg=f"hashes_from: {exc}. Nothing was installed into the environment of {python}.",
                                 cmd=argv, stdout=out, stderr=err)
            lock_path = os.path.join(tmp, "hashed-lock.txt")
            with open(lock_path, "w", encoding="utf-8") as handle:
                handle.write(lock)
            argv, rc, out, err = _run(module, [], [lock_path], no_deps=True, require_hashes=True, env=env)
            report = _pyenv.parse_install_report(installer, out, err)
    module.exit_json(changed=_pyenv.report_changed(report), cmd=argv, stdout=out, stderr=err, **report)


def _run(module: AnsibleModule, packages: list, files: list, *, env: dict, dry_run: bool = False,
         no_deps: bool | None = None, require_hashes: bool = False) -> tuple[list, int, str, str]:
    """One run of the installer with the module's sources; a failure ends the module, naming it."""
    p = module.params
    try:
        argv = _pyenv.install_argv(
            p["installer"], p["python"], packages, uv=p["uv"] or "", requirements_files=files,
            find_links=p["find_links"], index_url=p["index_url"], extra_index_urls=p["extra_index_urls"],
            no_index=p["no_index"], no_deps=p["no_deps"] if no_deps is None else no_deps, dry_run=dry_run,
            require_hashes=require_hashes)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    rc, out, err = module.run_command(argv, environ_update=env)
    if rc != 0:
        module.fail_json(msg=f"{p['installer']} could not install into the environment of {p['python']} "
                             f"(rc={rc}): {_tail(err or out)}",
                         rc=rc, cmd=argv, stdout=out, stderr=err)
    return argv, rc, out, err


if __name__ == "__main__":
    main()
