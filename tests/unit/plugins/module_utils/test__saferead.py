"""Root's reader of another user's files (plugins/module_utils/_saferead.py), on real plants: FIFOs,
sockets, links to /dev/zero, to a root-only file and into a loop, a file over the cap; and the
start record script run as root on a service-owned model directory holding each plant."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _saferead as safe
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _startrecord as sr

SERVICE = 65534  # nobody: the service user who owns the model directory
SECRET = b"root-only-secret-line-0123456789\nsecond line\n"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's directory: root only")


@pytest.fixture()
def secret(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


@pytest.fixture()
def service_dir(tmp_path):
    """A directory the service user owns (0755), below root's tmp_path."""
    path = tmp_path / "srv"
    path.mkdir()
    os.chown(path, SERVICE, SERVICE)
    return path


def plant(where, name, kind, secret_path, limit=safe.LIMIT):
    """Put one plant at where/name; the socket is returned to keep it bound."""
    path = where / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock, here = socket.socket(socket.AF_UNIX), os.getcwd()
        os.chdir(where)  # bound by its name: the full path may be longer than AF_UNIX allows
        try:
            sock.bind(name)
        finally:
            os.chdir(here)
        return sock
    elif kind == "zero":
        os.symlink("/dev/zero", path)
    elif kind == "secret":
        os.symlink(secret_path, path)
    elif kind == "loop":
        os.symlink(".", where / "loop")
        os.symlink(os.path.join("loop", "loop", name + ".real"), path)
    elif kind == "big":
        with open(path, "wb") as handle:
            handle.truncate(limit + 1)
    elif kind == "device":
        os.mknod(path, 0o600 | 0o020000, os.makedev(1, 5))  # /dev/zero's numbers, a character device
    return None


PLANTS = [
    ("fifo", "a FIFO, not a regular file"),
    ("socket", "a socket or a device without a reader, not a regular file"),
    ("zero", "is a link in a directory another user can write: not followed"),
    ("secret", "is a link in a directory another user can write: not followed"),
    ("loop", "is a link in a directory another user can write: not followed"),
    ("big", "bytes, over the"),
    ("device", "a character device, not a regular file"),
]


@pytest.mark.parametrize("kind, why", PLANTS, ids=[kind for kind, _why in PLANTS])
def test_each_plant_is_refused_at_once_and_by_name(service_dir, secret, kind, why):
    _keep = plant(service_dir, "manifest.json", kind, secret, limit=1024)
    path = str(service_dir / "manifest.json")
    started = time.monotonic()
    with pytest.raises(safe.Unreadable) as refused:
        safe.read_bytes(path, limit=1024)
    assert str(refused.value).startswith(f"unreadable: {path}: ") and why in str(refused.value)
    assert safe.digest(path, limit=1024) == str(refused.value)
    assert not isinstance(refused.value, safe.Absent)
    assert time.monotonic() - started < 2


def test_a_regular_file_is_read_and_digested(service_dir):
    (service_dir / "manifest.json").write_bytes(b'{"a": 1}')
    path = str(service_dir / "manifest.json")
    assert safe.read_bytes(path) == b'{"a": 1}' and safe.read_text(path) == '{"a": 1}'
    assert safe.digest(path) == "sha256:" + hashlib.sha256(b'{"a": 1}').hexdigest()


def test_absent_is_known(service_dir):
    assert safe.digest(str(service_dir / "none")) == "absent"
    with pytest.raises(safe.Absent):
        safe.directory(str(service_dir / "none"))
    assert safe.files(str(service_dir / "none"), ".metadata") == []


def test_a_link_in_roots_directory_is_followed_and_resolved(tmp_path, service_dir):
    """Root's own links (vllm_weights' model link, in a root-only directory) are followed; the
    directory's real path is what the reader walked, not what the link says now."""
    (service_dir / "config.json").write_text("{}")
    os.symlink(service_dir, tmp_path / "model")
    assert safe.directory(str(tmp_path / "model")) == str(service_dir)
    assert safe.read_bytes(str(tmp_path / "model" / "config.json")) == b"{}"


def test_a_link_in_roots_directory_to_a_device_is_still_refused(tmp_path):
    os.symlink("/dev/zero", tmp_path / "zero")
    with pytest.raises(safe.Unreadable, match="a character device, not a regular file"):
        safe.read_bytes(str(tmp_path / "zero"))


