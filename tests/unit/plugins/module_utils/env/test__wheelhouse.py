"""Tables for the wheelhouse engine: platform tags, pip's own download lines, sets, verification."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._env import _wheelhouse as wh

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "pip"
UV_WHEEL = "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"


@pytest.mark.parametrize(
    ("glibc", "machine", "first", "must_hold", "last"),
    [
        ("2.36", "x86_64", "manylinux_2_36_x86_64",
         ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"],
         "linux_x86_64"),
        ("2.17", "x86_64", "manylinux_2_17_x86_64", ["manylinux2014_x86_64", "manylinux_2_5_x86_64"], "linux_x86_64"),
        ("2.39", "aarch64", "manylinux_2_39_aarch64", ["manylinux_2_17_aarch64", "manylinux2014_aarch64"],
         "linux_aarch64"),
    ],
)
def test_platform_tags_spell_out_every_manylinux_the_glibc_accepts(glibc, machine, first, must_hold, last):
    tags = wh.platform_tags(glibc, machine)
    assert tags[0] == first and tags[-1] == last
    assert set(must_hold) <= set(tags)
    assert len(tags) == len(set(tags))


def test_platform_tags_of_aarch64_stop_at_manylinux2014():
    assert not [tag for tag in wh.platform_tags("2.28", "aarch64") if "2010" in tag or "manylinux1" in tag
                or tag.startswith("manylinux_2_16")]


@pytest.mark.parametrize(("glibc", "machine", "says"), [
    ("2.16", "x86_64", "older"), ("236", "x86_64", "like 2.35"), ("2.36", "armv7l", "machine must be"),
])
def test_platform_tags_refuse_what_pip_would_misread(glibc, machine, says):
    with pytest.raises(wh.WheelhouseError, match=says):
        wh.platform_tags(glibc, machine)


@pytest.mark.parametrize("value", ["3", "3.11.7", "py311", ""])
def test_python_version_is_major_minor(value):
    with pytest.raises(wh.WheelhouseError, match="like 3.11"):
        wh.python_version(value)


def test_downloaded_files_from_a_first_download():
    files = wh.downloaded_files((FIXTURES / "download-new.txt").read_text())
    assert files == [UV_WHEEL, "requests-2.32.3-py3-none-any.whl",
                     "charset_normalizer-3.5.3-cp311-cp311-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl",
                     "idna-3.20-py3-none-any.whl", "urllib3-2.8.0-py3-none-any.whl",
                     "certifi-2026.10.19.post1-py3-none-any.whl"]


def test_downloaded_files_when_everything_was_there_already():
    again = wh.downloaded_files((FIXTURES / "download-again.txt").read_text())
    assert sorted(again) == sorted(wh.downloaded_files((FIXTURES / "download-new.txt").read_text()))


@pytest.mark.parametrize(("filename", "expected"), [
    (UV_WHEEL, ("uv", "0.13.9")),
    ("vllm-0.17.0-cp38-abi3-manylinux_2_31_x86_64.whl", ("vllm", "0.17.0")),
    ("charset_normalizer-3.5.3-cp311-cp311-manylinux1_x86_64.whl", ("charset-normalizer", "3.5.3")),
    ("foo-1.0-1build-py3-none-any.whl", ("foo", "1.0")),
])
def test_wheel_name_version(filename, expected):
    assert wh.wheel_name_version(filename) == expected


def test_wheel_name_version_refuses_an_sdist():
    with pytest.raises(wh.WheelhouseError, match="not a wheel"):
        wh.wheel_name_version("vllm-0.17.0.tar.gz")


def test_download_argv_is_wheels_only_for_the_nodes_platform():
    argv = wh.download_argv("/usr/bin/python3", "/srv/wh", ["vllm==0.17.0"], platforms=["manylinux_2_36_x86_64"],
                            python_version_="3.12", no_deps=True, find_links=["/cache"], no_index=True)
    assert argv[:4] == ["/usr/bin/python3", "-m", "pip", "download"]
    assert "--only-binary=:all:" in argv and argv[argv.index("--python-version") + 1] == "3.12"
    assert argv[argv.index("--platform") + 1] == "manylinux_2_36_x86_64"
    assert {"--no-deps", "--no-index", "--find-links=/cache"} <= set(argv) and argv[-1] == "vllm==0.17.0"
    with pytest.raises(wh.WheelhouseError, match="at least one"):
        wh.download_argv("p", "d", [], platforms=[], python_version_="3.11")


def test_distinct_sets_one_per_content_both_releases_mid_upgrade():
    node_a = [{"name": "uv", "requirements": ["uv==0.13.9"]}, {"name": "vllm", "requirements": ["vllm==0.17.0"]}]
    node_b = [{"name": "uv", "requirements": [" uv==0.13.9 "]}, {"name": "vllm", "requirements": ["vllm==0.18.0"]}]
    sets = wh.distinct_sets(node_a + node_b)
    assert [s["name"] for s in sets] == ["uv", "vllm", "vllm"]
    assert len({s["key"] for s in sets}) == 3
    no_deps = wh.distinct_sets([{"name": "vllm", "requirements": ["vllm==0.17.0"], "no_deps": True}])
    assert no_deps[0]["key"] not in {s["key"] for s in sets}


@pytest.mark.parametrize(("item", "says"), [
    ("uv==0.13.9", "not a mapping"),
    ({"name": "uv", "requirements": "uv==0.13.9"}, "list of lines"),
    ({"name": "uv", "requirements": []}, "needs a name"),
    ({"name": "Bad Name", "requirements": ["uv==0.13.9"]}, "needs a name"),
])
def test_distinct_sets_refuse_malformed_sets(item, says):
    with pytest.raises(wh.WheelhouseError, match=says):
        wh.distinct_sets([item])


def _house(tmp_path: Path, files: dict[str, bytes]) -> dict:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    hashes = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    sets = [{"key": "uv-x", "name": "uv", "requirements": ["uv==0.13.9"], "no_deps": False, "files": list(files)}]
    manifest = wh.build_manifest(str(tmp_path), sets, hashes, {"python": "3.11", "glibc": "2.36", "machine": "x86_64"})
    wh.write(str(tmp_path), manifest)
    return manifest


def test_write_then_verify_round_trip_and_sha256sum_format(tmp_path):
    manifest = _house(tmp_path, {UV_WHEEL: b"wheel bytes"})
    assert wh.load_manifest(str(tmp_path)) == json.loads(json.dumps(manifest))
    sums_text = (tmp_path / wh.SUMS).read_text()
    assert sums_text == f"{hashlib.sha256(b'wheel bytes').hexdigest()}  {UV_WHEEL}\n"
    assert wh.verify(str(tmp_path), manifest, wh.parse_sums(sums_text, "SUMS")) == []


def test_verify_names_a_changed_byte_a_short_file_a_missing_one(tmp_path):
    manifest = _house(tmp_path, {"a-1-py3-none-any.whl": b"aaaa", "b-1-py3-none-any.whl": b"bbbb",
                                 "c-1-py3-none-any.whl": b"cccc"})
    sums = wh.parse_sums((tmp_path / wh.SUMS).read_text(), "SUMS")
    (tmp_path / "a-1-py3-none-any.whl").write_bytes(b"aaab")
    (tmp_path / "b-1-py3-none-any.whl").write_bytes(b"bb")
    (tmp_path / "c-1-py3-none-any.whl").unlink()
    assert wh.verify(str(tmp_path), manifest, sums) == [
        "a-1-py3-none-any.whl: sha256 differs from SHA256SUMS",
        "b-1-py3-none-any.whl: 2 bytes, the manifest says 4",
        "c-1-py3-none-any.whl: missing",
    ]


def test_verify_finds_sums_and_manifest_that_disagree(tmp_path):
    manifest = _house(tmp_path, {"a-1-py3-none-any.whl": b"aaaa"})
    assert wh.verify(str(tmp_path), manifest, {"a-1-py3-none-any.whl": "0" * 64}) == [
        "a-1-py3-none-any.whl: SHA256SUMS and gpuserve-wheelhouse.json disagree"]


@pytest.mark.parametrize(("text", "says"), [("nothex  a.whl", "line 1"), ("\n" + "a" * 64, "line 2")])
def test_parse_sums_names_the_bad_line(text, says):
    with pytest.raises(wh.WheelhouseError, match=says):
        wh.parse_sums(text, "/srv/wh/SHA256SUMS")


def test_load_manifest_names_the_file(tmp_path):
    with pytest.raises(wh.WheelhouseError, match="gpuserve-wheelhouse.json does not exist"):
        wh.load_manifest(str(tmp_path))
    (tmp_path / wh.MANIFEST).write_text("{")
    with pytest.raises(wh.WheelhouseError, match="not valid JSON"):
        wh.load_manifest(str(tmp_path))
    (tmp_path / wh.MANIFEST).write_text('{"format": 9}')
    with pytest.raises(wh.WheelhouseError, match="not a format-1"):
        wh.load_manifest(str(tmp_path))


def test_missing_requirements_names_the_pins_no_wheel_provides():
    manifest = {"files": {UV_WHEEL: {}, "Flash_Attn-2.8.0-cp311-cp311-linux_x86_64.whl": {}}}
    assert wh.missing_requirements(manifest, ["uv==0.13.9", "flash-attn==2.8.0", "vllm[audio]==0.18.0"]) == [
        "vllm[audio]==0.18.0"]
    with pytest.raises(wh.WheelhouseError, match="not pinned"):
        wh.missing_requirements(manifest, ["vllm>=0.17"])


def test_hashed_lock_pins_what_was_resolved_with_every_hash_of_it():
    manifest = {"files": {
        UV_WHEEL: {"sha256": "a" * 64},
        "Charset_Normalizer-3.5.3-cp311-cp311-manylinux1_x86_64.whl": {"sha256": "b" * 64},
        "charset_normalizer-3.5.3-cp311-cp311-musllinux_1_1_x86_64.whl": {"sha256": "c" * 64},
        "six-1.16.0-py2.py3-none-any.whl": {"sha256": "d" * 64},
        "six-1.17.0-py2.py3-none-any.whl": {"sha256": "e" * 64},
    }}
    resolved = [{"name": "six", "version": "1.17.0"}, {"name": "charset-normalizer", "version": "3.5.3"}]
    assert wh.hashed_lock(manifest, resolved, "/srv/wh") == (
        f"charset-normalizer==3.5.3 --hash=sha256:{'b' * 64} --hash=sha256:{'c' * 64}\n"
        f"six==1.17.0 --hash=sha256:{'e' * 64}\n")


def test_hashed_lock_refuses_what_the_builder_did_not_hash():
    manifest = {"files": {UV_WHEEL: {"sha256": "a" * 64}}}
    with pytest.raises(wh.WheelhouseError, match=r"would take six==1.17.0, which the manifest of the wheelhouse /srv/wh"):
        wh.hashed_lock(manifest, [{"name": "uv", "version": "0.13.9"}, {"name": "Six", "version": "1.17.0"}], "/srv/wh")


def test_trust_problems_name_a_file_every_user_may_write(tmp_path):
    (tmp_path / "a-1-py3-none-any.whl").write_bytes(b"a")
    assert wh.trust_problems(str(tmp_path), ["a-1-py3-none-any.whl"]) == []
    (tmp_path / "a-1-py3-none-any.whl").chmod(0o646)
    assert wh.trust_problems(str(tmp_path), ["a-1-py3-none-any.whl"]) == [
        f"{tmp_path}/a-1-py3-none-any.whl is writable by every user (mode 0646)"]


@pytest.mark.parametrize(("host", "says"), [
    ({"python": "3.11", "glibc": "2.36", "machine": "x86_64"}, ""),
    ({"python": "3.11", "glibc": "2.39", "machine": "x86_64"}, ""),
    ({"python": "3.11", "glibc": "2.35", "machine": "x86_64"}, "is for glibc 2.36, this host has 2.35"),
    ({"python": "3.12", "glibc": "2.36", "machine": "x86_64"}, "is for python 3.11"),
    ({"python": "3.11", "glibc": "2.36", "machine": "aarch64"}, "is for machine x86_64"),
    ({"python": "3.11", "glibc": "", "machine": "x86_64"}, "is not 2.N"),
])
def test_platform_problem_a_newer_glibc_is_fine_nothing_else_differs(host, says):
    problem = wh.platform_problem({"python": "3.11", "glibc": "2.36", "machine": "x86_64"}, host)
    assert (says in problem) if says else problem == ""


PUSH_MANIFEST = {"files": {"b-1-py3-none-any.whl": {"sha256": "b" * 64}, "a-1-py3-none-any.whl": {"sha256": "a" * 64}}}
CONTROL = {wh.SUMS: "5" * 64, wh.MANIFEST: "7" * 64}


@pytest.mark.parametrize(("on_host", "expected"), [
    ({}, ["a-1-py3-none-any.whl", "b-1-py3-none-any.whl", wh.SUMS, wh.MANIFEST]),  # a first push
    ({"a-1-py3-none-any.whl": "a" * 64, "b-1-py3-none-any.whl": "b" * 64, wh.SUMS: "5" * 64, wh.MANIFEST: "7" * 64},
     []),  # in place: nothing sent
    ({"a-1-py3-none-any.whl": "a" * 64, "b-1-py3-none-any.whl": "0" * 64, wh.SUMS: "5" * 64, wh.MANIFEST: "7" * 64},
     ["b-1-py3-none-any.whl"]),  # a changed byte on the host
    ({"a-1-py3-none-any.whl": "a" * 64, wh.SUMS: "4" * 64, wh.MANIFEST: "6" * 64},
     ["b-1-py3-none-any.whl", wh.SUMS, wh.MANIFEST]),  # an upgrade, or a push killed after its first wheel
])
def test_push_plan_sends_what_differs_wheels_first(on_host, expected):
    assert wh.push_plan(PUSH_MANIFEST, CONTROL, on_host) == expected
