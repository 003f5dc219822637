"""A model-based test of the serve plan: generated fleets and faults through the real plan code.

hypothesis draws a fleet (nodes x the env each runs and its links x a journal left by a killed
run x a rollback hold x the switch record a run before left x a unit file systemd has not loaded x whether its start record is the
running start's x the routers listing it) and a sequence of rounds. Each round is world events
(a server dies, a node is taken out of a router by hand, the pins change, a restart or a
rollback is asked for, a reboot becomes pending, node acceptance becomes due (gpu_node's
request), the inventory moves a node to another port or names it by its address instead of its
name (or back), a run writes the unit and is killed
before its daemon-reload, a server crashes and systemd restarts the unit it has in memory) and
one site.yml run with faults (a router's or a node's read that does not answer, the run killed
after any step, any step that fails -- a drain or an add that times out, the fence, a canary or
a start --, a staged driver install that fails after the stop -- the old driver untouched or
not --, a node acceptance rejects, a second operator's run started while it runs). Each run
takes the fleet lock first with the real
`_lock.decide()`: a second run while the first lives is refused and changes nothing; the lock a
killed run left is taken over by the next. The run is simulated the way
playbooks/tasks/serve_node.yml and roles/vllm_server/tasks/execute.yml and recover.yml execute a
plan: real `_nodeplan.plan()`, `recovery()` and
`_fleet.removal_problems()`, one node at a time (gpuserve_serial 1), the rollout stopping at the
first failed node, a held node left as it is while the others carry on; a failed node goes
through serve_node.yml's rescue (its /health read where it is configured and where it listened,
the real `vllm_router_back_url` decision, back into every router that answers).

Asserted for every plan of a rollback run: a node moves only when the fleet's last rollout (read
from every node's switch record, the pins playing no part) switched it, and then to what it served
before that switch; never two steps back. Asserted after every step: a live server is never stopped or restarted while any router lists it
under any URL, its old port's too (whatever that router's read said); a node whose reads did not all answer gets no disruptive step;
a removal never takes a router below its floor; acceptance never runs beside a live server;
after a failure, a node that served routed is listed again by every router that answers, under
the URL it serves at. Asserted at the end: once the faults stop, two
runs bring every node to serving what its plan says, listed healthy by every router, no journal,
and the next plan has no step; every router lists each node under its inventory URL alone, and
every server runs the unit file on disk (a node without a start record of its own start is seen
by systemd's NeedDaemonReload alone). The figures are printed at the end of the unit step.
"""

from __future__ import annotations

import copy
import typing as t
import urllib.parse

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _fleet as vf
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _lock as vl
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _nodeplan as vp
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _nodereport as vn
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _nodeview as vv
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _rollout as vo

ENVS = ("/opt/ml-env.d/vllm-0.17.0-aaaa", "/opt/ml-env.d/vllm-0.18.0-bbbb", "/opt/ml-env.d/vllm-0.19.0-cccc")
ROUTERS = ("router01", "router02")
PORTS = (8000, 8010)
FLOOR = 1
DISRUPTIVE = ("stop", "restart", "reboot")
STATS: dict[str, int] = {"fleets": 0, "rounds": 0, "runs": 0, "plans": 0, "steps": 0, "held": 0, "moves": 0,
                         "refused": 0, "killed": 0, "failed": 0, "fenced": 0, "concurrent": 0, "takeovers": 0,
                         "not_loaded": 0, "accepted": 0, "rejected": 0, "fell_back": 0, "put_back": 0,
                         "put_back_old_port": 0, "rolled_back": 0, "stayed": 0, "floor_held": 0, "readdressed": 0}


