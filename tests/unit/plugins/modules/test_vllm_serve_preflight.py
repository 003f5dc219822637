"""vllm_serve_preflight without vLLM: it must say it was skipped and why, never pass silently.

The checks with the real vLLM (parser, configs, attention backends) are in tests/vllm_full.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import sys
import venv
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from module_runner import run_module_main  # noqa: E402

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _preflight_boundary as boundary  # noqa: E402
from ansible_collections.gpuserve.vllm.plugins.modules import vllm_serve_preflight  # noqa: E402

ARGV = ["/opt/ml-env/bin/vllm", "serve", "/srv/m", "--kv-cache-dtype", "fp8"]


@pytest.fixture(autouse=True)
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The scratch directory's default, in this test's own directory (not the machine's)."""
    path = tmp_path / "gpuserve" / "preflight"
    monkeypatch.setattr(boundary, "SCRATCH_DIR", str(path))
    return path


def test_skips_without_vllm_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    # This test's interpreter has no vLLM: the probe must report that, not a pass.
    result = run_module_main(vllm_serve_preflight,
                             {"python": sys.executable, "argv": ARGV}, monkeypatch)
    assert result["failed"] is False, result.get("msg")
    assert result["changed"] is False
    assert result["skipped"] is True
    assert "vLLM is not installed" in result["skip_reason"]


def test_refuses_a_missing_interpreter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    result = run_module_main(vllm_serve_preflight,
                             {"python": str(tmp_path / "nope"), "argv": ARGV}, monkeypatch)
    assert result["failed"] is True
    assert "is not an executable interpreter" in result["msg"]


