"""Tables for the pure helpers behind python_env_facts, plus one run of the real script."""

from __future__ import annotations

import glob
import json
import os
import pwd
import py_compile
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _pyenv


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("vllm", "vllm"),
        ("Flash_Attn", "flash-attn"),
        ("flashinfer.python", "flashinfer-python"),
        ("a-_.b", "a-b"),
    ],
)
def test_normalize_name(name: str, expected: str) -> None:
    assert _pyenv.normalize_name(name) == expected


@pytest.mark.parametrize(
    ("specifier", "version", "expected"),
    [
        # vLLM 0.16-0.18 declare Requires-Python: <3.14,>=3.10
        ("<3.14,>=3.10", "3.11.2", True),
        ("<3.14,>=3.10", "3.12.3", True),
        ("<3.14,>=3.10", "3.9.18", False),
        ("<3.14,>=3.10", "3.14.0", False),
        ("<3.14,>=3.10", "3.13.9", True),
        ("", "2.7.18", True),
        (">=3.10", "3.10", True),
        (">3.10", "3.10.0", False),
        (">3.10", "3.10.1", True),
        ("<=3.12", "3.12.0", True),
        ("<=3.12", "3.12.1", False),
        ("==3.11.*", "3.11.9", True),
        ("==3.11.*", "3.12.0", False),
        ("!=3.11.*", "3.11.9", False),
        ("!=3.12.0", "3.12.1", True),
        ("~=3.11", "3.12.0", True),
        ("~=3.11", "4.0.0", False),
        ("~=3.11.2", "3.11.9", True),
        ("~=3.11.2", "3.12.0", False),
        ("==3.11", "3.11.0", True),
        (" >= 3.10 , < 3.14 ", "3.12.3", True),
    ],
)
def test_specifier_allows(specifier: str, version: str, expected: bool) -> None:
    assert _pyenv.specifier_allows(specifier, version) is expected


@pytest.mark.parametrize(
    ("specifier", "version"),
    [("python3", "3.11.2"), (">=3.*", "3.11.2"), ("~=3", "3.11.2"), (">=3.10", "abc")],
)
def test_specifier_errors(specifier: str, version: str) -> None:
    with pytest.raises(_pyenv.SpecifierError):
        _pyenv.specifier_allows(specifier, version)


@pytest.mark.parametrize(
    ("version", "expected"),
    [("3.12.3", (3, 12, 3)), ("2.10.0rc1", (2, 10, 0)), ("1!2.0", (2, 0)), ("0.17.0+cu129", (0, 17, 0))],
)
def test_release_tuple(version: str, expected: tuple[int, ...]) -> None:
    assert _pyenv.release_tuple(version) == expected


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        ("vllm==0.17.0", "vllm"),
        ("vllm[audio] == 0.17.0", "vllm"),
        ("flashinfer_python>=0.6", "flashinfer-python"),
        ("Six", "six"),
        ("  idna ; python_version > '3'", "idna"),
    ],
)
def test_pin_name(requirement: str, expected: str) -> None:
    assert _pyenv.pin_name(requirement) == expected


def test_pin_name_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        _pyenv.pin_name("==1.0")


@pytest.mark.parametrize(
    ("wanted", "expected", "missing"),
    [
        (None, {"vllm": "0.17.0", "six": "1.16.0"}, []),
        ([], {}, []),
        (["VLLM"], {"vllm": "0.17.0"}, []),
        (["vllm", "torch"], {"vllm": "0.17.0"}, ["torch"]),
    ],
)
def test_select_packages(wanted: list[str] | None, expected: dict[str, str],
                         missing: list[str]) -> None:
    packages = {"vllm": "0.17.0", "six": "1.16.0"}
    assert _pyenv.select_packages(packages, wanted) == (expected, missing)


def test_parse_inspect_output_normalises_and_takes_last_line() -> None:
    doc = {"python_version": "3.11.2", "prefix": "/opt/ml-env", "base_prefix": "/usr",
           "executable": "/opt/ml-env/bin/python",
           "packages": {"Flash_Attn": "2.8.0", "flash-attn": "0.1", "six": "1.16.0"}}
    out = "a warning printed by a sitecustomize\n" + json.dumps(doc) + "\n\n"
    data = _pyenv.parse_inspect_output(out)
    assert data["packages"] == {"flash-attn": "2.8.0", "six": "1.16.0"}
    assert data["python_version"] == "3.11.2"


def test_parse_inspect_output_empty() -> None:
    with pytest.raises(ValueError):
        _pyenv.parse_inspect_output("\n \n")