class Fleet:
    """What is true on the nodes and routers (not what a read says of it). A router lists a set
    of worker URLs; it reports one healthy while a server answers there (its health check). A
    node's server listens on the port it was started with (`port`); the inventory may name
    another (`wanted`): the unit this run renders differs until the node restarts."""

    def __init__(self, nodes: list[dict[str, t.Any]], routers: list[str], target: str) -> None:
        self.nodes = {n["name"]: n for n in nodes}
        self.lists = {r: {self.at(n["name"], n["port"]) for n in nodes if n["alive"] and r not in n["unlisted"]}
                      for r in routers}
        self.target = target
        self.clock = 1000.0
        self.lock: dict[str, t.Any] | None = None  # the lock file's holder record
        self.live_pids: set[int] = set()  # ansible-playbook processes running on the controller
        self.next_pid = 100
        for n in nodes:
            n.pop("unlisted")

    def tick(self) -> float:
        self.clock += 1.0
        return self.clock

    def url(self, name: str) -> str:
        """The node's URL as this run's inventory gives it (its name or its address: `addr`)."""
        n = self.nodes[name]
        return f"http://{n.get('addr', name)}:{n['wanted']}"

    @staticmethod
    def at(name: str, port: int) -> str:
        return f"http://{name}:{port}"

    @staticmethod
    def hosts(name: str) -> list[str]:
        """The node's names and addresses (its server listens on every one): name, IP."""
        return [name, f"10.0.0.{int(name[3:])}"]

    def others(self, name: str) -> list[str]:
        return sorted(h for other in self.nodes if other != name for h in self.hosts(other))

    def owner(self, url: str) -> str:
        return next((name for name in self.nodes if vf.url_host(url) in self.hosts(name)), "")

    def view(self, name: str, reads: list[dict[str, t.Any]]) -> list[dict[str, t.Any]]:
        """worker_state.yml's view: the node known by its names and addresses."""
        return vf.router_view(reads, self.url(name), [], self.hosts(name), self.others(name))

    def serves_at(self, url: str) -> bool:
        owner = self.owner(url)
        n = self.nodes.get(owner)
        return bool(n and n["alive"] and urllib.parse.urlsplit(url).port == n["port"])

    def listing(self, name: str) -> list[str]:
        """The routers that list the node under any URL of its hosts."""
        return [r for r, listed in self.lists.items() if any(self.owner(u) == name for u in listed)]

    def observe(self, name: str, faults: dict[str, t.Any]) -> dict[str, t.Any]:
        """vllm_node_state's result for this node (its shape: test_vllm_node_state.py). A node
        whose start record works names the unit changed while its server runs an older unit than
        the file (the record of a start systemd made from memory is marked: _startrecord)."""
        n = self.nodes[name]
        alive = n["alive"]
        health_unknown = alive and (name, "health") in faults["unknown"]
        metrics_unknown = (name, "metrics") in faults["unknown"]
        record = ({"present": True, "current": True, "changed": ["unit"] if n["old_unit"] else [], "error": ""}
                  if alive and n["record"] else {"present": False, "current": False, "changed": [], "error": ""})
        return {
            "unit": {"load_state": "loaded", "active_state": "active" if alive else "failed",
                     "sub_state": "running" if alive else "failed", "main_pid": 4242 if alive else 0,
                     "started": n["started"] if alive else None, "need_daemon_reload": n["not_loaded"]},
            "process": {"env": n["running"] if alive else "", "started": n["started"] if alive else None},
            "link": {"path": "/opt/ml-env", "kind": "link", "env": n["link"]},
            "previous": {"path": "/opt/ml-env.previous", "kind": "link" if n["previous"] else "absent",
                         "env": n["previous"]},
            "target": {"path": self.target, "env": self.target},
            "envs": {e: {"exists": True, "built": True} for e in ENVS},
            "files": {"unit": n["unit_written"], "env_file": 0.0, "restart_marker": n["marker"]},
            "start_record": record,
            "listen": {"port": n["port"], "source": "process" if alive else "configured"},
            "journal": copy.deepcopy(n["journal"]), "hold": copy.deepcopy(n["hold"]),
            "switches": copy.deepcopy(n["switches"]),
            "reboot": {"pending": n["reboot"], "reason": "new kernel command line" if n["reboot"] else ""},
            "acceptance": {"pending": n["acceptance"], "reason": "NCCL settings changed" if n["acceptance"] else ""},
            "health": ({"status": None, "error": "timed out", "known": False, "tries": 3} if health_unknown
                       else {"status": 200 if alive else None, "error": "" if alive else "refused",
                             "known": True, "tries": 1}),
            "metrics": {"reachable": alive and not metrics_unknown, "known": not metrics_unknown},
            "gpus": [],
        }

    def reads(self, faults: dict[str, t.Any]) -> list[dict[str, t.Any]]:
        """The registered GET /workers results on each router (a real vllm-router's body)."""
        out = []
        for r, listed in self.lists.items():
            item = {"name": r, "url": "http://127.0.0.1:30000", "service": "vllm-router.service"}
            if (r, "router") in faults["unknown"]:
                out.append({"item": item, "unreachable": True, "msg": "ssh: connect to host: Connection timed out"})
                continue
            workers = [{"url": url, "is_healthy": self.serves_at(url)} for url in sorted(listed)]
            out.append({"item": item, "status": 200, "json": {"workers": workers, "total": len(workers)}})
        return out

    def healthy_count(self, router: str) -> int:
        """What the router's own health check (every few seconds) reports healthy."""
        return sum(1 for url in self.lists[router] if self.serves_at(url))


class Killed(Exception):
    """The run was killed (SIGKILL of ansible-playbook): nothing after this step happens."""


class Failed(Exception):
    """The node failed; serve_node.yml's rescue runs, then the rollout stops."""


