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
import urllib.parse

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._unit import parse_systemctl_show

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
    "vllm_router_service_name": (str, 0),
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
            "service": values["vllm_router_service_name"] + ".service",
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


# What a router's read can say: it answers (its workers are known), it is known not to serve
# (its host answers and the service is not installed or not running), or nothing can be told.
SERVING, ABSENT, UNKNOWN = "serving", "absent", "unknown"


def _unit(result: t.Mapping[str, t.Any] | None) -> dict[str, str]:
    """`systemctl show -p LoadState -p ActiveState` as read on the router host; {} when unread."""
    if not result or result.get("unreachable") or result.get("skipped") or result.get("rc") != 0:
        return {}
    return parse_systemctl_show(str(result.get("stdout") or ""))


def _read(result: t.Mapping[str, t.Any], unit: t.Mapping[str, t.Any] | None = None
          ) -> tuple[str, list[dict[str, t.Any]], str]:
    """(serving | absent | unknown, workers, error) from one registered uri result of GET
    <router>/workers and, for a router that refused, the read of its unit on its host.

    Only what is known counts as absent: the host answered, nothing listens on the router's
    port, and systemd says the service is not installed, inactive or failed. A host that does not
    answer, a time-out, an HTTP error or a refusal while the service is active are unknown.
    """
    if result.get("unreachable"):
        return UNKNOWN, [], f"host unreachable: {result.get('msg', '')}".strip()
    status = result.get("status")
    body = result.get("json")
    if status == 200 and isinstance(body, t.Mapping) and isinstance(body.get("workers"), list):
        return SERVING, [dict(w) for w in body["workers"] if isinstance(w, t.Mapping)], ""
    if status not in (None, -1):
        return UNKNOWN, [], f"HTTP {status} from /workers"
    error = str(result.get("msg") or "no answer").splitlines()[0][:200]
    if "refused" not in error.lower():
        return UNKNOWN, [], error
    service = str(dict(result.get("item") or {}).get("service") or "the router's service")
    systemd = _unit(unit)
    load, active = systemd.get("LoadState", ""), systemd.get("ActiveState", "")
    if load == "not-found" or active in ("inactive", "failed"):
        return ABSENT, [], f"{error}; {service} is {'not installed' if load == 'not-found' else active}"
    said = f"{load}/{active}" if systemd else "not readable on its host"
    return UNKNOWN, [], f"{error}; {service} is {said}"


def _units_by_router(units: t.Sequence[t.Mapping[str, t.Any]] | None) -> dict[str, t.Mapping[str, t.Any]]:
    """The unit reads of a loop over the /workers results, by router name."""
    out: dict[str, t.Mapping[str, t.Any]] = {}
    for unit in units or []:
        item = dict(unit.get("item") or {})
        name = dict(item.get("item") or {}).get("name", item.get("name"))
        if name:
            out[str(name)] = unit
    return out


def url_host(url: t.Any) -> str:
    """The host of a worker URL as the routers list it (lower case, no brackets); "" when none."""
    try:
        return (urllib.parse.urlsplit(str(url or "").strip()).hostname or "").lower()
    except ValueError:
        return ""


def _hosts(names: t.Iterable[t.Any]) -> set[str]:
    """Names and addresses as url_host gives them."""
    return {str(n).strip().strip("[]").lower() for n in names if str(n or "").strip()}


def node_urls(workers: t.Sequence[t.Mapping[str, t.Any]], url: str, aliases: t.Iterable[t.Any] = (),
              others: t.Iterable[t.Any] = ()) -> list[str]:
    """The URLs a router lists for this node: its own URL, and any other on one of its hosts
    (`url`'s and `aliases`: the names and addresses the inventory gives it) that no other node
    of the fleet has (`others`: their names and addresses). A URL on a host two nodes share is
    only ever the exact one: it cannot be told whose it is.

    So a node whose port or address changed is still known at the routers under the URL it was
    added with: it is taken out of them (and drained) before it stops, never restarted while
    a router still sends it requests under its old URL.
    """
    url = url.strip().rstrip("/")
    mine = (_hosts(aliases) | {url_host(url)}) - _hosts(others) - {""}
    found = []
    for worker in workers:
        listed = str(worker.get("url", "")).strip().rstrip("/")
        if listed and listed not in found and (listed == url or url_host(listed) in mine):
            found.append(listed)
    return found


