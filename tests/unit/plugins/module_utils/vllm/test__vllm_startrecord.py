"""The start record (plugins/module_utils/_vllm/_startrecord.py): what a server loaded at its
start against what is on disk now, on real files, and the script as systemd runs it."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _saferead as safe
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _nodestate as ns
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _startrecord as sr

SCRIPT = sr.__file__
# systemctl when systemd does not run the host (this one's own, Ubuntu 22.04's systemd 249).
NOT_BOOTED = ("System has not been booted with systemd as init system (PID 1). Can't operate.\n"
              "Failed to connect to bus: Host is down\n")


class Systemctl:
    """A stand-in for /usr/bin/systemctl: it keeps its arguments and answers as systemd does
    (`show --property=NeedDaemonReload --value vllm.service` prints `no` or `yes` and a newline)."""

    def __init__(self, folder):
        folder.mkdir()
        self.path, self.log = folder / "systemctl", folder / "calls"
        self.answer("no\n")

    def answer(self, stdout="", rc=0, stderr="", hang=False):
        body = ("exec /bin/sleep 30\n" if hang else
                f"printf '%s' {shlex.quote(stdout)}\nprintf '%s' {shlex.quote(stderr)} >&2\nexit {rc}\n")
        self.path.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {shlex.quote(str(self.log))}\n" + body)
        self.path.chmod(0o755)

    @property
    def calls(self):
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture(autouse=True)
def systemd(tmp_path, monkeypatch):
    """Every start here asks the stand-in, never the host's systemctl (the answer would depend on the host)."""
    systemctl = Systemctl(tmp_path / "sbin")
    monkeypatch.setattr(sr, "SYSTEMCTL", (str(systemctl.path),))
    return systemctl


def make_env(root, version="0.17.0"):
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "vllm" / "model_executor").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("VERSION = 1\n")
    (site / "vllm" / "model_executor" / "models.py").write_text("A = 1\n")
    (site / f"vllm-{version}.dist-info").mkdir()
    (root / "bin").mkdir()
    (root / "bin" / "vllm").write_text("#!/bin/sh\n")
    return site


def make_revision(root, name, manifest="{}"):
    rev = root / name
    (rev / ".gpuserve").mkdir(parents=True)
    (rev / ".gpuserve" / "manifest.json").write_text(manifest)
    (rev / "config.json").write_text("{}")
    return rev


@pytest.fixture()
def node(tmp_path):
    """A node's files as the unit names them: unit, env file, nccl.conf, an env behind a link,
    model and drafter links to staged revisions."""
    env = tmp_path / "envs" / "vllm-0.17.0-aaaa"
    site = make_env(env)
    os.symlink(env, tmp_path / "ml-env")
    for name in ("vllm.service", "vllm.env"):
        (tmp_path / name).write_text(name + "\n")
    make_revision(tmp_path, "rev-1")
    make_revision(tmp_path, "rev-2", manifest='{"commit": "2"}')
    os.symlink(tmp_path / "rev-1", tmp_path / "model")
    drafter = make_revision(tmp_path, "drafter-1")
    os.symlink(drafter, tmp_path / "drafter")
    paths = {"unit": str(tmp_path / "vllm.service"), "env_file": str(tmp_path / "vllm.env"),
             "nccl_conf": str(tmp_path / "nccl.conf"), "model": str(tmp_path / "model"),
             "drafter": str(tmp_path / "drafter"), "executable": str(tmp_path / "ml-env" / "bin" / "vllm"),
             "record": str(tmp_path / "state" / "vllm_server.start.json")}
    return tmp_path, site, paths


def record_start(paths, invocation="0123abcd"):
    argv = ["--record", paths["record"], "--executable", paths["executable"], "--unit", paths["unit"],
            "--env-file", paths["env_file"], "--nccl-conf", paths["nccl_conf"], "--model", paths["model"],
            "--drafter", paths["drafter"]]
    assert sr.main(argv, {"INVOCATION_ID": invocation}) == 0


def changed_now(paths, invocation="0123abcd"):
    view = ns.start_view(paths["record"], invocation, paths["model"], paths["drafter"], paths["unit"],
                         paths["env_file"], paths["nccl_conf"])
    assert view["current"], view
    return view["changed"]


def relink(path, target):
    os.symlink(target, path + ".new")
    os.replace(path + ".new", path)


def test_nothing_changed_since_the_start(node):
    tmp, _site, paths = node
    record_start(paths)
    assert changed_now(paths) == []
    record = sr.read(paths["record"])
    assert record["env"] == str(tmp / "envs" / "vllm-0.17.0-aaaa")
    assert record["vllm_version"] == "0.17.0"
    assert stat.S_IMODE(os.stat(paths["record"]).st_mode) == 0o644