class Held(Exception):
    """A router's floor refused the node's removal: it is left as it is, the rollout carries on."""


SETTINGS = vf.router_settings(list(ROUTERS), {}, {
    "vllm_router_host": "127.0.0.1", "vllm_router_port": 30000, "vllm_router_request_timeout_secs": 60,
    "vllm_router_drain_timeout": 0, "vllm_router_drain_poll": 1, "vllm_router_drain_settle": 1,
    "vllm_router_drain_stale_after": 20, "vllm_router_add_timeout": 60,
    "vllm_router_min_healthy_workers": FLOOR, "vllm_router_service_name": "vllm-router"})


def check_may_stop(fleet: Fleet, name: str, step: str, unknown: bool) -> None:
    """The invariants, from the true state, right before a step that stops a live server."""
    n = fleet.nodes[name]
    if not n["alive"]:
        return
    listing = fleet.listing(name)
    assert not listing, f"{name}: {step} of a live server while {listing} list it"
    assert not unknown, f"{name}: {step} of a live server although a read it depends on did not answer"


def execute(fleet: Fleet, name: str, p: dict[str, t.Any], faults: dict[str, t.Any], reads: list,
            view: list[dict[str, t.Any]]) -> None:
    """serve_node.yml + execute.yml (the plan's server_steps) + recover.yml, for one node's plan."""
    n = fleet.nodes[name]
    unknown = any(k[0] in fleet.lists and k[1] == "router" for k in faults["unknown"]) or (
        n["alive"] and (name, "health") in faults["unknown"])
    kill_at = faults["kill"].get(name)
    fail_at = faults["fail"].get(name)
    done = 0

    def step_done() -> None:
        nonlocal done
        done += 1
        STATS["steps"] += 1
        if kill_at is not None and done >= kill_at:
            raise Killed()
        if fail_at is not None and done >= fail_at:  # the task after this step fails (a time-out, an error)
            raise Failed("step")

    steps = list(p["steps"])
    if "remove" in steps:  # worker_remove.yml: every URL each router lists the node under
        before = {r: fleet.healthy_count(r) for r in fleet.lists}
        if vf.removal_problems(reads, [u for r in view for u in r["urls"]], SETTINGS):
            raise Held("floor")  # serve_node.yml: vllm_router_removal_hold; nothing was changed
        for r in view:
            if r["listed"]:
                fleet.lists[r["name"]] -= set(r["urls"])
        for r in fleet.lists:
            assert fleet.healthy_count(r) >= min(FLOOR, before[r]), f"{r} went below its floor"
        assert not unknown, f"{name}: removed although a read it depends on did not answer"
        step_done()
    if "drain" in steps:
        assert not unknown, f"{name}: drained although a read it depends on did not answer"
        step_done()
    if name in faults["readd"]:  # a second actor puts the node back while it is out (by hand, a script)
        for r in fleet.lists:
            fleet.lists[r].add(fleet.at(name, n["port"]))
    # The node's own steps: the plan's server_steps in its order, as roles/vllm_server/tasks/
    # execute.yml runs them (one task file per kind).
    for kind in p["server_steps"]:
        if kind in ("stop", "canary", "switch", "reboot") or (kind == "start" and "restart" in steps):
            assert n["journal"] is not None, f"{name}: {kind} before the journal was written"
        if kind == "fence":  # steps/fence.yml: a fresh read; listed or unknown anywhere refuses
            fresh = fleet.view(name, fleet.reads(faults))
            if any(r["listed"] or r["unknown"] for r in fresh):
                STATS["fenced"] += 1
                raise Failed("fence")
        elif kind == "journal":
            n["journal"] = copy.deepcopy(p["journal"])
        elif kind == "stop":
            check_may_stop(fleet, name, "stop", unknown)
            n["alive"] = False
            step_done()
        elif kind == "canary":
            if name in faults["canary_fails"]:
                recover(fleet, name, p, {"canary": {"ok": False}})
                raise Failed("canary")
            n["journal"]["canary_ok"] = True
            step_done()
        elif kind == "switch":  # steps/switch.yml: the record first, then the links
            n["switches"] = copy.deepcopy(p["switch_record"]["switches"])
            step_done()
            n["previous"], n["link"] = n["link"], p["switch_to"]
            step_done()
        elif kind == "reboot":
            check_may_stop(fleet, name, "reboot", unknown)
            if name in faults["install_fails"]:  # apt fails after the stop (driver_fallback.yml)
                n["alive"] = False
                if faults["install_fails"][name]:  # the old driver untouched: started again on it
                    STATS["fell_back"] += 1
                    n["alive"], n["running"], n["started"], n["port"] = True, n["link"], fleet.tick(), n["wanted"]
                    n["not_loaded"] = n["old_unit"] = False
                raise Failed("driver install")  # the request stays: the next run tries again
            n["alive"], n["reboot"], n["not_loaded"] = False, False, False  # the boot loads every unit file
            if n["acceptance"]:  # gpu_node's after_reboot.yml: acceptance on the new boot answers it
                n["acceptance"] = False
            step_done()
        elif kind == "acceptance":  # steps/acceptance.yml: the GPUs to itself
            assert not n["alive"], f"{name}: node acceptance beside a live server"
            if n["acceptance"]:
                if name in faults["rejects"]:
                    STATS["rejected"] += 1
                    raise Failed("acceptance")  # stays stopped and out, the request kept
                STATS["accepted"] += 1
                n["acceptance"] = False
            step_done()
        elif kind == "start":
            if "restart" in steps:
                check_may_stop(fleet, name, "restart", unknown)
                # daemon-reload and restart: the unit this run rendered, on the inventory's port
                n["alive"], n["running"], n["started"], n["port"] = False, n["link"], fleet.tick(), n["wanted"]
                n["not_loaded"] = n["old_unit"] = False
                if name in faults["start_fails"]:
                    recover(fleet, name, p, {"start": {"ok": False, "stage": "start"}})
                    raise Failed("start")
                n["alive"] = True
                step_done()
            assert n["alive"], f"{name}: a health wait with nothing running"
            step_done()
        elif kind == "clear_restart":
            n["marker"] = None
        elif kind == "hold":
            n["hold"] = {"from": p["from"], "to": p["to"], "at": "model"}
        elif kind == "unhold":
            n["hold"] = None
        elif kind == "journal_done":
            n["journal"] = None
        else:
            assert kind in ("stop_canary", "prune"), f"{name}: a step kind the executor does not know: {kind}"
    if "add" in steps:  # worker_add.yml: in under its URL, healthy; then its old URLs go
        for r in view:
            if r["reachable"]:
                fleet.lists[r["name"]].add(fleet.url(name))
        step_done()
        for stale in vf.stale_urls(fleet.reads(faults), fleet.url(name), fleet.hosts(name), fleet.others(name)):
            fleet.lists[stale["name"]].discard(stale["url"])