def test_inspect_script_on_this_interpreter() -> None:
    """The script must run on a real interpreter and find a distribution we know is installed."""
    out = subprocess.run([sys.executable, "-I", "-c", _pyenv.INSPECT_SCRIPT], check=True,
                         capture_output=True, text=True).stdout
    data = _pyenv.parse_inspect_output(out)
    assert data["python_version"] == "%d.%d.%d" % sys.version_info[:3]
    assert data["prefix"] == sys.prefix
    assert data["packages"]["pytest"] == pytest.__version__


# --- install_argv / uv_environment / parse_install_report (python_env_install)

@pytest.mark.parametrize(
    ("installer", "packages", "options", "expected"),
    [
        ("uv", ["vllm==0.17.0"], {"uv": "/opt/t/bin/uv"},
         ["/opt/t/bin/uv", "pip", "install", "--python", "/e/bin/python", "--compile-bytecode",
          "vllm==0.17.0"]),
        ("pip", ["vllm==0.17.0"], {},
         ["/e/bin/python", "-I", "-m", "pip", "install", "--disable-pip-version-check", "vllm==0.17.0"]),
        ("uv", ["vllm[audio]==0.17.0", "flashinfer-cubin==0.6.4"],
         {"uv": "uv", "find_links": ["/w", "https://m/x"], "index_url": "https://i/simple",
          "extra_index_urls": ["https://x/simple"], "no_index": True, "no_deps": True, "dry_run": True},
         ["uv", "pip", "install", "--python", "/e/bin/python", "--find-links=/w",
          "--find-links=https://m/x", "--index-url=https://i/simple",
          "--extra-index-url=https://x/simple", "--no-index", "--no-deps", "--dry-run",
          "vllm[audio]==0.17.0", "flashinfer-cubin==0.6.4"]),
        ("pip", [], {"requirements_files": ["/e/req.txt"], "dry_run": True},
         ["/e/bin/python", "-I", "-m", "pip", "install", "--disable-pip-version-check", "--dry-run",
          "-r", "/e/req.txt"]),
        ("uv", [], {"uv": "uv", "requirements_files": ["/t/lock.txt"], "find_links": ["/w"], "no_index": True,
                    "no_deps": True, "require_hashes": True},
         ["uv", "pip", "install", "--python", "/e/bin/python", "--compile-bytecode", "--find-links=/w",
          "--no-index", "--no-deps", "--require-hashes", "-r", "/t/lock.txt"]),
    ],
)
def test_install_argv(installer, packages, options, expected) -> None:
    assert _pyenv.install_argv(installer, "/e/bin/python", packages, **options) == expected


@pytest.mark.parametrize(
    ("installer", "packages", "options", "message"),
    [
        ("uv", ["six"], {}, "needs the path of the uv executable"),
        ("conda", ["six"], {}, "installer must be one of uv, pip, not 'conda'"),
        ("pip", [], {}, "nothing to install"),
    ],
)
def test_install_argv_refuses(installer, packages, options, message) -> None:
    with pytest.raises(ValueError, match=message):
        _pyenv.install_argv(installer, "/e/bin/python", packages, **options)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, {"UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "UV_NATIVE_TLS": "1"}),
        ({"cache_dir": "/c", "link_mode": "copy", "native_tls": False},
         {"UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "UV_CACHE_DIR": "/c",
          "UV_LINK_MODE": "copy", "UV_NATIVE_TLS": "0"}),
    ],
)
def test_uv_environment(options, expected) -> None:
    assert _pyenv.uv_environment(**options) == expected


FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "pyenv"


def _dists(*pairs: str) -> list[dict[str, str]]:
    return [{"name": pair.split("==")[0], "version": pair.split("==")[1]} for pair in pairs]


