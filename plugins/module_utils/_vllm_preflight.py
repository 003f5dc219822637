# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Pure logic around the vLLM serve preflight: which role variable set a flag, and the refusal text.

The judging itself happens in _vllm_preflight_probe.py, inside the ml-env's interpreter. Stdlib
only, no Ansible imports.
"""

from __future__ import annotations

import typing as t

# Flags the role renders from several variables, or under another name.
_SPECIAL = {
    "--speculative-config": ("vllm_server_speculative_method / vllm_server_drafter_path / "
                             "vllm_server_num_speculative_tokens / vllm_server_speculative_extra"),
    "--model": "vllm_server_model_path",
}


def flag_variables(argv: t.Sequence[str], extra_flags: t.Iterable[str] = ()) -> dict[str, str]:
    """`--kv-cache-dtype` -> `vllm_server_kv_cache_dtype`, for every flag of a serve argv.

    A flag that came from vllm_server_extra_flags is named as that dict's key; the others follow
    the role's naming (`vllm_server_<option>`).
    """
    extra = set()
    for key in extra_flags:
        key = str(key)
        head, dot, tail = key.lstrip("-").partition(".")
        extra.add("--" + head.replace("_", "-") + dot + tail)
    names = dict(_SPECIAL)
    for arg in argv:
        arg = str(arg)
        if not arg.startswith("--") or arg in names:
            continue
        if arg in extra:
            names[arg] = f"vllm_server_extra_flags['{arg}']"
        else:
            names[arg] = "vllm_server_" + arg[2:].split(".")[0].replace("-", "_")
    return names


def refusal_message(result: t.Mapping[str, t.Any], host: str = "") -> str:
    """One message listing every problem with the variable(s), vLLM's words and the fix."""
    problems = list(result.get("problems") or [])
    where = f" on {host}" if host else ""
    lines = [f"vLLM {result.get('vllm_version', '?')}{where} would refuse this serve "
             f"configuration ({len(problems)} problem(s)); the running server was not touched:"]
    for problem in problems:
        lines.append(f"- {', '.join(problem['variables'])}: {problem['message']} "
                     f"Fix: {problem['fix']}.")
    return "\n".join(lines)
