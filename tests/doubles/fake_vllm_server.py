#!/usr/bin/env python3
"""TEST DOUBLE of `vllm serve` -- not vLLM, never installed by the roles.

A stand-in that speaks vLLM's HTTP endpoints (/health, /v1/models, /v1/completions, /version,
/metrics with the vllm:spec_decode_* counters) and writes vLLM-like log lines, so the
vllm_server role, its modules and their tests can exercise real failure modes without GPUs:

  --double-mode ok             load for --double-load-seconds, then serve (default)
  --double-mode crash-at-start print a vLLM-style traceback right away and exit 1
  --double-mode die-mid-load   print loading lines for --double-die-after seconds, then crash
  --double-mode unhealthy      listen, but /health answers 503 forever
  --double-mode flat-counters  serve, but the spec-decode counters never grow
  --double-crash syntax|runtime|oom|nccl   which traceback a crash prints (default syntax)
  --double-crash replay        print a real-format vLLM crash log instead (--double-replay FILE,
                               default tests/fixtures/vllm_logs/seed_indentationerror_deepseek_v2.log:
                               every line prefixed by its process, workers interleaved, vLLM's
                               generic RuntimeError last); lines starting with '#' are skipped

  --double-canary-port N       the port a canary (vllm_server's upgrade check) uses: a start on it
                               without `--load-format dummy` or without a num_hidden_layers
                               override in `--hf-overrides` (top level or text_config) exits 1
                               with a traceback naming what is missing (a canary must never load
                               the real weights)
  --double-argv-log FILE       append one JSON line per start: port, argv, sys.prefix

Each --double-* flag can also come from the environment (FAKE_VLLM_MODE, FAKE_VLLM_CRASH,
FAKE_VLLM_REPLAY, FAKE_VLLM_LOAD_SECONDS, FAKE_VLLM_DIE_AFTER, FAKE_VLLM_CANARY_PORT,
FAKE_VLLM_ARGV_LOG), so a systemd unit's EnvironmentFile can steer it. Run with the interpreter
of an env that has vLLM installed (molecule installs it as an env's bin/vllm), it reports that
vLLM's version (log line, /version), so a test can tell which env serves.
Other vLLM flags are accepted and ignored, except --host, --port (0 = pick one; the chosen port
is printed as "Uvicorn running on http://HOST:PORT"), --served-model-name, --api-key (or
VLLM_API_KEY) and --speculative-config (must be valid JSON, as for vLLM). Stdlib only.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODES = ("ok", "crash-at-start", "die-mid-load", "unhealthy", "flat-counters")
CRASHES = ("syntax", "runtime", "oom", "nccl", "replay")
REPLAY = Path(__file__).resolve().parent.parent / "fixtures" / "vllm_logs" / "seed_indentationerror_deepseek_v2.log"
SITE = "/opt/ml-env/lib/python3.12/site-packages/vllm"
# Accepted tokens per draft, cycled: a fixed pattern keeps the double's acceptance honest and
# predictable (for k=3: 8 drafts -> 24 draft tokens, 13 accepted).
ACCEPT_PATTERN = (3, 2, 1, 2, 0, 3, 1, 1)


def served_version() -> str:
    """The vLLM version of the interpreter's env (the double stands in for its bin/vllm)."""
    try:
        return importlib.metadata.version("vllm") + "+testdouble"
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0+testdouble"