def router_view(results: t.Sequence[t.Mapping[str, t.Any]], url: str,
                units: t.Sequence[t.Mapping[str, t.Any]] | None = None,
                aliases: t.Iterable[t.Any] = (), others: t.Iterable[t.Any] = ()) -> list[dict[str, t.Any]]:
    """This node (`url`) as each router lists it: [{name, url, state, reachable, unknown, listed,
    healthy, urls, stale, error}]; `reachable` is state serving, `unknown` state unknown.

    `urls` are the URLs the router lists for the node (node_urls: its own and, on its hosts, any
    other it was added with), `listed` whether there is one, `stale` those that are not `url` (a
    changed port or address: the node moves to `url`), `healthy` whether the router lists `url`
    itself healthy.

    results: the registered loop results of GET /workers on each router, each with `item` the
    router's settings (name, url, service); units: the registered loop results of reading the
    unit of each router that did not answer (their `item` is that router's /workers result).
    """
    url = url.strip().rstrip("/")
    aliases, others = list(aliases or []), list(others or [])
    by_name = _units_by_router(units)
    view = []
    for result in results:
        item = dict(result.get("item") or {})
        state, workers, error = _read(result, by_name.get(str(item.get("name"))))
        urls = node_urls(workers, url, aliases, others)
        own = [w for w in workers if str(w.get("url", "")).strip().rstrip("/") == url]
        view.append({"name": item.get("name", "?"), "url": item.get("url", ""), "state": state,
                     "reachable": state == SERVING, "unknown": state == UNKNOWN,
                     "listed": bool(urls),
                     "healthy": bool(own) and all(bool(w.get("is_healthy")) for w in own),
                     "urls": urls, "stale": [u for u in urls if u != url],
                     "error": error})
    return view


def stale_urls(results: t.Sequence[t.Mapping[str, t.Any]], url: str, aliases: t.Iterable[t.Any] = (),
               others: t.Iterable[t.Any] = ()) -> list[dict[str, str]]:
    """[{name, router, url}]: each URL other than `url` a router lists for this node, from fresh
    reads of /workers (registered loop results whose `item` has the router's name and url), to
    remove once the node is in under `url` (the end of a drained move)."""
    out = []
    for result in results:
        item = dict(result.get("item") or {})
        workers = (result.get("json") or {}).get("workers") if isinstance(result.get("json"), t.Mapping) else None
        for listed in node_urls(workers if isinstance(workers, list) else [], url, aliases, others):
            if listed != url.strip().rstrip("/"):
                out.append({"name": str(item.get("name", "?")), "router": str(item.get("url", "")), "url": listed})
    return out


def back_url(results: t.Sequence[t.Mapping[str, t.Any]], url: str, health_url: str, port: t.Any = None) -> str:
    """The URL a node that failed in its turn still serves at, from fresh /health reads (loop
    results whose `item` is the URL asked): `url` when its configured `health_url` answered;
    else, when only where it listened at the turn's start answered (its port changed and it
    failed before its restart), `url` on that `port`; "" when nothing answered (not put back)."""
    answered = {str(r.get("item", "")) for r in results
                if isinstance(r, t.Mapping) and r.get("status") == 200}
    if health_url in answered:
        return url
    if not answered or port in (None, ""):
        return ""
    parts = urllib.parse.urlsplit(url.strip())
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return urllib.parse.urlunsplit((parts.scheme, f"{host}:{int(port)}", parts.path, "", "")).rstrip("/")


def run_outcome(host: t.Mapping[str, t.Any]) -> str:
    """One host's line at a run's end, from what the plays kept (`failed`: {stage, msg};
    `held`: why its steps waited; `untouched`: why the rollout left it): the worst first."""
    failed = host.get("failed")
    if isinstance(failed, t.Mapping):
        return f"FAILED ({failed.get('stage', '?')}): {failed.get('msg', '')}"
    if str(host.get("held") or ""):
        return f"HELD: {host['held']}"
    if str(host.get("untouched") or ""):
        return f"untouched: {host['untouched']}"
    return "done"


def removal_problems(results: t.Sequence[t.Mapping[str, t.Any]], leaving: t.Iterable[str],
                     settings: t.Sequence[t.Mapping[str, t.Any]],
                     units: t.Sequence[t.Mapping[str, t.Any]] | None = None) -> list[str]:
    """Routers that would keep fewer healthy workers than their minimum without `leaving` URLs,
    and routers whose workers could not be read (their floor cannot be checked)."""
    leaving = {u.strip().rstrip("/") for u in leaving}
    minimum = {s["name"]: int(s["min_healthy_workers"]) for s in settings}
    by_name = _units_by_router(units)
    problems = []
    for result in results:
        name = dict(result.get("item") or {}).get("name", "?")
        state, workers, error = _read(result, by_name.get(str(name)))
        if state == UNKNOWN and leaving:
            problems.append(f"router {name} did not answer ({error}): its healthy workers cannot be "
                            "counted, so no node leaves it")
            continue
        if state != SERVING:
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


