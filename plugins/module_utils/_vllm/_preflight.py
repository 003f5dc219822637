# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Pure logic around the vLLM serve preflight: which role variable set a flag, the refusal text,
and the unit's environment read back from its EnvironmentFile= lines.

The judging itself happens in _preflight_probe.py, inside the ml-env's interpreter. Stdlib
only, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

_ENV_LINE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.DOTALL)
_UNESCAPE = re.compile(r'\\([\\"`$])')

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


def unit_environment(lines: t.Iterable[str]) -> dict[str, str]:
    """The variables of EnvironmentFile= lines as the role writes them (`NAME="value"`).

    Double-quoted values lose the backslashes systemd_env_value put before \\ " ` $; single
    quotes keep their content as is; blank and # lines are skipped. A bad line raises
    ValueError naming its number only (the line may hold a secret).
    """
    found: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        line = str(line).strip()
        if not line or line.startswith(("#", ";")):
            continue
        match = _ENV_LINE.match(line)
        if not match:
            raise ValueError(f"unit_environment line {number} is not NAME=value "
                             "(the lines of the unit's EnvironmentFile)")
        value = match.group("value")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = _UNESCAPE.sub(r"\1", value[1:-1])
        elif len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        found[match.group("name")] = value
    return found
