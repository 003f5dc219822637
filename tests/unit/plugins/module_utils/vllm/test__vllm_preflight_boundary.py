"""The trust boundary of root's preflight: what of the unit's environment the probe may use."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _pyenv
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _preflight_boundary as pb

SCRATCH = "/var/cache/gpuserve/preflight"
SERVICE = "/var/cache/vllm"  # what the role's unit points its caches into, the service user's


def _service_writes(path: str) -> str:
    """The table's node: the service user owns /var/cache/vllm and /srv/svc, root the rest."""
    for owned in (SERVICE, "/srv/svc"):
        if path == owned or path.startswith(owned + "/"):
            return f"{owned} is owned by vllm (uid 990)"
    return ""


# The role's __vllm_server_cache_env, and the rest of a unit's environment.
ROLE_ENV = {
    "XDG_CACHE_HOME": SERVICE, "VLLM_CACHE_ROOT": f"{SERVICE}/vllm",
    "HF_HOME": f"{SERVICE}/huggingface", "TRITON_CACHE_DIR": f"{SERVICE}/triton",
    "TORCHINDUCTOR_CACHE_DIR": f"{SERVICE}/torchinductor",
    "CUDA_CACHE_PATH": f"{SERVICE}/nv/ComputeCache", "FLASHINFER_WORKSPACE_BASE": f"{SERVICE}/flashinfer",
    "PYTHONPYCACHEPREFIX": f"{SERVICE}/pycache",
}


@pytest.mark.parametrize(("name", "value", "probe"), [
    ("XDG_CACHE_HOME", SERVICE, f"{SCRATCH}/xdg"),
    ("VLLM_CACHE_ROOT", f"{SERVICE}/vllm", f"{SCRATCH}/vllm"),
    ("HF_HOME", f"{SERVICE}/huggingface", f"{SCRATCH}/huggingface"),
    ("HF_HUB_CACHE", "/srv/hub", f"{SCRATCH}/huggingface/hub"),
    ("TRITON_CACHE_DIR", f"{SERVICE}/triton", f"{SCRATCH}/triton"),
    ("TORCHINDUCTOR_CACHE_DIR", f"{SERVICE}/torchinductor", f"{SCRATCH}/torchinductor"),
    ("CUDA_CACHE_PATH", f"{SERVICE}/nv/ComputeCache", f"{SCRATCH}/nv/ComputeCache"),
    # a cache root's own directory is still not the probe's: the service's caches are never used
    ("VLLM_CACHE_ROOT", "/root/.cache/vllm", f"{SCRATCH}/vllm"),
])
def test_a_cache_goes_to_roots_scratch(name: str, value: str, probe: str) -> None:
    found = pb.probe_environment({name: value}, _service_writes, SCRATCH)
    assert found.env[name] == probe
    assert found.redirected == [{"name": name, "service": value, "probe": probe}]
    assert found.left_out == []


def test_every_cache_is_scratch_even_when_the_unit_sets_none() -> None:
    found = pb.probe_environment({}, _service_writes, SCRATCH)
    assert set(found.env) == set(pb.CACHE_VARIABLES)
    assert all(value.startswith(SCRATCH + "/") for value in found.env.values())
    assert found.redirected == [] and found.left_out == []


@pytest.mark.parametrize(("name", "value", "reason"), [
    ("PYTHONPYCACHEPREFIX", f"{SERVICE}/pycache", "names code or bytecode"),
    ("PYTHONPYCACHEPREFIX", "/root/pycache", "names code or bytecode"),  # wherever it points
    ("PYTHONPATH", "/opt/overlay", "names code or bytecode"),
    ("PYTHONSTARTUP", "/srv/svc/start.py", "names code or bytecode"),
    ("LD_LIBRARY_PATH", "/usr/local/cuda/lib64:/srv/svc/lib",
     "LD_LIBRARY_PATH names /srv/svc/lib, which another user could change (/srv/svc is owned by vllm"),
    ("PATH", "/srv/svc/bin:/usr/bin", "PATH names /srv/svc/bin"),
    ("VLLM_TORCH_PROFILER_DIR", f"{SERVICE}/profiles", f"names {SERVICE}/profiles"),
    ("HF_TOKEN_PATH", f"{SERVICE}/token", "HF_TOKEN_PATH names a path, which another user"),
])
def test_what_names_a_place_another_user_could_write_is_left_out(name: str, value: str,
                                                                 reason: str) -> None:
    found = pb.probe_environment({name: value, "NCCL_DEBUG": "WARN"}, _service_writes, SCRATCH)
    assert name not in found.env and found.env["NCCL_DEBUG"] == "WARN"
    assert [item["name"] for item in found.left_out] == [name]
    assert reason in found.left_out[0]["reason"], found.left_out[0]["reason"]
    assert found.redirected == []


