# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Prometheus' scrape configuration of a gpuserve.vllm fleet, generated from the inventory.

One job per kind of target, each target labelled with its inventory name as `instance` (so the
vLLM, GPU and node series of one node join on `instance`, and the rules' `sum by (instance)`
reads per node):

    vllm         every GPU node's vLLM /metrics (vllm_server_port)
    vllm-router  every router's Prometheus listener (vllm_router_prometheus_host:port)
    node         node_exporter on every GPU node and router (with the GPU textfile on GPU nodes)
    dcgm         dcgm-exporter on every GPU node (only with gpu_exporter "dcgm")
    prometheus   Prometheus itself

The job names vllm and vllm-router are the ones the rules match (roles/monitoring/files/rules).
A target Prometheus cannot reach -- a service bound to loopback on another host -- is a problem
named in a sentence, never a target that would only read as down.

Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._net import bare_host, is_loopback

JOBS = ("vllm", "vllm-router", "node", "dcgm", "prometheus")
GPU_EXPORTERS = ("dcgm", "textfile")
_ALL_INTERFACES = ("", "0.0.0.0", "::")


class TargetsError(Exception):
    """Input that cannot describe a fleet (a missing name, a port out of range)."""


def _port(value: t.Any, what: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError) as exc:
        raise TargetsError(f"{what}: {value!r} is not a port number") from exc
    if not 0 < port < 65536:
        raise TargetsError(f"{what}: {port} is not a port number (1-65535)")
    return port


