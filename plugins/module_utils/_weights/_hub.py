# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The Hugging Face Hub (or an HTTP mirror laid out like it), read with the stdlib only.

- ``resolve_commit``: ``GET {endpoint}/api/models/{repo}/revision/{revision}`` -> ``sha`` (what
  huggingface_hub's ``model_info`` calls).
- ``list_tree``: ``GET {endpoint}/api/models/{repo}/tree/{commit}?recursive=true&expand=false``,
  following ``Link: <...>; rel="next"`` pages (what ``list_repo_tree`` calls).
- ``fetch``: one file from ``{endpoint}/{repo}/resolve/{commit}/{path}`` (or ``{base_url}/{path}``)
  that resumes with ``Range: bytes=<have>-``: bytes already on disk are never fetched again
  (huggingface_hub restarts an interrupted file from zero, huggingface_hub #4196).

The token goes in the Authorization header only, and is dropped when a redirect leaves the host
(the Hub redirects downloads to its CDN, which needs no token). Errors carry the Hub's
``X-Error-Code`` / ``X-Error-Message`` headers, which is how the Hub says "gated", "revision not
found" and so on.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import typing as t
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK = 4 * 1024 * 1024
LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


class HubError(RuntimeError):
    """The Hub refused or could not be reached; the message names the URL and the reason."""


class _KeepAuthOnSameHost(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never send the token to another host (the CDN)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: N802 (urllib's API)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


def _open(url: str, token: str, headers: t.Mapping[str, str] | None = None, timeout: float = 60.0):
    request = urllib.request.Request(url, headers=dict(headers or {}))
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(_KeepAuthOnSameHost)
    try:
        return opener.open(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        code = exc.headers.get("X-Error-Code", "") if exc.headers else ""
        message = exc.headers.get("X-Error-Message", "") if exc.headers else ""
        detail = " ".join(x for x in (code, message) if x) or exc.reason
        hint = " (a gated or private repository needs a token with access: vllm_weights_hf_token)" \
            if exc.code in (401, 403) else ""
        raise HubError(f"{_redact(url)}: HTTP {exc.code} {detail}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise HubError(f"{_redact(url)}: cannot reach it ({reason})") from None


def _redact(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))


def _json(url: str, token: str, timeout: float) -> tuple[t.Any, str | None]:
    with _open(url, token, {"Accept": "application/json"}, timeout) as response:
        body = response.read()
        link = response.headers.get("Link", "")
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HubError(f"{_redact(url)}: response is not JSON ({exc})") from None
    match = LINK_NEXT.search(link)
    return data, (urllib.parse.urljoin(url, match.group(1)) if match else None)


def _repo_path(repo: str) -> str:
    if not re.match(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$", repo):
        raise HubError(f"repository {repo!r} is not of the form owner/name")
    return repo


def resolve_commit(endpoint: str, repo: str, revision: str, token: str = "",
                   timeout: float = 60.0) -> str:
    """The 40-hex commit a branch or tag names today (a commit id is returned as it is)."""
    if re.match(r"^[0-9a-f]{40}$", revision):
        return revision
    url = (f"{endpoint.rstrip('/')}/api/models/{_repo_path(repo)}/revision/"
           f"{urllib.parse.quote(revision or 'main', safe='')}")
    data, _next_page = _json(url, token, timeout)
    sha = data.get("sha") if isinstance(data, dict) else None
    if not isinstance(sha, str) or not re.match(r"^[0-9a-f]{40}$", sha):
        raise HubError(f"{url}: no 40-hex 'sha' in the response (found {sha!r})")
    return sha


def list_tree(endpoint: str, repo: str, commit: str, token: str = "",
              timeout: float = 60.0, max_pages: int = 1000) -> list[dict[str, t.Any]]:
    """Every entry of the repository's tree at the commit, all pages."""
    url: str | None = (f"{endpoint.rstrip('/')}/api/models/{_repo_path(repo)}/tree/"
                       f"{urllib.parse.quote(commit, safe='')}?recursive=true&expand=false")
    entries: list[dict[str, t.Any]] = []
    pages = 0
    while url:
        page, url = _json(url, token, timeout)
        if not isinstance(page, list):
            raise HubError(f"tree listing of {repo}@{commit}: a page is {type(page).__name__}, not a list")
        entries.extend(page)
        pages += 1
        if pages >= max_pages:
            raise HubError(f"tree listing of {repo}@{commit}: more than {max_pages} pages")
    return entries


def resolve_url(endpoint: str, repo: str, commit: str, path: str) -> str:
    return (f"{endpoint.rstrip('/')}/{_repo_path(repo)}/resolve/{commit}/"
            f"{urllib.parse.quote(path)}")


def fetch(url: str, dest: str, size: int, token: str = "", timeout: float = 60.0) -> int:
    """Download url into dest, appending to what dest already holds; returns bytes fetched.

    A partial dest is continued with ``Range: bytes=<have>-``; a server that ignores the range
    (200 instead of 206) restarts the file from zero. The caller hashes the result.
    """
    have = os.path.getsize(dest) if os.path.exists(dest) else 0
    if have == size:
        return 0
    if have > size:
        os.truncate(dest, 0)
        have = 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    fetched = 0
    with _open(url, token, headers, timeout) as response:
        status = response.status
        if have and status == 206:
            content_range = response.headers.get("Content-Range", "")
            if not content_range.startswith(f"bytes {have}-"):
                raise HubError(f"{_redact(url)}: asked for bytes {have}- but got {content_range!r}")
            mode = "ab"
        elif status == 200:
            mode = "wb"
        else:
            raise HubError(f"{_redact(url)}: unexpected HTTP {status}")
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        with open(dest, mode) as out:
            start = 0 if mode == "wb" else have
            why = ""
            try:
                while True:
                    block = response.read(CHUNK)
                    if not block:
                        break
                    out.write(block)
                    fetched += len(block)
            except (OSError, http.client.HTTPException) as exc:
                why = f" ({type(exc).__name__}: {exc})"
            finally:
                out.flush()
                os.fsync(out.fileno())
            if start + fetched < size:
                raise HubError(f"{_redact(url)}: the transfer broke off after {start + fetched} of "
                               f"{size} bytes{why}; they are kept and the next run continues from there")
    return fetched