@pytest.mark.parametrize(("name", "value"), [
    ("LD_LIBRARY_PATH", "/usr/local/cuda/lib64"),
    ("PATH", "/usr/local/bin:/usr/bin"),
    ("VLLM_ATTENTION_BACKEND", "TRITON_MLA"),
    ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
    ("VLLM_API_KEY", "s3cret"),
    ("PYTHONUNBUFFERED", "1"),
    ("HF_HUB_OFFLINE", "1"),
])
def test_what_root_alone_controls_is_kept_as_is(name: str, value: str) -> None:
    found = pb.probe_environment({name: value}, _service_writes, SCRATCH)
    assert found.env[name] == value and found.left_out == [] and found.redirected == []


def test_a_secret_value_is_never_reported() -> None:
    found = pb.probe_environment({"HF_TOKEN_PATH": "/srv/svc/hf-token-file",
                                  "VLLM_SECRET_FILE": "/srv/svc/x"}, _service_writes, SCRATCH)
    assert "/srv/svc" not in repr(found.left_out) and "/srv/svc" not in repr(found.redirected)


def test_the_roles_environment_reaches_the_probe_with_none_of_the_services_paths() -> None:
    found = pb.probe_environment(dict(ROLE_ENV, VLLM_API_KEY="s", CUDA_DEVICE_ORDER="PCI_BUS_ID"),
                                 _service_writes, SCRATCH)
    assert not [v for v in found.env.values() if SERVICE in v]
    assert sorted(r["name"] for r in found.redirected) == sorted(set(ROLE_ENV) - {"PYTHONPYCACHEPREFIX"})
    assert [r["name"] for r in found.left_out] == ["PYTHONPYCACHEPREFIX"]
    assert found.report(SCRATCH, {})["scratch_dir"] == SCRATCH


def test_the_real_predicate_sees_a_directory_the_service_user_owns(tmp_path: Path) -> None:
    svc = tmp_path / "svc"
    svc.mkdir()
    assert _pyenv.path_problem(str(svc / "pycache")) == ""
    if os.geteuid() == 0:
        os.chown(svc, pwd.getpwnam("nobody").pw_uid, -1)
        found = pb.probe_environment({"LD_LIBRARY_PATH": str(svc / "lib")}, _pyenv.path_problem)
        assert "is owned by nobody" in found.left_out[0]["reason"]


@pytest.mark.parametrize(("named", "unread"), [
    ({"model": "/srv/m", "drafter": "/srv/d"}, {}),
    ({"model": "moonshotai/Kimi-K2.5"}, {"model": "moonshotai/Kimi-K2.5"}),
    ({"model": "/srv/m", "drafter": "lightseekorg/kimi-k2.5-eagle3"},
     {"drafter": "lightseekorg/kimi-k2.5-eagle3"}),
])
def test_unread_models_are_those_not_local(named: dict, unread: dict) -> None:
    assert pb.unread_models(named, lambda path: path.startswith("/srv/")) == unread


def test_prepare_scratch_creates_0700_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "gpuserve" / "preflight"
    pb.prepare_scratch(str(path), _pyenv.path_problem)
    assert oct(path.stat().st_mode & 0o777) == "0o700"
    (path / "vllm").mkdir()
    pb.prepare_scratch(str(path), _pyenv.path_problem)
    assert (path / "vllm").is_dir()