@pytest.mark.parametrize(
    ("fixture", "installed", "removed", "reinstalled"),
    [
        ("uv-dry-fresh.txt", ["idna==3.7", "six==1.16.0"], [], []),
        ("uv-install.txt", ["idna==3.7", "six==1.16.0"], [], []),
        ("uv-noop.txt", [], [], []),
        ("uv-dry-noop.txt", [], [], []),
        ("uv-dry-upgrade.txt", ["six==1.17.0"], ["six==1.16.0"], []),
        ("uv-upgrade.txt", ["six==1.17.0"], ["six==1.16.0"], []),
        ("uv-reinstall.txt", [], [], ["six==1.17.0"]),
        ("uv-fail.txt", [], [], []),
        ("pip-dry-fresh.txt", ["idna==3.7", "six==1.16.0"], [], []),
        ("pip-install.txt", ["idna==3.7", "six==1.16.0"], [], []),
        ("pip-noop.txt", [], [], []),
        ("pip-dry-noop.txt", [], [], []),
        ("pip-dry-upgrade.txt", ["six==1.17.0"], [], []),
        ("pip-upgrade.txt", ["six==1.17.0"], ["six==1.16.0"], []),
    ],
)
def test_parse_install_report_on_recorded_output(fixture, installed, removed, reinstalled) -> None:
    # uv reports on stderr and pip on stdout; the fixtures hold both streams together, so each
    # is handed in as the stream its installer reports on and the other stream is empty.
    text = (FIXTURES / fixture).read_text()
    installer = fixture.split("-")[0]
    stdout, stderr = ("", text) if installer == "uv" else (text, "")
    report = _pyenv.parse_install_report(installer, stdout, stderr)
    assert report == {"installed": _dists(*installed), "removed": _dists(*removed),
                      "reinstalled": _dists(*reinstalled)}
    assert _pyenv.report_changed(report) is bool(installed or removed or reinstalled)


@pytest.mark.parametrize(
    ("installer", "stdout", "stderr"),
    [
        # a change report on the other installer's stream is not read as one
        ("uv", " + six==1.16.0\n", ""),
        ("pip", "", "Successfully installed six-1.16.0\n"),
    ],
)
def test_parse_install_report_reads_the_right_stream(installer, stdout, stderr) -> None:
    assert not _pyenv.report_changed(_pyenv.parse_install_report(installer, stdout, stderr))


def test_pip_dist_names_with_dashes() -> None:
    report = _pyenv.parse_install_report(
        "pip", "Successfully installed huggingface-hub-0.36.0 Flash_Attn-2.8.3\n", "")
    assert report["installed"] == _dists("huggingface-hub==0.36.0", "flash-attn==2.8.3")


# --- isolated_call / untrusted_interpreter (every interpreter root runs)

@pytest.fixture(name="env")
def fixture_env(tmp_path: Path) -> dict[str, Path]:
    """A real venv of this interpreter (no pip) with one package and one .pth file."""
    venv.create(tmp_path / "env", symlinks=True)
    site = Path(glob.glob(str(tmp_path / "env" / "lib" / "python*" / "site-packages"))[0])
    (site / "pkg").mkdir()
    (site / "pkg" / "__init__.py").write_text("")
    (site / "extra.pth").write_text("")
    return {"root": tmp_path / "env", "python": tmp_path / "env" / "bin" / "python", "site": site,
            "pth": site / "extra.pth", "pkg": site / "pkg", "cfg": tmp_path / "env" / "pyvenv.cfg",
            "bin": tmp_path / "env" / "bin"}


def test_a_venv_only_its_owner_can_change_is_trusted(env: dict[str, Path]) -> None:
    assert _pyenv.untrusted_interpreter(str(env["python"])) == ""


@pytest.mark.parametrize(
    ("what", "mode", "expected"),
    [
        ("site", 0o777, "site-packages is writable by every user (mode 0777)"),
        ("pth", 0o646, "extra.pth is writable by every user (mode 0646)"),
        ("pkg", 0o757, "/pkg is writable by every user (mode 0757)"),
        ("cfg", 0o666, "pyvenv.cfg is writable by every user (mode 0666)"),
        ("bin", 0o777, "/bin is writable by every user (mode 0777)"),
        ("root", 0o777, "env is writable by every user (mode 0777)"),
    ],
)
def test_what_another_user_could_write_is_refused(env: dict[str, Path], what: str, mode: int,
                                                  expected: str) -> None:
    env[what].chmod(mode)
    problem = _pyenv.untrusted_interpreter(str(env["python"]))
    assert problem.startswith("root does not run %s: " % env["python"]), problem
    assert expected in problem, problem
    assert "gpuserve.vllm.ml_env" in problem


def test_group_write_is_refused_unless_the_group_is_root(env: dict[str, Path]) -> None:
    env["site"].chmod(0o775)
    os.chown(env["site"], -1, 0)
    assert _pyenv.untrusted_interpreter(str(env["python"])) == ""
    if os.geteuid() == 0:
        os.chown(env["site"], -1, 4321)
        assert "writable by group 4321 (mode 0775)" in _pyenv.untrusted_interpreter(str(env["python"]))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