def batch_size(serial: t.Any, hosts: t.Any) -> int:
    """The most nodes a batch of site.yml's rolling play takes at once: `serial` as Ansible reads
    it (a count, "N%" of `hosts`, at least 1, or a list of those: its largest)."""
    if isinstance(serial, (list, tuple)):
        if not serial:
            raise FleetError("gpuserve_serial is an empty list")
        return max(batch_size(one, hosts) for one in serial)
    text = str(serial).strip()
    try:
        if text.endswith("%"):
            return max(1, int(int(hosts) * float(text[:-1]) / 100))
        count = int(text)
    except (TypeError, ValueError):
        raise FleetError(f"gpuserve_serial must be a count, a percentage or a list of them, found {serial!r}") from None
    if count < 1:
        raise FleetError(f"gpuserve_serial must be at least 1, found {serial!r}")
    return count


def _owners(nodes: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, list[str]]:
    """host -> the URLs of the fleet nodes that have that name or address."""
    owners: dict[str, list[str]] = {}
    for node in nodes:
        node_url = str(node.get("url", "")).strip().rstrip("/")
        for host in _hosts(list(node.get("hosts") or []) + [url_host(node_url)]):
            owners.setdefault(host, []).append(node_url)
    return owners


def reconcile(listed: t.Sequence[t.Mapping[str, t.Any]], desired: t.Iterable[str],
              min_healthy: t.Any = 1, max_unavailable: int | None = None,
              nodes: t.Sequence[t.Mapping[str, t.Any]] | None = None) -> dict[str, t.Any]:
    """Runtime membership changes for one router, adds before removals.

    `add`: what the inventory has and the router lacks. A URL the router lists and the inventory
    no longer names is, when it is a fleet node's old URL (on a host of that node's alone;
    `nodes`: [{url, hosts}], each node's URL and its names and addresses):
    - removed when the router lists the node healthy under its new URL (the same server
      answers there: nothing is lost, in-flight requests finish);
    - else `moving`: left to the serve plays, which take the node out under that URL, drain it,
      restart it (its port or address changed) and put it back under the new one.
    Any other is removed as far as the router keeps its floor of healthy workers without it
    (unhealthy ones go first): `min_healthy`, and with `max_unavailable` (the rolling play's
    batch size) no fewer than the healthy workers it has less that many; `refused`: the rest,
    with `msg` giving the counts. Run on a fresh read taken after the adds, so that a new
    URL is in before an old one goes.
    """
    try:
        floor = int(min_healthy)
    except (TypeError, ValueError):
        raise FleetError(f"vllm_router_min_healthy_workers must be an integer, found {min_healthy!r}") from None
    want = [u.strip().rstrip("/") for u in desired]
    rows = [(str(w.get("url", "")).rstrip("/"), bool(w.get("is_healthy"))) for w in listed]
    have = [url for url, _healthy in rows]
    healthy_urls = {url for url, ok in rows if ok}
    owners = _owners(nodes or [])
    remove: list[str] = []
    moving: list[str] = []
    others = []
    for url, ok in rows:
        owner = owners.get(url_host(url), [])
        if url in want:
            continue
        if len(owner) == 1 and owner[0] in want:
            (remove if owner[0] in healthy_urls else moving).append(url)
        else:
            others.append((url, ok))
    # A node's old URL removed while it is in under its new one costs the router nothing.
    healthy = healthy_before = len([1 for url, ok in rows if ok and url not in remove])
    if max_unavailable is not None:
        floor = max(floor, healthy_before - int(max_unavailable))
    refused: list[str] = []
    for url, ok in sorted(others, key=lambda r: r[1]):
        if ok and healthy - 1 < floor:
            refused.append(url)
            continue
        remove.append(url)
        healthy -= 1 if ok else 0
    msg = ""
    if refused:
        msg = (f"not removed: {', '.join(refused)}: the router lists {len(rows)} worker(s), "
               f"{healthy_before} healthy; without them it would keep fewer than {floor} healthy "
               f"(vllm_router_min_healthy_workers {int(min_healthy)}"
               + (f", or its healthy workers less vllm_router_max_unavailable_workers {int(max_unavailable)}"
                  if max_unavailable is not None else "")
               + "). Bring the inventory's workers up (or fix their addresses) first; a later run "
               "removes more once the router has fewer to lose")
    return {"add": [u for u in want if u not in have], "remove": remove, "refused": refused,
            "moving": moving, "floor": floor, "msg": msg}