@pytest.mark.parametrize("what", ["mode", "owner", "above"])
def test_prepare_scratch_refuses_what_another_user_could_change(tmp_path: Path, what: str) -> None:
    if what != "mode" and os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    path = tmp_path / "gpuserve" / "preflight"
    path.mkdir(parents=True)
    if what == "mode":
        path.chmod(0o755)
    elif what == "owner":
        path.chmod(0o700)
        os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    else:
        path.chmod(0o700)
        os.chown(path.parent, pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(pb.ScratchError, match="scratch directory"):
        pb.prepare_scratch(str(path), _pyenv.path_problem)


# ---- Python files vLLM imports, and checkpoints whose Python --trust-remote-code imports ----
@pytest.mark.parametrize(("argv", "config", "files"), [
    (["/v", "serve", "/srv/m"], None, {}),
    (["/v", "serve", "/srv/m", "--tool-parser-plugin", "/srv/svc/p.py"], None,
     {"--tool-parser-plugin": "/srv/svc/p.py"}),
    (["/v", "serve", "/srv/m", "--reasoning-parser-plugin=/opt/r.py", "--chat-template", "/srv/svc/t.jinja"], None,
     {"--reasoning-parser-plugin": "/opt/r.py"}),  # a chat template is not code
    (["/v", "serve", "/srv/m"], {"tool_parser_plugin": "/srv/svc/p.py", "port": 8000},
     {"--tool-parser-plugin": "/srv/svc/p.py"}),
    (["/v", "serve", "/srv/m", "--tool-parser-plugin", "/opt/p.py"], {"tool-parser-plugin": "/srv/svc/p.py"},
     {"--tool-parser-plugin": "/opt/p.py"}),  # the command line wins
    (["/v", "serve", "/srv/m", "--tool-parser-plugin="], None, {}),
])
def test_code_files(argv: list, config: object, files: dict) -> None:
    assert pb.code_files(argv, config) == files


def test_a_plugin_the_service_user_could_change_is_refused() -> None:
    files = {"--reasoning-parser-plugin": "/opt/r.py", "--tool-parser-plugin": "/srv/svc/p.py"}
    problems = pb.code_problems(files, _service_writes,
                                {"--tool-parser-plugin": "vllm_server_extra_flags['--tool-parser-plugin']"})
    assert problems == [
        "vllm_server_extra_flags['--tool-parser-plugin'] (--tool-parser-plugin /srv/svc/p.py): /srv/svc "
        "is owned by vllm (uid 990). vLLM imports this file as Python, and root's preflight runs "
        "vLLM's serve checks, which import it: give the file and the folders above it to root, with "
        "no group or other write (chown root:root, chmod go-w), or set vllm_server_preflight: false"]
    assert pb.code_problems({"--tool-parser-plugin": "/srv/svc/p.py"}, _service_writes, {})[0].startswith(
        "the --config file (--tool-parser-plugin /srv/svc/p.py)")


@pytest.mark.parametrize(("argv", "config", "trusted"), [
    (["/v", "serve", "/srv/m"], None, False),
    (["/v", "serve", "/srv/m", "--trust-remote-code"], None, True),
    (["/v", "serve", "/srv/m", "--trust-remote-code", "--no-trust-remote-code"], None, False),
    (["/v", "serve", "/srv/m"], {"trust_remote_code": True}, True),
    (["/v", "serve", "/srv/m"], {"trust-remote-code": "true"}, True),
    (["/v", "serve", "/srv/m"], {"trust-remote-code": False}, False),
    (["/v", "serve", "/srv/m", "--no-trust-remote-code"], {"trust-remote-code": True}, False),
])
def test_trusts_remote_code(argv: list, config: object, trusted: bool) -> None:
    assert pb.trusts_remote_code(argv, config) is trusted


@pytest.mark.parametrize(("named", "untrusted"), [
    ({"model": "/srv/m", "drafter": "/srv/d"}, {}),
    ({"model": "/srv/svc/m", "drafter": "/srv/d"}, {"model": "/srv/svc/m (/srv/svc is owned by vllm (uid 990))"}),
    ({"drafter": "/srv/svc/d"}, {"drafter": "/srv/svc/d (/srv/svc is owned by vllm (uid 990))"}),
    ({"model": "/srv/svc/hub-id"}, {}),  # not a directory: not read at all (unread_models)
])
def test_remote_code_models_are_the_checkpoints_another_user_could_change(named: dict, untrusted: dict) -> None:
    assert pb.remote_code_models(named, _service_writes, lambda path: not path.endswith("hub-id")) == untrusted
