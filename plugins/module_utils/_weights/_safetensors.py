# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The size a safetensors file must have, read from its header alone (no hashing).

Layout (safetensors format): 8 bytes little-endian u64 header length N, then N bytes of JSON
(each tensor's ``data_offsets`` [begin, end) relative to the end of the header, plus an optional
``__metadata__``), then the data. A complete file is exactly ``8 + N + max(end)`` bytes, so a
truncated shard is found in milliseconds, before any hash is computed or vLLM starts loading.

Stdlib only, no Ansible imports: runs on the managed node.
"""

from __future__ import annotations

import json
import os
import struct
import typing as t

from ansible_collections.gpuserve.vllm.plugins.module_utils import _saferead as safe

# The safetensors library refuses headers above 100 MB (MAX_HEADER_SIZE in safetensors' Rust
# crate); a larger length field means the first 8 bytes are not a safetensors header at all.
MAX_HEADER_BYTES = 100_000_000


class HeaderError(ValueError):
    """The file is not a readable safetensors file (the message says what was found)."""


def expected_size(path: str) -> int:
    """The exact size the file must have according to its header; HeaderError if unreadable.
    Opened through _saferead (root checks the service user's directories): a link another user
    placed, a FIFO or a device is refused as unreadable."""
    try:
        with safe.opened(path, limit=2 ** 62) as (fd, _info, _deadline):
            return _from_header(path, os.fdopen(os.dup(fd), "rb"))
    except safe.Unreadable as exc:
        raise HeaderError(f"{path}: cannot read ({exc.why})") from None


def _from_header(path: str, handle: t.BinaryIO) -> int:
    with handle:
        head = handle.read(8)
        if len(head) < 8:
            raise HeaderError(f"{path}: {len(head)} bytes, shorter than the 8-byte header length "
                              f"of a safetensors file")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            raise HeaderError(f"{path}: header length field is {length} bytes (over the "
                              f"{MAX_HEADER_BYTES}-byte limit): not a safetensors file")
        raw = handle.read(length)
    if len(raw) < length:
        raise HeaderError(f"{path}: truncated inside its header ({8 + len(raw)} bytes, the header "
                          f"alone needs {8 + length})")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HeaderError(f"{path}: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise HeaderError(f"{path}: header is {type(header).__name__}, not a JSON object")
    return 8 + length + _data_end(path, header)


def _data_end(path: str, header: t.Mapping[str, t.Any]) -> int:
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and o >= 0 for o in offsets) or offsets[1] < offsets[0]):
            raise HeaderError(f"{path}: tensor {name!r} has data_offsets {offsets!r}, not [begin, end]")
        end = max(end, offsets[1])
    return end


def size_problem(path: str, size: int | None = None) -> str | None:
    """One sentence when the file's size disagrees with its header (None: consistent).

    ``size`` is the size already known from a stat, to avoid a second one.
    """
    try:
        want = expected_size(path)
    except HeaderError as exc:
        return str(exc)
    except OSError as exc:
        return f"{path}: cannot read ({exc.strerror})"
    have = os.path.getsize(path) if size is None else size
    if have < want:
        return (f"{path}: truncated: its header says {want} bytes, the file has {have} "
                f"({want - have} missing)")
    if have > want:
        return f"{path}: {have} bytes, {have - want} more than its header says ({want})"
    return None