@pytest.mark.parametrize("what", ["site", "pth", "pkg", "cfg", "bin", "root"])
def test_an_entry_owned_by_another_user_is_refused(env: dict[str, Path], what: str) -> None:
    os.lchown(env[what], 4321, 4321)
    problem = _pyenv.untrusted_interpreter(str(env["python"]))
    assert "%s is owned by uid 4321" % env[what] in problem, problem


def test_the_trusted_users_are_root_and_the_caller(env: dict[str, Path]) -> None:
    # Everything here is the caller's: trusting only another uid names the first folder, /.
    assert _pyenv.untrusted_interpreter(str(env["python"]), trusted={4321}).startswith(
        "root does not run %s: / is owned by " % env["python"])


def test_a_sticky_folder_above_is_fine(tmp_path: Path) -> None:
    # pytest's tmp_path lives under /tmp (mode 1777): other users cannot replace what is ours in it.
    assert os.stat("/tmp").st_mode & 0o1777 == 0o1777
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    assert _pyenv.untrusted_interpreter(str(python)) == ""


def test_isolated_call_flags_and_environment(env: dict[str, Path]) -> None:
    argv, changes = _pyenv.isolated_call(str(env["python"]), ["-c", "pass"], {"VLLM_X": "1"},
                                         environ={"PYTHONPATH": "/x", "PYTHONHOME": "/y",
                                                  "PATH": "/bin"})
    assert argv == [str(env["python"]), "-I", "-B", "-c", "pass"]
    assert changes == {"PYTHONPATH": "", "PYTHONHOME": "", "PYTHONNOUSERSITE": "1",
                       "PYTHONSAFEPATH": "1", "PYTHONDONTWRITEBYTECODE": "1", "VLLM_X": "1"}


@pytest.mark.parametrize(
    ("extra", "kept", "dropped"),
    [
        ({"VLLM_X": "1", "HF_HOME": "/srv/hf"}, {"VLLM_X": "1", "HF_HOME": "/srv/hf"}, []),
        ({"PYTHONPATH": "/var/cache/vllm/x"}, {}, ["PYTHONPATH"]),
        ({"PYTHONPYCACHEPREFIX": "/var/cache/vllm/pycache"}, {}, ["PYTHONPYCACHEPREFIX"]),
        ({"PYTHONSTARTUP": "/x.py", "PYTHONHOME": "/x", "PYTHONUSERBASE": "/x",
          "PYTHONEXECUTABLE": "/x", "PYTHONPLATLIBDIR": "x", "PYTHONBREAKPOINT": "x.y"}, {},
         ["PYTHONBREAKPOINT", "PYTHONEXECUTABLE", "PYTHONHOME", "PYTHONPLATLIBDIR",
          "PYTHONSTARTUP", "PYTHONUSERBASE"]),
        # the isolation's own cannot be turned off from extra_env
        ({"PYTHONSAFEPATH": "", "PYTHONNOUSERSITE": "", "PYTHONDONTWRITEBYTECODE": ""}, {},
         ["PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE", "PYTHONSAFEPATH"]),
        ({"PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8"},
         {"PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8"}, []),
    ],
)
def test_isolated_environment_drops_what_names_code(extra: dict, kept: dict, dropped: list) -> None:
    changes, gone = _pyenv.isolated_environment(extra, environ={"PYTHONPATH": "/caller", "PATH": "/bin"})
    assert gone == dropped
    assert changes == dict({"PYTHONPATH": "", "PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1",
                            "PYTHONDONTWRITEBYTECODE": "1"}, **kept)


def test_isolated_call_refuses_what_another_user_could_write(env: dict[str, Path]) -> None:
    env["pth"].chmod(0o666)
    with pytest.raises(_pyenv.UntrustedInterpreter, match="extra.pth is writable by every user"):
        _pyenv.isolated_call(str(env["python"]), ["-c", "pass"])


