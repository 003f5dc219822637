# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Is this node as the last full run left it? Digests of what the prepare roles converge.

Why: a site.yml run with nothing to change spent ~100 tasks a node asking each role whether its
work was done. The answer can be read once: at the end of a full run the node's managed
artefacts are read and their digests recorded; the next run reads them again, and when every
digest and the run's inputs are the same, the prepare roles have nothing to do.

What a digest holds, so that any change shows (and nothing is read that is not needed):
- a file or link: type, mode, owner, group, size, inode, modification and status-change times
  (ns), a link's target. Rewriting a file moves its times; replacing it moves its inode; a chmod
  or chown moves its status-change time, which only root can set back (by the clock).
- a folder: type, mode, owner, group, and every entry below it, walked without following links.
  Not a folder's own times: they move when Python drops a cache file in it, and its entries are
  in the digest anyway.
- a unit: what `systemctl show` says of its load, active and enablement states.
- a small file's content (/proc, where times say nothing) and a folder's listing.
Anything that cannot be read is unknown, and unknown is never "the same": the digest of an
unreadable part is None and a comparison with None is a difference.

Racily clean (as git calls it): a file changed within the timestamp granularity of the moment it
was read could change again without its times moving. record() waits until the newest status
change read is older than RACY_NS and reads again; a part still that new is not recorded.

Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import time
import typing as t

FORMAT = 2  # 2: a handoff
RACY_NS = 2_000_000_000
CONTENT_LIMIT = 1 << 20
KINDS = ("tree", "path", "unit", "content", "listing")
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "UnitFileState", "FragmentPath", "DropInPaths")


class ConvergedError(Exception):
    """An artefact list or record this module cannot use (names the part and what was found)."""


class Unreadable(Exception):
    """A part that could not be read: unknown, never the same as anything."""


class Part(t.NamedTuple):
    """One artefact's digest (None: unreadable, `why` says why) and its newest status change."""

    name: str
    digest: t.Optional[str]
    why: str
    newest_ns: int


def part_name(artefact: t.Mapping[str, t.Any]) -> str:
    """'kind:target', the key of an artefact in a record; ConvergedError for a bad one."""
    kind = artefact.get("kind")
    if kind not in KINDS:
        raise ConvergedError(f"artefact {dict(artefact)!r}: kind must be one of {', '.join(KINDS)}")
    target = artefact.get("name" if kind == "unit" else "path")
    if not isinstance(target, str) or not target or (kind != "unit" and not os.path.isabs(target)):
        raise ConvergedError(f"artefact {dict(artefact)!r}: needs "
                             f"{'a unit name' if kind == 'unit' else 'an absolute path'}")
    return f"{kind}:{target}"


def _entry_line(rel: str, info: os.stat_result, link: str = "") -> str:
    if stat.S_ISDIR(info.st_mode):
        return f"{rel}\0d\0{info.st_mode:o}\0{info.st_uid}\0{info.st_gid}"
    return (f"{rel}\0{stat.S_IFMT(info.st_mode):o}\0{info.st_mode:o}\0{info.st_uid}\0{info.st_gid}\0"
            f"{info.st_size}\0{info.st_ino}\0{info.st_mtime_ns}\0{info.st_ctime_ns}\0{link}")


def _lstat(path: str) -> t.Optional[os.stat_result]:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreadable(f"{path}: {exc.strerror or exc}") from None


def _readlink(path: str, info: os.stat_result) -> str:
    if not stat.S_ISLNK(info.st_mode):
        return ""
    try:
        return os.readlink(path)
    except OSError as exc:
        raise Unreadable(f"{path}: {exc.strerror or exc}") from None


