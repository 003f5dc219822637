"""Tables for the HTTP helpers' duration formatting (plugins/module_utils/_vllm/_http.py), and the
body cap on a real port."""

from __future__ import annotations

import http.server
import threading

import pytest

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _http as vh


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (12.4, "12s"), (754, "12m34s"), (3700, "1h01m40s")])
def test_format_duration(seconds: float, text: str) -> None:
    assert vh.format_duration(seconds) == text


class _Endless(http.server.BaseHTTPRequestHandler):
    """A port that answers with a body without end (a service root must not read into memory)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's API)
        self.send_response(200 if self.path == "/metrics" else 503)
        self.end_headers()
        try:
            self.wfile.write(b"x" * (64 * 1024 * 1024))  # twice the default cap, more than any test's
        except OSError:
            pass

    def log_message(self, *_args) -> None:
        pass


@pytest.fixture()
def endless():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("path", ["/metrics", "/health"], ids=["200", "an HTTP error's body"])
def test_a_body_over_the_cap_is_not_read(endless, path):
    status, text = vh.http_request(endless + path, timeout=5, limit=1024 * 1024)
    assert (status, text) == (None, f"the answer is over {1024 * 1024} bytes: not read")
