"""What failed, in a few lines, for the summary at the end of tests/run.sh.

CI shows only the tail of a run's output; without this the tail says "integration failed" and
nothing of which test or which molecule task. Usage:
    failure_digest.py junit <step.xml>       one line per failed or erroring test
    failure_digest.py ansible <molecule.log> the task and host of each fatal/failed result
"""

import re
import sys
import xml.etree.ElementTree as ET

WIDTH = 400


def _short(text):
    text = " ".join((text or "").split())
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."


def junit(path):
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            yield f"{bad.tag.upper()} {name}: {_short(bad.get('message') or bad.text)}"


# Ansible's default and yaml callbacks, with or without molecule's box drawing in front.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TASK_START = re.compile(r"^[\s│]*TASK \[")
_TASK = re.compile(r"^[\s│]*TASK \[(?P<task>[^\]]*)\]")
# At the start of a line: not a quoted result inside a nested run's printed stdout.
_BAD = re.compile(r"^[\s│]*(?P<what>fatal|failed): \[(?P<host>[^\]]+)\]")


def ansible(path):
    task = "?"
    with open(path, encoding="utf-8", errors="replace") as log:
        lines = _ANSI.sub("", log.read()).splitlines()
    for number, line in enumerate(lines):
        if _TASK_START.match(line):
            # molecule wraps a long task name onto the next line: join until its "]"
            joined = line + "".join(" " + more.strip(" │") for more in lines[number + 1:number + 3])
            found = _TASK.match(joined)
            task = found.group("task") if found else task
            continue
        bad = _BAD.match(line)
        if bad and not _ignored(lines, number):
            detail = " ".join(part.strip(" │") for part in lines[number:number + 6])
            yield f"{bad.group('what')} [{bad.group('host')}] TASK [{task}]: {_short(detail)}"


def _ignored(lines, number):
    """An ignore_errors result is followed by '...ignoring' before the next task or blank line."""
    for line in lines[number + 1:]:
        if "...ignoring" in line:
            return True
        if _TASK_START.match(line) or not line.strip(" │"):
            return False
    return False


def main(argv):
    kind, path = argv[1], argv[2]
    try:
        lines = list(junit(path) if kind == "junit" else ansible(path))
    except (OSError, ET.ParseError) as err:
        lines = [f"(no digest: {err})"]
    for line in lines[:20]:
        print(f"  {line}")
    if len(lines) > 20:
        print(f"  ... and {len(lines) - 20} more")


if __name__ == "__main__":
    main(sys.argv)
