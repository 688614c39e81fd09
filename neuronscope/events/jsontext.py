"""The JSON layer of trace reading: a Chrome-trace file's bytes, decompressed and decoded into
:class:`TraceEvent` records by :func:`stream` (at once for a document of at most
:data:`WHOLE_AT_ONCE_BYTES` that msgspec takes whole, else a chunk at a time) and by
:func:`whole` (layouts the streaming path does not take). Work per byte and memory are bounded:
one event (or a run of whitespace) is at most :data:`MAX_EVENT_BYTES`, a document read whole at
most :data:`MAX_WHOLE_BYTES`. msgspec skips the fields the reader does not read without making
objects of them or checking their text (invalid UTF-8 there is read past, where the standard
library's json refuses the document); what msgspec refuses (NaN, Infinity, out-of-range
numbers, lone surrogates) is read with the standard library.
"""

from __future__ import annotations

import itertools
import json
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from neuronscope.errors import TraceFormatError
from neuronscope.events.trace_records import FastTraceEvent, TraceEvent

__all__ = [
    "CHUNK_BYTES",
    "MAX_EVENT_BYTES",
    "MAX_WHOLE_BYTES",
    "WHOLE_AT_ONCE_BYTES",
    "Fallback",
    "blocks",
    "guard_io",
    "stream",
    "whole",
]


Ingest = Callable[[list[TraceEvent], str], None]
#: Called with the number of bytes of the file (compressed, where it is) read since its last call.
OnRead = Callable[[int], None]

_EVENT_LIST: msgspec.json.Decoder[list[Any]] = msgspec.json.Decoder(list[FastTraceEvent])
_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])


#: Bytes of decompressed JSON read and parsed at once. Big enough that per-parse overhead
#: vanishes, small enough that one chunk's Python objects (about 8x the text) stay a few tens
#: of megabytes whatever the file's size.
CHUNK_BYTES = 1 << 20
#: A document whose decompressed text is at most this is parsed in one go, as ``json.loads``
#: would: on the small traces most users open, the streaming path's buffer, copies and
#: decompression in chunks (fresh memory each, and each new page a fault) took a third of the
#: reading time. A few megabytes of text make a few tens of megabytes of objects at most.
WHOLE_AT_ONCE_BYTES = 4 << 20
#: How far back from a chunk's end to look for an event boundary; events are far smaller.
_BOUNDARY_WINDOW = 1 << 16
#: Candidate boundaries tried per chunk before giving up on the streaming path. A candidate fails
#: only where "}, {" appears inside a string (a C++ kernel name, say) or a nested value.
_BOUNDARY_TRIES = 8
#: Text before "traceEvents" beyond which the streaming path gives up (a foreign layout).
_HEAD_LIMIT = 64 << 20

#: JSON's whitespace: fewer characters than ``\s`` or ``str.strip`` take, so that no path
#: reads a file another path refuses.
_JSON_SPACE = b" \t\n\r"
_WS = rb"[ \t\n\r]*"
_EVENTS_KEY = re.compile(rb'"traceEvents"' + _WS + rb":" + _WS + rb"\[")
_EVENTS_NAME = re.compile(rb'"traceEvents"' + _WS + rb":")
_BOUNDARY = re.compile(rb"\}" + _WS + rb"," + _WS + rb"\{")
_ARRAY_START = re.compile(_WS + rb"\[")
_ARRAY_END = re.compile(_WS + rb"\]")
#: A list of objects ends: a candidate for the events' list's end.
_LIST_END = re.compile(rb"\}" + _WS + rb"\]")
#: Largest single event the streaming reader holds (a name or args of megabytes is no
#: profiler's): beyond it the file is refused rather than buffered without bound.
MAX_EVENT_BYTES = 16 << 20
#: A top-level value besides the events longer than this (as JSON text) is left out of the
#: metadata, named by its size: what torch and its plugins write there is a few kilobytes
#: (``deviceProperties``, ``distributedInfo``), and a hostile one of 21.5 M empty lists (a
#: 78 KB gzip) took 1.7 GB and 5 s to decode into Python objects nobody reads.
MAX_METADATA_VALUE_BYTES = 1 << 20
#: Largest document read whole (layouts the streaming reader does not take): bounds memory.
MAX_WHOLE_BYTES = 64 << 20


class Fallback(Exception):
    """The streaming reader met a layout it does not handle; parse the whole file instead."""