def test_each_change_is_named(node):
    tmp, site, paths = node
    record_start(paths)
    (tmp / "nccl.conf").write_text("NCCL_P2P_DISABLE=1\n")
    assert changed_now(paths) == ["nccl_conf"]
    (tmp / "vllm.service").write_text("changed\n")
    relink(paths["model"], tmp / "rev-2")
    assert changed_now(paths) == ["unit", "nccl_conf", "model"]
    (site / "vllm" / "model_executor" / "models.py").write_text("A = 2\n")
    (tmp / "drafter-1" / ".gpuserve" / "manifest.json").write_text('{"commit": "other"}')
    assert changed_now(paths) == ["unit", "nccl_conf", "env_code", "model", "drafter"]


def test_a_file_put_back_with_its_old_time_is_a_change(node):
    """python_patch's rollback restores a file's bytes and its time from before the patch: the
    server that started on the patched file must restart, though no time moved forward."""
    _tmp, site, paths = node
    target = site / "vllm" / "model_executor" / "models.py"
    before = os.stat(target)
    target.write_text("A = 1  # patched\n")
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns + 5_000_000_000))
    patched_mtime = os.stat(target).st_mtime
    record_start(paths)
    target.write_text("A = 1\n")
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert changed_now(paths) == ["env_code"]
    assert ns.code_mtime(str(site.parents[2])) < patched_mtime  # times alone would say "older: nothing to do"


