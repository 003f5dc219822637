# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Stdlib HTTP for probing vLLM (loopback by default, so proxies from the environment are
ignored), and the durations progress lines print.

Stdlib only, Python 3.9+, no Ansible imports: modules run this on the managed node
and plugins on the controller.
"""

from __future__ import annotations

import json
import typing as t


def http_request(url: str, *, method: str = "GET", body: t.Any = None, api_key: str | None = None,
                 timeout: float = 5.0) -> tuple[int | None, str]:
    """(status, text) of one request; status None with the error text when nothing answered."""
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
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
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
