"""Bounded load generator for the router scenario (tests only; loopback or own containers).

Sends a steady stream of /v1/completions (--stream: streamed, --max-tokens long, each checked
for every chunk and the final [DONE]) through the router from --concurrency threads until
the stop file appears, --max-seconds pass or --max-requests were sent, whichever comes first,
then writes a JSON summary (count, failures with their reasons, p50/p99 latency, the share of
each node from the completion's `system_fingerprint`, set by the fleet-node test double) and
prints it as text. With --retry-refused a connection the router refuses (it is restarting) is
tried again every 0.1 s, as a client with retries would: the attempts and the longest wait are
reported, and only a request that was never served or was cut counts as failed. Stdlib only, so it runs on the router node's own interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections import Counter


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def read_stream(resp, tokens: int) -> tuple[bool, str]:
    """An SSE completion stream: every `data:` event a chunk, `data: [DONE]` last."""
    node, chunks, done = "unknown", 0, False
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            break
        event = json.loads(payload)
        node = event.get("system_fingerprint") or node
        chunks += 1
    if not done:
        return False, f"stream cut after {chunks} of {tokens} tokens"
    return chunks == tokens, node if chunks == tokens else f"stream of {chunks} of {tokens} tokens"


def refused(exc: BaseException) -> bool:
    return isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, ConnectionRefusedError)


def one_request(url: str, key: str, model: str, timeout: float, stream: bool = False,
                tokens: int = 8) -> tuple[bool, str, float]:
    body = json.dumps({"model": model, "prompt": "The capital of France is", "max_tokens": tokens,
                       "stream": stream}).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            if stream:
                ok, what = read_stream(resp, tokens)
                return ok, what, time.monotonic() - start
            data = json.loads(resp.read())
        node = data.get("system_fingerprint") or "unknown"
        ok = bool(data.get("choices"))
        return ok, node if ok else "no choices", time.monotonic() - start
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace").strip()
        return False, f"HTTP {exc.code}" + (f": {detail}" if detail else ""), time.monotonic() - start
    except (OSError, ValueError) as exc:
        return False, "refused" if refused(exc) else type(exc).__name__, time.monotonic() - start


def run(args: argparse.Namespace) -> dict:
    lock = threading.Lock()
    latencies: list[float] = []
    nodes: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    failure_times: list[str] = []  # when each failure came back (UTC), to match with the journals
    refusals = {"count": 0, "longest_wait_s": 0.0}
    sent = [0]
    deadline = time.monotonic() + args.max_seconds

    def worker() -> None:
        while time.monotonic() < deadline and not os.path.exists(args.stop_file):
            with lock:
                if sent[0] >= args.max_requests:
                    return
                sent[0] += 1
            first = time.monotonic()
            while True:
                ok, what, latency = one_request(args.url, args.api_key, args.model, args.timeout,
                                                args.stream, args.max_tokens)
                if what != "refused" or not args.retry_refused or time.monotonic() > deadline:
                    break
                with lock:
                    refusals["count"] += 1
                    refusals["longest_wait_s"] = round(max(refusals["longest_wait_s"], time.monotonic() - first), 2)
                time.sleep(0.1)
            with lock:
                latencies.append(latency)
                (nodes if ok else failures)[what] += 1
                if not ok and len(failure_times) < 50:
                    failure_times.append(time.strftime("%H:%M:%S", time.gmtime()) + f" {what[:80]}")
            time.sleep(args.pause)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _client in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = sum(nodes.values()) + sum(failures.values())
    return {
        "requests": total,
        "failed": sum(failures.values()),
        "failures": dict(failures),
        "failure_times": failure_times,
        "refused": refusals["count"],
        "refused_longest_wait_s": refusals["longest_wait_s"],
        "seconds": round(time.monotonic() - started, 1),
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "max_ms": round(max(latencies, default=0) * 1000, 1),
        "per_node": {n: {"count": c, "share": round(c / total, 3)} for n, c in sorted(nodes.items())},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000/v1/completions")
    parser.add_argument("--api-key", default=os.environ.get("FLEET_LOADGEN_API_KEY", ""))
    parser.add_argument("--model", default="kimi-k2.5")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.05, help="seconds between two requests of a thread")
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--max-seconds", type=float, default=300)
    parser.add_argument("--max-requests", type=int, default=20000)
    parser.add_argument("--stream", action="store_true", help="stream each completion (server-sent events)")
    parser.add_argument("--max-tokens", type=int, default=8, help="tokens asked per completion")
    parser.add_argument("--retry-refused", action="store_true",
                        help="try a refused connection again every 0.1 s (a restarting router)")
    parser.add_argument("--stop-file", default="/run/fleet_loadgen.stop")
    parser.add_argument("--output", default="/run/fleet_loadgen.json")
    args = parser.parse_args()
    summary = run(args)
    tmp = args.output + ".tmp"
    with open(tmp, "w") as out:
        json.dump(summary, out)
    os.replace(tmp, args.output)
    shares = ", ".join(f"{n} {v['count']} ({v['share']:.0%})" for n, v in summary["per_node"].items())
    print(f"{summary['requests']} requests in {summary['seconds']} s, {summary['failed']} failed "
          f"{summary['failures'] or ''}; latency p50 {summary['p50_ms']} ms, p99 {summary['p99_ms']} ms, "
          f"max {summary['max_ms']} ms; per node: {shares}"
          + (f"; {summary['refused']} refused connections retried, the longest wait {summary['refused_longest_wait_s']} s"
             if args.retry_refused else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