def recover(fleet: Fleet, name: str, p: dict[str, t.Any], outcomes: dict[str, t.Any]) -> None:
    """recover.yml: back to serving where the plan can, else stopped; the journal stays unless
    the node serves the env it served before."""
    n = fleet.nodes[name]
    r = vn.recovery(p, outcomes, True)
    if "restore" in r["steps"]:
        n["link"] = p["rollback_to"]
        if p["rollback_previous"]:
            n["previous"] = p["rollback_previous"]
        n["switches"] = copy.deepcopy(p["switch_record_undone"]["switches"])
    if "start" in r["steps"]:
        n["alive"], n["running"], n["started"], n["port"] = True, n["link"], fleet.tick(), n["wanted"]
        n["not_loaded"] = n["old_unit"] = False  # start.yml: daemon-reload, then the restart
    if "stop" in r["steps"]:
        n["alive"] = False
    if n["alive"] and n["running"] == p["from"]:
        n["journal"] = None


def run(fleet: Fleet, faults: dict[str, t.Any], requests: dict[str, t.Any]) -> list[str]:
    """One site.yml run's serve plays; returns the nodes held.

    Play 2 first: every node that serves nothing, all at once (a node that fails there is out
    of the rest of the run). Play 3: each router that answers adds the nodes that serve and it
    lacks (roles/vllm_router/tasks/reconcile.yml). Then play 4: a node at a time, the rollout stopping at the first
    failed node; a held node is left as it is and the others carry on.
    """
    STATS["runs"] += 1
    held: list[str] = []
    out: set[str] = set()
    started = fleet.tick()
    fleet.next_pid += 1
    me = {"run_id": f"run-{fleet.next_pid}", "controller": "ops01", "boot_id": "b", "pid": fleet.next_pid,
          "pid_start": "1", "started": started, "user": "ops", "command": "ansible-playbook site.yml",
          "heartbeat": started}
    holder = fleet.lock
    verdict = vl.decide(holder, me, holder_alive=None if holder is None else holder["pid"] in fleet.live_pids,
                        now=started)
    if verdict["action"] == "refuse":
        return held
    STATS["takeovers"] += verdict["action"] == "takeover"
    fleet.lock, fleet.live_pids = me, fleet.live_pids | {me["pid"]}
    try:
        held = serve_plays(fleet, faults, requests, started, held, out)
    except Killed:
        STATS["killed"] += 1
        fleet.live_pids.discard(me["pid"])  # its process is gone, its lock stays
        return held
    fleet.lock = None
    fleet.live_pids.discard(me["pid"])
    return held


