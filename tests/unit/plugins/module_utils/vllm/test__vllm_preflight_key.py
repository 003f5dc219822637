"""What the verdict cache keys on: checkpoints named by argv, the vLLM tree, distributions."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _preflight_key as vk

SPEC = json.dumps({"method": "eagle3", "model": "/srv/drafter", "num_speculative_tokens": 3})


@pytest.mark.parametrize("argv, found", [
    (["/v", "serve", "/srv/m", "--speculative-config", SPEC],
     {"model": "/srv/m", "drafter": "/srv/drafter"}),
    (["/v", "serve", "--model", "/srv/m"], {"model": "/srv/m"}),
    (["/v", "serve", "--model=/srv/m", f"--speculative-config={SPEC}"],
     {"model": "/srv/m", "drafter": "/srv/drafter"}),
    (["/v", "serve", "/srv/m", "--speculative-config.model", "/srv/d2"],
     {"model": "/srv/m", "drafter": "/srv/d2"}),
    (["/v", "serve", "/srv/m", "--speculative-config", '{"method": "ngram"}'],
     {"model": "/srv/m"}),
    (["/v", "serve", "/srv/m", "--speculative-config", "{broken"], {"model": "/srv/m"}),
    (["/v", "serve", "moonshotai/Kimi-K2.5"], {"model": "moonshotai/Kimi-K2.5"}),
])
def test_checkpoints(argv: list, found: dict) -> None:
    assert vk.checkpoints(argv) == found


def test_local_dirs_finds_every_directory_named(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "d").mkdir()
    (tmp_path / "tok").mkdir()
    spec = json.dumps({"method": "eagle3", "model": str(tmp_path / "d")})
    argv = ["/v", "serve", str(tmp_path / "m"), "--speculative-config", spec,
            f"--tokenizer={tmp_path / 'tok'}", "--port", "8000", "--host", "/nonexistent"]
    assert vk.local_dirs(argv) == sorted(str(tmp_path / n) for n in ("d", "m", "tok"))


def test_checkpoint_digest_reads_configs_and_code_never_weights(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "kimi_k25"}')
    (tmp_path / "configuration_kimi_k25.py").write_text("X = 1\n")
    (tmp_path / "model-00001-of-000064.safetensors").write_bytes(b"\0" * 64)
    (tmp_path / "sub").mkdir()
    before = vk.checkpoint_digest(str(tmp_path))
    assert sorted(before) == ["config.json", "configuration_kimi_k25.py"]
    (tmp_path / "model-00001-of-000064.safetensors").write_bytes(b"\1" * 64)
    assert vk.checkpoint_digest(str(tmp_path)) == before
    (tmp_path / "config.json").write_text('{"model_type": "kimi_k2"}')
    assert vk.checkpoint_digest(str(tmp_path))["config.json"] != before["config.json"]


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "vllm"
    (root / "models" / "__pycache__").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "models" / "kimi_k25.py").write_text("class KimiK25: pass\n")
    return root


def test_tree_digest_sees_a_replaced_file_and_ignores_bytecode(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    before, count = vk.tree_digest(str(root))
    assert count == 2
    (root / "models" / "__pycache__" / "kimi_k25.cpython-311.pyc").write_bytes(b"pyc")
    assert vk.tree_digest(str(root))[0] == before
    # what python_patch does: a temp file renamed over the original (same size here)
    tmp = root / "models" / ".kimi_k25.py.tmp"
    tmp.write_text("class KimiK26: pass\n")
    os.replace(tmp, root / "models" / "kimi_k25.py")
    assert vk.tree_digest(str(root))[0] != before


def test_tree_digest_sees_an_in_place_edit(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    before = vk.tree_digest(str(root))[0]
    path = root / "models" / "kimi_k25.py"
    stamp = path.stat().st_mtime_ns
    path.write_text("class KimiK25: passX\n")
    os.utime(path, ns=(stamp + 1_000_000, stamp + 1_000_000))
    assert vk.tree_digest(str(root))[0] != before


def test_distributions_digest_sees_a_reinstall(tmp_path: Path) -> None:
    dist = tmp_path / "torch-2.9.1.dist-info"
    dist.mkdir()
    (dist / "RECORD").write_text("torch/__init__.py,sha256=x,1\n")
    (tmp_path / "not-a-dist").mkdir()
    before, count = vk.distributions_digest([str(tmp_path), str(tmp_path / "missing")])
    assert count == 1
    new = tmp_path / "RECORD.new"
    new.write_text("torch/__init__.py,sha256=y,1\n")
    os.replace(new, dist / "RECORD")
    assert vk.distributions_digest([str(tmp_path)])[0] != before


def test_environment_keeps_what_vllm_reads_and_drops_secrets() -> None:
    environ = {"VLLM_ATTENTION_BACKEND": "TRITON_MLA", "HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_x",
               "VLLM_API_KEY": "s", "CUDA_VISIBLE_DEVICES": "0,1", "HOME": "/root",
               "PYTHONPATH": "/overlay"}
    assert vk.environment(environ) == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_HUB_OFFLINE": "1",
                                       "PYTHONPATH": "/overlay",
                                       "VLLM_ATTENTION_BACKEND": "TRITON_MLA"}


def test_gpus_reads_the_driver_and_each_gpu(tmp_path: Path) -> None:
    assert vk.gpus(str(tmp_path / "none")) == ""
    (tmp_path / "gpus" / "0000:01:00.0").mkdir(parents=True)
    (tmp_path / "version").write_text("NVRM version: NVIDIA UNIX Open Kernel Module 580.95.05\n")
    info = tmp_path / "gpus" / "0000:01:00.0" / "information"
    info.write_text("Model: NVIDIA RTX PRO 6000 Blackwell Server Edition\n")
    before = vk.gpus(str(tmp_path))
    info.write_text("Model: NVIDIA H200\n")
    assert before and vk.gpus(str(tmp_path)) != before


def test_fingerprint_finds_vllm_on_sys_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _tree(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    found = vk.fingerprint(["/v", "serve", str(tmp_path / "m")])
    assert list(found["vllm"]) == [str(root)] and found["uncacheable"] == []
    assert found["checkpoints"] == {str(tmp_path / "m"): {"config.json": vk.checkpoint_digest(
        str(tmp_path / "m"))["config.json"]}}


def test_fingerprint_of_a_remote_model_is_uncacheable() -> None:
    found = vk.fingerprint(["/v", "serve", "moonshotai/Kimi-K2.5"])
    assert any("moonshotai/Kimi-K2.5 is not a local directory" in r
               for r in found["uncacheable"])


def test_runs_as_a_script_with_another_interpreter(tmp_path: Path) -> None:
    request = {"argv": ["/v", "serve", str(tmp_path)], "result_path": str(tmp_path / "out.json")}
    (tmp_path / "req.json").write_text(json.dumps(request))
    source = Path(vk.__file__).read_text()
    subprocess.run([sys.executable, "-", str(tmp_path / "req.json")], input=source.encode(),
                   check=True, cwd=tmp_path)
    found = json.loads((tmp_path / "out.json").read_text())
    assert found["python"] == sys.executable and str(tmp_path) in found["checkpoints"]


# ---- what vLLM reads from files the command line names (issue 18) --------------------------
@pytest.mark.parametrize("flag", ["--chat-template", "--config", "--tool-parser-plugin"])
@pytest.mark.parametrize("inline", [False, True], ids=["separate", "flag=value"])
def test_a_file_valued_flag_is_read_by_content(tmp_path: Path, flag: str, inline: bool) -> None:
    named = tmp_path / "named-file"
    named.write_text("{{ messages }}\n" if flag == "--chat-template" else "x: 1\n")
    words = [f"{flag}={named}"] if inline else [flag, str(named)]
    argv = ["/v", "serve", str(tmp_path / "m")] + words
    before = vk.fingerprint(argv)
    stamp = named.stat().st_mtime_ns
    named.write_text(named.read_text().replace("1", "2").replace("messages", "messagez"))
    os.utime(named, ns=(stamp, stamp))  # same size, same mtime: only the bytes differ
    assert vk.fingerprint(argv) != before


def test_files_named_inside_a_config_file_are_read(tmp_path: Path) -> None:
    template = tmp_path / "template.jinja"
    template.write_text("{{ messages }}")
    config = tmp_path / "serve.yaml"
    config.write_text(f"# vllm serve --config\nchat-template: '{template}'\nport: 8000\n")
    argv = ["/v", "serve", str(tmp_path / "m"), "--config", str(config)]
    before = vk.fingerprint(argv)
    template.write_text("{{ messages | reverse }}")
    assert vk.fingerprint(argv) != before


@pytest.mark.parametrize("form", ["separate", "flag=value", "nested"])
def test_the_drafter_of_an_inline_speculative_config_is_read(tmp_path: Path, form: str) -> None:
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text('{"hidden_size": 7168}')
    spec = {"method": "eagle3", "model": str(drafter)}
    if form == "nested":
        spec = {"method": "eagle3", "draft": {"models": [str(drafter)]}}
    words = ([f"--speculative-config={json.dumps(spec)}"] if form == "flag=value"
             else ["--speculative-config", json.dumps(spec)])
    argv = ["/v", "serve", str(tmp_path / "m")] + words
    assert str(drafter) in vk.local_dirs(argv)
    before = vk.fingerprint(argv)
    (drafter / "config.json").write_text('{"hidden_size": 4096}')
    assert vk.fingerprint(argv) != before


def test_a_large_file_is_keyed_by_its_stat_not_read(tmp_path: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"\0" * (vk.READ_LIMIT + 1))
    first = vk.file_digest(str(gguf))
    assert first.startswith("stat:")
    os.replace(_copy(gguf, tmp_path / "new.gguf"), gguf)
    assert vk.file_digest(str(gguf)) != first  # another inode: python_patch / uv / cp + mv


def _copy(source: Path, target: Path) -> Path:
    target.write_bytes(source.read_bytes())
    return target


def test_checkpoint_digest_reads_the_chat_template_file(tmp_path: Path) -> None:
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    before = vk.checkpoint_digest(str(tmp_path))
    (tmp_path / "chat_template.jinja").write_text("{{ messages | first }}")
    assert vk.checkpoint_digest(str(tmp_path)) != before
