# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The routers as the serve plays see them: settings from the router hosts, membership, removals.

Router settings (timeouts, minimum healthy workers, where the router listens) belong to the
router hosts (`group_vars/vllm_routers`), so they are read from there, each router for itself;
a value set only on a GPU node is the fallback. The drain timeout is checked against the
router's request timeout: a drain shorter than the longest request the router still waits for
would cut that request off. Stdlib only, no Ansible imports: filter plugins run this.
"""

from __future__ import annotations

import typing as t

# name -> (type, minimum); every setting a serve play reads for a router.
SETTINGS: dict[str, tuple[type, float]] = {
    "vllm_router_host": (str, 0),
    "vllm_router_port": (int, 1),
    "vllm_router_request_timeout_secs": (int, 1),
    "vllm_router_drain_timeout": (int, 0),
    "vllm_router_drain_poll": (float, 0.1),
    "vllm_router_drain_settle": (float, 0),
    "vllm_router_drain_stale_after": (int, 1),
    "vllm_router_add_timeout": (int, 1),
    "vllm_router_min_healthy_workers": (int, 0),
}
# Added to the router's request timeout when vllm_router_drain_timeout is 0 (auto).
DRAIN_MARGIN_SECS = 30


class FleetError(ValueError):
    """A router setting that cannot work; the message names the host and the variables."""


def _client_host(host: str) -> str:
    host = (host or "").strip().strip("[]")
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def router_settings(routers: t.Sequence[str], hostvars: t.Mapping[str, t.Mapping[str, t.Any]],
                    fallback: t.Mapping[str, t.Any]) -> list[dict[str, t.Any]]:
    """Each router's settings: its own host variables, else `fallback` (the role's values on the node).

    Returns [{name, url, request_timeout, drain_timeout, drain_poll, drain_settle,
    drain_stale_after, add_timeout, min_healthy_workers}].
    """
    out = []
    for name in routers:
        own = dict(hostvars.get(name) or {})
        values: dict[str, t.Any] = {}
        for key, (kind, minimum) in SETTINGS.items():
            raw = own.get(key, fallback.get(key))
            where = f"{key} of router {name}" + ("" if key in own else " (from the GPU node's value)")
            try:
                value = kind(raw) if raw is not None else None
            except (TypeError, ValueError):
                raise FleetError(f"{where} must be a {kind.__name__}, found {raw!r}") from None
            if value is None:
                raise FleetError(f"{where} is not set")
            if kind is not str and value < minimum:
                raise FleetError(f"{where} must be at least {minimum:g}, found {raw!r}")
            values[key] = value
        request = values["vllm_router_request_timeout_secs"]
        drain = values["vllm_router_drain_timeout"] or request + DRAIN_MARGIN_SECS
        if drain < request:
            origin = "" if "vllm_router_drain_timeout" in own else " (from the GPU node's value)"
            raise FleetError(
                f"vllm_router_drain_timeout of router {name}{origin} is {drain} s, shorter than its "
                f"vllm_router_request_timeout_secs ({request} s): a request the router still waits "
                f"for would be cut off by the restart that follows the drain. Raise the drain "
                f"timeout (0 = request timeout + {DRAIN_MARGIN_SECS} s) or lower the request timeout")
        out.append({
            "name": name,
            "url": f"http://{_client_host(values['vllm_router_host'])}:{values['vllm_router_port']}",
            "request_timeout": request, "drain_timeout": drain,
            "drain_poll": values["vllm_router_drain_poll"],
            "drain_settle": values["vllm_router_drain_settle"],
            "drain_stale_after": values["vllm_router_drain_stale_after"],
            "add_timeout": values["vllm_router_add_timeout"],
            "min_healthy_workers": values["vllm_router_min_healthy_workers"],
        })
    return out


def drain_settings(settings: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, t.Any]:
    """One drain for all routers of a node: the longest timeout, settle and stale bound."""
    if not settings:
        return {}
    return {"timeout": max(s["drain_timeout"] for s in settings),
            "poll": min(s["drain_poll"] for s in settings),
            "settle": max(s["drain_settle"] for s in settings),
            "stale_after": max(s["drain_stale_after"] for s in settings),
            "add_timeout": max(s["add_timeout"] for s in settings)}


def _read(result: t.Mapping[str, t.Any]) -> tuple[bool, list[dict[str, t.Any]], str]:
    """(reachable, workers, error) from one registered uri result of GET <router>/workers."""
    if result.get("unreachable"):
        return False, [], f"host unreachable: {result.get('msg', '')}".strip()
    status = result.get("status")
    body = result.get("json")
    if status == 200 and isinstance(body, t.Mapping) and isinstance(body.get("workers"), list):
        return True, [dict(w) for w in body["workers"] if isinstance(w, t.Mapping)], ""
    if status in (None, -1):
        return False, [], str(result.get("msg") or "no answer").splitlines()[0][:200]
    return False, [], f"HTTP {status} from /workers"


def router_view(results: t.Sequence[t.Mapping[str, t.Any]], url: str) -> list[dict[str, t.Any]]:
    """This node (`url`) as each router lists it: [{name, url, reachable, listed, healthy, error}].

    results: the registered loop results of GET /workers on each router, each with `item` the
    router's settings (name, url).
    """
    url = url.strip().rstrip("/")
    view = []
    for result in results:
        item = dict(result.get("item") or {})
        reachable, workers, error = _read(result)
        mine = [w for w in workers if str(w.get("url", "")).rstrip("/") == url]
        view.append({"name": item.get("name", "?"), "url": item.get("url", ""),
                     "reachable": reachable, "listed": bool(mine),
                     "healthy": bool(mine) and all(bool(w.get("is_healthy")) for w in mine),
                     "error": error})
    return view


def removal_problems(results: t.Sequence[t.Mapping[str, t.Any]], leaving: t.Iterable[str],
                     settings: t.Sequence[t.Mapping[str, t.Any]]) -> list[str]:
    """Routers that would keep fewer healthy workers than their minimum without `leaving` URLs."""
    leaving = {u.strip().rstrip("/") for u in leaving}
    minimum = {s["name"]: int(s["min_healthy_workers"]) for s in settings}
    problems = []
    for result in results:
        name = dict(result.get("item") or {}).get("name", "?")
        reachable, workers, _error = _read(result)
        if not reachable:
            continue
        healthy = {str(w.get("url", "")).rstrip("/") for w in workers if w.get("is_healthy")}
        going = sorted(healthy & leaving)
        if not going:
            continue
        left = healthy - leaving
        if len(left) < minimum.get(name, 1):
            problems.append(
                f"router {name} would keep {len(left)} healthy worker(s) while {', '.join(going)} "
                f"restart(s); its vllm_router_min_healthy_workers is {minimum.get(name, 1)}. Use a "
                "smaller gpuserve_serial, or bring the unhealthy workers back first")
    return problems


def reconcile(listed: t.Sequence[t.Mapping[str, t.Any]], desired: t.Iterable[str]) -> dict[str, list[str]]:
    """Runtime membership changes for one router: add what the inventory has and the router
    lacks, remove what the router lists and the inventory no longer has."""
    want = [u.strip().rstrip("/") for u in desired]
    have = [str(w.get("url", "")).rstrip("/") for w in listed]
    return {"add": [u for u in want if u not in have], "remove": [u for u in have if u not in want]}