def concurrent_run(fleet: Fleet) -> None:
    """A second operator's site.yml while this one runs: refused by the lock, it changes nothing."""
    before = copy.deepcopy((fleet.nodes, fleet.lists, fleet.lock))
    STATS["concurrent"] += 1
    run(fleet, NO_FAULTS, {})
    assert copy.deepcopy((fleet.nodes, fleet.lists, fleet.lock)) == before, "a run the lock refused changed the fleet"


def serve_plays(fleet: Fleet, faults: dict[str, t.Any], requests: dict[str, t.Any], started: float,
                held: list[str], out: set[str]) -> list[str]:
    """Plays 2, 3 and 4 of one run (Killed propagates: nothing after the kill happens). A node
    whose turn the idle play took (its plan ran there, not held) is left by the rolling play."""
    taken: set[str] = set()
    # The idle play observes every node first (one task, all hosts): plan.yml's rollout is read
    # from these reads, each node's replaced by its own fresher one when it plans.
    reads = {name: fleet.observe(name, faults) for name in sorted(fleet.nodes)}
    rollout = vo.last_rollout(reads) if requests.get("rollback") else None
    for scope in ("idle", "routers", "all"):
        if scope == "routers":
            reconcile(fleet, faults)
            if faults.get("concurrent"):
                concurrent_run(fleet)
            continue
        for name in sorted(set(fleet.nodes) - out - taken):
            verdict = serve(fleet, name, scope, faults, dict(requests, restart_since=started), reads, rollout)
            if verdict == "ok" and scope == "idle":
                taken.add(name)
            if verdict == "held":
                held.append(name)
            elif verdict == "failed":
                out.add(name)
                if scope == "all":
                    return held
    return held


def reconcile(fleet: Fleet, faults: dict[str, t.Any]) -> None:
    """Play 3 on each router host that answers (roles/vllm_router/tasks/reconcile.yml): the
    inventory's URLs it lacks are added where a server answers; then, from a fresh read, what it
    lists that the inventory no longer names is removed, a node's old URL only once the node is
    in under its new one (else the serve plays move it, drained)."""
    nodes = [{"url": fleet.url(name), "hosts": fleet.hosts(name)} for name in fleet.nodes]
    desired = [node["url"] for node in nodes]
    for r, listed in fleet.lists.items():
        if (r, "router") in faults["unknown"]:
            continue
        workers = [{"url": u, "is_healthy": fleet.serves_at(u)} for u in sorted(listed)]
        listed.update(u for u in vf.reconcile(workers, desired, FLOOR, 1, nodes)["add"] if fleet.serves_at(u))
        workers = [{"url": u, "is_healthy": fleet.serves_at(u)} for u in sorted(listed)]
        changes = vf.reconcile(workers, desired, FLOOR, 1, nodes)
        for url in changes["remove"]:
            owner = fleet.owner(url)
            if owner and fleet.serves_at(url):
                assert fleet.serves_at(fleet.url(owner)) and fleet.url(owner) in listed, \
                    f"{r}: {url} removed while its node serves nowhere else it lists"
            listed.discard(url)


def serve(fleet: Fleet, name: str, scope: str, faults: dict[str, t.Any], requests: dict[str, t.Any],
          reads: dict[str, t.Any], rollout: dict[str, t.Any] | None) -> str:
    """serve_node.yml for one node: ok | skipped | held | failed. The idle play observes the node
    first and leaves one that serves (vllm_node_serving) before its routers are read. A rollback
    is judged from every node's read (plan.yml: vllm_last_rollout over hostvars); each read is
    from before that node's own steps, and a rollback run switches no node forward, so the
    rollout read at the run's start is every node's."""
    observed = reads[name] if scope == "idle" else fleet.observe(name, faults)
    reads[name] = observed
    if rollout is not None:
        assert vo.last_rollout(reads)["env"] == rollout["env"], "the rollout moved during a rollback run"
        requests = dict(requests, rollout=rollout)
    if scope == "idle" and vv.Node(observed).serving:
        return "skipped"
    reads = fleet.reads(faults)
    view = fleet.view(name, reads)
    n = fleet.nodes[name]
    state = {"observed": observed, "routers": view,
             "start": True, "rendered": {"unit_changed": n["alive"] and n["port"] != n["wanted"]}, "requests": requests,
             "canary": {"enabled": True, "stop_server": "auto", "batch_size": 1 if scope == "all" else len(fleet.nodes),
                        "hosts_count": len(fleet.nodes), "gpu_memory_gib": 16},
             "check_mode": False, "now": fleet.tick()}
    try:
        p = vp.plan(state)
    except vp.PlanError:
        STATS["refused"] += 1
        return "failed"
    STATS["plans"] += 1
    if requests.get("rollback") and not observed["journal"]:
        # Never two steps back, and only where the last rollout switched the node: a node that
        # moves goes to what it served before its last forward switch, which went to the env the
        # fleet's last rollout named; every other node stays on what its link names.
        last = vo.last_forward(vv.Node(observed).switches)
        if p["to"] != observed["link"]["env"]:
            assert last and last["to"] == rollout["env"] == observed["link"]["env"], (name, p["line"])
            assert p["to"] == last["from"] and p["action"] in ("rollback", "held"), (name, p["line"])
            STATS["rolled_back"] += p["action"] == "rollback"
        elif last and last["to"] == observed["link"]["env"] != rollout["env"]:
            STATS["stayed"] += 1
    STATS["not_loaded"] += p["restart_reasons"] == [vp.UNIT_NOT_LOADED]  # what only NeedDaemonReload tells
    if p["held"]:
        STATS["held"] += 1
        return "held"
    port = n["port"]  # where it listened when its turn began
    try:
        execute(fleet, name, p, faults, reads, view)
    except Failed:
        STATS["failed"] += 1
        rescue(fleet, name, p, port, faults)
        return "failed"
    except Held:
        STATS["held"] += 1
        STATS["floor_held"] += 1
        return "held"
    return "ok"