def log(level: str, where: str, message: str, prefix: str = "", stream=None) -> None:
    """One line in vLLM's log format (level, date, [file:line], message)."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"{prefix}{level} {stamp} [{where}] {message}", file=stream or sys.stdout, flush=True)


def traceback_lines(kind: str) -> tuple[list[str], list[str]]:
    """(engine-core lines, api-server lines) of a start-up crash the way vLLM prints it."""
    core = "(EngineCore_DP0 pid=4242) "
    head = [
        f"{core}ERROR 11-29 19:20:01 [core.py:708] EngineCore failed to start.",
        f"{core}Traceback (most recent call last):",
        f'{core}  File "{SITE}/v1/engine/core.py", line 699, in run_engine_core',
        f"{core}    engine_core = EngineCoreProc(*args, **kwargs)",
        f'{core}  File "{SITE}/v1/executor/multiproc_executor.py", line 120, in _init_executor',
        f"{core}    self.collective_rpc(\"load_model\")",
    ]
    if kind == "syntax":
        body = [
            f'{core}  File "{SITE}/model_executor/model_loader/utils.py", line 88, in get_model_architecture',
            f"{core}    model_cls = ModelRegistry.resolve_model_cls(architectures)",
            f'{core}  File "<frozen importlib._bootstrap>", line 1204, in _gcd_import',
            f'{core}  File "{SITE}/model_executor/models/deepseek_v2.py", line 57',
            f"{core}    from .interfaces import (MixtureOfExperts, SupportsEagle,",
            f"{core}                            ^",
            f"{core}SyntaxError: '(' was never closed",
        ]
    elif kind == "runtime":
        body = [
            f'{core}  File "{SITE}/v1/worker/gpu_model_runner.py", line 2611, in load_model',
            f"{core}    raise RuntimeError(",
            f"{core}RuntimeError: Model does not support EAGLE3 interface but "
            "aux_hidden_state_outputs was requested",
        ]
    elif kind == "oom":
        body = [
            f'{core}  File "{SITE}/model_executor/layers/fused_moe/layer.py", line 912, in create_weights',
            f"{core}    w13_weight = torch.nn.Parameter(torch.empty(",
            f"{core}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. "
            "GPU 3 has a total capacity of 94.97 GiB of which 1.02 GiB is free.",
        ]
    else:
        body = [
            f"{core}gpu07:4242:4300 [3] NCCL WARN Call to ibv_reg_mr failed",
            f"{core}gpu07:4242:4300 [3] NCCL WARN P2P: peer access to GPU 5 failed: "
            "cudaErrorPeerAccessUnsupported",
            f'{core}  File "{SITE}/distributed/device_communicators/pynccl.py", line 140, in all_reduce',
            f"{core}    self.nccl.ncclAllReduce(",
            f"{core}torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error "
            "(run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3",
        ]
    api = [
        "Traceback (most recent call last):",
        '  File "/opt/ml-env/bin/vllm", line 10, in <module>',
        "    sys.exit(main())",
        f'  File "{SITE}/v1/engine/utils.py", line 912, in wait_for_engine_startup',
        "    raise RuntimeError(",
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
    ]
    return head + body, api


def replay(path: str) -> None:
    """Print a recorded/real-format vLLM crash log line by line (stdout, as vLLM's logger) and exit 1."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.startswith("#"):
                print(line.rstrip("\n"), flush=True)
    sys.exit(1)


def crash(kind: str, replay_path: str = str(REPLAY)) -> None:
    """Print a crash the way vLLM does (engine core to stderr, API server last) and exit 1."""
    if kind == "replay":
        replay(replay_path)
    core, api = traceback_lines(kind)
    for line in core:
        print(line, file=sys.stderr, flush=True)
    time.sleep(0.05)
    for line in api:
        print(line, file=sys.stderr, flush=True)
    sys.exit(1)


class State:
    """Counters and settings shared by the request handler threads."""

    def __init__(self, args: argparse.Namespace, spec: dict | None) -> None:
        self.args = args
        self.spec = spec
        self.k = int(spec.get("num_speculative_tokens", 3)) if spec is not None else 0
        self.lock = threading.Lock()
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted = 0
        self.per_pos = [0] * self.k
        self.cycle = 0
        self.healthy = args.double_mode != "unhealthy"
        self.served_name = args.served_model_name or args.model

    def generate(self, max_tokens: int) -> int:
        """Simulate speculative decoding of max_tokens tokens; returns tokens produced."""
        produced = 0
        with self.lock:
            while produced < max_tokens:
                if self.k and self.args.double_mode != "flat-counters":
                    accepted = min(ACCEPT_PATTERN[self.cycle % len(ACCEPT_PATTERN)], self.k)
                    self.cycle += 1
                    self.drafts += 1
                    self.draft_tokens += self.k
                    self.accepted += accepted
                    for pos in range(accepted):
                        self.per_pos[pos] += 1
                    produced += accepted + 1
                else:
                    produced += 1
        return min(produced, max_tokens)

    def metrics(self) -> str:
        labels = f'engine="0",model_name="{self.served_name}"'
        out = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} 0.0",
        ]
        if self.k:
            with self.lock:
                for name, value in (("num_drafts", self.drafts), ("num_draft_tokens", self.draft_tokens),
                                    ("num_accepted_tokens", self.accepted)):
                    out += [f"# TYPE vllm:spec_decode_{name}_total counter",
                            f"vllm:spec_decode_{name}_total{{{labels}}} {float(value)}"]
                out.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
                for pos, value in enumerate(self.per_pos):
                    out.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},'
                               f'position="{pos}"}} {float(value)}')
        return "\n".join(out) + "\n"


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args) -> None:  # vLLM-style access log
            log("INFO", "launcher.py:46", f'{self.client_address[0]} - "{self.requestline}" {args[1] if len(args) > 1 else ""}')

        def _send(self, code: int, body, ctype: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else (
                json.dumps(body).encode() if not isinstance(body, str) else body.encode())
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorised(self) -> bool:
            key = state.args.api_key or os.environ.get("VLLM_API_KEY")
            if not key or not self.path.startswith("/v1"):
                return True
            if self.headers.get("Authorization") == f"Bearer {key}":
                return True
            self._send(401, {"error": "Unauthorized"})
            return False

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            if not self._authorised():
                return
            if self.path == "/health":
                self._send(200 if state.healthy else 503, b"", "text/plain")
            elif self.path == "/version":
                self._send(200, {"version": served_version()})
            elif self.path == "/metrics":
                self._send(200, state.metrics(), "text/plain; version=0.0.4")
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{
                    "id": state.served_name, "object": "model", "owned_by": "vllm",
                    "root": state.args.model, "max_model_len": state.args.max_model_len}]})
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:  # noqa: N802
            if not self._authorised():
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                request = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "invalid JSON", "code": 400}})
                return
            if self.path != "/v1/completions":
                self._send(404, {"detail": "Not Found"})
                return
            if request.get("model") != state.served_name:
                self._send(404, {"error": {"message": f"The model `{request.get('model')}` does not exist.",
                                           "type": "NotFoundError", "code": 404}})
                return
            if not state.healthy:
                self._send(500, {"error": {"message": "EngineDeadError", "code": 500}})
                return
            tokens = state.generate(int(request.get("max_tokens") or 16))
            self._send(200, {
                "id": "cmpl-testdouble", "object": "text_completion", "created": int(time.time()),
                "model": state.served_name,
                "choices": [{"index": 0, "text": " Paris" + " and so on" * (tokens // 3),
                             "finish_reason": "length", "logprobs": None}],
                "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": tokens + 5},
            })

    return Handler


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fake_vllm_server (TEST DOUBLE)")
    parser.add_argument("subcommand", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--speculative-config", default=None)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--load-format", default="auto")
    parser.add_argument("--hf-overrides", default=None)
    env = os.environ.get
    parser.add_argument("--double-mode", choices=MODES, default=env("FAKE_VLLM_MODE", "ok"))
    parser.add_argument("--double-crash", choices=CRASHES, default=env("FAKE_VLLM_CRASH", "syntax"))
    parser.add_argument("--double-replay", default=env("FAKE_VLLM_REPLAY", str(REPLAY)))
    parser.add_argument("--double-load-seconds", type=float,
                        default=float(env("FAKE_VLLM_LOAD_SECONDS", "1")))
    parser.add_argument("--double-die-after", type=float, default=float(env("FAKE_VLLM_DIE_AFTER", "2")))
    parser.add_argument("--double-canary-port", type=int, default=int(env("FAKE_VLLM_CANARY_PORT", "0")))
    parser.add_argument("--double-argv-log", default=env("FAKE_VLLM_ARGV_LOG", ""))
    args, _unknown = parser.parse_known_args(argv)
    return args


