"""The Hub client (plugins/module_utils/_weights/_hub.py) against the TEST DOUBLE tests/doubles/fake_hub.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._weights import _hub as hub

TESTS = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(TESTS / "support"))
sys.path.insert(0, str(TESTS / "doubles"))
import tiny_checkpoint as tc  # noqa: E402
from fake_hub import FakeHub  # noqa: E402  (TEST DOUBLE)

REPO, COMMIT = "gpuserve-test/tiny-model", "0123456789abcdef0123456789abcdef01234567"
RECORDED_REVISION = json.loads((TESTS / "fixtures/hub/revision-openai-community-gpt2.json").read_text())


@pytest.fixture
def fake(tmp_path: Path):
    tc.make_checkpoint(tmp_path / "files", shards=3, shard_bytes=64 << 10)
    double = FakeHub(REPO, COMMIT, tmp_path / "files", tc.hub_tree(tmp_path / "files"), page_size=2)
    yield double
    double.close()


def test_revision_response_shape_is_the_recorded_one(fake: FakeHub) -> None:
    assert hub.resolve_commit(fake.endpoint, REPO, "main") == COMMIT
    recorded = RECORDED_REVISION["response"]
    assert hub.re.match(r"^[0-9a-f]{40}$", recorded["sha"])  # the field read, in the recorded response
    assert fake.requests[-1]["path"] == f"/api/models/{REPO}/revision/main"


def test_a_commit_is_not_resolved(fake: FakeHub) -> None:
    assert hub.resolve_commit(fake.endpoint, REPO, COMMIT) == COMMIT
    assert fake.requests == []


def test_unknown_revision_names_the_hubs_error(fake: FakeHub) -> None:
    with pytest.raises(hub.HubError) as err:
        hub.resolve_commit(fake.endpoint, REPO, "v9")
    assert f"{fake.endpoint}/api/models/{REPO}/revision/v9: HTTP 404 RevisionNotFound Invalid rev id: v9" == str(err.value)


def test_tree_follows_every_page(fake: FakeHub) -> None:
    entries = hub.list_tree(fake.endpoint, REPO, COMMIT)
    assert entries == fake.tree and len(fake.requests) == 3  # 5 entries, 2 per page
    assert fake.requests[0]["path"] == f"/api/models/{REPO}/tree/{COMMIT}?recursive=true&expand=false"


def test_unreachable_hub(tmp_path: Path) -> None:
    with pytest.raises(hub.HubError, match="cannot reach it"):
        hub.list_tree("http://127.0.0.1:9", REPO, COMMIT, timeout=5)


def test_bad_repo_name_is_refused() -> None:
    with pytest.raises(hub.HubError, match="not of the form owner/name"):
        hub.list_tree("http://127.0.0.1:9", "../x", COMMIT)


def test_fetch_resumes_and_keeps_the_token_off_the_cdn(fake: FakeHub, tmp_path: Path) -> None:
    shard = "model-00002-of-00003.safetensors"
    data = (fake.files / shard).read_bytes()
    url = hub.resolve_url(fake.endpoint, REPO, COMMIT, shard)
    dest = tmp_path / "out" / shard
    fake.cut_after[shard] = 20000
    with pytest.raises(hub.HubError, match=f"broke off after 20000 of {len(data)} bytes"):
        hub.fetch(url, str(dest), len(data), token="hf_secret")
    assert dest.read_bytes() == data[:20000]
    assert hub.fetch(url, str(dest), len(data), token="hf_secret") == len(data) - 20000
    assert dest.read_bytes() == data
    assert fake.served[shard] == len(data)  # nothing sent twice
    api = [r for r in fake.requests if r["server"] == "api"]
    cdn = [r for r in fake.requests if r["server"] == "cdn"]
    assert {r["authorization"] for r in api} == {"Bearer hf_secret"}
    assert {r["authorization"] for r in cdn} == {None}
    assert [r["range"] for r in cdn] == [None, "bytes=20000-"]
    assert hub.fetch(url, str(dest), len(data)) == 0  # complete: no request at all
    assert len(fake.requests) == 4


def test_fetch_restarts_when_the_server_ignores_the_range(fake: FakeHub, tmp_path: Path) -> None:
    shard = "model-00001-of-00003.safetensors"
    data = (fake.files / shard).read_bytes()
    dest = tmp_path / shard
    dest.write_bytes(data[:1000])
    fake.ignore_range = True
    assert hub.fetch(hub.resolve_url(fake.endpoint, REPO, COMMIT, shard), str(dest), len(data)) == len(data)
    assert dest.read_bytes() == data


def test_fetch_of_a_missing_entry(fake: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(hub.HubError, match="HTTP 404 EntryNotFound Entry not found"):
        hub.fetch(hub.resolve_url(fake.endpoint, REPO, COMMIT, "nope.bin"), str(tmp_path / "x"), 10)