def rescue(fleet: Fleet, name: str, p: dict[str, t.Any], port: int, faults: dict[str, t.Any]) -> None:
    """serve_node.yml's rescue: /health where this run configures the node and where it listened
    when its turn began; a node that was routed and still serves goes back into every router that
    answers, under the URL `vllm_router_back_url` gives (where it serves)."""
    n = fleet.nodes[name]
    if not p["routed"]:
        return
    addr = n.get("addr", name)
    asked = list(dict.fromkeys([fleet.url(name) + "/health", f"http://{addr}:{port}/health"]))
    serving = f"http://{addr}:{n['port']}/health" if n["alive"] else ""
    results = [{"item": url, "status": 200 if url == serving else -1} for url in asked]
    back = vf.back_url(results, fleet.url(name), asked[0], port)
    assert back == (f"http://{addr}:{n['port']}" if n["alive"] and serving in asked else ""), (name, back, n)
    for r in fleet.lists:
        if back and (r, "router") not in faults["unknown"]:
            fleet.lists[r].add(back)
            STATS["put_back"] += 1
            STATS["put_back_old_port"] += back != fleet.url(name)


NO_FAULTS: dict[str, t.Any] = {"unknown": set(), "kill": {}, "fail": {}, "canary_fails": set(), "start_fails": set(),
                               "readd": set(), "concurrent": False, "install_fails": {}, "rejects": set()}

node_strategy = st.fixed_dictionaries({
    "alive": st.booleans(),
    "running": st.sampled_from(ENVS),
    "link": st.sampled_from(ENVS),
    "previous": st.sampled_from(("",) + ENVS),
    "journal": st.none() | st.builds(
        lambda action, frm, to, ok: {"version": 1, "action": action, "from": frm, "to": to, "previous": "",
                                     "canary_ok": ok},
        st.sampled_from(("upgrade", "restart", "rollback")), st.sampled_from(ENVS), st.sampled_from(ENVS),
        st.booleans()),
    "hold": st.none() | st.builds(lambda frm, to: {"from": frm, "to": to, "at": "x"},
                                  st.sampled_from(ENVS), st.sampled_from(ENVS)),
    "reboot": st.booleans(),
    "acceptance": st.booleans(),  # gpu_node's request: due while the server ran
    "marker": st.none() | st.just(500.0) | st.just(5000.0),
    "record": st.booleans(),  # its start record is its running start's own (else: file times)
    "not_loaded": st.booleans(),  # a killed run's unit on disk, systemd's NeedDaemonReload
    "unlisted": st.sets(st.sampled_from(ROUTERS)),
    # the switch record a run before left: forward switches and rollbacks, in time order
    "switches": st.lists(st.tuples(st.sampled_from(("",) + ENVS), st.sampled_from(ENVS), st.booleans()),
                         max_size=3).map(lambda rows: [{"from": f, "to": to, "at": 100.0 + i, "rollback": r}
                                                       for i, (f, to, r) in enumerate(rows)]),
})


def faults_strategy(names: list[str]) -> st.SearchStrategy[dict[str, t.Any]]:
    reads = [(r, "router") for r in ROUTERS] + [(n, k) for n in names for k in ("health", "metrics")]
    return st.fixed_dictionaries({
        "unknown": st.sets(st.sampled_from(reads), max_size=2),
        "kill": st.dictionaries(st.sampled_from(names), st.integers(1, 8), max_size=1),
        "fail": st.dictionaries(st.sampled_from(names), st.integers(1, 8), max_size=1),
        "canary_fails": st.sets(st.sampled_from(names), max_size=1),
        "start_fails": st.sets(st.sampled_from(names), max_size=1),
        "readd": st.sets(st.sampled_from(names), max_size=1),
        "concurrent": st.booleans(),
        # a staged driver install failing after the stop: True, the old driver untouched (started again)
        "install_fails": st.dictionaries(st.sampled_from(names), st.booleans(), max_size=1),
        "rejects": st.sets(st.sampled_from(names), max_size=1),
    })