def test_a_loop_of_roots_links_ends(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(safe.Unreadable, match=f"more than {safe.MAX_LINKS} links"):
        safe.read_bytes(str(tmp_path / "a"))


def test_a_directory_component_another_user_links_is_not_followed(service_dir, secret):
    """The link need not be the leaf: a directory link in the service's tree is refused too."""
    os.symlink(secret.parent, service_dir / ".gpuserve")
    with pytest.raises(safe.Unreadable, match=r"\.gpuserve is a link in a directory another user can write"):
        safe.read_bytes(str(service_dir / ".gpuserve" / "secret"))


def test_a_file_that_grows_past_the_cap_while_read_is_refused(service_dir):
    """The cap holds on the bytes read, not only on the size fstat saw."""
    path = service_dir / "grows"
    path.write_bytes(b"x" * 100)
    with safe.opened(str(path), limit=150) as (fd, _info, deadline):
        path.write_bytes(b"x" * 200)
        with pytest.raises(safe.Unreadable, match="over the 150-byte cap"):
            list(safe._chunks(fd, str(path), 150, deadline))  # pylint: disable=protected-access


def test_a_listing_never_follows_links_and_names_what_it_refuses(service_dir, secret):
    meta = service_dir / "download"
    (meta / "sub").mkdir(parents=True)
    (meta / "sub" / "a.metadata").write_text("a\n")
    os.symlink(secret, meta / "b.metadata")
    os.symlink(".", meta / "loop")  # a directory loop: never entered
    os.mkfifo(meta / "c.metadata")
    (meta / "other.txt").write_text("x")
    assert safe.files(str(meta), ".metadata") == [
        (str(meta / "b.metadata"), "a link, not a regular file"),
        (str(meta / "c.metadata"), "a FIFO, not a regular file"),
        (str(meta / "sub" / "a.metadata"), ""),
    ]


def test_a_listing_stops_at_its_caps(service_dir):
    deep = service_dir
    for level in range(5):
        deep = deep / f"d{level}"
    deep.mkdir(parents=True)
    with pytest.raises(safe.Unreadable, match="deeper than 3 directories"):
        safe.files(str(service_dir), max_depth=3)
    with pytest.raises(safe.Unreadable, match="more than 2 entries"):
        safe.files(str(service_dir), max_entries=2)


def test_time_runs_out_on_a_slow_read(service_dir, monkeypatch):
    """A filesystem that answers each read slowly (a clock that moves 4 s a chunk): the read is
    refused once the bound is past, not finished."""
    (service_dir / "f").write_bytes(b"x" * 10)
    clock = iter(range(0, 1000, 4))
    monkeypatch.setattr(safe.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(safe, "CHUNK", 1)
    with pytest.raises(safe.Unreadable, match="not read within 10 s"):
        safe.read_bytes(str(service_dir / "f"), seconds=10)


# The start record script as the unit runs it: root, `python3 -I -B`, the installed copy with
# _saferead.py beside it, on a model directory the service user owns.

def run_script(tmp_path, model, timeout=30):
    libexec = tmp_path / "libexec"
    libexec.mkdir(exist_ok=True)
    shutil.copy(sr.__file__, libexec / "vllm_start_record.py")
    shutil.copy(safe.__file__, libexec / "_saferead.py")
    record = tmp_path / "state" / "start.json"
    argv = [sys.executable, "-I", "-B", str(libexec / "vllm_start_record.py"), "--record", str(record),
            "--executable", str(tmp_path / "none" / "bin" / "vllm"), "--model", str(model)]
    done = subprocess.run(argv, env={"INVOCATION_ID": "feed", "PATH": "/usr/bin:/bin"}, capture_output=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr
    return record.read_bytes(), json.loads(record.read_bytes())["fingerprint"]["model"]


@pytest.mark.parametrize("kind, why", PLANTS, ids=[kind for kind, _why in PLANTS])
def test_the_script_ends_on_each_planted_manifest_and_leaks_nothing(tmp_path, service_dir, secret, kind, why):
    (service_dir / ".gpuserve").mkdir()
    os.chown(service_dir / ".gpuserve", SERVICE, SERVICE)
    _keep = plant(service_dir / ".gpuserve", "manifest.json", kind, secret, limit=sr.MANIFEST_LIMIT)
    started = time.monotonic()
    record, model = run_script(tmp_path, service_dir)
    assert time.monotonic() - started < 20
    assert model.startswith(f"unreadable: {service_dir}/.gpuserve/manifest.json: ") and why in model, model
    assert SECRET.splitlines()[0] not in record


@pytest.mark.parametrize("kind, why", PLANTS, ids=[kind for kind, _why in PLANTS])
def test_the_script_ends_on_each_planted_metadata_and_leaks_nothing(tmp_path, service_dir, secret, kind, why):
    meta = service_dir / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (meta / "config.json.metadata").write_text("a" * 40 + "\netag\n1\n")
    _keep = plant(meta, "model.safetensors.metadata", kind, secret, limit=sr.METADATA_LIMIT)
    record, model = run_script(tmp_path, service_dir)
    # The listing refuses by the entry's own type (it never enters a link, so no loop forms).
    why = {"zero": "a link, not", "secret": "a link, not", "loop": "a link, not", "socket": "a socket, not"}.get(kind, why)
    assert model.startswith(f"unreadable: {meta}/model.safetensors.metadata: ") and why in model, model
    assert SECRET.splitlines()[0] not in record and b"a" * 40 not in record


def test_the_script_keeps_digests_of_a_hardlinked_secret(tmp_path, service_dir, secret):
    """A hard link to a root-only file is a regular file (where protected_hardlinks is off): its
    first line goes into the record only as part of a digest."""
    meta = service_dir / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    os.link(secret, meta / "config.json.metadata")
    record, model = run_script(tmp_path, service_dir)
    assert model == f"{service_dir} commits sha256:" + hashlib.sha256(SECRET.splitlines()[0]).hexdigest()
    assert SECRET.splitlines()[0] not in record