def _read_path(path: str) -> t.Tuple[t.List[str], int]:
    """The path's own entry; for a link, the entry of what it resolves to as well."""
    info = _lstat(path)
    if info is None:
        return ["absent"], 0
    lines = [_entry_line(".", info, _readlink(path, info))]
    newest = 0 if stat.S_ISDIR(info.st_mode) else info.st_ctime_ns
    if stat.S_ISLNK(info.st_mode):
        real = os.path.realpath(path)
        target = _lstat(real)
        lines.append(_entry_line(real, target) if target is not None else f"{real}\0absent")
        if target is not None and not stat.S_ISDIR(target.st_mode):
            newest = max(newest, target.st_ctime_ns)
    return lines, newest


def _read_tree(root: str) -> t.Tuple[t.List[str], int]:
    """Every entry under root, sorted, without following links (a link is an entry)."""
    info = _lstat(root)
    if info is None:
        return ["absent"], 0
    if not stat.S_ISDIR(info.st_mode):
        return [_entry_line(".", info, _readlink(root, info))], info.st_ctime_ns
    lines = [_entry_line(".", info)]
    newest = 0
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        folder = os.path.join(root, rel_dir) if rel_dir else root
        try:
            with os.scandir(folder) as entries:
                found = sorted(entries, key=lambda entry: entry.name)
        except OSError as exc:
            raise Unreadable(f"{folder}: {exc.strerror or exc}") from None
        for entry in found:
            rel = os.path.join(rel_dir, entry.name) if rel_dir else entry.name
            try:
                entry_info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                raise Unreadable(f"{entry.path}: removed while it was read") from None
            except OSError as exc:
                raise Unreadable(f"{entry.path}: {exc.strerror or exc}") from None
            lines.append(_entry_line(rel, entry_info, _readlink(entry.path, entry_info)))
            if stat.S_ISDIR(entry_info.st_mode):
                pending.append(rel)
            else:
                newest = max(newest, entry_info.st_ctime_ns)
    return lines, newest