def world(fleet: Fleet, event: tuple[str, str]) -> None:
    """Something that happens between two runs, not by the playbook."""
    kind, arg = event
    if kind == "dies":
        fleet.nodes[arg]["alive"] = False  # the routers' health checks see it unhealthy
    elif kind == "unlisted":
        for r in fleet.lists:
            fleet.lists[r].discard(arg)
    elif kind == "pins":
        fleet.target = arg
    elif kind == "restart_asked":
        fleet.nodes[arg]["marker"] = fleet.tick()
    elif kind == "reboot_pending":
        fleet.nodes[arg]["reboot"] = True
    elif kind == "acceptance_due":  # the prepare play found acceptance due while the server ran
        fleet.nodes[arg]["acceptance"] = True
    elif kind == "port":  # -e vllm_server_port=... or the inventory's port changed for this node
        n = fleet.nodes[arg]
        n["wanted"] = PORTS[1 - PORTS.index(n["wanted"])]
        STATS["moves"] += 1
    elif kind == "address":  # the inventory names the node by its IP instead of its name (or back)
        n = fleet.nodes[arg]
        name, ip = fleet.hosts(arg)
        n["addr"] = ip if n.get("addr", name) == name else name
        STATS["readdressed"] += 1
    elif kind == "unit_written":  # a run rendered the unit and was killed before its daemon-reload
        n = fleet.nodes[arg]
        n["unit_written"], n["not_loaded"], n["old_unit"] = fleet.tick(), True, n["alive"]
    elif kind == "crash_restart":  # vLLM crashed, systemd restarted the unit it has in memory
        n = fleet.nodes[arg]
        if n["alive"]:
            n["started"], n["old_unit"] = fleet.tick(), n["not_loaded"]


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_plan_keeps_the_invariants_and_converges(data):
    count = data.draw(st.integers(2, 3), label="nodes")
    names = [f"gpu{i:02d}" for i in range(1, count + 1)]
    nodes = [dict(data.draw(node_strategy, label=name), name=name, started=900.0, unit_written=0.0,
                  port=PORTS[0], wanted=PORTS[0]) for name in names]
    for n in nodes:
        if n["journal"] is None and n["alive"]:
            n["running"] = n["link"]  # without a killed run, a live server runs what the link names
        n["old_unit"] = n["alive"] and n["not_loaded"]
    routers = list(ROUTERS[:data.draw(st.integers(1, 2), label="routers")])
    fleet = Fleet(nodes, routers, data.draw(st.sampled_from(ENVS), label="pins"))
    STATS["fleets"] += 1
    # "port" twice: a move is a change of setting the whole run has to carry (and fail in) drained;
    # "address": the inventory's URL names the node by its IP, or by its name again.
    events = st.tuples(st.sampled_from(("dies", "unlisted", "restart_asked", "reboot_pending", "acceptance_due", "port",
                                        "unit_written", "crash_restart", "port", "address")), st.sampled_from(names)) | \
        st.tuples(st.just("pins"), st.sampled_from(ENVS))
    for _round in range(data.draw(st.integers(1, 4), label="rounds")):
        STATS["rounds"] += 1
        for event in data.draw(st.lists(events, max_size=2), label="events"):
            world(fleet, event)
        faults = data.draw(faults_strategy(names), label="faults")
        requests = data.draw(st.fixed_dictionaries({"rollback": st.booleans()}), label="requests")
        states = {name: copy.deepcopy(fleet.nodes[name]) for name in names}
        held = run(fleet, faults, requests)
        for name in held:  # a held node is left exactly as it was
            assert fleet.nodes[name] == states[name], f"{name} was held but changed"

    # The faults stop: two plain runs converge every node, and the next plans have no step.
    for _clean_run in range(2):
        run(fleet, NO_FAULTS, {})
    for name in names:
        n = fleet.nodes[name]
        state = {"observed": fleet.observe(name, NO_FAULTS), "start": True,
                 "routers": fleet.view(name, fleet.reads(NO_FAULTS)),
                 "canary": {"batch_size": 1, "hosts_count": count}, "now": fleet.tick()}
        p = vp.plan(state)
        assert p["steps"] == [] and p["action"] in ("none", "hold"), f"{name}: {p['line']}"
        assert n["alive"] and n["running"] == n["link"] == p["to"] and n["journal"] is None, (name, n)
        assert n["port"] == n["wanted"], (name, n)
        assert not n["old_unit"] and not n["not_loaded"], f"{name} runs a unit systemd has not loaded: {n}"
        assert not n["reboot"] and not n["acceptance"], f"{name}: a reboot or acceptance still pending: {n}"
        assert all({u for u in fleet.lists[r] if fleet.owner(u) == name} == {fleet.url(name)} for r in routers), \
            (name, fleet.lists)