def test_same_bytes_written_again_and_bytecode_are_not_changes(node):
    tmp, site, paths = node
    record_start(paths)
    (tmp / "vllm.service").write_text("vllm.service\n")  # the unit rendered again, same bytes
    (site / "vllm" / "__pycache__").mkdir()
    (site / "vllm" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0")
    (site / "vllm" / "stray.pyc").write_bytes(b"\0")
    assert changed_now(paths) == []


def test_an_install_in_the_env_is_a_change(node):
    _tmp, site, paths = node
    record_start(paths)
    (site / "torch-2.9.0.dist-info").mkdir()
    assert changed_now(paths) == ["env_code"]


def test_another_starts_record_is_not_compared(node):
    _tmp, _site, paths = node
    record_start(paths, invocation="aaaa")
    view = ns.start_view(paths["record"], "bbbb", paths["model"], paths["drafter"], paths["unit"],
                         paths["env_file"], paths["nccl_conf"])
    assert (view["present"], view["current"], view["changed"]) == (True, False, [])


@pytest.mark.parametrize("content, error", [
    ("{not json", "cannot be read as JSON"),
    ('["a list"]', "not a gpuserve.vllm start record of format 1"),
    ('{"format": 9, "fingerprint": {}}', "not a gpuserve.vllm start record of format 1"),
])
def test_an_unreadable_record_is_said(tmp_path, content, error):
    path = tmp_path / "start.json"
    path.write_text(content)
    view = ns.start_view(str(path), "aaaa", "", "", "", "", "")
    assert (view["present"], view["current"]) == (True, False)
    assert str(path) in view["error"] and error in view["error"]


def test_no_record_without_a_systemd_start(node):
    _tmp, _site, paths = node
    assert sr.main(["--record", paths["record"], "--executable", paths["executable"]], {}) == 2
    assert not os.path.exists(paths["record"])


def test_hf_download_commits_name_a_revision(tmp_path):
    meta = tmp_path / "model" / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (meta / "config.json.metadata").write_text("a" * 40 + "\netag\n1700000000.0\n")
    first = sr.checkpoint_identity(str(tmp_path / "model"))
    (meta / "config.json.metadata").write_text("b" * 40 + "\netag\n1700000000.0\n")
    # A digest of the first lines, never the lines: the record is world-readable.
    assert first == f"{tmp_path / 'model'} commits sha256:" + hashlib.sha256(b"a" * 40).hexdigest()
    assert sr.checkpoint_identity(str(tmp_path / "model")) != first
    assert sr.checkpoint_identity(str(tmp_path / "nothing")) == "absent"


def test_the_script_runs_alone_as_systemd_runs_it(node, tmp_path, systemd):
    """ExecStartPre runs the installed copy with `python3 -I -B`: it imports nothing from the
    collection but _saferead, installed beside it (a copy outside it works), and leaves no bytecode. It asks systemctl by its absolute
    path (here the stand-in's, put in the copy) whether the unit file is the one systemd loaded."""
    _tmp, _site, paths = node
    copy = tmp_path / "libexec" / "vllm_start_record.py"
    copy.parent.mkdir()
    source = open(SCRIPT, encoding="utf-8").read()
    line = 'SYSTEMCTL = ("/usr/bin/systemctl", "/bin/systemctl")'
    assert line in source
    copy.write_text(source.replace(line, f"SYSTEMCTL = ({str(systemd.path)!r},)"))
    shutil.copy(safe.__file__, copy.parent / "_saferead.py")  # as vllm_server installs it, beside
    argv = [sys.executable, "-I", "-B", str(copy), "--record", paths["record"], "--executable", paths["executable"],
            "--unit", paths["unit"], "--env-file", paths["env_file"], "--nccl-conf", paths["nccl_conf"],
            "--model", paths["model"], "--drafter", paths["drafter"]]
    done = subprocess.run(argv, env={"INVOCATION_ID": "feed", "PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.load(open(paths["record"], encoding="utf-8"))["invocation"] == "feed"
    assert changed_now(paths, "feed") == []
    assert not list(copy.parent.glob("**/*.pyc"))
    assert systemd.calls == ["show --property=NeedDaemonReload --value vllm.service"]
    systemd.answer("yes\n")
    done = subprocess.run(argv, env={"INVOCATION_ID": "beef", "PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert changed_now(paths, "beef") == ["unit"]


def test_a_start_of_a_unit_systemd_has_not_loaded_names_the_unit(node, systemd):
    """A run renders a new unit and is killed before its daemon-reload; vLLM crashes and systemd
    restarts the old unit from memory. The record of that start must not say it loaded the new
    file, or the next plan finds nothing changed and the new flags never run."""
    tmp, _site, paths = node
    record_start(paths, invocation="first")
    assert changed_now(paths, "first") == []
    (tmp / "vllm.service").write_text("vllm.service --max-num-seqs 512\n")  # the killed run's unit
    systemd.answer("yes\n")
    record_start(paths, invocation="crash-restart")
    assert changed_now(paths, "crash-restart") == ["unit"]
    unit = sr.read(paths["record"])["fingerprint"]["unit"]
    assert unit == "not loaded (daemon-reload pending): " + sr.file_digest(paths["unit"])
    # The plan's restart reloads first (start.yml): that start loaded the file, nothing is left.
    systemd.answer("no\n")
    record_start(paths, invocation="restart")
    assert changed_now(paths, "restart") == []
    assert systemd.calls == ["show --property=NeedDaemonReload --value vllm.service"] * 3


@pytest.mark.parametrize("reply, why", [
    ({"rc": 1, "stderr": NOT_BOOTED}, "systemctl show exited 1, \"System has not been booted with systemd"),
    ({"stdout": "\n"}, "systemctl show exited 0, ''"),
    ({"hang": True}, "timed out after 0.5 seconds"),
    (None, "no /nonexistent/systemctl"),
], ids=["systemctl fails", "no value", "systemctl hangs", "no systemctl"])
def test_a_start_whose_unit_load_is_not_known_names_the_unit(node, systemd, monkeypatch, reply, why):
    """Unknown is not "loaded": the start goes on (the record is written, at most
    SYSTEMCTL_TIMEOUT late) and the next plan restarts the server, whose start records again."""
    _tmp, _site, paths = node
    monkeypatch.setattr(sr, "SYSTEMCTL_TIMEOUT", 0.5)
    if reply is None:
        monkeypatch.setattr(sr, "SYSTEMCTL", ("/nonexistent/systemctl",))
    else:
        systemd.answer(**reply)
    record_start(paths)
    unit = sr.read(paths["record"])["fingerprint"]["unit"]
    assert unit.startswith("not known to be loaded (NeedDaemonReload unknown: ") and why in unit, unit
    assert unit.endswith("): " + sr.file_digest(paths["unit"]))
    assert changed_now(paths) == ["unit"]


def test_a_start_without_a_unit_file_asks_no_systemctl(node, systemd):
    _tmp, _site, paths = node
    assert sr.main(["--record", paths["record"], "--executable", paths["executable"]], {"INVOCATION_ID": "a"}) == 0
    assert sr.read(paths["record"])["fingerprint"]["unit"] == "absent" and systemd.calls == []


def test_a_file_that_cannot_be_read_now_is_not_a_change(node):
    """Unknown is not changed: a read refused now (the env file replaced by a FIFO) restarts
    nothing, and is said."""
    _tmp, _site, paths = node
    record_start(paths)
    os.unlink(paths["env_file"])
    os.mkfifo(paths["env_file"])
    view = ns.start_view(paths["record"], "0123abcd", paths["model"], paths["drafter"], paths["unit"],
                         paths["env_file"], paths["nccl_conf"])
    assert view["changed"] == []
    assert view["unreadable"] == [f"env_file (unreadable: {paths['env_file']}: a FIFO, not a regular file)"]