def host_port(host: str, port: int) -> str:
    """'gpu01:8000', '[fd00::1]:8000'."""
    host = bare_host(host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _reach(bind: str, address: str, name: str, monitoring_host: str) -> str | None:
    """The address Prometheus scrapes a service bound to `bind` at; None when it cannot reach it."""
    bind = bare_host(bind or "")
    if bind in _ALL_INTERFACES:
        return address
    if is_loopback(bind):
        return "127.0.0.1" if name == monitoring_host else None
    return bind


def scrape_configs(nodes: t.Sequence[t.Mapping[str, t.Any]], routers: t.Sequence[t.Mapping[str, t.Any]],
                   settings: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """{'scrape_configs': [...], 'problems': [...]} for prometheus.yml.

    nodes:   [{name, address, vllm_host, vllm_port, exporter_host}] -- the GPU nodes
    routers: [{name, address, prometheus_host, prometheus_port, exporter_host}]
      exporter_host: where the host's node_exporter (and dcgm-exporter) listen (its fleet address,
      _listen.fleet_addresses); absent or 0.0.0.0: every address, scraped at `address`.
    settings: monitoring_host (the inventory name Prometheus runs on), gpu_exporter ('dcgm' or
      'textfile'), node_exporter_port, dcgm_port, prometheus_port, prometheus_host (where
      Prometheus listens; absent: every address), scrape_interval (optional, per job: {'vllm': '5s'}).
    """
    monitoring_host = str(settings.get("monitoring_host", ""))
    gpu_exporter = str(settings.get("gpu_exporter", "textfile"))
    if gpu_exporter not in GPU_EXPORTERS:
        raise TargetsError(f"gpu_exporter: {gpu_exporter!r} is neither of {', '.join(GPU_EXPORTERS)}")
    node_port = _port(settings.get("node_exporter_port", 9100), "node_exporter_port")
    dcgm_port = _port(settings.get("dcgm_port", 9400), "dcgm_port")
    self_port = _port(settings.get("prometheus_port", 9090), "prometheus_port")
    intervals = dict(settings.get("scrape_interval") or {})
    problems: list[str] = []
    targets: dict[str, list[dict[str, t.Any]]] = {job: [] for job in JOBS}

    def add(job: str, name: str, address: str, port: int) -> None:
        targets[job].append({"targets": [host_port(address, port)], "labels": {"instance": name}})

    # Per kind of host: its job, the port and listen address keys (the port's default), the role
    # variables an operator sets, what listens there and which address would do.
    kinds = (
        (nodes, "a GPU node", "vllm", ("vllm_port", 8000, "vllm_server_port"), ("vllm_host", "vllm_server_host"),
         "vLLM listens", "the node (the routers need that too)"),
        (routers, "a router", "vllm-router", ("prometheus_port", 29000, "vllm_router_prometheus_port"),
         ("prometheus_host", "vllm_router_prometheus_host"), "vllm-router's metrics listen", "the router host"),
    )
    seen: set[str] = set()
    for hosts, kind, job, (port_key, port_default, port_var), (host_key, host_var), what, hint in kinds:
        for host in hosts:
            name = str(host.get("name") or "")
            if not name:
                raise TargetsError(f"{kind} without a name: {dict(host)!r}")
            address = bare_host(str(host.get("address") or name))
            port = _port(host.get(port_key, port_default), f"{name}: {port_var}")
            reach = _reach(str(host.get(host_key, "")), address, name, monitoring_host)
            if reach is None:
                problems.append(f"{name}: {what} on {host.get(host_key)} ({host_var}), which Prometheus on "
                                f"{monitoring_host or 'the monitoring host'} cannot reach; set {host_var} to 0.0.0.0 "
                                f"or an address of {hint}")
            else:
                add(job, name, reach, port)
            if name in seen:
                continue
            seen.add(name)
            # The exporters listen on the host's fleet address (monitoring_listen_address); absent: every address.
            exporter = _reach(str(host.get("exporter_host", "")), address, name, monitoring_host)
            if exporter is None:
                problems.append(f"{name}: its exporters listen on {host.get('exporter_host')} (monitoring_listen_address), "
                                f"which Prometheus on {monitoring_host or 'the monitoring host'} cannot reach; set "
                                f"monitoring_listen_address to an address of {hint}")
                continue
            if job == "vllm" and gpu_exporter == "dcgm":
                add("dcgm", name, exporter, dcgm_port)
            add("node", name, exporter, node_port)
    # Prometheus scrapes itself where it listens (loopback when it listens on every address).
    own = _reach(str(settings.get("prometheus_host", "")), "127.0.0.1", monitoring_host, monitoring_host) or "127.0.0.1"
    add("prometheus", monitoring_host or "prometheus", own, self_port)
    configs = []
    for job in JOBS:
        if not targets[job]:
            continue
        config: dict[str, t.Any] = {"job_name": job}
        if job in intervals:
            config["scrape_interval"] = str(intervals[job])
        config["static_configs"] = targets[job]
        configs.append(config)
    return {"scrape_configs": configs, "problems": problems}


def _url(value: t.Any) -> str:
    return str(value or "").strip().rstrip("/")


def router_workers(router: t.Mapping[str, t.Any], nodes: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, t.Any]:
    """What the router host's worker-list script reads and expects: {'router': url, 'workers': {url: node}}.

    router: {name, api_host, api_port, worker_urls} -- the router host's vllm_router_host,
      vllm_router_port and vllm_router_worker_urls (its explicit list; empty: the nodes below);
    nodes: [{name, worker_url}] -- the router's worker group, each with the URL vllm_router gives
      it (http://<vllm_router_worker_address|ansible_host|name>:<vllm_server_port>).
    An explicit URL that is no node's is expected under its host's name, so the alert still names it.
    """
    name = str(router.get("name") or "")
    if not name:
        raise TargetsError(f"a router without a name: {dict(router)!r}")
    port = _port(router.get("api_port", 30000), f"{name}: vllm_router_port")
    bind = bare_host(str(router.get("api_host") or ""))
    host = "127.0.0.1" if bind in _ALL_INTERFACES else bind
    by_url = {_url(node.get("worker_url")): str(node.get("name") or "") for node in nodes}
    explicit = router.get("worker_urls") or []
    if isinstance(explicit, (str, bytes)) or not isinstance(explicit, t.Sequence):
        raise TargetsError(f"{name}: vllm_router_worker_urls must be a list of URLs, found {explicit!r}")
    urls = [_url(url) for url in explicit] or list(by_url)
    workers = {}
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise TargetsError(f"{name}: worker {url!r} is not an http(s) URL (vllm_router_worker_urls)")
        workers[url] = by_url.get(url) or bare_host(url.split("://", 1)[1].rsplit(":", 1)[0])
    return {"router": f"http://{host_port(host, port)}", "workers": workers}