def test_the_model_is_not_vacuous():
    """The generated runs held, refused, killed, fenced and failed nodes, and took steps (else the
    invariants above were checked on nothing). Runs after the property test in this file."""
    assert STATS["fleets"] >= 100 and STATS["steps"] > 1000
    assert min(STATS["held"], STATS["killed"], STATS["failed"], STATS["fenced"], STATS["concurrent"],
               STATS["takeovers"], STATS["moves"], STATS["not_loaded"], STATS["accepted"], STATS["rejected"],
               STATS["fell_back"], STATS["put_back"], STATS["rolled_back"], STATS["stayed"], STATS["readdressed"]) > 0, STATS


def _quiet_node(name: str) -> dict[str, t.Any]:
    """A node that serves what its link names, routed, on the first port, with no history."""
    return {"name": name, "alive": True, "running": ENVS[0], "link": ENVS[0], "previous": "", "journal": None,
            "hold": None, "reboot": False, "acceptance": False, "marker": None, "record": True,
            "not_loaded": False, "unlisted": set(), "switches": [], "started": 900.0, "unit_written": 0.0,
            "port": PORTS[0], "wanted": PORTS[0], "old_unit": False}


def test_a_node_that_fails_before_its_port_move_goes_back_under_its_old_url():
    """The drained move's failure the random draws rarely meet: out of the router, drained, then
    the next task fails before the restart -- the rescue reads /health on both ports and puts the
    node back where it still serves (its old URL), the other node untouched."""
    fleet = Fleet([_quiet_node("gpu01"), _quiet_node("gpu02")], ["router01"], ENVS[0])
    world(fleet, ("port", "gpu01"))
    faults = dict(NO_FAULTS, fail={"gpu01": 2})  # remove, drain, then a failure
    run(fleet, faults, {})
    assert fleet.nodes["gpu01"]["alive"] and fleet.nodes["gpu01"]["port"] == PORTS[0]
    assert fleet.lists["router01"] == {"http://gpu01:8000", "http://gpu02:8000"}
    run(fleet, NO_FAULTS, {})  # the next run moves it, drained
    assert fleet.lists["router01"] == {"http://gpu01:8010", "http://gpu02:8000"}


def test_a_floor_that_refuses_one_node_holds_it_and_the_rollout_carries_on():
    """router01 lists gpu01 alone (gpu02 serves on its old port, unlisted): gpu01's removal would
    empty it, so gpu01 is held and left as it is; gpu02, which needs no removal, moves and is
    added -- and the next run can take gpu01 out. Before, the refusal failed gpu01 and stopped
    the rollout at it on every run: gpu02 never moved, the fleet never converged."""
    second = dict(_quiet_node("gpu02"), unlisted={"router01"})
    fleet = Fleet([_quiet_node("gpu01"), second], ["router01"], ENVS[1])
    world(fleet, ("port", "gpu02"))
    before = copy.deepcopy(fleet.nodes["gpu01"])
    held = run(fleet, NO_FAULTS, {})
    assert held == ["gpu01"] and fleet.nodes["gpu01"] == before
    assert fleet.lists["router01"] == {"http://gpu01:8000", "http://gpu02:8010"}
    assert run(fleet, NO_FAULTS, {}) == []
    assert fleet.nodes["gpu01"]["link"] == ENVS[1]


def test_an_address_change_and_back_is_a_drained_move_each_way():
    """The inventory names gpu01 by its IP (the router then lists it under the IP URL), then by
    its name again with a new port: the router still lists it under the IP, which only the
    node's addresses tell; a restart while that URL is listed would cut its streams."""
    fleet = Fleet([_quiet_node("gpu01"), _quiet_node("gpu02")], ["router01"], ENVS[0])
    world(fleet, ("address", "gpu01"))
    assert run(fleet, NO_FAULTS, {}) == []
    assert fleet.lists["router01"] == {"http://10.0.0.1:8000", "http://gpu02:8000"}
    world(fleet, ("address", "gpu01"))
    world(fleet, ("port", "gpu01"))
    assert run(fleet, NO_FAULTS, {}) == []  # check_may_stop: no restart while a router lists it
    assert fleet.lists["router01"] == {"http://gpu01:8010", "http://gpu02:8000"}
