"""The vllm_serve_preflight module, run by ansible-playbook against the real vLLM envs.

The argv and the env file's lines are rendered by the vllm_server role's own variables from the
example and rehearsal inventories (ansible-playbook, role defaults + vars + the inventory's
group_vars), with the model and drafter paths pointed at the config.json fixtures (public shapes,
fixtures/README.md). Compute capability 12.0 (RTX PRO 6000 Blackwell) is given, since this
machine has no GPU. The release the example inventory pins judges the example clean, every check
run (its CUDA platform loaded against NVIDIA's stub libcuda); without the stub the attention
backends are reported as not run and every other verdict stands.
"""

from __future__ import annotations

import json
import os
import time
import typing as t
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from conftest import (FIXTURES, NATIVE, NEWEST, OLD, PATCHED, REPO, env_python, overlay_python,
                      playbook, timed, vllm_full_env)

ROLE = REPO / "roles" / "vllm_server"
EXAMPLE = REPO / "inventories" / "example" / "group_vars" / "gpu_nodes" / "main.yml"
REHEARSAL = REPO / "inventories" / "rehearsal" / "group_vars" / "all.yml"
PATHS = {"vllm_server_model_path": str(FIXTURES / "kimi-k2.5"),
         "vllm_server_drafter_path": str(FIXTURES / "kimi-k2.5-eagle3")}
DOTTED = {"compilation_config.pass_config.fuse_allreduce_rms": True}
PINNED = yaml.safe_load(EXAMPLE.read_text())["vllm_install_version"]
API_KEY = "vllm-full-api-key-0123456789"  # the example takes it from the vault; must never show
# Above Kimi-K2.5's 262144 positions: vLLM refuses it unless the unit's environment allows it.
LONG = {"vllm_server_max_model_len": 524288,
        "vllm_server_env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", "NCCL_DEBUG": "WARN"}}

# name -> (inventory, task vars over it, vLLM version, patched?)
RENDERED = {
    "example": (EXAMPLE, {}),
    "rehearsal": (REHEARSAL, {}),
    "example-fp8": (EXAMPLE, {"vllm_server_kv_cache_dtype": "fp8"}),
    "example-fp8-dotted": (EXAMPLE, {"vllm_server_kv_cache_dtype": "fp8",
                                     "vllm_server_extra_flags": DOTTED}),
    "bad-drafter": (EXAMPLE, {"vllm_server_drafter_path": "@BAD_DRAFTER@"}),
    "ngram": (EXAMPLE, {"vllm_server_drafter_path": "", "vllm_server_speculative_method": "ngram",
                        "vllm_server_speculative_extra": {"prompt_lookup_max": 4}}),
    "long-context": (EXAMPLE, LONG),
}
NO_STUB = {"cuda_stub": False}
# The module's default (300 s) is for a node; on 2 shared CI cores a 0.33.0 probe took 125-165 s
# alone and over 300 s beside molecule runs (before the envs had bytecode; see vllm_full_env).
PROBE_TIMEOUT = 900
# name -> (rendered, vLLM version, patched?, module options over the defaults)
CASES = {
    "example on 0.17.0 patched": ("example", PATCHED, True, {}),
    "rehearsal on 0.17.0 patched": ("rehearsal", PATCHED, True, {}),
    "fp8 on 0.17.0 patched": ("example-fp8", PATCHED, True, {}),
    "example on 0.17.0 unpatched": ("example", PATCHED, False, {}),
    "fp8 and a dotted flag on 0.18.0": ("example-fp8-dotted", NATIVE, False, {}),
    "drafter of another hidden size on 0.18.0": ("bad-drafter", NATIVE, False, {}),
    "auto tool choice without parser on 0.18.0": ("no-tool-parser", NATIVE, False, {}),
    "example on 0.16.0": ("example", OLD, False, {}),
    "ngram speculation without a drafter on 0.18.0": ("ngram", NATIVE, False, {}),
    "example on the pinned release": ("example", PINNED, False, {}),
    "long context allowed by the unit's env, no CUDA stub, on 0.33.0":
        ("long-context", NEWEST, False, NO_STUB),
}