def test_planted_start_up_code_never_runs_in_an_isolated_call(env: dict[str, Path],
                                                              tmp_path: Path) -> None:
    """sitecustomize on PYTHONPATH and a .pth in the user site: both run without the isolation,
    neither runs in it, not even in a child interpreter started without -I."""
    marker = tmp_path / "marker"
    planted = "import os; open(%r, 'a').write('%%d\\n' %% os.getpid())\n" % str(marker)
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "sitecustomize.py").write_text(planted)
    user_site = subprocess.run(
        [str(env["python"]), "-c", "import site; print(site.getusersitepackages())"],
        env=dict(os.environ, PYTHONUSERBASE=str(tmp_path / "user")), check=True,
        capture_output=True, text=True).stdout.strip()
    Path(user_site).mkdir(parents=True)
    (Path(user_site) / "evil.pth").write_text(planted)
    hostile = dict(os.environ, PYTHONPATH=str(tmp_path / "evil"), PYTHONUSERBASE=str(tmp_path / "user"))
    # The venv has no user site (include-system-site-packages=false): the base interpreter does.
    base = os.path.realpath(sys.executable)
    child = "import subprocess, sys; subprocess.run([%r, '-c', 'pass'], check=True)" % base
    subprocess.run([base, "-c", "pass"], env=hostile, check=True)
    assert len(marker.read_text().split()) == 2  # the hostile environment works without isolation
    marker.unlink()
    for python in (str(env["python"]), base):
        argv, changes = _pyenv.isolated_call(python, ["-c", child], environ=hostile)
        subprocess.run(argv, env=dict(hostile, **changes), check=True)
    assert not marker.exists()


# --- a child of root's interpreter (vLLM's `python -m vllm.model_executor.models.registry`)
# started without -I, in a node where the service user owns a directory

# Run by the isolated interpreter: the child as vLLM starts it, from the directory given.
_PARENT = "import subprocess, sys; subprocess.run([sys.executable, '-m', 'pkg.victim'], cwd=%r, check=True)"
_VICTIM = "open(%r, 'a').write('clean\\n')\n"
_PLANTED = "open(%r, 'a').write('planted\\n')\n"


def _service_dir(path: Path) -> Path:
    """path and everything below it given to nobody: what the service user could write."""
    nobody = pwd.getpwnam("nobody")
    for base, dirs, files in os.walk(path):
        for name in [base] + [os.path.join(base, n) for n in dirs + files]:
            os.lchown(name, nobody.pw_uid, nobody.pw_gid)
    return path


def _plant(env: dict[str, Path], tmp_path: Path, how: str) -> tuple[dict[str, str], str]:
    """Planted code for pkg.victim in a directory the service user owns; the variables (or the
    working directory) that would lead a child interpreter to it."""
    svc = tmp_path / "svc"
    marker = tmp_path / "marker"
    (svc / "pkg").mkdir(parents=True)
    (svc / "pkg" / "__init__.py").write_text("")
    (svc / "pkg" / "victim.py").write_text(_PLANTED % str(marker))
    extra, cwd = {}, str(tmp_path)
    if how == "PYTHONPATH":
        extra["PYTHONPATH"] = str(svc)
    elif how == "working directory":
        cwd = str(svc)
    elif how == "PYTHONPYCACHEPREFIX":
        # bytecode the child would load in place of the env's own pkg/victim.py (never checked
        # against its source: an unchecked-hash .pyc)
        prefix = svc / "pycache"
        victim = env["pkg"] / "victim.py"
        pyc = subprocess.run([str(env["python"]), "-c", "import importlib.util as u, sys; "
                              "print(u.cache_from_source(sys.argv[1]))", str(victim)],
                             env=dict(os.environ, PYTHONPYCACHEPREFIX=str(prefix)), check=True,
                             capture_output=True, text=True).stdout.strip()
        assert pyc.startswith(str(prefix))
        py_compile.compile(str(svc / "pkg" / "victim.py"), cfile=pyc, dfile=str(victim),
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH, doraise=True)
        extra["PYTHONPYCACHEPREFIX"] = str(prefix)
    _service_dir(svc)
    return extra, cwd


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
@pytest.mark.parametrize("how", ["PYTHONPATH", "PYTHONPYCACHEPREFIX", "working directory"])
def test_a_child_of_an_isolated_interpreter_never_runs_planted_code(env: dict[str, Path],
                                                                    tmp_path: Path, how: str) -> None:
    (env["pkg"] / "victim.py").write_text(_VICTIM % str(tmp_path / "ran"))
    extra, cwd = _plant(env, tmp_path, how)
    python, parent = str(env["python"]), _PARENT % cwd
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    # Without the isolation the planted code runs: the attack is real.
    subprocess.run([python, "-c", parent], env=dict(base_env, **extra), check=True, cwd=tmp_path)
    assert (tmp_path / "marker").read_text() == "planted\n"
    (tmp_path / "marker").unlink()
    argv, changes = _pyenv.isolated_call(python, ["-c", parent], extra)
    subprocess.run(argv, env=dict(base_env, **changes), check=True, cwd=tmp_path)
    assert not (tmp_path / "marker").exists()
    assert (tmp_path / "ran").read_text() == "clean\n"  # the child ran, with the env's own code