def blocks(path: Path, first: int = 0, on_read: OnRead | None = None) -> Iterator[bytes]:
    """The decompressed bytes of ``path`` (gzip or plain), in blocks of about CHUNK_BYTES, the
    first up to ``first`` bytes; ``on_read`` is told each read's size (a progress bar's steps)."""
    limit = max(first, CHUNK_BYTES)
    with open(path, "rb") as fh:
        read = fh.read if on_read is None else lambda size: _told(fh.read(size), on_read)
        data = read(limit)
        if data[:2] != b"\x1f\x8b":
            while data:
                yield data
                data = read(CHUNK_BYTES)
            return
        dec = zlib.decompressobj(wbits=31)
        fed = done = False
        while data:
            while data:
                fed = True
                out = dec.decompress(data, limit)
                limit = CHUNK_BYTES
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
            data = read(CHUNK_BYTES)
        if fed:
            tail = dec.flush()
            if tail:
                yield tail
            if not dec.eof:
                raise EOFError("the compressed data ends before its end-of-stream marker")


def _told(data: bytes, on_read: OnRead) -> bytes:
    on_read(len(data))
    return data


def stream(path: Path, name: str, ingest: Ingest, on_read: OnRead | None = None) -> dict[str, Any]:
    """Feed the events of ``path`` to ``ingest`` (at once up to WHOLE_AT_ONCE_BYTES where msgspec
    takes the document whole, else chunk by chunk); return the top-level keys. Raises
    :class:`Fallback` on a layout it does not take (nothing read is then kept)."""
    chunks = guard_io(path, name, first=WHOLE_AT_ONCE_BYTES, on_read=on_read)
    first = next(chunks, b"")
    second = next(chunks, None)
    if second is None:  # the whole document in one block
        try:
            events, meta = _decode(first)
        except ValueError:
            pass  # NaN, an odd layout, an event of the wrong shape: read as any file is, below
        else:
            _feed(events, name, ingest)
            return meta
    # The first block in chunks too: memory holds one chunk's events, whatever happens to it.
    view = memoryview(first)
    pieces: Iterator[bytes | memoryview] = (view[i : i + CHUNK_BYTES] for i in range(0, len(view), CHUNK_BYTES))
    # A bytearray, consumed from the front in place: bytes sliced and added would copy each
    # chunk several times over, a third of the reading time of a small file.
    buf = bytearray()
    head: bytes | None = None
    array = False  # the JSON Array Format: a bare list of events, no metadata
    searched = 0
    seen_any = False
    done = 0  # events decoded so far: where an event of the wrong shape is, in the document
    for block in itertools.chain(pieces, () if second is None else (second,), chunks):
        if not seen_any:
            seen_any = bool(bytes(block).strip(_JSON_SPACE))
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
                if not _top_level(head):
                    raise Fallback  # the key of a nested object, or inside a string
        if len(buf) >= CHUNK_BYTES:
            done += _cut(buf, name, ingest, done)
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
        done += _cut(buf, name, ingest, done, final=True)
    # What is left: the last events, "]", and the top-level keys written after the events.
    try:
        text = buf.decode("utf-8")
        last, end = json.JSONDecoder().raw_decode("[" + text)
    except ValueError:
        raise Fallback from None
    ingest(_records(last, name, done), name)
    rest = text[end - 1 :].encode("utf-8")
    if array:
        if rest.strip(_JSON_SPACE):
            raise Fallback
        return {}
    outside = head + b"]" + rest  # the document with "[]" for its events
    try:
        top = _metadata(_decode_outside(outside), outside, len(head) - 1)
    except (ValueError, RecursionError):
        raise Fallback from None
    if top is None:
        raise Fallback
    return top


def _metadata(doc: Any, text: bytes, start: int) -> dict[str, Any] | None:
    """The top-level keys, less "traceEvents", of a document whose events' list was cut out:
    ``text`` is the rest with "[]" in the list's place, at ``start``; ``doc`` is ``text``
    decoded. None where the list cut out is not the document's events.

    Where the name "traceEvents" is written once in ``text``, unescaped, and ``doc``'s
    top-level "traceEvents" is [], that name is the top-level key and the list is its value.
    Else the list must open in the top-level object (a nested key leaves a bracket open), and
    the object must name "traceEvents" once: JSON's last key wins, and a second one may be
    spelt with an escape (``"trace\\u0045vents"``)."""
    if not isinstance(doc, dict) or doc.pop("traceEvents", None) != []:
        return None
    if b"\\" in text or len(_EVENTS_NAME.findall(text)) > 1:
        if not _top_level(text[: start + 1]):
            return None
        try:
            keys = json.loads(text, object_pairs_hook=lambda pairs: [key for key, _ in pairs])
        except (ValueError, RecursionError):
            return None
        if keys.count("traceEvents") != 1:
            return None
    return doc


