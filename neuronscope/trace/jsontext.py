"""The JSON layer of trace reading: a Chrome-trace file's bytes, decompressed and parsed a
chunk of events at a time (:func:`stream`), or whole for layouts the streaming path does not
take (:func:`whole`). Work per byte and memory are bounded: one event (or a run of whitespace)
is at most :data:`MAX_EVENT_BYTES`, a document read whole at most :data:`MAX_WHOLE_BYTES`.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError

__all__ = ["CHUNK_BYTES", "MAX_EVENT_BYTES", "MAX_WHOLE_BYTES", "Fallback", "blocks", "guard_io", "stream", "whole"]

Ingest = Callable[[list[Any], str], None]

_loads: Callable[[Any], Any]
try:  # optional (the "fast" extra): about twice as fast as the standard library here
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads


#: Bytes of decompressed JSON read and parsed at once. Big enough that per-parse overhead
#: vanishes, small enough that one chunk's Python objects (about 8x the text) stay a few tens
#: of megabytes whatever the file's size.
CHUNK_BYTES = 1 << 20
#: How far back from a chunk's end to look for an event boundary; events are far smaller.
_BOUNDARY_WINDOW = 1 << 16
#: Candidate boundaries tried per chunk before giving up on the streaming path. A candidate fails
#: only where "}, {" appears inside a string (a C++ kernel name, say) or a nested value.
_BOUNDARY_TRIES = 8
#: Text before "traceEvents" beyond which the streaming path gives up (a foreign layout).
_HEAD_LIMIT = 64 << 20

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_START = re.compile(rb"\s*\[")
#: Largest single event the streaming reader holds (a name or args of megabytes is no
#: profiler's): beyond it the file is refused rather than buffered without bound.
MAX_EVENT_BYTES = 16 << 20
#: Largest document read whole (layouts the streaming reader does not take): bounds memory.
MAX_WHOLE_BYTES = 64 << 20


class Fallback(Exception):
    """The streaming reader met a layout it does not handle; parse the whole file instead."""


def blocks(path: Path) -> Iterator[bytes]:
    """The decompressed bytes of ``path`` (gzip or plain), in blocks of about CHUNK_BYTES."""
    with open(path, "rb") as fh:
        data = fh.read(CHUNK_BYTES)
        if data[:2] != b"\x1f\x8b":
            while data:
                yield data
                data = fh.read(CHUNK_BYTES)
            return
        dec = zlib.decompressobj(wbits=31)
        fed = done = False
        while data:
            while data:
                fed = True
                out = dec.decompress(data, CHUNK_BYTES)
                data = dec.unconsumed_tail
                if dec.eof:
                    # Another gzip member may follow (concatenated files); anything else after
                    # the last member is ignored, as gzip itself does.
                    data = dec.unused_data
                    dec = zlib.decompressobj(wbits=31)
                    fed = False
                    if data[:2] != b"\x1f\x8b":
                        data, done = b"", True
                if out:
                    yield out
            if done:
                break
            data = fh.read(CHUNK_BYTES)
        if fed:
            tail = dec.flush()
            if tail:
                yield tail
            if not dec.eof:
                raise EOFError("the compressed data ends before its end-of-stream marker")


def stream(path: Path, name: str, ingest: Ingest) -> dict[str, Any]:
    """Feed the events of ``path`` to ``ingest`` a chunk at a time; return the top-level keys.
    Raises :class:`Fallback` on a layout it does not take (nothing then is to be kept)."""
    loads = _loads
    # A bytearray, consumed from the front in place: bytes sliced and added would copy each
    # chunk several times over, a third of the reading time of a small file.
    buf = bytearray()
    head: bytes | None = None
    array = False  # the JSON Array Format: a bare list of events, no metadata
    searched = 0
    seen_any = False
    for block in guard_io(path, name):
        seen_any = seen_any or not block.isspace()
        buf += block
        if head is None:
            m = _ARRAY_START.match(buf)
            if m is not None:
                head, array = b'{"traceEvents":[', True
                del buf[: m.end()]
            else:
                # Search only the new bytes (and a key's length before them): linear work.
                m = _EVENTS_KEY.search(buf, max(0, searched - 64))
                searched = len(buf)
                if m is None:
                    if len(buf) > _HEAD_LIMIT:
                        raise Fallback
                    continue
                head = bytes(buf[: m.end()])
                del buf[: m.end()]
        if len(buf) >= CHUNK_BYTES:
            _cut(buf, name, ingest)
            # Work per byte stays bounded: a buffer that holds no event boundary is
            # rescanned once per block, so its size is capped.
            if len(buf) > MAX_EVENT_BYTES:
                raise TraceFormatError(
                    f"{name}: an event (or a run of whitespace) is over "
                    f"{MAX_EVENT_BYTES >> 20} MiB; a torch.profiler trace has no such event"
                )
    if not seen_any:
        raise TraceFormatError(f"{name}: the file is empty")
    if head is None:
        raise Fallback
    if len(buf) > _BOUNDARY_WINDOW:
        _cut(buf, name, ingest, final=True)
    # What is left: the last events, "]", and the top-level keys written after the events.
    try:
        text = buf.decode("utf-8")
        events, end = json.JSONDecoder().raw_decode("[" + text)
    except ValueError:
        raise Fallback from None
    ingest(events, name)
    if array:
        if text[end - 1 :].strip():
            raise Fallback
        return {}
    try:
        meta = loads(head + b"]" + text[end - 1 :].encode("utf-8"))
    except ValueError:
        raise Fallback from None
    if not isinstance(meta, dict) or meta.get("traceEvents") != []:
        raise Fallback
    del meta["traceEvents"]
    return meta


def _cut(buf: bytearray, name: str, ingest: Ingest, final: bool = False) -> None:
    """Parse the complete events at the front of ``buf`` and remove them from it."""
    start = max(0, len(buf) - _BOUNDARY_WINDOW)
    found = list(_BOUNDARY.finditer(buf, start))
    if not found and start:
        found = list(_BOUNDARY.finditer(buf))  # events bigger than the window
    if not found:
        return
    for m in reversed(found[-_BOUNDARY_TRIES:]):
        try:
            with memoryview(buf) as view:  # one copy of the events, none of the buffer
                events = _loads(b"".join((b"[", view[: m.start() + 1], b"]")))
        except ValueError:
            continue  # "}, {" inside a string or a nested value: try an earlier one
        ingest(events, name)
        del buf[: m.end() - 1]
        return
    if not final:
        raise Fallback


def whole(path: Path, name: str, ingest: Ingest) -> dict[str, Any]:
    """Slow path: the whole document at once (odd layouts, and precise error messages)."""
    parts, size = [], 0
    for block in guard_io(path, name):
        size += len(block)
        if size > MAX_WHOLE_BYTES:
            raise TraceFormatError(
                f"{name}: over {MAX_WHOLE_BYTES >> 20} MiB of JSON in a layout the streaming "
                f"reader does not take (no 'traceEvents' list near the top); not a torch.profiler trace"
            )
        parts.append(block)
    data = b"".join(parts)
    del parts
    if not data.strip():
        raise TraceFormatError(f"{name}: the file is empty")
    try:
        doc = _loads(data)
    except ValueError:
        try:
            doc = json.loads(data)  # also takes NaN / Infinity, which orjson refuses
        except ValueError as exc:
            raise TraceFormatError(_json_error(name, data, exc)) from None
    size = len(data)
    del data
    if isinstance(doc, list):  # the JSON Array Format of Chrome traces
        events, meta = doc, {}
    elif isinstance(doc, dict):
        events = doc.pop("traceEvents", None)
        meta = doc
        if not isinstance(events, list):
            if doc.get("type") in ("ProfileResult", "Comparison") and "schema_version" in doc:
                raise TraceFormatError(
                    f"{name}: this is a neuronscope result, not a trace; open it with "
                    f"neuronscope.load() on its run directory"
                )
            keys = ", ".join(list(map(str, doc))[:6]) or "none"
            raise TraceFormatError(
                f"{name}: not a Chrome trace: no 'traceEvents' list at the top level "
                f"(keys: {keys}); expected a file written by torch.profiler"
            )
    else:
        raise TraceFormatError(
            f"{name}: not a Chrome trace: the JSON ({size} bytes) holds a "
            f"{type(doc).__name__}, not an object with 'traceEvents'"
        )
    step = 50_000
    while events:  # drop the parsed objects as they are read
        part = events[:step]
        del events[:step]
        ingest(part, name)
    return meta


def guard_io(path: Path, name: str) -> Iterator[bytes]:
    """:func:`blocks` with I/O and decompression errors turned into TraceFormatError."""
    try:
        yield from blocks(path)
    except FileNotFoundError:
        raise TraceFormatError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(f"{name}: is a directory, not a trace file") from None
    except EOFError as exc:
        raise TraceFormatError(f"{name}: truncated gzip data ({exc})") from None
    except (zlib.error, OSError) as exc:
        raise TraceFormatError(f"{name}: cannot read: {type(exc).__name__}: {exc}") from None


def _json_error(name: str, data: bytes, exc: ValueError) -> str:
    pos = getattr(exc, "pos", None)
    msg = getattr(exc, "msg", None) or str(exc)
    if isinstance(pos, int) and pos >= len(data.rstrip()) - 1:
        return f"{name}: truncated JSON: the text ends (at byte {len(data)}) before the trace does ({msg})"
    where = f" at byte {pos}" if isinstance(pos, int) else ""
    return f"{name}: not valid JSON{where}: {msg}"


