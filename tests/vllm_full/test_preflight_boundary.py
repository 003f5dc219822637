"""Root's preflight never runs what the service user planted in its caches (issue 35).

The real vLLM judges the example's command line as root, with the unit's environment pointing
its caches into a directory `nobody` owns (vllm_server_cache_dir stands for it). vLLM's model
registry inspects the model class in a child (`sys.executable -m
vllm.model_executor.models.registry`) on a `modelinfos` miss; that child runs without -I. A
.pyc for vllm/__init__.py is planted in the service's PYTHONPYCACHEPREFIX: it runs when an
interpreter is started with that prefix (shown first), and must not run in the preflight.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import py_compile
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, NATIVE, REPO, env_python, playbook, timed

ROLE = REPO / "roles" / "vllm_server"
EXAMPLE = REPO / "inventories" / "example" / "group_vars" / "gpu_nodes" / "main.yml"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the preflight runs as root on a node")


def _plant(python: Path, prefix: Path, marker: Path) -> Path:
    """An unchecked-hash .pyc of vllm/__init__.py under prefix, which first writes marker."""
    init = Path(subprocess.run([str(python), "-I", "-c", "import importlib.util as u; "
                                "print(u.find_spec('vllm').origin)"],
                               check=True, capture_output=True, text=True).stdout.strip())
    pyc = subprocess.run([str(python), "-c", "import importlib.util as u, sys; "
                          "print(u.cache_from_source(sys.argv[1]))", str(init)],
                         env=dict(os.environ, PYTHONPYCACHEPREFIX=str(prefix)), check=True,
                         capture_output=True, text=True).stdout.strip()
    source = prefix.parent / "planted_init.py"
    source.write_text(f"open({str(marker)!r}, 'a').write('planted\\n')\n" + init.read_text())
    py_compile.compile(str(source), cfile=pyc, dfile=str(init), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return Path(pyc)


def test_the_registry_child_never_loads_the_services_bytecode(tmp_path: Path) -> None:
    python = env_python(NATIVE)
    assert importlib.util.find_spec("yaml")  # the argv is rendered by the role
    svc, scratch, marker = tmp_path / "var-cache-vllm", tmp_path / "scratch", tmp_path / "marker"
    svc.mkdir()
    _plant(python, svc / "pycache", marker)
    nobody = pwd.getpwnam("nobody")
    for base, dirs, files in os.walk(svc):
        for name in [base] + [os.path.join(base, n) for n in dirs + files]:
            os.lchown(name, nobody.pw_uid, nobody.pw_gid)
    # The attack is real: an interpreter started with the service's prefix runs the planted code.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    subprocess.run([str(python), "-c", "import vllm"], check=True, timeout=300,
                   env=dict(env, PYTHONPYCACHEPREFIX=str(svc / "pycache")))
    assert marker.read_text() == "planted\n"
    marker.unlink()

    (task,) = playbook([{
        "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml"),
                       str(EXAMPLE)],
        "tasks": [{"ansible.builtin.debug": {"msg": {
            "argv": "{{ __vllm_server_argv }}",
            "env": "{{ __vllm_server_env_all | gpuserve.vllm.systemd_env_lines }}"}}, "vars": {
            "vllm_server_model_path": str(FIXTURES / "kimi-k2.5"),
            "vllm_server_drafter_path": str(FIXTURES / "kimi-k2.5-eagle3"),
            "vllm_server_cache_dir": str(svc), "vllm_server_api_key": "k"}}],
    }], tmp_path)
    rendered = task["msg"]
    assert f'PYTHONPYCACHEPREFIX="{svc}/pycache"' in rendered["env"]
    start = time.monotonic()
    (result,) = playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "gpuserve.vllm.vllm_serve_preflight": {
            "python": str(python), "argv": rendered["argv"], "compute_capability": "12.0",
            "fail_on_problems": False, "unit_environment": rendered["env"],
            "scratch_dir": str(scratch), "timeout": 900}}]}], tmp_path)
    timed(f"boundary: the example on {NATIVE} as root (probe {result.get('seconds')} s)", start)
    checks = {c["name"]: c["status"] for c in result.get("checks") or []}
    assert checks.get("model-config") == "passed", result.get("msg") or result
    # vLLM's registry child ran (it inspects the model class on a modelinfos miss; the entry
    # is written after it answers) with root's scratch as its cache, not the service's
    assert list((scratch / "vllm" / "modelinfos").glob("*.json")), sorted(map(str, scratch.rglob("*")))
    assert not marker.exists(), "the planted bytecode ran as root"
    assert sorted(p.name for p in svc.iterdir()) == ["planted_init.py", "pycache"]  # nothing written there
    assert "PYTHONPYCACHEPREFIX" in [r["name"] for r in result["boundary"]["left_out"]]
    assert {r["name"] for r in result["boundary"]["redirected"]} >= {"VLLM_CACHE_ROOT", "HF_HOME"}


PLANTED_CONFIG = '''open({marker!r}, "a").write("uid %d\\n" % __import__("os").getuid())
from transformers import LlamaConfig


class PlantedConfig(LlamaConfig):
    model_type = "gpuserve_planted"
'''


def test_remote_code_of_a_checkpoint_the_service_could_change_never_runs_as_root(tmp_path: Path) -> None:
    """--trust-remote-code on a model type vLLM has no config class for: transformers imports the
    checkpoint's configuration_*.py. Root's preflight does so for a root-owned checkpoint (the
    attack is real), and never for one another user owns: its config checks are not run."""
    python = env_python(NATIVE)
    model, scratch, marker = tmp_path / "models" / "planted", tmp_path / "scratch", tmp_path / "marker"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({
        "model_type": "gpuserve_planted", "architectures": ["LlamaForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_planted.PlantedConfig"},
        "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 1,
        "num_key_value_heads": 4, "vocab_size": 128, "max_position_embeddings": 256, "torch_dtype": "bfloat16"}))
    (model / "configuration_planted.py").write_text(PLANTED_CONFIG.format(marker=str(marker)))

    def judge() -> dict:
        (result,) = playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [{
            "gpuserve.vllm.vllm_serve_preflight": {
                "python": str(python), "argv": ["/opt/ml-env/bin/vllm", "serve", str(model), "--trust-remote-code"],
                "fail_on_problems": False, "scratch_dir": str(scratch), "timeout": 900}}]}], tmp_path)
        return result

    root_owned = judge()
    assert marker.read_text() == "uid 0\n", root_owned  # root's own checkpoint: its code runs, as root
    marker.unlink()
    nobody = pwd.getpwnam("nobody")
    for path in (model, model / "config.json", model / "configuration_planted.py"):
        os.lchown(path, nobody.pw_uid, nobody.pw_gid)
    start = time.monotonic()
    result = judge()
    timed(f"boundary: --trust-remote-code, a checkpoint nobody owns, on {NATIVE} (probe {result.get('seconds')} s)", start)
    assert not marker.exists(), "the checkpoint's Python ran as root"
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["parser"]["status"] == "passed", result
    assert checks["model-config"]["status"] == "not run", result
    assert "--trust-remote-code is set and another user could change the model" in checks["model-config"]["detail"]
    assert result["boundary"]["untrusted_checkpoints"][0]["role"] == "model"