def _top_level(head: bytes) -> bool:
    """Whether ``head`` (the text up to the events' "[") opens the events of the top-level
    object: closed there, it is a whole object (a nested key leaves a bracket open)."""
    try:
        return isinstance(_decode_outside(head + b"]}"), dict)
    except (ValueError, RecursionError):
        return False


def _cut(buf: bytearray, name: str, ingest: Ingest, done: int, final: bool = False) -> int:
    """Parse the complete events at the front of ``buf`` and remove them from it; returns how
    many. ``done``: the events before them in the document."""
    start = max(0, len(buf) - _BOUNDARY_WINDOW)
    found = list(_BOUNDARY.finditer(buf, start))
    if not found and start:
        found = list(_BOUNDARY.finditer(buf))  # events bigger than the window
    if not found:
        return 0
    for m in reversed(found[-_BOUNDARY_TRIES:]):
        try:
            with memoryview(buf) as view:  # one copy of the events, none of the buffer
                events = _decode_events(b"".join((b"[", view[: m.start() + 1], b"]")))
        except msgspec.ValidationError as exc:
            # JSON, but an event of the wrong shape (a cut inside an event is no JSON at all).
            raise _malformed(name, exc, done) from None
        except ValueError:
            continue  # "}, {" inside a string or a nested value: try an earlier one
        ingest(events, name)
        del buf[: m.end() - 1]
        return len(events)
    if not final:
        raise Fallback
    return 0


def _records(parsed: list[Any], name: str, done: int) -> list[TraceEvent]:
    """The standard library's events as records; TraceFormatError for one of the wrong shape."""
    try:
        return msgspec.convert(parsed, list[TraceEvent])
    except msgspec.ValidationError as exc:
        raise _malformed(name, exc, done) from None


def _malformed(name: str, exc: msgspec.ValidationError, done: int) -> TraceFormatError:
    """The error for an event of the wrong shape, at its place in the document (msgspec
    counts from the start of the list it was given, after ``done`` events)."""
    where = re.sub(r"`\$\[(\d+)\]", lambda m: f"`traceEvents[{done + int(m.group(1))}]", str(exc), count=1)
    return TraceFormatError(f"{name}: malformed trace event: {where}")


def _decode_outside(data: bytes) -> Any:
    """The document around the events (with "[]" for them), as :func:`_decode_any` decodes it,
    but each top-level value over :data:`MAX_METADATA_VALUE_BYTES` of text is left out: the
    object's values are first taken as raw text (msgspec allocates nothing inside them)."""
    try:
        top = _TOP_LEVEL.decode(data)
    except ValueError:
        return _decode_any(data)  # not an object, or text only the standard library takes
    return {key: _bounded_value(value) for key, value in top.items()}


def _bounded_value(raw: msgspec.Raw) -> Any:
    """One top-level value: decoded, or a note of its size where it is too long to keep."""
    if len(raw) > MAX_METADATA_VALUE_BYTES:
        return f"left out: {len(raw):,} bytes of JSON"
    return _decode_any(bytes(raw))


def _decode_any(data: bytes) -> Any:
    """Any JSON value; with the standard library where msgspec refuses the text (NaN,
    Infinity, out-of-range numbers, lone surrogates)."""
    try:
        return msgspec.json.decode(data)
    except ValueError:
        return json.loads(data)


def _decode_events(data: bytes) -> list[TraceEvent]:
    """A JSON list of events; with the standard library where msgspec refuses the text (NaN,
    Infinity, lone surrogates). msgspec.ValidationError for an event of the wrong shape (or a
    number out of range in one), ValueError where neither takes the text."""
    try:
        return _EVENT_LIST.decode(data)
    except msgspec.ValidationError:
        raise  # JSON, but an event of the wrong shape
    except ValueError:
        return msgspec.convert(json.loads(data), list[TraceEvent])


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
    return _parse_whole(data, name, ingest)


def _parse_whole(data: bytes, name: str, ingest: Ingest) -> dict[str, Any]:
    """Parse a whole document (object or array layout) and feed its events to ``ingest``;
    returns the top-level keys. Raises TraceFormatError naming what is wrong."""
    if not data.strip(_JSON_SPACE):
        raise TraceFormatError(f"{name}: the file is empty")
    try:
        events, meta = _decode(data)
        stdlib = False
    except ValueError:  # not JSON as msgspec takes it, or not a trace of the usual shape
        events, meta = _decode_checked(data, name)
        stdlib = True
    del data
    _feed(events, name, ingest, stdlib=stdlib)
    return meta