def _read_unit(name: str) -> t.Tuple[t.List[str], int]:
    try:
        done = subprocess.run(
            ["systemctl", "show", "--property=" + ",".join(UNIT_PROPERTIES), "--", name],
            capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unreadable(f"systemctl show {name}: {exc}") from None
    if done.returncode != 0:
        raise Unreadable(f"systemctl show {name}: exit {done.returncode}: {done.stderr.strip()}")
    return sorted(line for line in done.stdout.splitlines() if line), 0


def _read_content(path: str) -> t.Tuple[t.List[str], int]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(CONTENT_LIMIT + 1)
    except FileNotFoundError:
        return ["absent"], 0
    except OSError as exc:
        raise Unreadable(f"{path}: {exc.strerror or exc}") from None
    if len(data) > CONTENT_LIMIT:
        raise Unreadable(f"{path}: over {CONTENT_LIMIT} bytes, not a small file")
    return [hashlib.sha256(data).hexdigest()], 0


def _read_listing(path: str) -> t.Tuple[t.List[str], int]:
    try:
        return sorted(os.listdir(path)), 0
    except FileNotFoundError:
        return ["absent"], 0
    except OSError as exc:
        raise Unreadable(f"{path}: {exc.strerror or exc}") from None


_READERS: t.Dict[str, t.Callable[[str], t.Tuple[t.List[str], int]]] = {
    "tree": _read_tree, "path": _read_path, "unit": _read_unit,
    "content": _read_content, "listing": _read_listing,
}


def read_part(artefact: t.Mapping[str, t.Any]) -> Part:
    """One artefact's digest; an unreadable one is Part(digest=None, why=...)."""
    name = part_name(artefact)
    kind, target = name.split(":", 1)
    try:
        lines, newest = _READERS[kind](target)
    except Unreadable as exc:
        return Part(name, None, str(exc), 0)
    digest = hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()
    return Part(name, digest, "", newest)


def read(artefacts: t.Sequence[t.Mapping[str, t.Any]]) -> t.Dict[str, Part]:
    """Every artefact's part, by name (a name given twice is read once)."""
    parts: t.Dict[str, Part] = {}
    for artefact in artefacts:
        name = part_name(artefact)
        if name not in parts:
            parts[name] = read_part(artefact)
    return parts


class Verdict(t.NamedTuple):
    """converged: every part and the inputs as recorded; else `reasons` say what differs."""

    converged: bool
    reasons: t.List[str]


def compare(record: t.Optional[t.Mapping[str, t.Any]], inputs: str,
            parts: t.Mapping[str, Part]) -> Verdict:
    """The record against this run's inputs and a fresh read. No record, other inputs, another
    set of artefacts, an unreadable part or a changed one: not converged, each named."""
    if record is None:
        return Verdict(False, ["no record of a converged run on this node"])
    reasons = []
    if record.get("inputs") != inputs:
        reasons.append("the run's inputs changed (role options, the collection or the wheelhouse)")
    recorded = record.get("parts") or {}
    for name in sorted(set(recorded) - set(parts)):
        reasons.append(f"{name}: recorded but no longer read")
    for name, part in parts.items():
        if part.digest is None:
            reasons.append(f"{name}: unreadable ({part.why})")
        elif name not in recorded:
            reasons.append(f"{name}: not recorded")
        elif recorded[name] != part.digest:
            reasons.append(f"{name}: changed")
    return Verdict(not reasons, reasons)


def racy(parts: t.Mapping[str, Part], now_ns: int) -> t.List[str]:
    """Parts holding an entry whose status changed less than RACY_NS before now_ns."""
    return sorted(name for name, part in parts.items() if part.newest_ns > now_ns - RACY_NS)


def record_for(inputs: str, parts: t.Mapping[str, Part],
               handoff: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Dict[str, t.Any]:
    """The record to write; ConvergedError when a part is unreadable (unknown is not recorded).
    handoff: what the run derived from these inputs and this node (an env's name), handed back
    by a read that finds both the same, so that the next run need not derive it again."""
    unreadable = [f"{name} ({part.why})" for name, part in parts.items() if part.digest is None]
    if unreadable:
        raise ConvergedError("not recorded, unreadable: " + "; ".join(unreadable))
    return {"format": FORMAT, "inputs": inputs, "handoff": dict(handoff or {}),
            "parts": {name: part.digest for name, part in sorted(parts.items())}}


def same_record(old: t.Mapping[str, t.Any], new: t.Mapping[str, t.Any]) -> bool:
    """Equal but for the time it was written."""
    return ({k: v for k, v in old.items() if k != "recorded_at"}
            == {k: v for k, v in new.items() if k != "recorded_at"})


def settled_read(artefacts: t.Sequence[t.Mapping[str, t.Any]],
                 clock: t.Callable[[], int] = time.time_ns,
                 sleep: t.Callable[[float], None] = time.sleep) -> t.Dict[str, Part]:
    """read(), waiting out the racy window once when a part changed just now; ConvergedError
    when one is still racy after that (something keeps changing it)."""
    parts = read(artefacts)
    newest = max((part.newest_ns for part in parts.values()), default=0)
    if not racy(parts, clock()):
        return parts
    sleep(max(0.0, (newest + RACY_NS - clock()) / 1e9) + 0.05)
    parts = read(artefacts)
    still = racy(parts, clock())
    if still:
        raise ConvergedError("not recorded, changed while it was read: " + ", ".join(still))
    return parts


def load(path: str) -> t.Optional[t.Dict[str, t.Any]]:
    """The record at path, None when there is none; ConvergedError for one this cannot use."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConvergedError(f"{path}: cannot be read as a converged-run record ({exc})") from None
    if (not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("parts"), dict)
            or not isinstance(data.get("handoff"), dict)):
        raise ConvergedError(f"{path}: not a gpuserve.vllm converged-run record of format {FORMAT}")
    return data


def dumps(record: t.Mapping[str, t.Any]) -> str:
    """The record as written: sorted keys, one part per line, so that a diff reads."""
    return json.dumps(record, indent=1, sort_keys=True) + "\n"
