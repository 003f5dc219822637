#!/usr/bin/python
# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prove a healthy vLLM server really serves the model and really speculates."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_server_check
short_description: Check that vLLM serves the model and that speculative decoding works
version_added: 0.1.0
description:
  - Checks that C(/v1/models) lists the served model name, sends one short completion, and
    compares the C(vllm:spec_decode_*) counters of C(/metrics) before and after it.
  - Reports the acceptance rate (accepted / draft tokens) and the mean acceptance length
    (1 + accepted tokens / drafts) of that completion, and the per-position acceptance rates.
  - With O(expect_speculation), fails when the counters are missing or did not grow (the server
    answers, but the drafter is not used).
  - A C(/metrics) read that fails (an HTTP error, a time-out) is read again, up to 3 times 1 s
    apart; a scrape that never answers fails with that said, never as "no counters".
author:
  - gpuserve maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Sends the same requests in check mode; a completion changes nothing on the server.
  diff_mode:
    support: none
  idempotent:
    support: full
  platform:
    platforms: posix
options:
  base_url:
    description: The server's base URL.
    type: str
    default: http://127.0.0.1:8000
  api_key:
    description: The server's API key, sent as a bearer token to C(/v1).
    type: str
  model:
    description: The served model name that C(/v1/models) must list and the completion uses.
    type: str
    required: true
  prompt:
    description: The prompt of the test completion.
    type: str
    default: "The capital of France is"
  max_tokens:
    description: Tokens to generate; enough for several speculative steps.
    type: int
    default: 48
  expect_speculation:
    description: Fail when the spec-decode counters are missing or did not grow.
    type: bool
    default: true
  timeout:
    description: Seconds allowed for each request.
    type: int
    default: 120
seealso:
  - module: gpuserve.vllm.vllm_health_wait
"""

EXAMPLES = r"""
- name: Check Kimi-K2.5 answers and EAGLE-3 drafts are accepted
  gpuserve.vllm.vllm_server_check:
    base_url: http://127.0.0.1:8000
    api_key: "{{ vault_vllm_api_key }}"
    model: kimi-k2.5
  register: check

- name: Show the acceptance
  ansible.builtin.debug:
    msg: "acceptance rate {{ check.spec_decode.acceptance_rate }}"
"""

RETURN = r"""
models:
  description: The model ids C(/v1/models) lists.
  returned: always
  type: list
  elements: str
  sample: ["kimi-k2.5"]
completion:
  description: The text and token count of the test completion.
  returned: success
  type: dict
  sample: {"text": " Paris.", "completion_tokens": 48}
spec_decode:
  description:
    - Counter growth during the completion, with C(acceptance_rate), C(mean_acceptance_length)
      and C(per_position_acceptance_rate) (null when nothing was drafted).
  returned: success
  type: dict
  sample: {"drafts": 20, "draft_tokens": 60, "accepted_tokens": 33, "grew": true,
           "acceptance_rate": 0.55, "mean_acceptance_length": 2.65,
           "per_position_acceptance_rate": {"0": 0.8, "1": 0.55, "2": 0.3}}
summary:
  description: One line for people.
  returned: success
  type: str
  sample: "kimi-k2.5: 48 tokens; EAGLE-3 acceptance rate 55.0%, mean acceptance length 2.65 (20 drafts)"
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._http import http_request
from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm._metrics import (
    spec_decode_counters,
    spec_decode_delta,
)

# A scrape that fails (an HTTP error, a time-out) is read again, 1 s apart, before the check fails.
METRICS_TRIES = 3


def main() -> None:
    """Models, one completion, counters before/after."""
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "default": "http://127.0.0.1:8000"},
            "api_key": {"type": "str", "no_log": True},
            "model": {"type": "str", "required": True},
            "prompt": {"type": "str", "default": "The capital of France is"},
            "max_tokens": {"type": "int", "default": 48, "no_log": False},
            "expect_speculation": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    p = module.params
    base = p["base_url"].rstrip("/")
    result: dict = {"changed": False, "models": []}

    def get(path: str, **kwargs) -> tuple[int | None, str]:
        return http_request(base + path, api_key=p["api_key"], timeout=p["timeout"], **kwargs)

    def scrape() -> str:
        """/metrics, read again while it fails (a missed scrape is no reading, not "no counters")."""
        status, text = None, ""
        for attempt in range(METRICS_TRIES):
            status, text = get("/metrics")
            if status == 200:
                return text
            if attempt + 1 < METRICS_TRIES:
                time.sleep(1)
        module.fail_json(msg=f"GET {base}/metrics failed {METRICS_TRIES} times (last: "
                             f"{f'HTTP {status}' if status else text[:200]}): whether speculative decoding "
                             "happens could not be read", **result)
        return ""

    status, text = get("/v1/models")
    if status != 200:
        hint = " (wrong or missing API key)" if status == 401 else ""
        module.fail_json(msg=f"GET {base}/v1/models answered {status}{hint}: {text[:300]}", **result)
    try:
        result["models"] = [m.get("id") for m in json.loads(text).get("data", [])]
    except (ValueError, AttributeError):
        module.fail_json(msg=f"GET {base}/v1/models did not return a model list: {text[:300]}", **result)
    if p["model"] not in result["models"]:
        module.fail_json(msg=f"/v1/models lists {result['models']}, not the served name "
                             f"{p['model']!r}: check vllm_server_served_model_name", **result)

    before = spec_decode_counters(scrape())
    status, text = get("/v1/completions", method="POST", body={
        "model": p["model"], "prompt": p["prompt"], "max_tokens": p["max_tokens"],
        "temperature": 0})
    if status != 200:
        module.fail_json(msg=f"the test completion failed: HTTP {status}: {text[:500]}", **result)
    try:
        reply = json.loads(text)
        result["completion"] = {"text": reply["choices"][0].get("text", "")[:200],
                                "completion_tokens": reply.get("usage", {}).get("completion_tokens")}
    except (ValueError, KeyError, IndexError, TypeError):
        module.fail_json(msg=f"the test completion returned no choices: {text[:300]}", **result)
    after = spec_decode_counters(scrape())
    delta = spec_decode_delta(before, after)
    delta["counters_exported"] = after["present"]
    result["spec_decode"] = delta
    tokens = result["completion"]["completion_tokens"]
    if delta["grew"]:
        result["summary"] = (
            f"{p['model']}: {tokens} tokens; speculative decoding acceptance rate "
            f"{delta['acceptance_rate'] * 100:.1f}%, mean acceptance length "
            f"{delta['mean_acceptance_length']:.2f} ({delta['drafts']} drafts, "
            f"{delta['draft_tokens']} draft tokens, {delta['accepted_tokens']} accepted)")
    else:
        result["summary"] = f"{p['model']}: {tokens} tokens; no speculative decoding observed"
    if p["expect_speculation"] and not delta["grew"]:
        found = ("/metrics exports no vllm:spec_decode_* counters" if not after["present"] else
                 f"the vllm:spec_decode_* counters stayed flat (drafts {before['drafts']:.0f} -> "
                 f"{after['drafts']:.0f}, draft tokens {before['draft_tokens']:.0f} -> "
                 f"{after['draft_tokens']:.0f})")
        module.fail_json(msg=(f"speculative decoding is configured but not happening: {found} "
                              f"during a {tokens}-token completion. Check the --speculative-config "
                              f"in the unit and the drafter lines in the journal."), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