def _feed(events: list[Any], name: str, ingest: Ingest, stdlib: bool = False) -> None:
    """Feed ``events`` to ``ingest`` a slice at a time, dropping each slice once read.
    ``stdlib``: the standard library's objects, made records slice by slice (so that memory
    holds one slice's records beside them, not a second copy of the document)."""
    step = 50_000
    done = 0
    while events:
        part = events[:step]
        del events[:step]
        ingest(_records(part, name, done) if stdlib else part, name)
        done += len(part)


def _decode(data: bytes) -> tuple[list[TraceEvent], dict[str, Any]]:
    """The usual document, decoded fast; ValueError for anything else."""
    if _ARRAY_START.match(data):
        return _EVENT_LIST.decode(data), {}
    span = _events_span(data)
    if span is not None:
        (a, b), meta = span
        try:
            return _EVENT_LIST.decode(memoryview(data)[a:b]), meta
        except ValueError:
            # Not the list's end after all, or a value of the wrong shape in a list that is not
            # the events (a first "traceEvents" a second one overrides): the whole document,
            # below, which raises the same error where the events are at fault.
            pass
    top = _TOP_LEVEL.decode(data)
    raw = top.pop("traceEvents", None)
    if raw is None:
        raise ValueError("no traceEvents")
    return _EVENT_LIST.decode(raw), {key: _bounded_value(value) for key, value in top.items()}


def _events_span(data: bytes) -> tuple[tuple[int, int], dict[str, Any]] | None:
    """Where the events' list is in the usual layout (the top-level "traceEvents" list,
    followed by a few top-level keys), and those other keys: the text around the list, a few
    kilobytes, decoded alone, so that the events' text is decoded once. None where no such
    place is found (the caller then decodes the whole document).

    The list's end is a "]" after a "}" (the last event), or right after its "[", for which
    the text before the list, "]" and the text after it make a JSON object; of those, the
    first. A later one closes a list of objects written after the events at the top level
    (``deviceProperties``, where a tool rewrote the trace): taking it made the events' text
    no JSON list, and the document was decoded twice more. An earlier one, inside the
    events, never makes an object: the events after it would follow the object's end."""
    m = _EVENTS_KEY.search(data)
    if m is None:
        return None
    start = m.end() - 1  # the list's "["
    lowest = max(start + 1, len(data) - _BOUNDARY_WINDOW)  # metadata after the events is far smaller
    ends = [mo.end() - 1 for mo in _LIST_END.finditer(data, lowest)]
    empty = _ARRAY_END.match(data, start + 1)
    if empty is not None:
        ends.insert(0, empty.end() - 1)
    for end in ends[-_BOUNDARY_TRIES:]:  # a few lists of objects at most follow the events
        text = data[: start + 1] + b"]" + data[end + 1 :]
        try:
            doc = _decode_outside(text)
        except (ValueError, RecursionError):
            continue  # not the list's end: the text around it does not close
        meta = _metadata(doc, text, start)
        if meta is not None:
            return (start, end + 1), meta
    return None


def _decode_checked(data: bytes, name: str) -> tuple[list[Any], dict[str, Any]]:
    """Any document, with the standard library (which also takes NaN, Infinity and lone
    surrogates): its events as parsed; TraceFormatError saying what is wrong where it is no
    trace."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise TraceFormatError(_json_error(name, data, exc)) from None
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
            if events is not None:
                raise TraceFormatError(
                    f"{name}: not a Chrome trace: its 'traceEvents' is a {type(events).__name__}, "
                    f"not a list of events; expected a file written by torch.profiler"
                )
            keys = ", ".join(list(map(str, doc))[:6]) or "none"
            raise TraceFormatError(
                f"{name}: not a Chrome trace: no 'traceEvents' list at the top level "
                f"(keys: {keys}); expected a file written by torch.profiler"
            )
    else:
        raise TraceFormatError(
            f"{name}: not a Chrome trace: the JSON ({len(data)} bytes) holds a "
            f"{type(doc).__name__}, not an object with 'traceEvents'"
        )
    return events, meta


def guard_io(path: Path, name: str, first: int = 0, on_read: OnRead | None = None) -> Iterator[bytes]:
    """:func:`blocks` with I/O and decompression errors turned into TraceFormatError."""
    try:
        yield from blocks(path, first, on_read)
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


