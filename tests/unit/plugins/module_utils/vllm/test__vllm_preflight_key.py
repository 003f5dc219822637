"""What the verdict cache keys on: checkpoints named by argv, the vLLM tree, distributions."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils import _saferead as safe
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
    script = tmp_path / "run" / "gpuserve_preflight.py"
    script.parent.mkdir()
    shutil.copy(vk.__file__, script)
    shutil.copy(safe.__file__, script.parent / "_saferead.py")  # beside it, as vllm_serve_preflight writes it
    subprocess.run([sys.executable, "-I", "-B", str(script), str(tmp_path / "req.json")], check=True, cwd=tmp_path)
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


# ---- nested values of a --config file, read as YAML (issue 35) ------------------------------
def _drafter(tmp_path: Path) -> Path:
    drafter = tmp_path / "drafter"
    drafter.mkdir(exist_ok=True)
    (drafter / "config.json").write_text('{"hidden_size": 7168}')
    return drafter


@pytest.mark.parametrize("form", ["mapping", "json string", "flow mapping", "list"])
def test_a_drafter_named_at_depth_two_of_a_config_file_is_keyed(tmp_path: Path, form: str) -> None:
    drafter = _drafter(tmp_path)
    config = tmp_path / "serve.yaml"
    config.write_text({
        "mapping": f"port: 8000\nspeculative-config:\n  method: eagle3\n  model: {drafter}\n",
        "json string": f"speculative-config: '{{\"method\": \"eagle3\", \"model\": \"{drafter}\"}}'\n",
        "flow mapping": f"speculative_config: {{method: eagle3, model: '{drafter}'}}\n",
        "list": f"lora-modules:\n  - name: a\n    path: {drafter}\n",
    }[form])
    argv = ["/v", "serve", str(tmp_path / "m"), "--config", str(config)]
    assert str(drafter) in vk.local_dirs(argv)
    before = vk.fingerprint(argv)
    stamp = (drafter / "config.json").stat().st_mtime_ns
    (drafter / "config.json").write_text('{"hidden_size": 4096}')
    os.utime(drafter / "config.json", ns=(stamp, stamp))  # same size and mtime: the bytes differ
    assert vk.fingerprint(argv) != before


def test_a_config_file_the_line_reader_missed(tmp_path: Path) -> None:
    """What the old line-by-line reader skipped: an indented value, a value after a list dash."""
    drafter = _drafter(tmp_path)
    config = tmp_path / "serve.yaml"
    config.write_text(f"speculative-config:\n    model: {drafter}\n")
    words, reasons = vk.named_words(["/v", "serve", "--config", str(config)])
    assert str(drafter) in words and reasons == []


@pytest.mark.parametrize(("files", "argv_tail", "reached"), [
    # a YAML config naming a JSON file naming a directory
    ({"serve.yaml": "hf-overrides-file: {dir}/extra.json\n", "extra.json": '{{"x": ["{dir}/d"]}}'},
     ["--config", "{dir}/serve.yaml"], "{dir}/d"),
    # a JSON file given to a flag
    ({"spec.json": '{{"model": "{dir}/d"}}'}, ["--speculative-config-file", "{dir}/spec.json"], "{dir}/d"),
    # name=path
    ({}, ["--lora-modules", "sql={dir}/d"], "{dir}/d"),
    # a JSON string inside a YAML value
    ({"serve.yaml": "speculative-config: '{{\"model\": \"{dir}/d\"}}'\n"},
     ["--config={dir}/serve.yaml"], "{dir}/d"),
])
def test_named_words_follow_yaml_and_json(tmp_path: Path, files: dict, argv_tail: list,
                                          reached: str) -> None:
    (tmp_path / "d").mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(text.format(dir=tmp_path))
    argv = ["/v", "serve", "/srv/m"] + [w.format(dir=tmp_path) for w in argv_tail]
    assert reached.format(dir=tmp_path) in vk.local_dirs(argv)


def test_a_config_that_names_itself_ends(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(f"config: {config}\n")
    words, _reasons = vk.named_words(["/v", "serve", "--config", str(config)])
    assert words.count(str(config)) == vk.NAMED_DEPTH + 1


def test_without_pyyaml_a_config_file_makes_the_verdict_uncacheable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(f"speculative-config:\n  model: {_drafter(tmp_path)}\n")
    argv = ["/v", "serve", str(tmp_path), "--config", str(config)]
    assert not [r for r in vk.fingerprint(argv)["uncacheable"] if "PyYAML" in r]
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
    found = vk.fingerprint(argv)
    assert [r for r in found["uncacheable"] if "PyYAML is not importable" in r and str(config) in r]


@pytest.mark.parametrize(("config", "argv_tail", "found"), [
    ({"model": "/srv/m2", "speculative-config": {"model": "/srv/d"}}, [],
     {"model": "/srv/m", "drafter": "/srv/d"}),  # the positional model wins over the file
    ({"speculative_config": '{"model": "hub/drafter"}'}, [], {"model": "/srv/m", "drafter": "hub/drafter"}),
    ({"speculative-config": {"model": "/srv/d"}}, ["--speculative-config.model", "/srv/d2"],
     {"model": "/srv/m", "drafter": "/srv/d2"}),  # the command line wins
    ("not a mapping", [], {"model": "/srv/m"}),
])
def test_checkpoints_named_by_a_config_file(config: object, argv_tail: list, found: dict) -> None:
    assert vk.checkpoints(["/v", "serve", "/srv/m"] + argv_tail, config) == found


def test_a_hub_drafter_named_in_a_config_file_is_uncacheable(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("speculative-config:\n  model: lightseekorg/kimi-k2.5-eagle3\n")
    found = vk.fingerprint(["/v", "serve", str(tmp_path), "--config", str(config)])
    assert any("drafter lightseekorg/kimi-k2.5-eagle3 is not a local directory" in r
               for r in found["uncacheable"])


@pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's directory: root only")
def test_a_planted_checkpoint_file_is_keyed_unreadable_never_read(tmp_path: Path) -> None:
    """Root keys the service user's checkpoint: a FIFO as config.json does not block, a link to a
    root-only file is not followed; each is keyed as unreadable by name."""
    model = tmp_path / "model"
    model.mkdir()
    os.chown(model, 65534, 65534)
    os.mkfifo(model / "config.json")
    (tmp_path / "secret.json").write_text("{}")
    os.symlink(tmp_path / "secret.json", model / "tokenizer.json")
    assert vk.checkpoint_digest(str(model)) == {
        "config.json": f"unreadable: {model / 'config.json'}: a FIFO, not a regular file",
        "tokenizer.json": f"unreadable: {model / 'tokenizer.json'}: tokenizer.json is a link in a directory "
                          "another user can write: not followed"}
