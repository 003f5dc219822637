# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""vLLM's journal read back: why the server died, and what it is doing while it loads.

Stdlib only, Python 3.9+, no Ansible imports: modules run this on the managed node
and plugins on the controller.
"""

from __future__ import annotations

import re
import typing as t


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
