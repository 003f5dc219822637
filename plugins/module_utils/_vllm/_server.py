# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Pure logic behind the vllm_server role's unit: `vllm serve` flag rendering and systemd quoting.

The rest lives beside it: _journal, _unit, _metrics, _http, _net, and ../_weights/_check (the
checkpoint directory).

Stdlib only, Python 3.9+, no Ansible imports: the modules run this on the managed node with
whatever interpreter is there, and the filter plugins run it on the controller.
"""

from __future__ import annotations

import json
import re
import typing as t

# --------------------------------------------------------------------------------------------
# systemd quoting
# --------------------------------------------------------------------------------------------

_BARE_WORD = re.compile(r"^[A-Za-z0-9_@./:,+=-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


class ServerConfigError(ValueError):
    """A variable the role cannot render safely; the message names it."""


def systemd_exec_quote(arg: t.Any) -> str:
    """Quote one argument for ExecStart= so systemd hands the process exactly `arg`.

    systemd unquotes ExecStart with C-style escapes, expands `$VAR` and `%` specifiers;
    doubling `$` and `%` and C-escaping inside double quotes makes any string literal.
    """
    text = str(arg)
    if any(ord(ch) < 32 and ch not in "\n\t\r" for ch in text) or "\x00" in text:
        raise ServerConfigError(f"argument {text!r} contains control characters")
    if text and _BARE_WORD.match(text):
        return text.replace("%", "%%")
    escaped = "".join(_C_ESCAPES.get(ch, ch) for ch in text)
    return '"' + escaped.replace("%", "%%").replace("$", "$$") + '"'


def systemd_exec_line(argv: t.Sequence[t.Any]) -> str:
    """The ExecStart= value for an argv list (first item: absolute path of the program)."""
    if not argv:
        raise ServerConfigError("empty command line")
    if not str(argv[0]).startswith("/"):
        raise ServerConfigError(f"the program {argv[0]!r} must be an absolute path")
    return " ".join(systemd_exec_quote(a) for a in argv)


def systemd_env_value(value: t.Any) -> str:
    """Quote a value for an EnvironmentFile= line (double-quoted, shell-style escapes)."""
    if isinstance(value, bool):
        value = "1" if value else "0"
    text = str(value)
    if "\x00" in text:
        raise ServerConfigError("environment value contains a NUL byte")
    for ch in ("\\", '"', "`", "$"):
        text = text.replace(ch, "\\" + ch)
    return '"' + text + '"'


def systemd_env_lines(env: t.Mapping[str, t.Any]) -> list[str]:
    """`NAME="value"` lines, sorted by name; None values are left out."""
    lines = []
    for name in sorted(env):
        if env[name] is None:
            continue
        if not _ENV_NAME.match(str(name)):
            raise ServerConfigError(f"{name!r} is not a valid environment variable name")
        lines.append(f"{name}={systemd_env_value(env[name])}")
    return lines


# --------------------------------------------------------------------------------------------
# vllm serve flags
# --------------------------------------------------------------------------------------------


def _flag_name(key: str) -> str:
    """`tensor_parallel_size` -> `--tensor-parallel-size`; dotted keys keep their tail.

    vLLM turns `_` into `-` only before the first dot: after it the key is the config field's
    own name (`--compilation-config.pass_config.fuse_allreduce_rms`).
    """
    key = str(key).strip()
    if not key:
        raise ServerConfigError("empty flag name")
    if key.startswith("-"):
        return key
    head, dot, tail = key.partition(".")
    return "--" + head.replace("_", "-") + dot + tail


def _is_dotted(flag: str) -> bool:
    return "." in flag.lstrip("-")


def _flag_value(value: t.Any) -> str:
    if isinstance(value, bool):  # only dotted flags get here: their values are JSON
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        # json.dumps always yields valid JSON, whatever quotes or backslashes the values hold.
        return json.dumps(value, sort_keys=False, separators=(", ", ": "))
    if isinstance(value, float):
        return repr(value)
    return str(value)


def serve_argv(executable: str, model: str, options: t.Mapping[str, t.Any],
               extra_flags: t.Mapping[str, t.Any] | None = None,
               subcommand: t.Sequence[str] = ("serve",)) -> list[str]:
    """`<executable> serve <model> --flag value ...` from ordered option mappings.

    True renders a bare flag, False/None/"" leaves it out, dicts and lists render as JSON, a
    list of strings under a key whose name ends in `[]` repeats the flag. `extra_flags`
    override `options` of the same flag (False there removes a flag the role would set).
    Dotted keys (`compilation_config.pass_config.fuse_allreduce_rms`) always carry a value,
    booleans as `true`/`false`: vLLM reads the word after a bare dotted flag as its value.
    """
    if not model:
        raise ServerConfigError("the model path is empty")
    merged: dict[str, t.Any] = {}
    for source in (options, extra_flags or {}):
        for key, value in source.items():
            merged[_flag_name(key)] = value
    argv = [str(executable), *subcommand, str(model)]
    for flag, value in merged.items():
        if value is None or value == "":
            continue
        if _is_dotted(flag):
            argv += [flag, _flag_value(value)]
        elif value is False:
            continue
        elif value is True:
            argv.append(flag)
        elif flag.endswith("[]"):
            for item in value if isinstance(value, (list, tuple)) else [value]:
                argv += [flag[:-2], _flag_value(item)]
        else:
            argv += [flag, _flag_value(value)]
    if "--enable-auto-tool-choice" in argv and "--tool-call-parser" not in argv:
        raise ServerConfigError(
            "vllm_server_enable_auto_tool_choice is true but vllm_server_tool_call_parser is "
            "empty: vLLM refuses --enable-auto-tool-choice without --tool-call-parser. Set "
            "vllm_server_tool_call_parser (kimi_k2 for Kimi-K2.5) or "
            "vllm_server_enable_auto_tool_choice: false")
    return argv


# Speculation methods whose proposer loads a separate drafter checkpoint (vLLM's
# SpeculativeConfig); ngram, suffix and mtp need none.
DRAFTER_METHODS = ("eagle", "eagle3", "medusa", "mlp_speculator", "draft_model")


def speculative_config(method: str | None, model: str | None, num_speculative_tokens: t.Any,
                       draft_tensor_parallel_size: t.Any = None,
                       extra: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any] | None:
    """The --speculative-config mapping, or None for no speculation.

    method `auto` means eagle3 with a drafter and no speculation without one; `none` or empty
    switches speculation off; any other method (eagle3, ngram, suffix, mtp...) is passed on, with
    the drafter only when given. `draft_tensor_parallel_size` is left out when empty or without a
    drafter: only the draft_model proposer uses it, EAGLE drafters run with the target's TP.
    """
    method = str(method or "").strip()
    if method == "auto":
        method = "eagle3" if model else ""
    if method in ("", "none", "None"):
        return None
    config: dict[str, t.Any] = {"method": method}
    if model:
        config["model"] = str(model)
    elif method in DRAFTER_METHODS:
        raise ServerConfigError(
            f"vllm_server_speculative_method is {method!r}, which needs a drafter, and "
            "vllm_server_drafter_path is empty: set the drafter's directory, or choose a method "
            "without one (ngram, suffix) or 'none'")
    try:
        tokens = int(num_speculative_tokens)
    except (TypeError, ValueError):
        raise ServerConfigError(
            f"num_speculative_tokens must be a positive integer, got {num_speculative_tokens!r}"
        ) from None
    if tokens < 1:
        raise ServerConfigError(f"num_speculative_tokens must be >= 1, got {tokens}")
    config["num_speculative_tokens"] = tokens
    if model and draft_tensor_parallel_size not in (None, ""):  # a drafter's own TP
        config["draft_tensor_parallel_size"] = int(draft_tensor_parallel_size)
    config.update(dict(extra or {}))
    return config
