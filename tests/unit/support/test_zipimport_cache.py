"""tests/containers/zipimport_cache.py, the test images' bytecode cache for Ansible's module
payloads: a real AnsiballZ run fills and then uses it, a cached entry is what runs (with this
run's file name in its tracebacks), and only root's payload zips in a root-only directory use it."""

import marshal
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

CONTAINERS = Path(__file__).resolve().parents[2] / "containers"


def run_with_hook(cache, code, **env):
    """A Python that loaded the hook, as the images' .pth line makes every python3 there."""
    return subprocess.run(
        [sys.executable, "-c", f"import zipimport_cache\n{code}"],
        env={**os.environ, "PYTHONPATH": str(CONTAINERS), "GPUSERVE_TEST_ZIPIMPORT_CACHE": str(cache), **env},
        capture_output=True, text=True, check=False)


def payload(tmp_path, name, source):
    archive = tmp_path / name
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("gpuserve_zip_probe/__init__.py", "")
        zipped.writestr("gpuserve_zip_probe/probe.py", source)
    return archive


IMPORT = "import sys; sys.path.insert(0, {archive!r}); from gpuserve_zip_probe import probe; print(probe.VALUE)"


def test_the_second_import_runs_the_cached_code_under_this_runs_file_name(tmp_path):
    cache = tmp_path / "cache"
    source = "VALUE = 'compiled'\ndef where():\n    raise RuntimeError('here')\n"
    first = payload(tmp_path, "ansible_ping_payload.zip", source)
    assert run_with_hook(cache, IMPORT.format(archive=str(first))).stdout == "compiled\n"
    entries = list(cache.iterdir())
    assert len(entries) == 2 and oct(cache.stat().st_mode & 0o777) == "0o700"

    # The entry stands in for the source: what it holds is what runs.
    entry = next(path for path in entries if "where" in marshal.loads(path.read_bytes()).co_names)
    stand_in = "VALUE = 'cached'\ndef where():\n    raise RuntimeError('here')\n"
    entry.write_bytes(marshal.dumps(compile(stand_in, "/old/ansible_ping_payload.zip/x.py", "exec")))
    other_dir = tmp_path / "run2"
    other_dir.mkdir()
    second = payload(other_dir, "ansible_ping_payload.zip", source)
    shown = run_with_hook(cache, IMPORT.format(archive=str(second)) + "\nprobe.where()")
    assert shown.stdout == "cached\n"
    assert f'File "{second}/gpuserve_zip_probe/probe.py"' in shown.stderr and "/old/" not in shown.stderr

    # Other content is another entry.
    payload(tmp_path, "ansible_ping_payload.zip", "VALUE = 'changed'\n")
    assert run_with_hook(cache, IMPORT.format(archive=str(first))).stdout == "changed\n"
    assert len(list(cache.iterdir())) == 3


@pytest.mark.parametrize("case", ["not a payload zip", "cache open to others"])
def test_anything_else_compiles_as_python_does(tmp_path, case):
    cache = tmp_path / "cache"
    name = "ansible_ping_payload.zip"
    if case == "not a payload zip":
        name = "library.zip"
    else:
        cache.mkdir()
        cache.chmod(0o777)
    archive = payload(tmp_path, name, "VALUE = 'compiled'\n")
    assert run_with_hook(cache, IMPORT.format(archive=str(archive))).stdout == "compiled\n"
    assert not cache.exists() or not list(cache.iterdir())


def test_a_real_ansiballz_module_fills_the_cache_once_and_runs_from_it(tmp_path):
    cache = tmp_path / "cache"
    interpreter = tmp_path / "python3"
    interpreter.write_text(f"#!/bin/sh\nPYTHONPATH={CONTAINERS} GPUSERVE_TEST_ZIPIMPORT_CACHE={cache} "
                           f"exec {sys.executable} -c 'import zipimport_cache, runpy, sys; "
                           "sys.argv[0] = \"-\"; exec(compile(sys.stdin.read(), \"<stdin>\", \"exec\"))' \"$@\"\n")
    interpreter.chmod(0o755)
    command = ["ansible", "localhost", "-m", "ansible.builtin.ping", "-e", f"ansible_python_interpreter={interpreter}"]
    env = {**os.environ, "ANSIBLE_PIPELINING": "1", "ANSIBLE_LOCALHOST_WARNING": "0"}
    first = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert '"ping": "pong"' in first.stdout, first.stdout + first.stderr
    filled = sorted(path.name for path in cache.iterdir())
    assert len(filled) > 20  # basic.py and what it imports
    second = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert '"ping": "pong"' in second.stdout, second.stdout + second.stderr
    assert sorted(path.name for path in cache.iterdir()) == filled