def canary_problem(args: argparse.Namespace) -> str | None:
    """What a start on the canary port lacks to be a canary (dummy weights, fewer layers)."""
    if not args.double_canary_port or args.port != args.double_canary_port:
        return None
    if args.load_format != "dummy":
        return (f"started on the canary port {args.port} with --load-format {args.load_format}, "
                "not dummy: the canary would read every weight shard")
    try:
        overrides = json.loads(args.hf_overrides or "{}")
    except ValueError:
        return f"--hf-overrides is not JSON: {args.hf_overrides!r}"
    text = overrides.get("text_config") if isinstance(overrides.get("text_config"), dict) else {}
    if "num_hidden_layers" not in overrides and "num_hidden_layers" not in text:
        return (f"started on the canary port {args.port} without a num_hidden_layers override in "
                f"--hf-overrides ({args.hf_overrides!r}): the canary would build every layer")
    return None


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    log("INFO", "api_server.py:1885", f"vLLM API server version {served_version()} (TEST DOUBLE)")
    log("INFO", "utils.py:328", f"non-default args: {json.dumps(argv)}")
    if args.double_argv_log:
        with open(args.double_argv_log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"port": args.port, "argv": [sys.argv[0]] + argv,
                                     "prefix": sys.prefix, "time": time.time()}) + "\n")
    problem = canary_problem(args)
    if problem:
        print("Traceback (most recent call last):", file=sys.stderr)
        print(f'  File "{sys.argv[0]}", line 10, in <module>', file=sys.stderr)
        print("    sys.exit(main())", file=sys.stderr)
        print(f"ValueError: TEST DOUBLE canary guard: {problem}", file=sys.stderr, flush=True)
        return 1
    spec = None
    if args.speculative_config is not None:
        try:
            spec = json.loads(args.speculative_config)
        except ValueError as exc:
            print(f"vllm serve: error: argument --speculative-config: invalid loads value: "
                  f"{args.speculative_config!r} ({exc})", file=sys.stderr, flush=True)
            return 2
        log("INFO", "speculative.py:210", f"speculative config: {json.dumps(spec, sort_keys=True)}")
    if args.double_mode == "crash-at-start":
        log("INFO", "model.py:547", "Resolved architecture: KimiK25ForConditionalGeneration")
        crash(args.double_crash, args.double_replay)
    log("INFO", "core.py:77", "Initializing a V1 LLM engine (v0.0.0+testdouble) with config: "
        f"model={args.model!r}")
    load_for = args.double_die_after if args.double_mode == "die-mid-load" else args.double_load_seconds
    steps = max(1, int(load_for / 0.2))
    for step in range(steps):
        done = int(100 * (step + 1) / steps)
        print(f"(EngineCore_DP0 pid=4242) Loading safetensors checkpoint shards: {done:3d}% "
              f"Completed | {step + 1}/{steps} [00:0{step % 10}<00:00]", flush=True)
        time.sleep(load_for / steps)
    if args.double_mode == "die-mid-load":
        crash(args.double_crash if args.double_crash != "syntax" else "oom", args.double_replay)
    log("INFO", "default_loader.py:267", f"Loading weights took {load_for:.2f} seconds")
    log("INFO", "gpu_model_runner.py:2002", "Model loading took 71.4 GiB and 12.5 seconds")
    log("INFO", "gpu_worker.py:276", "Available KV cache memory: 9.51 GiB")
    log("INFO", "gpu_model_runner.py:3200", "Graph capturing finished in 4 secs, took 0.55 GiB")
    state = State(args, spec)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    server.daemon_threads = True
    host, port = server.server_address[:2]
    log("INFO", "launcher.py:34", f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    log("INFO", "launcher.py:40", "Application startup complete.")
    if args.double_mode == "unhealthy":
        log("ERROR", "core_client.py:564", "Engine core proc EngineCore_DP0 died unexpectedly")
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