@pytest.fixture(scope="session")
def rendering(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Each configuration's argv and env file lines, rendered by the role's own variables."""
    work = tmp_path_factory.mktemp("render")
    bad = work / "drafter-4096"
    bad.mkdir()
    config = json.loads((FIXTURES / "kimi-k2.5-eagle3" / "config.json").read_text())
    config["hidden_size"] = 4096  # e.g. a drafter trained for another target
    (bad / "config.json").write_text(json.dumps(config))
    plays = []
    for name, (inventory, over) in RENDERED.items():
        task_vars = dict(PATHS, vault_vllm_server_api_key=API_KEY,
                         **{k: (str(bad) if v == "@BAD_DRAFTER@" else v) for k, v in over.items()})
        plays.append({
            "hosts": "localhost", "gather_facts": False,
            "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml"),
                           str(inventory)],
            "tasks": [{"name": name, "ansible.builtin.debug": {"var": "rendered"},
                       "vars": dict(task_vars, rendered={
                           "argv": "{{ __vllm_server_argv }}",
                           "env": "{{ __vllm_server_env_all | gpuserve.vllm.systemd_env_lines }}"})}],
        })
    results = playbook(plays, work, all_plays=True)
    rendered = {name: tasks[0]["rendered"] for name, tasks in zip(RENDERED, results)}
    # vLLM's own validate() refusing what the role refuses early (the role cannot render it).
    argv = list(rendered["example"]["argv"])
    at = argv.index("--tool-call-parser")
    rendered["no-tool-parser"] = dict(rendered["example"], argv=argv[:at] + argv[at + 2:])
    return rendered


@pytest.fixture(scope="session")
def argvs(rendering: dict) -> dict[str, list[str]]:
    return {name: found["argv"] for name, found in rendering.items()}


def _preflight(name: str, rendered: dict, version: str, patched: bool, options: dict,
               overlay: Path | None, work: Path) -> dict:
    python = env_python(version)
    if patched:
        python = overlay_python(python, t.cast(Path, overlay))
    start = time.monotonic()
    result = playbook([{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": name, "gpuserve.vllm.vllm_serve_preflight": dict({
            "python": str(python), "argv": rendered["argv"], "compute_capability": "12.0",
            "fail_on_problems": False, "unit_environment": rendered["env"],
            "timeout": PROBE_TIMEOUT}, **options)}],
    }], work)[0]
    timed(f"preflight: {name} (probe {result.get('seconds', '?')} s)", start)
    return result


@pytest.fixture(scope="session")
def verdicts(rendering: dict, request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every case's module result; cases run GPUSERVE_VLLM_FULL_JOBS at a time (default 2)."""
    overlay = request.getfixturevalue("patched_overlay")[1]
    for version in (PATCHED, NATIVE, OLD, NEWEST, PINNED):
        env_python(version)  # build (or skip) before the threads start
    jobs = int(os.environ.get("GPUSERVE_VLLM_FULL_JOBS", "2"))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {case: pool.submit(_preflight, case, rendering[rendered], version, patched,
                                     options, overlay, tmp_path_factory.mktemp("preflight"))
                   for case, (rendered, version, patched, options) in CASES.items()}
        return {case: future.result() for case, future in futures.items()}


def _problems(result: dict) -> list[dict]:
    assert not result.get("skipped"), result.get("skip_reason")
    assert "checks" in result, result.get("msg")
    return result["problems"]


ALL_CHECKS = ["parser", "model-config", "speculative-config", "attention-backend-target",
              "attention-backend-drafter"]


@pytest.mark.parametrize("case", ["example on 0.17.0 patched", "rehearsal on 0.17.0 patched",
                                  "fp8 and a dotted flag on 0.18.0",
                                  "example on the pinned release"])
def test_valid_configurations_pass(verdicts: dict, case: str) -> None:
    result = verdicts[case]
    assert _problems(result) == [], result["problems"]
    assert result["not_run"] == [], result["not_run"]
    names = {c["name"] for c in result["checks"] if c["status"] == "passed"}
    assert set(ALL_CHECKS) <= names, result["checks"]
    assert result["compute_capability"] == "12.0"


def test_the_pinned_release_is_the_newest_tested_with_its_companions() -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    assert PINNED == NEWEST
    assert list(vllm_full_env.COMPANIONS.get(PINNED, ())) == example["vllm_install_companions"]
    series = ".".join(PINNED.split(".")[:2])
    defaults = yaml.safe_load((REPO / "roles" / "vllm_install" / "defaults" / "main.yml")
                              .read_text())
    assert series in defaults["vllm_install_cuda_requirements"]


def test_the_pinned_release_runs_every_check_against_the_cuda_stub(verdicts: dict) -> None:
    result = verdicts["example on the pinned release"]
    assert [c["name"] for c in result["checks"]] == ALL_CHECKS
    assert any("NVIDIA's CUDA stub library" in note and "libcuda" in note
               for note in result["notes"]), result["notes"]
    target = next(c for c in result["checks"] if c["name"] == "attention-backend-target")
    assert "TRITON_MLA" in target["detail"] and "MLA" in target["detail"]


def test_a_check_that_cannot_run_is_reported_and_the_others_stand(verdicts: dict) -> None:
    """0.33's CUDA platform module needs libcuda.so.1 at import; without it (and without the
    stub) the attention backends are not run, and the long context the unit's environment
    allows (VLLM_ALLOW_LONG_MAX_MODEL_LEN) passes: the probe ran with that environment."""
    result = verdicts["long context allowed by the unit's env, no CUDA stub, on 0.33.0"]
    assert result.get("failed") is not True and _problems(result) == [], result["problems"]
    status = {c["name"]: c["status"] for c in result["checks"]}
    assert status == {"parser": "passed", "model-config": "passed",
                      "speculative-config": "passed", "attention-backend-target": "not run",
                      "attention-backend-drafter": "not run"}, result["checks"]
    for skipped in result["not_run"]:
        assert "libcuda.so.1" in skipped["reason"] and "cuda_stub is false" in skipped["reason"]
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" not in json.dumps(result["problems"])
    assert API_KEY not in json.dumps(result)  # the env file's lines go in no_log


def test_ngram_without_drafter_passes(verdicts: dict, argvs: dict) -> None:
    spec = json.loads(argvs["ngram"][argvs["ngram"].index("--speculative-config") + 1])
    assert spec == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    result = verdicts["ngram speculation without a drafter on 0.18.0"]
    assert _problems(result) == []
    detail = next(c["detail"] for c in result["checks"] if c["name"] == "speculative-config")
    assert detail.startswith("method ngram")


def test_example_runs_triton_mla_on_cc_12(verdicts: dict) -> None:
    target = next(c for c in verdicts["example on 0.17.0 patched"]["checks"]
                  if c["name"] == "attention-backend-target")
    assert "TRITON_MLA" in target["detail"] and "MLA" in target["detail"]


def test_fp8_on_0_17_is_refused_from_vllm_code(verdicts: dict) -> None:
    (problem,) = _problems(verdicts["fp8 on 0.17.0 patched"])
    assert problem["check"] == "attention-backend-target"
    assert problem["variables"] == ["vllm_server_kv_cache_dtype"]
    assert "vLLM 0.17.0" in problem["message"] and "TRITON_MLA: kv_cache_dtype not supported" \
        in problem["message"]
    assert "['auto', 'bfloat16']" in problem["fix"]


def test_unpatched_0_17_refuses_eagle3_for_kimi(verdicts: dict) -> None:
    problems = _problems(verdicts["example on 0.17.0 unpatched"])
    assert [p["check"] for p in problems] == ["speculative-config"]
    assert "eagle3 is only supported for" in problems[0]["message"]
    assert "vllm_server_drafter_path" in problems[0]["variables"][0]


def test_drafter_hidden_size_mismatch_is_refused(verdicts: dict) -> None:
    (problem,) = _problems(verdicts["drafter of another hidden size on 0.18.0"])
    assert problem["check"] == "drafter-hidden-size"
    assert "4096" in problem["message"] and "7168" in problem["message"]


def test_vllm_itself_refuses_auto_tool_choice_without_parser(verdicts: dict) -> None:
    (problem,) = _problems(verdicts["auto tool choice without parser on 0.18.0"])
    assert problem["check"] == "serve-validate"
    assert "--enable-auto-tool-choice requires --tool-call-parser" in problem["message"]
    assert "vllm_server_enable_auto_tool_choice" in problem["variables"]


def test_language_model_only_is_unknown_to_0_16(verdicts: dict) -> None:
    (problem,) = _problems(verdicts["example on 0.16.0"])
    assert problem["check"] == "parser"
    assert "unrecognized arguments" in problem["message"]
    assert "vllm_server_language_model_only" in problem["variables"]
    assert "vLLM 0.16.0" in problem["message"]


def test_dotted_flag_rendering(argvs: dict) -> None:
    argv = argvs["example-fp8-dotted"]
    at = argv.index("--compilation-config.pass_config.fuse_allreduce_rms")
    assert argv[at + 1] == "true"
