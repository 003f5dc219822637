# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Pure logic behind the vllm_server role: flag rendering, systemd quoting, weight checks,
journal root-cause extraction, unit-death detection and spec-decode metrics.

Stdlib only, Python 3.9+, no Ansible imports: the modules run this on the managed node with
whatever interpreter is there, and the filter plugins run it on the controller.
"""

from __future__ import annotations

import json
import os
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
    the drafter only when given. `draft_tensor_parallel_size` is left out when empty: only the
    draft_model proposer uses it, EAGLE drafters run with the target's parallelism.
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
    if draft_tensor_parallel_size not in (None, ""):
        config["draft_tensor_parallel_size"] = int(draft_tensor_parallel_size)
    config.update(dict(extra or {}))
    return config


def is_loopback(host: str) -> bool:
    """True when binding `host` only exposes the server to this machine."""
    host = str(host).strip().strip("[]").lower()
    return host in ("localhost", "::1", "ip6-localhost") or host.startswith("127.")


# --------------------------------------------------------------------------------------------
# weights
# --------------------------------------------------------------------------------------------

INDEX_NAME = "model.safetensors.index.json"


def check_weights_dir(path: str) -> dict[str, t.Any]:
    """What vLLM needs in a checkpoint directory, as a list of problems (empty: fine).

    config.json present and non-empty; every shard named by model.safetensors.index.json
    present and non-empty; without an index, at least one non-empty *.safetensors file.
    """
    problems: list[str] = []
    shards: list[str] = []
    result: dict[str, t.Any] = {"path": path, "problems": problems, "shards": shards}
    if not os.path.isdir(path):
        problems.append(f"{path}: directory does not exist")
        return result

    def _size(name: str) -> int | None:
        full = os.path.join(path, name)
        return os.path.getsize(full) if os.path.isfile(full) else None

    size = _size("config.json")
    if size is None:
        problems.append(f"{os.path.join(path, 'config.json')}: missing")
    elif size == 0:
        problems.append(f"{os.path.join(path, 'config.json')}: empty")

    index_path = os.path.join(path, INDEX_NAME)
    if os.path.isfile(index_path):
        try:
            with open(index_path, encoding="utf-8") as handle:
                weight_map = json.load(handle).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise ValueError("no weight_map")
        except (ValueError, AttributeError) as exc:
            problems.append(f"{index_path}: unreadable index ({exc})")
            return result
        shards.extend(sorted(set(str(v) for v in weight_map.values())))
        for shard in shards:
            size = _size(shard)
            if size is None:
                problems.append(f"{os.path.join(path, shard)}: missing (named by {INDEX_NAME})")
            elif size == 0:
                problems.append(f"{os.path.join(path, shard)}: empty (named by {INDEX_NAME})")
    else:
        found = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
        shards.extend(found)
        if not found:
            problems.append(f"{path}: no {INDEX_NAME} and no *.safetensors file")
        for shard in found:
            if _size(shard) == 0:
                problems.append(f"{os.path.join(path, shard)}: empty")
    return result


# --------------------------------------------------------------------------------------------
# journal: root cause and progress
# --------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# "(EngineCore_DP0 pid=123) " / "(VllmWorker rank=3 pid=456) " / "(APIServer pid=7) "
_PROC_PREFIX = re.compile(r"^\([^()]*\bpid=\d+\)\s?")
# "INFO 11-29 19:20:01 [loader.py:123] " and "ERROR 11-29 19:20:01.123 [x.py:1] "
_LOG_PREFIX = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+[\d:.]+\s+(?:\[[^\]]*\]\s*)?"
)
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?$')
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)"
                       r"|[A-Za-z_][\w.]*\.[A-Z]\w*)(?::\s?(?P<msg>.*))?$")
_GENERIC_FAILURES = (
    "Engine core initialization failed",
    "See root cause above",
    "WorkerProc initialization failed",
    "Worker failed",
    "Worker proc ",
    "died unexpectedly",
)
_OOM = re.compile(r"(CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|"
                  r"No available memory for the cache blocks|cudaErrorMemoryAllocation|"
                  r"larger than the maximum number of tokens that can be stored in KV cache)",
                  re.IGNORECASE)
_NCCL = re.compile(r"(\bNCCL\b.*\b(error|WARN|timeout|timed out|failure|failed)\b|"
                   r"nccl(Internal|System|UnhandledCuda|Remote|InvalidUsage|InvalidArgument)Error|"
                   r"Watchdog caught collective operation timeout)", re.IGNORECASE)
_MEANINGFUL = re.compile(
    r"(Starting vLLM|vLLM API server version|Initializing a V1 LLM engine|"
    r"Starting to load model|Loading model|Loading weights|Loading safetensors|"
    r"Loading drafter|draft model|Model loading took|weights took|"
    r"Memory profiling|Available KV cache memory|GPU KV cache size|Maximum concurrency|"
    r"torch\.compile|Compiling a graph|Capturing CUDA graph|Graph capturing finished|"
    r"init engine|Started server process|Waiting for application startup|"
    r"Application startup complete|Uvicorn running|Resolved architecture|"
    r"Using max model len|Loading .*checkpoint)",
    re.IGNORECASE,
)


def normalise_line(line: str) -> str:
    """A journal line without colour codes, process prefix and carriage-return redraws."""
    line = _ANSI.sub("", str(line)).rstrip("\n")
    if "\r" in line:  # tqdm redraws: keep the last non-empty frame
        frames = [f for f in line.split("\r") if f.strip()]
        line = frames[-1] if frames else ""
    return _PROC_PREFIX.sub("", line.rstrip())


def log_message(line: str) -> str:
    """The message part of a vLLM log record (level, date and [file:line] removed)."""
    return _LOG_PREFIX.sub("", normalise_line(line)).strip()


def _tracebacks(lines: list[str]) -> list[dict[str, t.Any]]:
    """Every traceback in the lines: its frames and its final (exception) line."""
    found = []
    i = 0
    while i < len(lines):
        text = _LOG_PREFIX.sub("", lines[i])
        if text.strip() != "Traceback (most recent call last):":
            i += 1
            continue
        frames: list[dict[str, str]] = []
        i += 1
        exception = None
        syntax_detail: list[str] = []
        while i < len(lines):
            line = lines[i]
            frame = _FRAME.match(line)
            if frame:
                frames.append(frame.groupdict())
                syntax_detail = []
            elif line.startswith((" ", "\t")):
                syntax_detail.append(line.strip())
            elif line.strip() == "":
                pass
            elif line.strip() == "Traceback (most recent call last):":
                i -= 1  # a new traceback began before this one ended
                break
            elif _EXC_LINE.match(line.strip()):
                exception = line.strip()
                break
            # else: a log line of another process interleaved with the traceback; skip it
            i += 1
        found.append({"frames": frames, "exception": exception, "detail": syntax_detail})
        i += 1
    return found


def _describe_traceback(tb: dict[str, t.Any]) -> str:
    exc = tb["exception"] or "(traceback without a final line)"
    frames = tb["frames"]
    if not frames:
        return exc
    last = frames[-1]
    if exc.startswith(("SyntaxError", "IndentationError", "TabError")) or last["func"] is None:
        where = f"{last['file']} line {last['line']}"
        code = f" near `{tb['detail'][0]}`" if tb["detail"] else ""
        return f"{exc} -- in {where}{code}"
    return f"{exc} -- raised in {last['file']}, line {last['line']}, in {last['func']}"


def _is_generic(tb: dict[str, t.Any]) -> bool:
    exc = tb["exception"] or ""
    return any(marker in exc for marker in _GENERIC_FAILURES)


def extract_root_cause(raw_lines: t.Iterable[str], limit: int = 8) -> list[str]:
    """The lines that say why vLLM died, most important first.

    The last traceback's final line and the file it was raised in (or, when that traceback
    is vLLM's generic "Engine core initialization failed", the last specific one before it),
    SyntaxError locations, CUDA out-of-memory lines and NCCL errors. Falls back to the last
    ERROR records, then to the last lines.
    """
    lines = [normalise_line(line) for line in raw_lines]
    causes: list[str] = []

    def add(text: str) -> None:
        text = text.strip()[:500]
        if text and not any(text in known for known in causes):
            causes.append(text)

    tracebacks = _tracebacks(lines)
    specific = [tb for tb in tracebacks if not _is_generic(tb) and tb["exception"]]
    if specific:
        add(_describe_traceback(specific[-1]))
    for line in lines:
        message = log_message(line)
        if _OOM.search(message):
            add(message)
    nccl = [log_message(line) for line in lines if _NCCL.search(line)]
    for message in nccl[-3:]:
        add(message)
    if tracebacks and (not specific or tracebacks[-1] is not specific[-1]):
        add(_describe_traceback(tracebacks[-1]))
    if not causes:
        errors = [log_message(line) for line in lines
                  if _LOG_PREFIX.match(line) and _LOG_PREFIX.match(line).group("level")
                  in ("ERROR", "CRITICAL")]
        for message in errors[-3:]:
            add(message)
    if not causes:
        for line in [line for line in lines if line.strip()][-3:]:
            add(log_message(line))
    return causes[:limit]


def latest_meaningful_line(raw_lines: t.Iterable[str]) -> str | None:
    """The newest line an operator wants to see while vLLM loads (weights, KV cache, graphs).

    Known milestones win; without one, the newest log record that is not an access log.
    """
    meaningful: str | None = None
    fallback: str | None = None
    for raw in raw_lines:
        message = log_message(raw)
        if not message:
            continue
        if _MEANINGFUL.search(message) or _OOM.search(message) or _NCCL.search(message):
            meaningful = message
        elif _LOG_PREFIX.match(normalise_line(raw)) and "HTTP/1." not in message:
            fallback = message
    chosen = meaningful or fallback
    return chosen[:300] if chosen else None


# --------------------------------------------------------------------------------------------
# systemd unit state
# --------------------------------------------------------------------------------------------

UNIT_PROPERTIES = ("ActiveState", "SubState", "MainPID", "NRestarts", "ExecMainStatus",
                   "ExecMainCode", "Result", "ExecMainStartTimestampMonotonic", "LoadState")


def parse_systemctl_show(text: str) -> dict[str, str]:
    """`systemctl show -p A -p B` output (KEY=value lines) as a dict."""
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def _int(props: t.Mapping[str, str], key: str) -> int:
    try:
        return int(props.get(key) or 0)
    except ValueError:
        return 0


def unit_death(unit: str, baseline: t.Mapping[str, str], current: t.Mapping[str, str]) -> str | None:
    """Why the unit's process is gone since `baseline` was taken, or None while it lives."""
    active = current.get("ActiveState", "")
    sub = current.get("SubState", "")
    status = current.get("ExecMainStatus", "")
    code = current.get("ExecMainCode", "")
    exit_text = f" (main process exit status {status})" if status not in ("", "0") else ""
    if current.get("LoadState") == "not-found":
        return f"{unit} does not exist"
    restarts = _int(current, "NRestarts") - _int(baseline, "NRestarts")
    if restarts > 0:
        return (f"{unit} died and systemd restarted it {restarts} time(s){exit_text}; "
                f"now {active}/{sub}")
    if sub == "auto-restart":
        return f"{unit} died{exit_text}; systemd will restart it (state {active}/{sub})"
    if active == "failed":
        return f"{unit} failed{exit_text} (result {current.get('Result', '?')}, code {code or '?'})"
    if active in ("inactive", "deactivating"):
        return f"{unit} is not running (state {active}/{sub}){exit_text}"
    old_pid, new_pid = _int(baseline, "MainPID"), _int(current, "MainPID")
    if old_pid and new_pid != old_pid:
        return f"{unit} main process {old_pid} is gone (now pid {new_pid or 'none'}){exit_text}"
    return None


