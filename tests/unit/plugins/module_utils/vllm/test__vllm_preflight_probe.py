"""The probe's stand-in for a missing NVIDIA driver: when it re-runs itself with the CUDA stub.

Only the decision is tested here (this tier has no vLLM and no CUDA library); the probe loading
vLLM 0.33.0's compiled ops against the stub the env really ships is tests/vllm_full
(test_the_pinned_release_runs_every_check_against_the_cuda_stub), and without it the checks it
reports as not run (test_a_check_that_cannot_run_is_reported_and_the_others_stand).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _preflight_probe as vp
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _preflight_stub as vs


@pytest.fixture()
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A request in the module's temp dir, the probe as a file there, no driver library."""
    script = tmp_path / "gpuserve_preflight.py"
    script.write_text("# the probe\n")
    monkeypatch.delenv(vs.STUB_ENV, raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/other/lib")
    monkeypatch.setattr(vs, "_loads", lambda library: False)
    monkeypatch.setattr(vs, "find_cuda_stub", lambda dirs: "/env/site-packages/pkg./libcuda-1a2b.so")
    return {"request": {"result_path": str(tmp_path / "result.json")}, "script": str(script),
            "tmp": tmp_path}


def test_no_driver_and_a_stub_re_runs_with_the_stub_first_on_the_loader_path(machine: dict) -> None:
    env = vs.cuda_stub_env(machine["request"], machine["script"])
    links = machine["tmp"] / "cuda-stub"
    assert env is not None
    assert env["LD_LIBRARY_PATH"] == f"{links}:/opt/other/lib"
    assert env[vs.STUB_ENV] == "/env/site-packages/pkg./libcuda-1a2b.so"
    assert os.readlink(links / "libcuda.so.1") == "/env/site-packages/pkg./libcuda-1a2b.so"
    assert oct((links).stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("case", ["driver loads", "cuda_stub false", "already re-run",
                                  "no stub in the env", "run from stdin"])
def test_when_the_probe_does_not_re_run(machine: dict, monkeypatch: pytest.MonkeyPatch,
                                        case: str) -> None:
    request, script = dict(machine["request"]), machine["script"]
    if case == "driver loads":
        monkeypatch.setattr(vs, "_loads", lambda library: library == "libcuda.so.1")
    elif case == "cuda_stub false":
        request["cuda_stub"] = False
    elif case == "already re-run":
        monkeypatch.setenv(vs.STUB_ENV, "/env/site-packages/pkg./libcuda-1a2b.so")
    elif case == "no stub in the env":
        monkeypatch.setattr(vs, "find_cuda_stub", lambda dirs: "")
    else:
        script = "-"
    assert vs.cuda_stub_env(request, script) is None
    assert not (machine["tmp"] / "cuda-stub").exists()


def test_find_cuda_stub_looks_only_at_libcuda_and_keeps_only_a_stub(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    monkeypatch.setattr(vs, "_is_stub", lambda path: asked.append(Path(path).name) or
                        Path(path).name == "libcuda-40d19bb1.so")
    for rel in ("torchvision.libs/libcudart.faf08d9a.so.13", "nvidia/cu13/lib/libcudart.so.13",
                "a-real-driver/libcuda.so.1", "pynvvideocodec./libcuda-40d19bb1.so"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"\x7fELF")
    found = vs.find_cuda_stub([str(tmp_path / "missing"), str(tmp_path)])
    assert found == str(tmp_path / "pynvvideocodec." / "libcuda-40d19bb1.so")
    assert asked == ["libcuda.so.1", "libcuda-40d19bb1.so"]  # never libcudart


def test_a_file_that_is_no_library_is_no_stub(tmp_path: Path) -> None:
    fake = tmp_path / "libcuda.so.1"
    fake.write_text("not an ELF file")
    assert vs._is_stub(str(fake)) is False
    assert vs.find_cuda_stub([str(tmp_path.parent)]) == ""


# ---- a model root's probe would read from the service's Hugging Face cache -----------------
@pytest.mark.parametrize(("unread", "spec", "not_run"), [
    ({"model": "moonshotai/Kimi-K2.5"}, False, ["model-config", "attention-backend-target"]),
    ({"drafter": "lightseekorg/kimi-k2.5-eagle3"}, True,
     ["model-config", "speculative-config", "attention-backend-target"]),
    ({}, False, []),
])
def test_a_model_that_is_no_local_directory_is_not_judged(unread: dict, spec: bool,
                                                          not_run: list) -> None:
    argv = ["/v", "serve", "/srv/m"] + (['--speculative-config={"method": "eagle3"}'] if spec else [])
    probe = vp.Probe({"argv": argv, "unread_models": unread})
    judged = []
    probe.parse = lambda: probe.check("parser", "accepted") or object()  # type: ignore[method-assign]
    probe.configs = lambda args: judged.append("configs") or (None, None, None)  # type: ignore[method-assign]
    probe.capability = lambda platform: None  # type: ignore[method-assign]
    probe.judge(None, {})
    assert [c["name"] for c in probe.not_run if "Hugging Face cache" in c["reason"]] == not_run
    assert judged == ([] if unread else ["configs"])
    assert probe.judged("parser") == vp.PASSED
    for role, path in unread.items():
        assert f"the {role} {path} is not a local directory" in probe.not_run[0]["reason"]


# ---- --trust-remote-code with a checkpoint another user could change -----------------------
def test_a_checkpoint_another_user_could_change_is_not_built_with_remote_code() -> None:
    argv = ["/v", "serve", "/srv/m", "--trust-remote-code", '--speculative-config={"method": "eagle3"}']
    probe = vp.Probe({"argv": argv, "untrusted_models": {"model": "/srv/m (/srv/m is owned by vllm (uid 990))"}})
    judged = []
    probe.parse = lambda: probe.check("parser", "accepted") or object()  # type: ignore[method-assign]
    probe.configs = lambda args: judged.append("configs") or (None, None, None)  # type: ignore[method-assign]
    probe.judge(None, {})
    assert judged == []
    assert probe.judged("parser") == vp.PASSED
    assert [c["name"] for c in probe.not_run] == ["model-config", "speculative-config", "attention-backend-target"]
    assert probe.not_run[0]["reason"] == (
        "not judged: --trust-remote-code is set and another user could change the model /srv/m (/srv/m "
        "is owned by vllm (uid 990)): vLLM would import the checkpoint's Python as root, so root's "
        "preflight does not build its configs; give the checkpoint to root (no group or other write) "
        "for these checks to run")
