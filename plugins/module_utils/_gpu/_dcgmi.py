# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Read the table ``dcgmi diag -r <level>`` prints, in both of its layouts.

The table has a name column and a result column under category rows (``|-----  Deployment
---+---|``, ``+-----  Hardware  ---+---+``). DCGM 3.x writes a test's result with the GPUs it
applies to (``Pass - All``, ``Pass - GPUs: 1, 2, 3``, and a continuation row ``Fail - GPU: 0``);
DCGM 4.x writes the test's result, then one continuation row per GPU (``GPU3: Fail``).
``Warning``, ``Info`` and ``Error`` rows carry prose that the table wraps at 46 columns, mid-word,
so continuation cells are joined as they are. Results: Pass, Fail, Warn, Skip, Not Run.
Pure functions over text; stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import re
import typing as t

RESULTS = ("pass", "fail", "warn", "skip", "not run")
MESSAGE_KINDS = ("Warning", "Info", "Error")
# dcgmi wraps prose at 45 characters, mid-word, in a result cell 46 wide: a blank at the end of
# a wrapped piece is text (it separates words), a blank after it is padding.
WRAP = 45

_CATEGORY_RE = re.compile(r"^[|+]-{3,}\s+(?P<name>[A-Za-z][A-Za-z /]*?)\s+-+\+")
_RESULT_RE = re.compile(r"^(?P<result>Pass|Fail|Warn|Skip|Not Run)(?:\s*-\s*(?P<scope>.*))?$", re.IGNORECASE)
_GPU_RESULT_RE = re.compile(r"^GPU\s*(?P<gpu>\d+)\s*:\s*(?P<result>Pass|Fail|Warn|Skip|Not Run)\s*$", re.IGNORECASE)
_SCOPE_GPUS_RE = re.compile(r"^GPUs?\s*:?\s*(?P<ids>[\d,\s]+)$", re.IGNORECASE)


class DcgmiError(Exception):
    """Output that is not a dcgmi diag table; the message says what was found instead."""


def _cells(line: str) -> tuple[str, str, str] | None:
    """(name, value, piece) of a table row; piece is the value as wrapped prose (see WRAP)."""
    if not line.startswith("|"):
        return None
    parts = line.split("|")
    if len(parts) < 3:
        return None
    closed = len(parts) > 3
    value = "|".join(parts[2:-1]) if closed else parts[2]
    value = value[1:] if value.startswith(" ") else value
    return parts[1].strip(), value.rstrip(), value[:WRAP] if closed else value


def _scope(scope: str | None) -> list[int] | str | None:
    """'All' -> 'all'; 'GPUs: 1, 2' / 'GPU: 0' / 'GPU 3' -> [ids]; nothing -> None."""
    if not scope:
        return None
    if scope.strip().lower() == "all":
        return "all"
    match = _SCOPE_GPUS_RE.match(scope.strip())
    if match:
        return [int(part) for part in re.split(r"[,\s]+", match.group("ids").strip()) if part]
    return None


def _apply_result(test: dict[str, t.Any], value: str) -> bool:
    """Record 'Pass - GPUs: 1, 2' or 'GPU3: Fail' on a test; False when value is neither."""
    gpu = _GPU_RESULT_RE.match(value.strip())
    if gpu:
        test["gpus"][int(gpu.group("gpu"))] = gpu.group("result").lower()
        return True
    result = _RESULT_RE.match(value.strip())
    if not result:
        return False
    status = result.group("result").lower()
    scope = _scope(result.group("scope"))
    if test["result"] is None:
        test["result"] = status
    if scope == "all":
        test["all"] = status
    elif scope:
        for index in scope:
            test["gpus"][index] = status
    if test["result"] != status and status in ("fail", "warn"):
        test["result"] = "fail" if "fail" in (test["result"], status) else status
    return True


def parse_diag(text: str) -> dict[str, t.Any]:
    """Metadata, tests (category, name, result, per-GPU results, messages) and loose messages.

    Raises DcgmiError when the text holds no dcgmi diag table row at all.
    """
    metadata: dict[str, str] = {}
    tests: list[dict[str, t.Any]] = []
    messages: list[dict[str, t.Any]] = []  # Error rows outside any test (Deployment in 3.x)
    category = None
    current: dict[str, t.Any] | None = None
    message: dict[str, t.Any] | None = None
    rows = 0
    for line in text.splitlines():
        line = line.rstrip()
        heading = _CATEGORY_RE.match(line)
        if heading:
            category, current, message = heading.group("name").strip(), None, None
            continue
        cells = _cells(line)
        if cells is None:
            continue
        name, value, piece = cells
        if name == "Diagnostic" and value.strip() == "Result":
            rows += 1
            continue
        rows += 1
        if category == "Metadata" and name:
            metadata[name] = value.strip()
            continue
        if name in MESSAGE_KINDS:
            message = {"kind": name, "text": piece.lstrip()}
            (current["messages"] if current is not None else messages).append(message)
            continue
        if not name:
            if current is not None and _apply_result(current, value):
                message = None
            elif message is not None:
                message["text"] += piece
            continue
        current = {"category": category, "name": name, "result": None, "all": None, "gpus": {}, "messages": []}
        message = None
        tests.append(current)
        if not _apply_result(current, value):
            current["result"] = value.strip().lower() or None
    if not rows:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        raise DcgmiError("expected a dcgmi diag table, found no table row; the output begins: %r" % first[:200])
    for item in messages + [m for test in tests for m in test["messages"]]:
        item["text"] = re.sub(r"\s+", " ", item["text"]).strip()
    return {"metadata": metadata, "tests": tests, "messages": messages}


def failing_gpus(test: dict[str, t.Any]) -> list[int]:
    """GPU indices the test names as failing."""
    return sorted(index for index, status in test["gpus"].items() if status == "fail")


def findings(parsed: dict[str, t.Any], label: t.Callable[[int], str] = lambda i: "GPU%d" % i,
             command: str = "dcgmi diag") -> tuple[list[str], list[str]]:
    """(failures, advisories) as sentences: Fail and Error fail, Warn/Skip/Not Run advise."""
    failures: list[str] = []
    advisories: list[str] = []
    for message in parsed["messages"]:
        target = failures if message["kind"] == "Error" else advisories
        target.append("%s reports: %s" % (command, message["text"]))
    for test in parsed["tests"]:
        where = "%s test '%s'" % (test["category"] or "uncategorised", test["name"])
        detail = "; ".join("%s: %s" % (m["kind"], m["text"]) for m in test["messages"] if m["kind"] != "Info")
        detail = (" (%s)" % detail) if detail else ""
        errors = [m["text"] for m in test["messages"] if m["kind"] == "Error"]
        if test["result"] == "fail" or errors:
            gpus = failing_gpus(test)
            if gpus:
                failures.append("%s: %s failed on %s%s" % (
                    command, where, ", ".join(label(index) for index in gpus), detail))
            elif test["all"] == "fail":
                failures.append("%s: %s failed on every GPU%s" % (command, where, detail))
            else:
                failures.append("%s: %s failed as a whole, naming no GPU%s" % (command, where, detail))
        elif test["result"] in ("warn", "skip", "not run"):
            advisories.append("%s: %s reads %s%s" % (command, where, test["result"].title(), detail))
        elif test["result"] != "pass":
            advisories.append("%s: %s has an unknown result %r" % (command, where, test["result"]))
    return failures, advisories
