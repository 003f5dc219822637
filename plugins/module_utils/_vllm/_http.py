# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Stdlib HTTP for probing vLLM (loopback by default, so proxies from the environment are
ignored), and the durations progress lines print.

Stdlib only, Python 3.9+, no Ansible imports: modules run this on the managed node
and plugins on the controller.
"""

from __future__ import annotations

import json
import time
import typing as t

# The most of an answer's body read (vLLM's /metrics is some hundred KiB with many engines): the
# service answers root's probes, and a body without end would be read into root's memory.
BODY_LIMIT = 32 * 1024 * 1024


def read_body(response: t.Any, limit: int = BODY_LIMIT, seconds: float = 60.0) -> bytes:
    """At most `limit` bytes of a body, within `seconds` in all (the socket's timeout bounds each
    read, a trickle is bounded here); ValueError past either."""
    chunks, total, end = [], 0, time.monotonic() + seconds
    while True:
        block = response.read(64 * 1024)
        if not block:
            return b"".join(chunks)
        total += len(block)
        if total > limit:
            raise ValueError(f"the answer is over {limit} bytes: not read")
        if time.monotonic() > end:
            raise ValueError(f"the answer took over {seconds:g} s: not read")
        chunks.append(block)


def http_request(url: str, *, method: str = "GET", body: t.Any = None, api_key: str | None = None,
                 timeout: float = 5.0, limit: int = BODY_LIMIT) -> tuple[int | None, str]:
    """(status, text) of one request; status None with the error text when nothing answered, or
    when the body is over `limit` bytes or does not end within a few timeouts (unknown, not an
    answer)."""
    import urllib.error
    import urllib.request

    data = None
    headers = {"Accept": "application/json, text/plain"}
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, read_body(response, limit, 4 * timeout).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, read_body(exc, limit, 4 * timeout).decode("utf-8", "replace")
        except (OSError, ValueError) as unread:
            return None, str(unread)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, str(reason)


def format_duration(seconds: float) -> str:
    """12 -> '12s', 754 -> '12m34s', 3700 -> '1h01m40s' (progress lines)."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
