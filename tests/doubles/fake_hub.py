"""TEST DOUBLE of the Hugging Face Hub's HTTP endpoints that gpuserve.vllm reads, on 127.0.0.1.

What it imitates, and where that behaviour was read:
- ``GET /api/models/{repo}/revision/{rev}`` -> JSON with ``sha`` (huggingface_hub ``model_info``;
  recorded shape: tests/fixtures/hub/revision-openai-community-gpt2.json).
- ``GET /api/models/{repo}/tree/{commit}?recursive=true`` -> a JSON list of entries, paged with
  ``Link: <next url>; rel="next"`` (huggingface_hub ``list_repo_tree`` -> ``utils/_pagination.py``;
  recorded entries: tests/fixtures/hub/tree-google-bert-bert-base-uncased.json). The entries
  served are given by the test (tests/support/tiny_checkpoint.hub_tree, the recorded shape).
- ``GET /{repo}/resolve/{commit}/{path}`` -> 302 to a CDN on another host:port, as the Hub does
  for LFS files; the CDN answers ``Range: bytes=N-`` with 206 and ``Content-Range: bytes
  N-END/SIZE`` (RFC 9110 section 14), or ignores it when told to (200, the whole file).
- Errors: a 404 with the ``X-Error-Code`` / ``X-Error-Message`` headers huggingface_hub's
  ``hf_raise_for_status`` reads (``RevisionNotFound``, ``EntryNotFound``).

It records every request (path, Range, Authorization) and can cut a download after N bytes of
a file (a connection lost half-way).
"""

from __future__ import annotations

import json
import threading
import typing as t
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class FakeHub:
    def __init__(self, repo: str, commit: str, files: Path, tree: list[dict[str, t.Any]],
                 branch: str = "main", page_size: int = 1000) -> None:
        self.repo, self.commit, self.files, self.tree = repo, commit, files, tree
        self.branch, self.page_size = branch, page_size
        self.requests: list[dict[str, t.Any]] = []
        self.cut_after: dict[str, int] = {}  # path -> bytes of body before the connection drops
        self.ignore_range = False
        self.served: dict[str, int] = {}  # path -> body bytes sent, all requests
        self.api = self._server(self._api_handler)
        self.cdn = self._server(self._cdn_handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.api.server_address[1]}"

    def _server(self, handler: t.Callable[[BaseHTTPRequestHandler], None]) -> ThreadingHTTPServer:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's API)
                hub.requests.append({"server": "api" if handler == hub._api_handler else "cdn",
                                     "path": self.path, "range": self.headers.get("Range"),
                                     "authorization": self.headers.get("Authorization")})
                handler(self)

            def log_message(self, *args: t.Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def close(self) -> None:
        for server in (self.api, self.cdn):
            server.shutdown()
            server.server_close()

    @staticmethod
    def _send(req: BaseHTTPRequestHandler, status: int, body: bytes = b"",
              headers: t.Mapping[str, str] | None = None) -> None:
        req.send_response(status)
        for name, value in (headers or {}).items():
            req.send_header(name, value)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    def _error(self, req: BaseHTTPRequestHandler, code: str, message: str) -> None:
        self._send(req, 404, json.dumps({"error": message}).encode(),
                   {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"})

    def _api_handler(self, req: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(req.path)
        query = urllib.parse.parse_qs(url.query)
        prefix = f"/api/models/{self.repo}/"
        if url.path.startswith(prefix + "revision/"):
            rev = urllib.parse.unquote(url.path[len(prefix + "revision/"):])
            if rev not in (self.branch, self.commit):
                return self._error(req, "RevisionNotFound", f"Invalid rev id: {rev}")
            return self._send(req, 200, json.dumps({"_id": "0" * 24, "id": self.repo, "sha": self.commit}).encode(),
                              {"Content-Type": "application/json"})
        if url.path == prefix + f"tree/{self.commit}":
            start = int(query.get("cursor", ["0"])[0])
            page = self.tree[start:start + self.page_size]
            headers = {"Content-Type": "application/json"}
            if start + self.page_size < len(self.tree):
                headers["Link"] = (f'<{self.endpoint}{url.path}?recursive=true&expand=false&cursor='
                                   f'{start + self.page_size}>; rel="next"')
            return self._send(req, 200, json.dumps(page).encode(), headers)
        resolve = f"/{self.repo}/resolve/{self.commit}/"
        if url.path.startswith(resolve):
            path = urllib.parse.unquote(url.path[len(resolve):])
            if not (self.files / path).is_file():
                return self._error(req, "EntryNotFound", "Entry not found")
            cdn = f"http://127.0.0.1:{self.cdn.server_address[1]}/blobs/{urllib.parse.quote(path)}"
            return self._send(req, 302, b"", {"Location": cdn, "X-Repo-Commit": self.commit})
        self._error(req, "RepoNotFound", "Repository not found")

    def _cdn_handler(self, req: BaseHTTPRequestHandler) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(req.path).path[len("/blobs/"):])
        data = (self.files / path).read_bytes()
        start = 0
        wanted = req.headers.get("Range", "")
        if wanted.startswith("bytes=") and not self.ignore_range:
            start = int(wanted[len("bytes="):].split("-")[0])
        body = data[start:]
        req.send_response(206 if start else 200)
        if start:
            req.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        req.send_header("Accept-Ranges", "bytes")
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        limit = self.cut_after.pop(path, None)
        sent = body if limit is None else body[:limit]
        # Counted before the write: a client that has read every byte may look at once.
        self.served[path] = self.served.get(path, 0) + len(sent)
        req.wfile.write(sent)
        if limit is not None:
            req.wfile.flush()
            req.close_connection = True
            req.connection.shutdown(2)
