"""Produce a vLLM /metrics body with the REAL vLLM code, for tests/fixtures/monitoring/vllm-<version>-metrics.txt.

    ~/.cache/gpuserve/vllm-full/0.33.0/bin/python tests/support/record_vllm_metrics.py > tests/fixtures/monitoring/vllm-0.33.0-metrics.txt

Run with the interpreter of a full vLLM env (tests/support/vllm_full_env.py builds them, CPU-only
torch). No model is loaded and no GPU is used: vLLM's own PrometheusStatLogger
(vllm/v1/metrics/loggers.py, with SpecDecodingProm from vllm/v1/spec_decode/metrics.py) is built
from vLLM's own config classes (ObservabilityConfig, CacheConfig, CompilationConfig) and a stand-in
for the model and speculative configs (a real ModelConfig needs the checkpoint's config.json):
served name kimi-k2.5, 262144 tokens, EAGLE-3 with 3 speculative tokens, 2 engines. It then
records the stats an engine core hands the API server (SchedulerStats with SpecDecodingStats,
IterationStats) for a few hundred steps of a busy node, and prints what prometheus_client serves
at /metrics (generate_latest, the text format vLLM's /metrics route returns). So every name,
type, label and bucket is vLLM's; the numbers are the script's.
"""

from __future__ import annotations

import random
import sys
import types

import prometheus_client
import vllm
from vllm.config import CacheConfig, CompilationConfig, ObservabilityConfig
from vllm.v1.metrics.loggers import PrometheusStatLogger
from vllm.v1.metrics.stats import IterationStats, SchedulerStats
from vllm.v1.spec_decode.metrics import SpecDecodingStats

NUM_SPEC_TOKENS = 3
ENGINES = [0, 1]


def _config() -> types.SimpleNamespace:
    cache = CacheConfig()
    cache.num_gpu_blocks = 18432
    return types.SimpleNamespace(
        observability_config=ObservabilityConfig(), cache_config=cache, compilation_config=CompilationConfig(),
        model_config=types.SimpleNamespace(served_model_name="kimi-k2.5", max_model_len=262144, is_diffusion=False),
        speculative_config=types.SimpleNamespace(num_speculative_tokens=NUM_SPEC_TOKENS, method="eagle3"),
        device_config=types.SimpleNamespace(device_type="cuda"),
        kv_transfer_config=None, ec_transfer_config=None, lora_config=None, watermark_config=None,
    )


def main() -> int:
    rng = random.Random(20261203)
    logger = PrometheusStatLogger(_config(), ENGINES)
    logger.log_engine_initialized()
    for step in range(400):
        for engine in ENGINES:
            spec = SpecDecodingStats.new(NUM_SPEC_TOKENS)
            running = 24 + rng.randrange(8)
            for _request in range(running):
                # Kimi-K2.5's EAGLE-3 drafter: about 1.7 of 3 draft tokens accepted (mean length ~2.7).
                accepted = min(NUM_SPEC_TOKENS, sum(rng.random() < p for p in (0.8, 0.6, 0.35)))
                spec.observe_draft(NUM_SPEC_TOKENS, accepted)
            sched = SchedulerStats(num_running_reqs=running, num_waiting_reqs=rng.randrange(3),
                                   kv_cache_usage=0.55 + rng.random() * 0.2, spec_decoding_stats=spec)
            iteration = IterationStats()
            iteration.num_generation_tokens = spec.num_drafts + spec.num_accepted_tokens
            if step % 20 == 0:
                iteration.prompt_token_stats.computed = iteration.prompt_token_stats.total = 2048 + rng.randrange(4096)
                iteration.time_to_first_tokens_iter.append(0.4 + rng.random() * 1.5)
            iteration.inter_token_latencies_iter.extend(0.018 + rng.random() * 0.02 for _token in range(running))
            logger.record(sched, iteration, None, engine)
    sys.stdout.write(f"# Produced by tests/support/record_vllm_metrics.py with vLLM {vllm.__version__}'s own "
                     "PrometheusStatLogger and prometheus_client (no model, no GPU; see its docstring).\n")
    sys.stdout.write(prometheus_client.generate_latest(prometheus_client.REGISTRY).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
