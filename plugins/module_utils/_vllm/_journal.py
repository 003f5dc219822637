# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""vLLM's journal read back: why the server died, and what it is doing while it loads.

vLLM runs an API server, an engine core and one worker per GPU; each prefixes every line it
logs with its process tag, level, date and source location, e.g.
`(Worker_TP3 pid=41003) ERROR 11-29 18:45:21 [multiproc_executor.py:671]   File "...", line 84`,
and the processes write at the same time, so their tracebacks interleave. Lines are parsed into
(process tag, level, message) first and tracebacks are read per process.

Stdlib only, Python 3.9+, no Ansible imports: modules run this on the managed node
and plugins on the controller.
"""

from __future__ import annotations

import re
import typing as t

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# journalctl's short and short-iso outputs: "Nov 29 18:45:21 gpu01 vllm[812]: "
_JOURNAL = re.compile(r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?"
                      r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d|Z)?)"
                      r" \S+ [\w@.:-]+\[\d+\]: ")
# "(EngineCore_DP0 pid=123) " / "(Worker_TP3 pid=41003) " / "(VllmWorker rank=3 pid=456) "
_PROC_TAG = re.compile(r"^\((?P<tag>[^()]*\bpid=\d+)\)\s?")
# Tags some launchers add after the process tag: "[Stage-0] " (vllm-omni), "[rank0]: " (torch)
_EXTRA_TAG = re.compile(r"^\[(?:Stage-\d+|rank\d+)\]:?\s")
# "ERROR 11-29 18:45:21 [multiproc_executor.py:671] " (one space, then the message with its own
# indentation), "[v1/engine/core.py:936]", and the older "ERROR 07-24 08:26:01 x.py:226] ".
_LOG_PREFIX = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+"
                         r"\d\d:\d\d:\d\d(?:\.\d+)?\s+(?:\[?[^\s\]]*:\d+\]\s?)?")
_TB_HEADER = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?$')
_EXC_LINE = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)|Exception)"
    r"|(?:[a-z_]\w*\.)+[A-Z]\w*)(?::\s?(?P<msg>.*))?$")
_ARGPARSE = re.compile(r"^[\w .-]+: error: (?:unrecognized arguments|argument |the following arguments)")
_SYNTAX = ("SyntaxError", "IndentationError", "TabError")
_GENERIC = re.compile(r"Engine core initialization failed|See root cause above|"
                      r"WorkerProc initialization failed|See stack trace for root cause|"
                      r"EngineCore failed to start|Worker failed|Worker proc \S+ died|died unexpectedly|"
                      r"EngineDeadError")
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
# What an operator does about each recognised kind of death, first match wins.
_HINTS = (
    (re.compile(r"^(SyntaxError|IndentationError|TabError)\b"),
     "a Python file of the environment does not parse (an edited or patched vLLM file?): fix "
     "the file and line named, or reinstall vLLM and re-run its patches"),
    (re.compile(r"^(ImportError|ModuleNotFoundError)\b"),
     "a module is missing or does not match this vLLM: check the packages of the Python "
     "environment (ml_env) against the vLLM version"),
    (_OOM, "GPU memory ran out: lower vllm_server_gpu_memory_utilization or "
           "vllm_server_max_model_len, or free the GPUs (nvidia-smi)"),
    (_NCCL, "NCCL between the GPUs failed: check the driver, NCCL_P2P_DISABLE/NCCL_* settings "
            "in vllm_server_env and the GPU topology"),
    (re.compile(r"No valid attention backend|attention backend", re.IGNORECASE),
     "no attention kernel supports this GPU, dtype and KV-cache dtype: check "
     "vllm_server_kv_cache_dtype and the vLLM version for this GPU"),
    (re.compile(r": error: (unrecognized arguments|argument |the following arguments)"),
     "vllm serve refused its command line: check vllm_server_extra_flags and the role's flags "
     "against this vLLM version (vllm serve --help)"),
    (re.compile(r"ValidationError|validation error for"),
     "vLLM refused its configuration: the message names the config class and field"),
)


class Record(t.NamedTuple):
    """One journal line: process tag ('' when none), log level ('' when none), message."""

    index: int
    tag: str
    level: str
    text: str


def _strip_common(line: str) -> str:
    line = _ANSI.sub("", str(line)).rstrip("\n")
    if "\r" in line:  # tqdm redraws: keep the last non-empty frame
        frames = [f for f in line.split("\r") if f.strip()]
        line = frames[-1] if frames else ""
    return _JOURNAL.sub("", line.rstrip())


def parse_line(line: str, index: int = 0) -> Record:
    """Split a journal line into its process tag, level and message (indentation kept)."""
    line = _strip_common(line)
    tag = ""
    match = _PROC_TAG.match(line)
    if match:
        tag, line = match.group("tag"), line[match.end():]
    line = _EXTRA_TAG.sub("", line)
    level = ""
    match = _LOG_PREFIX.match(line)
    if match:
        level, line = match.group("level"), line[match.end():]
    return Record(index, tag, level, line)


def normalise_line(line: str) -> str:
    """A journal line without journald prefix, colour codes, process tags and tqdm redraws."""
    return _EXTRA_TAG.sub("", _PROC_TAG.sub("", _strip_common(line)))


def log_message(line: str) -> str:
    """The message part of a vLLM log record (tags, level, date and [file:line] removed)."""
    return parse_line(line).text.strip()


def _exception_detail(records: list[Record], start: int) -> list[str]:
    """Indented lines right after an exception line (pydantic's per-field errors)."""
    detail = []
    for record in records[start:start + 3]:
        text = record.text
        if not text.startswith((" ", "\t")) or _FRAME.match(text) or "errors.pydantic.dev" in text:
            break
        detail.append(text.strip())
    return detail


def _tracebacks(records: list[Record]) -> tuple[list[dict[str, t.Any]], set[int]]:
    """Every traceback of one process's records, and the indices of the lines they used."""
    found: list[dict[str, t.Any]] = []
    used: set[int] = set()
    i = 0
    while i < len(records):
        if records[i].text.strip() != _TB_HEADER:
            i += 1
            continue
        tb: dict[str, t.Any] = {"frames": [], "exception": None, "detail": [], "index": records[i].index}
        used.add(records[i].index)
        i += 1
        while i < len(records):
            text = records[i].text
            frame = _FRAME.match(text)
            if text.strip() == _TB_HEADER:
                break  # a new traceback began before this one ended
            used.add(records[i].index)
            if frame:
                tb["frames"].append(dict(frame.groupdict(), code=None))
            elif text.startswith((" ", "\t")) and tb["frames"]:
                code = text.strip()
                if tb["frames"][-1]["code"] is None and code and set(code) - set("^~ "):
                    tb["frames"][-1]["code"] = code
            elif _EXC_LINE.match(text.strip()) and not text.startswith((" ", "\t")):
                tb["exception"] = text.strip()
                tb["index"] = records[i].index
                tb["detail"] = _exception_detail(records, i + 1)
                i += 1
                break
            i += 1
        found.append(tb)
    return found, used


def _frames_before(records: list[Record], position: int, tag: str) -> list[dict[str, t.Any]]:
    """The frames right above an exception line whose traceback header is not in the lines read
    (the journal window began inside the traceback)."""
    block: list[str] = []
    for record in reversed(records[max(0, position - 200):position]):
        if record.tag != tag:
            continue
        if not (record.text.startswith((" ", "\t")) or _FRAME.match(record.text)):
            break
        block.insert(0, record.text)
    frames: list[dict[str, t.Any]] = []
    for text in block:
        frame = _FRAME.match(text)
        if frame:
            frames.append(dict(frame.groupdict(), code=None))
        elif frames and frames[-1]["code"] is None and set(text.strip()) - set("^~ "):
            frames[-1]["code"] = text.strip()
    return frames


def _describe(tb: dict[str, t.Any]) -> str:
    """`Type: message -- in file line N near `source`` for one traceback."""
    exc = tb["exception"] or "(traceback without a final line)"
    if tb["detail"]:
        exc = f"{exc}: {'; '.join(tb['detail'])}"
    frames = [f for f in tb["frames"] if not f["file"].startswith("<frozen")] or tb["frames"]
    if not frames:
        return exc
    last = frames[-1]
    code = f" near `{last['code']}`" if last["code"] else ""
    if exc.startswith(_SYNTAX) or last["func"] is None:
        return f"{exc} -- in {last['file']} line {last['line']}{code}"
    return f"{exc} -- raised in {last['file']}, line {last['line']}, in {last['func']}{code}"


def _events(records: list[Record]) -> list[dict[str, t.Any]]:
    """Exceptions (from tracebacks and loose exception lines) and argparse errors, in order."""
    groups: dict[str, list[Record]] = {}
    for record in records:
        groups.setdefault(record.tag, []).append(record)
    events: list[dict[str, t.Any]] = []
    used: set[int] = set()
    for tag, group in groups.items():
        tracebacks, group_used = _tracebacks(group)
        used |= group_used
        for tb in tracebacks:
            if tb["exception"]:
                events.append({"index": tb["index"], "tag": tag, "key": tb["exception"],
                               "text": _describe(tb)})
    for position, record in enumerate(records):
        text = record.text.strip()
        if record.index in used or record.level not in ("", "ERROR", "CRITICAL"):
            continue
        if record.text[:1] in (" ", "\t") and not _ARGPARSE.match(text):
            continue
        match = _EXC_LINE.match(text)
        if (match and match.group("msg")) or _ARGPARSE.match(text):
            tb = {"exception": text, "frames": _frames_before(records, position, record.tag),
                  "detail": _exception_detail(records, position + 1) if match else []}
            events.append({"index": record.index, "tag": record.tag, "key": text, "text": _describe(tb)})
    events.sort(key=lambda e: e["index"])
    return events


def extract_root_cause(raw_lines: t.Iterable[str], limit: int = 8) -> list[str]:
    """The lines that say why vLLM died, the first real exception first.

    The first specific exception (type, message, file, line, source line), then the other
    specific ones, CUDA out-of-memory and NCCL lines, and last the chain of vLLM's generic
    wrappers ("WorkerProc initialization failed", "Engine core initialization failed"). An
    exception every worker raised is named once, with the number of processes. Without any,
    the last ERROR records, then the last lines.
    """
    records = [parse_line(line, i) for i, line in enumerate(raw_lines)]
    causes: list[str] = []

    def add(text: str) -> None:
        text = text.strip()[:600]
        if text and not any(text in known for known in causes):
            causes.append(text)

    events = _events(records)
    seen: dict[str, dict[str, t.Any]] = {}
    for event in events:
        first = seen.setdefault(event["key"], dict(event, tags={event["tag"]}))
        first["tags"].add(event["tag"])
    unique = list(seen.values())
    for event in [e for e in unique if not _GENERIC.search(e["key"])]:
        count = len(event["tags"])
        add(event["text"] + (f" (raised in {count} processes)" if count > 1 else ""))
    logged = [r.text for r in records if not r.text.startswith((" ", "\t"))]  # no source lines
    for message in logged:
        if _OOM.search(message):
            add(message)
    for message in [m for m in logged if _NCCL.search(m)][-3:]:
        add(message)
    for event in [e for e in unique if _GENERIC.search(e["key"])]:
        add(event["text"])
    if not causes:
        for message in [r.text for r in records if r.level in ("ERROR", "CRITICAL")][-3:]:
            add(message)
    if not causes:
        for record in [r for r in records if r.text.strip()][-3:]:
            add(record.text)
    return causes[:limit]


def cause_hint(causes: t.Sequence[str]) -> str | None:
    """What to do about the first recognised kind of death among the causes, or None."""
    for cause in causes:
        for pattern, hint in _HINTS:
            if pattern.search(cause):
                return hint
    return None


def latest_meaningful_line(raw_lines: t.Iterable[str]) -> str | None:
    """The newest line an operator wants to see while vLLM loads (weights, KV cache, graphs).

    Known milestones win; without one, the newest log record that is not an access log.
    """
    meaningful: str | None = None
    fallback: str | None = None
    for raw in raw_lines:
        record = parse_line(raw)
        message = record.text.strip()
        if not message:
            continue
        if _MEANINGFUL.search(message) or _OOM.search(message) or _NCCL.search(message):
            meaningful = message
        elif record.level and "HTTP/1." not in message:
            fallback = message
    chosen = meaningful or fallback
    return chosen[:300] if chosen else None