# --------------------------------------------------------------------------------------------
# /metrics
# --------------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+"
                     r"(?P<value>[-+]?(?:[0-9.]+(?:[eE][-+]?\d+)?|Inf|NaN))(?:\s+\d+)?$")
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')

SPEC_PREFIX = "vllm:spec_decode_"
SPEC_DRAFTS = SPEC_PREFIX + "num_drafts_total"
SPEC_DRAFT_TOKENS = SPEC_PREFIX + "num_draft_tokens_total"
SPEC_ACCEPTED = SPEC_PREFIX + "num_accepted_tokens_total"
SPEC_PER_POS = SPEC_PREFIX + "num_accepted_tokens_per_pos_total"


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition: name -> [(labels, value)], comments skipped."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = {m.group("key"): m.group("value") for m in _LABEL.finditer(match.group("labels") or "")}
        samples.setdefault(match.group("name"), []).append((labels, float(match.group("value"))))
    return samples


def spec_decode_counters(text: str) -> dict[str, t.Any]:
    """The spec-decode counters summed over engines/models; `present` False if none exported."""
    samples = parse_prometheus(text)

    def total(name: str) -> float:
        return sum(value for _labels, value in samples.get(name, []))

    per_pos: dict[str, float] = {}
    for labels, value in samples.get(SPEC_PER_POS, []):
        pos = labels.get("position", "?")
        per_pos[pos] = per_pos.get(pos, 0.0) + value
    return {
        "present": any(name in samples for name in (SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED)),
        "drafts": total(SPEC_DRAFTS),
        "draft_tokens": total(SPEC_DRAFT_TOKENS),
        "accepted_tokens": total(SPEC_ACCEPTED),
        "accepted_per_position": dict(sorted(per_pos.items(), key=lambda kv: _pos_key(kv[0]))),
    }