def test_a_crashing_interpreter_fails_with_its_output(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'boom: no such library' >&2\nexit 3\n")
    broken.chmod(0o755)
    result = run_module_main(vllm_serve_preflight, {"python": str(broken), "argv": ARGV},
                             monkeypatch)
    assert result["failed"] is True
    assert "exited 3 without a result" in result["msg"] and "boom" in result["msg"]


# ---- verdict cache -------------------------------------------------------------------------
# The fingerprint script runs for real (a venv of this interpreter with a vllm package directory
# in its site-packages: the module runs it with -I, so PYTHONPATH would not reach it); vLLM's
# own judgement is replaced by a TEST DOUBLE returning a fixed verdict, since this tier has no
# vLLM. The cache with the real vLLM judging: tests/vllm_full/test_preflight_cache.py.
ACCEPTED = {"skipped": False, "problems": [], "notes": [], "vllm_version": "0.17.0",
            "checks": [{"name": "parser", "ok": True, "detail": "all flags accepted"}]}
REFUSED = dict(ACCEPTED, problems=[{"check": "parser", "variables": ["vllm_server_x"],
                                    "flags": ["--x"], "message": "unrecognized arguments: --x",
                                    "fix": "remove it"}],
               checks=[{"name": "parser", "ok": False, "detail": "unrecognized"}])


@pytest.fixture()
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A model directory, a venv with a vllm package, and a judge double counting its calls."""
    venv.create(tmp_path / "env", symlinks=True)
    site = Path(glob.glob(str(tmp_path / "env" / "lib" / "python*" / "site-packages"))[0])
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "kimi_k25"}')
    state = {"verdict": ACCEPTED, "judged": 0, "tmp": tmp_path, "site": site,
             "python": str(tmp_path / "env" / "bin" / "python"),
             "cache_dir": str(tmp_path / "state" / "vllm_preflight"),
             "argv": ["/opt/ml-env/bin/vllm", "serve", str(tmp_path / "model"), "--port", "8000"]}
    real = vllm_serve_preflight.run_probe

    def run_probe(python: str, request: dict, timeout: int, source: str = "",
                  env: dict | None = None) -> dict:
        if source == vllm_serve_preflight.KEY:
            return real(python, request, timeout, source, *([env] if env is not None else []))
        state["judged"] += 1
        state["env"] = env
        state["request"] = request
        return dict(state["verdict"], seconds=14.0)

    monkeypatch.setattr(vllm_serve_preflight, "run_probe", run_probe)
    return state


def _run(node: dict, monkeypatch: pytest.MonkeyPatch, **over: object) -> dict:
    args = {"python": node["python"], "argv": node["argv"], "cache_dir": node["cache_dir"],
            "fail_on_problems": False}
    args.update(over)
    return run_module_main(vllm_serve_preflight, args, monkeypatch)


def test_an_unchanged_rerun_returns_the_stored_verdict(node: dict,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    first = _run(node, monkeypatch)
    assert first["cached"] is False and first["cache"].startswith("stored in ")
    second = _run(node, monkeypatch)
    assert node["judged"] == 1
    assert second["cached"] is True and second["checks"] == ACCEPTED["checks"]
    assert second["cache_key"] == first["cache_key"] and "cached verdict from" in second["cache"]


UNIT_ENV = ['CUDA_DEVICE_ORDER="PCI_BUS_ID"', 'VLLM_API_KEY="s3cret-api-key"', 'NCCL_DEBUG="WARN"']


@pytest.mark.parametrize("change", ["flag", "extra_flags", "capability", "config", "vllm file",
                                    "chat template", "inline drafter", "unit env",
                                    "drafter in --config"])
def test_any_change_judges_again(node: dict, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    first_args: dict = {}
    template, drafter = node["tmp"] / "template.jinja", node["tmp"] / "drafter"
    if change == "chat template":
        template.write_text("{{ messages }}")
        node["argv"] += ["--chat-template", str(template)]
    elif change == "inline drafter":
        drafter.mkdir()
        (drafter / "config.json").write_text('{"hidden_size": 7168}')
        node["argv"] += [f'--speculative-config={{"method": "eagle3", "model": "{drafter}"}}']
    elif change == "unit env":
        first_args["unit_environment"] = UNIT_ENV
    elif change == "drafter in --config":
        # the ml-env has PyYAML (vLLM needs it); without it the verdict is uncacheable (below)
        (node["site"] / "yaml").symlink_to(Path(yaml.__file__).parent)
        drafter.mkdir()
        (drafter / "config.json").write_text('{"hidden_size": 7168}')
        (node["tmp"] / "serve.yaml").write_text(f"speculative-config:\n  method: eagle3\n  model: {drafter}\n")
        node["argv"] += ["--config", str(node["tmp"] / "serve.yaml")]
    first = _run(node, monkeypatch, **first_args)
    over: dict = {}
    if change == "flag":
        over["argv"] = node["argv"][:-1] + ["8001"]
    elif change == "extra_flags":
        over["extra_flags"] = ["port"]
    elif change == "capability":
        over["compute_capability"] = "10.0"
    elif change == "config":
        (node["tmp"] / "model" / "config.json").write_text('{"model_type": "kimi_k2"}')
    elif change == "chat template":
        template.write_text("{{ messages | first }}")
    elif change in ("inline drafter", "drafter in --config"):
        (drafter / "config.json").write_text('{"hidden_size": 4096}')
    elif change == "unit env":
        over["unit_environment"] = UNIT_ENV[:2] + ['NCCL_DEBUG="INFO"']
    else:
        new = node["site"] / "vllm" / "patched.tmp"
        new.write_text("# patched\n")
        os.replace(new, node["site"] / "vllm" / "__init__.py")
    again = _run(node, monkeypatch, **over)
    assert again["cached"] is False and node["judged"] == 2
    assert again["cache_key"] != first["cache_key"]


def test_the_probe_runs_with_the_unit_environment(node: dict,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(node, monkeypatch, unit_environment=UNIT_ENV + ['VLLM_X="/srv/hf \\"x\\""'])
    assert {k: v for k, v in node["env"].items() if k not in boundary.CACHE_VARIABLES} == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "VLLM_API_KEY": "s3cret-api-key", "NCCL_DEBUG": "WARN",
        "VLLM_X": '/srv/hf "x"'}
    assert "s3cret-api-key" not in json.dumps(result)
    entry = Path(result["cache"].removeprefix("stored in ")).read_text()
    assert "s3cret-api-key" not in entry


def test_a_secret_value_never_enters_the_key(node: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _run(node, monkeypatch, unit_environment=UNIT_ENV)
    rotated = _run(node, monkeypatch, unit_environment=[
        line.replace("s3cret-api-key", "rotated-key") for line in UNIT_ENV])
    assert rotated["cached"] is True and rotated["cache_key"] == first["cache_key"]
    dropped = _run(node, monkeypatch, unit_environment=UNIT_ENV[:1] + UNIT_ENV[2:])
    assert dropped["cached"] is False  # whether a secret is set is in the key, its value never


def test_unit_environment_is_no_log() -> None:
    source = Path(vllm_serve_preflight.__file__).read_text()
    assert '"unit_environment": {"type": "list", "elements": "str", "default": [],\n' \
           '                                 "no_log": True}' in source


def test_run_probe_hands_the_environment_to_the_script_not_its_argv(tmp_path: Path) -> None:
    script = ("import json, os, sys\n"
              "request = json.load(open(sys.argv[1]))\n"
              "json.dump({'argv': sys.argv, 'env': dict(os.environ)}, open(request['result_path'], 'w'))\n")
    found = vllm_serve_preflight.run_probe(sys.executable, {"argv": []}, 30, script,
                                           {"VLLM_API_KEY": "s3cret", "VLLM_X": "1"})
    assert found["env"]["VLLM_API_KEY"] == "s3cret" and found["env"]["VLLM_X"] == "1"
    assert "s3cret" not in json.dumps(found["argv"])


def test_a_refusal_is_never_stored(node: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    node["verdict"] = REFUSED
    first = _run(node, monkeypatch, fail_on_problems=True)
    assert first["failed"] is True and "vLLM refused" in first["cache"]
    again = _run(node, monkeypatch, fail_on_problems=True)
    assert again["failed"] is True and again["cached"] is False and node["judged"] == 2


def test_check_mode_reads_but_never_writes(node: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    checked = _run(node, monkeypatch, _ansible_check_mode=True)
    assert "check mode never writes" in checked["cache"]
    assert not os.path.exists(node["cache_dir"])
    _run(node, monkeypatch)
    cached = _run(node, monkeypatch, _ansible_check_mode=True)
    assert cached["cached"] is True and node["judged"] == 2


def test_a_remote_model_is_judged_every_time(node: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["/opt/ml-env/bin/vllm", "serve", "moonshotai/Kimi-K2.5"]
    first = _run(node, monkeypatch, argv=argv)
    assert "not a local directory" in first["cache"]
    assert _run(node, monkeypatch, argv=argv)["cached"] is False and node["judged"] == 2


def test_no_cache_dir_no_cache(node: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(node, monkeypatch, cache_dir="")
    result = _run(node, monkeypatch, cache_dir="")
    assert result["cached"] is False and "cache" not in result and node["judged"] == 2


# ---- the trust boundary: root's probe never reads what the service user may write -----------
ROLE_CACHES = ['XDG_CACHE_HOME="{svc}"', 'VLLM_CACHE_ROOT="{svc}/vllm"', 'HF_HOME="{svc}/huggingface"',
               'TRITON_CACHE_DIR="{svc}/triton"', 'PYTHONPYCACHEPREFIX="{svc}/pycache"',
               'LD_LIBRARY_PATH="{svc}/lib"', 'NCCL_DEBUG="WARN"']


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_the_services_caches_are_never_the_probes(node: dict, monkeypatch: pytest.MonkeyPatch,
                                                  scratch: Path) -> None:
    svc = node["tmp"] / "var-cache-vllm"
    svc.mkdir()
    os.chown(svc, pwd.getpwnam("nobody").pw_uid, -1)
    result = _run(node, monkeypatch, unit_environment=[line.format(svc=svc) for line in ROLE_CACHES])
    env = node["env"]
    assert not [value for value in env.values() if str(svc) in value], env
    assert env["VLLM_CACHE_ROOT"] == str(scratch / "vllm") and env["NCCL_DEBUG"] == "WARN"
    assert "PYTHONPYCACHEPREFIX" not in env and "LD_LIBRARY_PATH" not in env
    assert oct(scratch.stat().st_mode & 0o777) == "0o700"
    report = result["boundary"]
    assert report["scratch_dir"] == str(scratch)
    assert {r["name"]: r["probe"] for r in report["redirected"]} == {
        "XDG_CACHE_HOME": str(scratch / "xdg"), "VLLM_CACHE_ROOT": str(scratch / "vllm"),
        "HF_HOME": str(scratch / "huggingface"), "TRITON_CACHE_DIR": str(scratch / "triton")}
    assert sorted(r["name"] for r in report["left_out"]) == ["LD_LIBRARY_PATH", "PYTHONPYCACHEPREFIX"]
    assert _run(node, monkeypatch, unit_environment=[line.format(svc=svc) for line in ROLE_CACHES])[
        "cached"] is True


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_scratch_directory_another_user_owns_is_refused(node: dict, scratch: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    scratch.mkdir(parents=True, mode=0o700)
    os.chown(scratch, pwd.getpwnam("nobody").pw_uid, -1)
    result = _run(node, monkeypatch)
    assert result["failed"] is True and "scratch directory" in result["msg"]
    assert node["judged"] == 0


def test_check_mode_creates_no_scratch_directory(node: dict, scratch: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(node, monkeypatch, _ansible_check_mode=True)
    assert not scratch.exists() and result["boundary"]["scratch_dir"] != str(scratch)
    assert node["env"]["VLLM_CACHE_ROOT"].startswith(result["boundary"]["scratch_dir"])


def test_a_model_read_from_a_hub_cache_is_not_judged_by_root(node: dict,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    spec = '--speculative-config={"method": "eagle3", "model": "lightseekorg/kimi-k2.5-eagle3"}'
    _run(node, monkeypatch, argv=node["argv"] + [spec])
    assert node["request"]["unread_models"] == {"drafter": "lightseekorg/kimi-k2.5-eagle3"}
    config = node["tmp"] / "serve.yaml"
    config.write_text("speculative-config:\n  model: lightseekorg/kimi-k2.5-eagle3\n")
    _run(node, monkeypatch, argv=node["argv"] + ["--config", str(config)])
    assert node["request"]["unread_models"] == {"drafter": "lightseekorg/kimi-k2.5-eagle3"}
    _run(node, monkeypatch)
    assert node["request"]["unread_models"] == {}


def test_without_pyyaml_a_config_file_is_judged_every_time(node: dict,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (node["tmp"] / "serve.yaml").write_text("port: 8000\n")
    node["argv"] += ["--config", str(node["tmp"] / "serve.yaml")]
    first = _run(node, monkeypatch)
    assert "PyYAML is not importable" in first["cache"]
    assert _run(node, monkeypatch)["cached"] is False and node["judged"] == 2


@pytest.mark.parametrize("where", ["argv", "config"])
def test_a_plugin_another_user_could_change_is_refused_before_the_probe(
        node: dict, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    plugins = node["tmp"] / "plugins"
    plugins.mkdir()
    plugin = plugins / "my_tool_parser.py"
    plugin.write_text("import os\n")
    if where == "argv":
        node["argv"] += ["--tool-parser-plugin", str(plugin)]
    else:
        (node["tmp"] / "serve.yaml").write_text(yaml.safe_dump({"tool-parser-plugin": str(plugin)}))
        node["argv"] += ["--config", str(node["tmp"] / "serve.yaml")]
    assert _run(node, monkeypatch)["failed"] is False  # only root (this test's user) can change it
    plugins.chmod(0o777)
    result = _run(node, monkeypatch, extra_flags=["tool_parser_plugin"])
    source = "vllm_server_extra_flags['--tool-parser-plugin']" if where == "argv" else "the --config file"
    assert result["failed"] is True
    assert result["msg"].startswith(f"{source} (--tool-parser-plugin {plugin}): {plugins} is writable by "
                                    "every user (mode 0777). vLLM imports this file as Python")
    assert node["judged"] == 1  # refused before the probe (and before the cache)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_plugin_the_service_user_owns_is_refused(node: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = node["tmp"] / "parser.py"
    plugin.write_text("import os\n")
    os.chown(plugin, pwd.getpwnam("nobody").pw_uid, -1)
    node["argv"] += ["--reasoning-parser-plugin", str(plugin)]
    result = _run(node, monkeypatch)
    assert result["failed"] is True and f"{plugin} is owned by nobody" in result["msg"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
@pytest.mark.parametrize("what", ["directory", "config.json", "remote code"])
def test_remote_code_of_a_checkpoint_another_user_could_change_is_not_run_by_root(
        node: dict, monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    model = node["tmp"] / "model"
    (model / "modeling_kimi.py").write_text("import os\n")
    node["argv"] += ["--trust-remote-code"]
    trusted = _run(node, monkeypatch)
    assert node["request"]["untrusted_models"] == {} and trusted["boundary"]["untrusted_checkpoints"] == []
    changed = {"directory": model, "config.json": model / "config.json", "remote code": model / "modeling_kimi.py"}[what]
    os.chown(changed, pwd.getpwnam("nobody").pw_uid, -1)
    result = _run(node, monkeypatch, cache_dir="")
    why = f"{model} ({changed} is owned by nobody (uid {pwd.getpwnam('nobody').pw_uid}))"
    assert node["request"]["untrusted_models"] == {"model": why}
    assert result["boundary"]["untrusted_checkpoints"] == [{"role": "model", "reason": why}]
    # without --trust-remote-code vLLM reads only the JSON files, as data: the checks run
    node["argv"].remove("--trust-remote-code")
    _run(node, monkeypatch, cache_dir="")
    assert node["request"]["untrusted_models"] == {}
