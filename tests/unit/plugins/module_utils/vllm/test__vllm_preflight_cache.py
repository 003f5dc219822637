"""The verdict cache: its key, what may be stored, and its files (atomic, 0700, pruned)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _preflight_cache as vc

FP = {"python": "/opt/ml-env/bin/python", "vllm": {"/site/vllm": ["a" * 64, 2012]},
      "distributions": "d" * 64, "checkpoints": {"/srv/m": {"config.json": "c" * 64}},
      "environment": {}, "gpus": "", "uncacheable": []}
ARGV = ["/opt/ml-env/bin/vllm", "serve", "/srv/m", "--max-num-seqs", "64"]
BASE = (FP, ARGV, ["enforce_eager"], "12.0", "code-1")
ACCEPTED = {"skipped": False, "problems": [], "notes": [], "vllm_version": "0.17.0",
            "checks": [{"name": "parser", "ok": True, "detail": "..."}], "seconds": 14.2}


def _with(index: int, value: object) -> tuple:
    args = list(BASE)
    args[index] = value
    return tuple(args)


def _fp(**over: object) -> dict:
    return dict(FP, **over)


def test_same_inputs_same_key() -> None:
    assert vc.cache_key(*BASE) == vc.cache_key(*BASE)
    assert len(vc.cache_key(*BASE)) == 64


@pytest.mark.parametrize("changed", [
    _with(1, ARGV[:-1] + ["32"]),                                   # a flag's value
    _with(1, ARGV + ["--enforce-eager"]),                           # a flag more
    _with(2, []),                                                   # extra flags' names
    _with(3, "10.0"),                                               # compute capability
    _with(4, "code-2"),                                             # the judging code
    _with(0, _fp(vllm={"/site/vllm": ["b" * 64, 2012]})),           # a vLLM file
    _with(0, _fp(distributions="e" * 64)),                          # a dependency reinstalled
    _with(0, _fp(checkpoints={"/srv/m": {"config.json": "f" * 64}})),  # config.json content
    _with(0, _fp(environment={"VLLM_USE_V1": "0"})),                # vLLM's environment
    _with(0, _fp(gpus="9" * 64)),                                   # other GPUs or driver
    _with(0, _fp(python="/opt/other/bin/python")),                  # another interpreter
])
def test_any_change_gives_another_key(changed: tuple) -> None:
    assert vc.cache_key(*changed) != vc.cache_key(*BASE)


def test_the_unit_environment_is_keyed_without_secret_values() -> None:
    env = {"NCCL_DEBUG": "WARN", "VLLM_API_KEY": "s3cret", "HF_TOKEN": "hf_abc"}
    key = vc.cache_key(*BASE, env)
    assert key != vc.cache_key(*BASE)
    assert key != vc.cache_key(*BASE, dict(env, NCCL_DEBUG="INFO"))
    assert key == vc.cache_key(*BASE, dict(env, VLLM_API_KEY="rotated", HF_TOKEN="hf_new"))
    assert key != vc.cache_key(*BASE, {"NCCL_DEBUG": "WARN", "HF_TOKEN": "hf_abc"})
    assert "s3cret" not in json.dumps(vc.keyed_environment(env))


def test_extra_flags_order_does_not_matter() -> None:
    assert vc.cache_key(FP, ARGV, ["a", "b"], "12.0", "c") == \
        vc.cache_key(FP, ARGV, ["b", "a"], "12.0", "c")


def test_code_digest_follows_the_sources() -> None:
    assert vc.code_digest("probe", "key") != vc.code_digest("probe2", "key")
    assert vc.code_digest("ab", "c") != vc.code_digest("a", "bc")


@pytest.mark.parametrize("result, fingerprint, reason", [
    (ACCEPTED, FP, ""),
    (dict(ACCEPTED, problems=[{"check": "parser"}]), FP, "vLLM refused"),
    (dict(ACCEPTED, skipped=True), FP, "skipped"),
    (dict(ACCEPTED, crashed=True), FP, "crashed"),
    (dict(ACCEPTED, checks=[]), FP, "no complete set"),
    (dict(ACCEPTED, checks=[{"name": "x", "ok": False}]), FP, "no complete set"),
    (ACCEPTED, _fp(uncacheable=["the model x is not a local directory"]), "not a local"),
])
def test_only_a_clean_acceptance_is_cacheable(result: dict, fingerprint: dict,
                                              reason: str) -> None:
    why = vc.why_not_cacheable(result, fingerprint)
    assert (why == "") if not reason else (reason in why), why


def test_write_then_read(tmp_path: Path) -> None:
    cache_dir = str(tmp_path / "state" / "vllm_preflight")
    path = vc.write_entry(cache_dir, "k" * 64, ACCEPTED, now=1_800_000_000)
    assert stat.S_IMODE(os.stat(cache_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(cache_dir) == ["k" * 64 + ".json"]  # no temp file left
    entry, note = vc.read_entry(cache_dir, "k" * 64)
    assert note == "" and entry["result"] == ACCEPTED
    result = vc.cached_result(entry, "k" * 64, 0.21)
    assert result["cached"] is True and result["seconds"] == 0.21
    assert result["checks"] == ACCEPTED["checks"] and "2027-01-15" in result["cache"]


def test_a_missing_entry_or_directory_is_a_quiet_miss(tmp_path: Path) -> None:
    assert vc.read_entry(str(tmp_path / "none"), "k" * 64) == (None, "")
    assert vc.read_entry(str(tmp_path), "k" * 64) == (None, "")


@pytest.mark.parametrize("content, words", [
    ("{not json", "unreadable"),
    (json.dumps({"format": vc.FORMAT, "key": "x" * 64, "result": ACCEPTED}), "not a verdict"),
    (json.dumps({"format": 0, "key": "k" * 64, "result": ACCEPTED}), "not a verdict"),
    (json.dumps({"format": vc.FORMAT, "key": "k" * 64, "result": "yes"}), "not a verdict"),
])
def test_a_damaged_or_foreign_entry_is_judged_again(tmp_path: Path, content: str,
                                                    words: str) -> None:
    tmp_path.chmod(0o700)
    (tmp_path / ("k" * 64 + ".json")).write_text(content)
    entry, note = vc.read_entry(str(tmp_path), "k" * 64)
    assert entry is None and words in note


def test_a_directory_others_can_write_is_not_trusted(tmp_path: Path) -> None:
    vc.write_entry(str(tmp_path / "c"), "k" * 64, ACCEPTED)
    (tmp_path / "c").chmod(0o770)
    entry, note = vc.read_entry(str(tmp_path / "c"), "k" * 64)
    assert entry is None and "must be 0700" in note
    with pytest.raises(ValueError, match="must be 0700"):
        vc.write_entry(str(tmp_path / "c"), "j" * 64, ACCEPTED)


def test_directory_problem(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    assert vc.directory_problem(str(tmp_path)) == ""
    assert "not to uid 4242" in vc.directory_problem(str(tmp_path), euid=4242)
    (tmp_path / "f").write_text("")
    assert "is not a directory" in vc.directory_problem(str(tmp_path / "f"))


def test_a_failed_write_leaves_no_entry_and_no_temp(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_full(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(vc.os, "replace", disk_full)
    with pytest.raises(OSError, match="No space"):
        vc.write_entry(str(tmp_path / "c"), "k" * 64, ACCEPTED)
    assert os.listdir(tmp_path / "c") == []


def test_prune_keeps_the_newest_and_sweeps_stale_temps(tmp_path: Path) -> None:
    cache_dir = tmp_path / "c"
    for n in range(vc.KEEP + 3):
        path = vc.write_entry(str(cache_dir), f"{n:064x}", ACCEPTED, now=1000.0)
        os.utime(path, (1000 + n, 1000 + n))
    stale = cache_dir / ".entry-killed"
    stale.write_text("{half")
    os.utime(stale, (1000, 1000))
    fresh = cache_dir / ".entry-writing"
    fresh.write_text("{")
    os.utime(fresh, (5000, 5000))
    removed = vc.prune(str(cache_dir), now=5000)
    names = sorted(os.listdir(cache_dir))
    assert len([n for n in names if n.endswith(".json")]) == vc.KEEP
    assert f"{0:064x}.json" not in names and f"{vc.KEEP + 2:064x}.json" in names
    assert str(stale) in removed and ".entry-writing" in names  # a writer may still own it