def _pos_key(pos: str) -> tuple[int, str]:
    return (int(pos), "") if pos.isdigit() else (1 << 30, pos)


def spec_decode_delta(before: t.Mapping[str, t.Any], after: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """Counter growth between two scrapes, with acceptance rate and mean acceptance length.

    acceptance rate = accepted / draft tokens; mean acceptance length = 1 + accepted / drafts
    (vLLM's own definitions). Rates are None when there was nothing to divide by.
    """
    drafts = after["drafts"] - before["drafts"]
    draft_tokens = after["draft_tokens"] - before["draft_tokens"]
    accepted = after["accepted_tokens"] - before["accepted_tokens"]
    per_pos = {}
    for pos, value in after.get("accepted_per_position", {}).items():
        grown = value - before.get("accepted_per_position", {}).get(pos, 0.0)
        per_pos[pos] = round(grown / drafts, 4) if drafts > 0 else None
    return {
        "drafts": int(drafts),
        "draft_tokens": int(draft_tokens),
        "accepted_tokens": int(accepted),
        "grew": drafts > 0 and draft_tokens > 0,
        "acceptance_rate": round(accepted / draft_tokens, 4) if draft_tokens > 0 else None,
        "mean_acceptance_length": round(1 + accepted / drafts, 4) if drafts > 0 else None,
        "per_position_acceptance_rate": per_pos,
    }


def format_duration(seconds: float) -> str:
    """12 -> '12s', 754 -> '12m34s', 3700 -> '1h01m40s' (progress lines)."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


# --------------------------------------------------------------------------------------------
# HTTP (stdlib; loopback by default, so proxies from the environment are ignored)
# --------------------------------------------------------------------------------------------


def http_request(url: str, *, method: str = "GET", body: t.Any = None, api_key: str | None = None,
                 timeout: float = 5.0) -> tuple[int | None, str]:
    """(status, text) of one request; status None with the error text when nothing answered."""
    import urllib.error
    import urllib.request

    data = None
    headers = {"Accept": "application/json, text/plain"}
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, str(reason)
