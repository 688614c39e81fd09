"""Bring your own trace: Chrome-trace files written by ``torch.profiler`` become results.

``tensorboard_trace_handler``, ``prof.export_chrome_trace`` and the Neuron profiler's
``export_trace`` all write the same Chrome-trace JSON. :func:`table_from_trace` reads one (or
several files of one run) into the :class:`~neuronscope.events.EventTable` that live captures
produce, and :func:`from_trace` runs it through :func:`~neuronscope.pipeline.build_result`, so
a trace file gets the same op table, regions and hints as a live capture.

What is read, by event category:

- ``cpu_op`` (ops) and ``user_annotation`` (``record_function`` ranges, which become regions);
  their GPU-side copies, ``gpu_user_annotation``, are skipped so nothing is counted twice.
- ``python_function`` frames (``with_stack=True``) and runtime calls (``cudaLaunchKernel`` ...)
  go to :attr:`EventTable.others`: children in the nesting, as in ``key_averages()`` (runtime
  calls are listed as ops there, Python frames are not). The innermost user frame around each
  op is kept as its location (``file:line``), for the hints.
- Device work: ``kernel``, ``gpu_memcpy``, ``gpu_memset`` (CUDA and ROCm) and ``privateuse1*``
  events (Neuron). Each is linked through its ``correlation`` argument to the runtime call that
  launched it (``cuda_runtime``, ``cuda_driver``, HIP, ``privateuse1_runtime`` ...), and its
  duration goes to the innermost ``cpu_op`` around that launch on the same (pid, tid) thread.
  Where the launch is missing, a kernel whose ``External id`` names a ``cpu_op`` goes to that op.
  Device time launched outside any op is kept as ``unattributed_device_ns``, never dropped.

Reading is a stream: the file is decompressed and parsed a few megabytes of events at a time,
so memory follows the events kept, not the JSON text. ``orjson`` is used when installed (the
``fast`` extra); the standard library's ``json`` otherwise.
"""

from __future__ import annotations

import itertools
import json
import operator
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Union

from .analysis.compile import promote_compiled_events
from .distributed import rank_entry, straggler_hints
from .errors import TraceFormatError
from .events import (
    IGNORED_NAMES,
    KIND_ANNOTATION,
    KIND_OP,
    KIND_PYTHON,
    KIND_RUNTIME,
    EventTable,
    gc_paused,
)
from .pipeline import build_result
from .result import ProfileResult

_loads: Callable[[Any], Any]
try:  # optional (the "fast" extra): about twice as fast as the standard library here
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

__all__ = ["TracePath", "find_trace_files", "from_trace", "table_from_trace"]

TracePath = Union[str, "os.PathLike[str]"]

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

# Category codes. Everything from _SKIP on carries no time of its own.
_OP, _ANN, _PY, _RUNTIME, _DEVICE, _SKIP, _SPAN = range(7)
_KNOWN_CATEGORIES = {
    "cpu_op": _OP,
    "operator": _OP,  # torch 1.8's name for cpu_op
    "user_annotation": _ANN,
    "python_function": _PY,
    "cuda_runtime": _RUNTIME,
    "cuda_driver": _RUNTIME,
    "runtime": _RUNTIME,
    "kernel": _DEVICE,
    "gpu_memcpy": _DEVICE,
    "gpu_memset": _DEVICE,
    "memcpy": _DEVICE,
    "memset": _DEVICE,
    "concurrent_kernel": _DEVICE,
    # TorchNeuron: operator dispatch (op's thread) and device execution (tid = stream id,
    # linked to the op by "External id" and a flow), as cudaLaunchKernel and a kernel.
    "privateuse1_runtime": _RUNTIME,
    "privateuse1_driver": _DEVICE,
    # The GPU-side copy of a record_function range: its time is the kernels' time, already
    # counted through them.
    "gpu_user_annotation": _SKIP,
    "trace": _SPAN,
}


def _classify(cat: Any) -> int:
    c = str(cat).lower()
    code = _KNOWN_CATEGORIES.get(c)
    if code is not None:
        return code
    if c.endswith(("_runtime", "_driver")):  # hip_runtime, privateuse1_runtime, xpu_runtime...
        return _RUNTIME
    if c.startswith("privateuse1"):
        return _DEVICE
    return _SKIP


_FRAME_NAME = re.compile(r"^(.+?)\((\d+)\): ")
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
_LIBRARY_ROOTS = frozenset({"torch", "neuronscope", "torchgen", "functorch", "torch_neuronx", "wrapt"})
_STDLIB_DIR = re.compile(r"/lib/python3\.\d+/(?!site-packages/|dist-packages/)")


def _user_location(name: str) -> str | None:
    """'file:line' of a ``python_function`` frame in user code, None for library frames.

    torch writes frames as ``path/file.py(LINE): func``, with the site-packages and stdlib
    directories cut from the path, so the first component tells torch, neuronscope and the
    stdlib from the user's code (a script named like a stdlib module, ``test.py``, is missed).
    """
    if name.startswith(("<built-in", "<frozen", "nn.Module:", "<string>")):
        return None
    m = _FRAME_NAME.match(name)
    if m is None:
        return None
    path = m.group(1).replace("\\", "/")
    if _STDLIB_DIR.search(path):  # an absolute path into the stdlib
        return None
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            path = path.rsplit(marker, 1)[1]  # as torch shortens it
            break
    first = path.lstrip("/").split("/", 1)[0]
    root = first.removesuffix(".py")
    if root in _LIBRARY_ROOTS or (root in _STDLIB and not path.startswith("/")):
        return None
    return f"{m.group(1)}:{m.group(2)}"


_UNSET = object()
_NO_ARGS: dict[str, Any] = {}


class _Fallback(Exception):
    """The streaming reader met a layout it does not handle; parse the whole file instead."""


def _blocks(path: Path) -> Iterator[bytes]:
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


class _Reader:
    """Reads trace files into one :class:`EventTable` (several files: one rank's captures)."""

    def __init__(self) -> None:
        self.table = EventTable()
        # Python frames and runtime calls: children in the nesting (they lower the self time
        # of the op around them, as in key_averages), never ops of their own.
        self.others = EventTable()
        self.exts: list[Any] = []  # "External id" per row (ops only), for the fallback link
        self.shapes: list[Any] = []
        self.locations: list[str | None] | None = None
        self.thread_ids: dict[tuple[Any, Any], int] = {}
        self.cat_codes: dict[Any, int] = {}
        self.location_cache: dict[str, str | None] = {}  # python_function name -> location
        self.name_cache: dict[str, str] = {}
        self.last_dims: dict[str, Any] = {}  # op name -> "Input Dims" of its last call
        self.files: list[str] = []
        self.metas: list[dict[str, Any]] = []
        self.wall_ns = 0
        self.saw_privateuse1 = False
        self.saw_hip = False
        self.linked_correlation = 0
        self.linked_external = 0
        self.unattributed_events = 0
        self.device_categories: set[str] = set()
        self._reset_file()

    # ---- per file --------------------------------------------------------------------------
    def _reset_file(self) -> None:
        self.runtime: dict[Any, tuple[int, int]] = {}  # correlation -> (thread, launch ns)
        self.dev_corr: list[Any] = []
        self.dev_ext: list[Any] = []
        self.dev_dur: list[int] = []
        self.frames: list[tuple[int, int, int, str]] = []  # (thread, start, end, location)
        self.raw_events = 0
        self.recognised = 0
        self.saw_span = False
        self.dev_first: int | None = None
        self.dev_last: int | None = None

    def _truncate(self, n: int, n_others: int) -> None:
        t, o = self.table, self.others
        for lst in (t.names, t.kinds, t.tids, t.starts, t.ends, t.device_ns, self.exts, self.shapes):
            del lst[n:]
        for lst in (o.names, o.kinds, o.tids, o.starts, o.ends, o.device_ns):
            del lst[n_others:]
        if self.locations is not None:
            del self.locations[n:]

    def read(self, path: Path) -> dict[str, Any]:
        """Add one file's events to the table; returns the file's top-level metadata."""
        name = str(path)
        base, base_others = len(self.table), len(self.others)
        self._reset_file()
        try:
            meta = self._stream(path, name)
        except _Fallback:
            self._truncate(base, base_others)
            self._reset_file()
            meta = self._whole(path, name)
        if self.recognised == 0 and not self.saw_span and "schemaVersion" not in meta:
            raise TraceFormatError(
                f"{name}: holds no torch.profiler events (no cpu_op, user_annotation, kernel or "
                f"PyTorch Profiler span); is it a Chrome trace written by torch.profiler?"
            )
        self._finish_file(base)
        self.files.append(name)
        self.metas.append(meta)
        return meta

    def _stream(self, path: Path, name: str) -> dict[str, Any]:
        loads = _loads
        buf = b""
        head: bytes | None = None
        seen_any = False
        for block in _guard_io(path, name):
            seen_any = seen_any or bool(block.strip())
            buf = buf + block if buf else block
            if head is None:
                m = _EVENTS_KEY.search(buf)
                if m is None:
                    if len(buf) > _HEAD_LIMIT:
                        raise _Fallback
                    continue
                head = buf[: m.end()]
                buf = buf[m.end() :]
            if len(buf) >= CHUNK_BYTES:
                buf = self._cut(buf, name)
        if not seen_any:
            raise TraceFormatError(f"{name}: the file is empty")
        if head is None:
            raise _Fallback
        if len(buf) > _BOUNDARY_WINDOW:
            buf = self._cut(buf, name, final=True)
        # What is left: the last events, "]", and the top-level keys written after the events.
        try:
            text = buf.decode("utf-8")
            events, end = json.JSONDecoder().raw_decode("[" + text)
        except ValueError:
            raise _Fallback from None
        self._ingest(events, name)
        try:
            meta = loads(head + b"]" + text[end - 1 :].encode("utf-8"))
        except ValueError:
            raise _Fallback from None
        if not isinstance(meta, dict) or meta.get("traceEvents") != []:
            raise _Fallback
        del meta["traceEvents"]
        return meta

    def _cut(self, buf: bytes, name: str, final: bool = False) -> bytes:
        """Parse the complete events at the front of ``buf``; return the rest."""
        start = max(0, len(buf) - _BOUNDARY_WINDOW)
        found = list(_BOUNDARY.finditer(buf, start))
        if not found and start:
            found = list(_BOUNDARY.finditer(buf))  # events bigger than the window
        if not found:
            return buf
        for m in reversed(found[-_BOUNDARY_TRIES:]):
            try:
                events = _loads(b"[" + buf[: m.start() + 1] + b"]")
            except ValueError:
                continue  # "}, {" inside a string or a nested value: try an earlier one
            self._ingest(events, name)
            return buf[m.end() - 1 :]
        if final:
            return buf
        raise _Fallback

    def _whole(self, path: Path, name: str) -> dict[str, Any]:
        """Slow path: the whole document at once (odd layouts, and precise error messages)."""
        data = b"".join(_guard_io(path, name))
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
            self._ingest(part, name)
        return meta

    # ---- the hot loop ----------------------------------------------------------------------
    def _ingest(self, events: list[Any], name: str) -> None:
        # The one loop that sees every event: locals only, one dict lookup per field, and the
        # rarer categories after the common ones.
        table = self.table
        names_append = table.names.append
        kinds_append = table.kinds.append
        tids_append = table.tids.append
        starts_append = table.starts.append
        ends_append = table.ends.append
        device_append = table.device_ns.append
        exts_append = self.exts.append
        others = self.others
        o_names, o_kinds, o_tids = others.names.append, others.kinds.append, others.tids.append
        o_starts, o_ends, o_device = others.starts.append, others.ends.append, others.device_ns.append
        shapes_append = self.shapes.append
        codes, thread_ids, runtime = self.cat_codes, self.thread_ids, self.runtime
        dev_corr, dev_ext, dev_dur, frames = self.dev_corr, self.dev_ext, self.dev_dur, self.frames
        ignored = IGNORED_NAMES
        locations = self.location_cache
        last_dims = self.last_dims
        intern_name = self.name_cache.setdefault
        dev_first, dev_last = self.dev_first, self.dev_last
        last_pid: Any = _UNSET
        last_tid: Any = _UNSET
        thread = -1
        recognised = 0
        e: Any = None
        try:
            for e in events:
                cat = e.get("cat")
                if cat is None:
                    continue
                code = codes.get(cat)
                if code is None:
                    code = codes[cat] = _classify(cat)
                    self._note_category(cat, code)
                if code >= _SKIP:
                    if code == _SPAN:
                        self.saw_span = True
                    continue
                dur = e.get("dur")
                if dur is None:  # not a complete ("X") event
                    continue
                recognised += 1
                ts = e["ts"]
                # Microseconds, as int or as float with nanosecond decimals, to integer ns.
                start = ts * 1000 if ts.__class__ is int else int(ts * 1000 + 0.5)
                dur_ns = dur * 1000 if dur.__class__ is int else int(dur * 1000 + 0.5)
                if code == _DEVICE:
                    args = e.get("args") or _NO_ARGS
                    dev_corr.append(args.get("correlation"))
                    dev_ext.append(args.get("External id"))
                    dev_dur.append(dur_ns)
                    if dev_first is None or start < dev_first:
                        dev_first = start
                    if dev_last is None or start + dur_ns > dev_last:
                        dev_last = start + dur_ns
                    continue
                pid = e.get("pid")
                tid = e.get("tid")
                if tid != last_tid or pid != last_pid:
                    last_pid, last_tid = pid, tid
                    thread = thread_ids.get((pid, tid), -1)
                    if thread < 0:
                        thread = thread_ids[(pid, tid)] = len(thread_ids)
                ev_name = e["name"]
                if code <= _ANN:  # cpu_op, user_annotation
                    if ev_name in ignored:
                        continue
                    ev_name = intern_name(ev_name, ev_name)  # one str per distinct name
                    names_append(ev_name)
                    tids_append(thread)
                    starts_append(start)
                    ends_append(start + dur_ns)
                    device_append(0)
                    args = e.get("args")
                    if args:
                        if code == _OP:
                            kinds_append(KIND_OP)
                            exts_append(args.get("External id"))
                        else:
                            kinds_append(KIND_ANNOTATION)
                            exts_append(None)
                        dims = args.get("Input Dims")
                        if dims is not None:
                            # Share one list between calls of an op with the shapes of its last
                            # call: loops repeat them, and shared lists keep memory low.
                            prev = last_dims.get(ev_name)
                            if prev is not None and prev == dims:
                                dims = prev
                            else:
                                last_dims[ev_name] = dims
                        shapes_append(dims)
                    else:
                        kinds_append(KIND_OP if code == _OP else KIND_ANNOTATION)
                        exts_append(None)
                        shapes_append(None)
                else:  # runtime call or Python frame: a child in the nesting, not an op
                    if code == _RUNTIME:
                        args = e.get("args")
                        if args:
                            corr = args.get("correlation")
                            if corr is not None:
                                runtime[corr] = (thread, start)
                        if ev_name.startswith("hip"):
                            self.saw_hip = True
                        kind = KIND_RUNTIME
                    else:
                        if ev_name in locations:
                            loc = locations[ev_name]
                        else:
                            loc = locations[ev_name] = _user_location(ev_name)
                        if loc is not None:
                            frames.append((thread, start, start + dur_ns, loc))
                        kind = KIND_PYTHON
                    if ev_name in ignored:
                        continue
                    o_names(intern_name(ev_name, ev_name))
                    o_kinds(kind)
                    o_tids(thread)
                    o_starts(start)
                    o_ends(start + dur_ns)
                    o_device(0)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            what = repr(e)
            if len(what) > 200:
                what = what[:200] + "..."
            raise TraceFormatError(
                f"{name}: malformed trace event ({type(exc).__name__}: {exc}): {what}"
            ) from None
        self.raw_events += len(events)
        self.recognised += recognised
        self.dev_first, self.dev_last = dev_first, dev_last

    def _note_category(self, cat: Any, code: int) -> None:
        c = str(cat).lower()
        if c.startswith("privateuse1"):
            self.saw_privateuse1 = True
        if code == _DEVICE:
            self.device_categories.add(str(cat))

    # ---- linking, once per file ------------------------------------------------------------
    def _rows_by_thread(self, base: int, kind: int, threads: Iterable[int]) -> dict[int, list[int]]:
        """This file's rows of one kind on each of ``threads``, parents first."""
        table = self.table
        rows: dict[int, list[int]] = {t: [] for t in threads}
        kinds, tids, starts, ends = table.kinds, table.tids, table.starts, table.ends
        for i in range(base, len(table)):
            if kinds[i] == kind:
                lst = rows.get(tids[i])
                if lst is not None:
                    lst.append(i)
        for lst in rows.values():
            lst.sort(key=lambda i: (starts[i] << 64) - ends[i])
        return rows

    def _finish_file(self, base: int) -> None:
        table = self.table
        n = len(table)
        starts, ends, device = table.starts, table.ends, table.device_ns
        # File span: first to last event of ops, annotations and device work.
        firsts = [v for v in (min(starts[base:], default=None), self.dev_first) if v is not None]
        lasts = [v for v in (max(ends[base:], default=None), self.dev_last) if v is not None]
        if firsts and lasts:
            self.wall_ns += max(lasts) - min(firsts)

        # Compiled code recorded as a range is an op (the pipeline makes it one too): the
        # kernels it launches are its own.
        promote_compiled_events(table)
        # Device events -> launches (by correlation), grouped by the launching thread.
        launches: dict[int, list[tuple[int, int]]] = {}
        orphans: list[int] = []  # device events whose launch found no op
        runtime = self.runtime
        dev_corr, dev_dur = self.dev_corr, self.dev_dur
        for k in range(len(dev_dur)):
            launch = runtime.get(dev_corr[k])
            if launch is None:
                orphans.append(k)
            else:
                launches.setdefault(launch[0], []).append((launch[1], k))
        if dev_dur:
            table.has_device = True
            table.device_event_count += len(dev_dur)

        launched_at: dict[int, tuple[int, int]] = {}  # orphan -> (thread, launch instant)
        if launches:
            per_thread = self._rows_by_thread(base, KIND_OP, launches)
            for t, items in launches.items():
                items.sort()
                for (when, k), i in zip(items, _innermost_open(per_thread[t], starts, ends, items)):
                    if i >= 0:
                        device[i] += dev_dur[k]
                        self.linked_correlation += 1
                    else:
                        orphans.append(k)
                        launched_at[k] = (t, when)

        if orphans:
            outside: dict[int, list[tuple[int, int]]] = {}
            by_ext: dict[Any, int] | None = None
            dev_ext = self.dev_ext
            for k in orphans:
                ext = dev_ext[k]
                # Old Kineto copies the correlation into "External id"; only a distinct value
                # names the op (as newer torch writes it).
                if ext is not None and ext != dev_corr[k]:
                    if by_ext is None:
                        by_ext = {}
                        exts = self.exts
                        for i in range(n - 1, base - 1, -1):
                            x = exts[i]
                            if x is not None:
                                by_ext[x] = i
                    i = by_ext.get(ext, -1)
                    if i >= 0:
                        device[i] += dev_dur[k]
                        self.linked_external += 1
                        continue
                table.unattributed_device_ns += dev_dur[k]
                self.unattributed_events += 1
                if k in launched_at:
                    t, when = launched_at[k]
                    outside.setdefault(t, []).append((when, k))
            # Launched outside any op (a fused optimizer's kernels, launched from C++) but
            # inside a range: the range's device time. It stays "outside any op" as well.
            if outside:
                ranges = self._rows_by_thread(base, KIND_ANNOTATION, outside)
                for t, items in outside.items():
                    items.sort()
                    for (_, k), i in zip(items, _innermost_open(ranges[t], starts, ends, items)):
                        if i >= 0:
                            device[i] += dev_dur[k]

        if self.frames:
            self._locate(base)
        table.raw_event_count += self.raw_events
        self._reset_file()

    def _locate(self, base: int) -> None:
        """Each op's innermost user ``python_function`` frame on its thread, as 'file:line'."""
        table = self.table
        n = len(table)
        if self.locations is None:
            self.locations = [None] * base
        self.locations.extend([None] * (n - len(self.locations)))
        locations = self.locations
        starts, ends, tids = table.starts, table.ends, table.tids
        frames_by_thread: dict[int, list[tuple[int, int, int, str]]] = {}
        for f in self.frames:
            frames_by_thread.setdefault(f[0], []).append(f)
        rows_by_thread: dict[int, list[int]] = {}
        for i in range(base, n):
            if tids[i] in frames_by_thread:
                rows_by_thread.setdefault(tids[i], []).append(i)
        for t, rows in rows_by_thread.items():
            frames = frames_by_thread[t]
            frames.sort(key=lambda f: (f[1], -f[2]))
            rows.sort(key=lambda i: starts[i])
            stack: list[tuple[int, int, int, str]] = []
            j, nf = 0, len(frames)
            for i in rows:
                s = starts[i]
                while j < nf and frames[j][1] <= s:
                    f = frames[j]
                    while stack and stack[-1][2] <= f[1]:
                        stack.pop()
                    stack.append(f)
                    j += 1
                while stack and stack[-1][2] < ends[i]:
                    stack.pop()
                if stack:
                    locations[i] = stack[-1][3]

    # ---- after all files -------------------------------------------------------------------
    def finish(self) -> EventTable:
        """Order rows by start (parents first), as a live capture has them; fill shapes."""
        table = self.table
        n = len(table)
        table.shapes = self.shapes if self.shapes.count(None) != n else []
        if self.locations is not None:
            self.locations.extend([None] * (n - len(self.locations)))
        keys = _order_keys(table.starts, table.ends)
        if any(map(operator.gt, keys, itertools.islice(keys, 1, None))):
            order = sorted(range(n), key=keys.__getitem__)
            for attr in ("names", "kinds", "tids", "starts", "ends", "device_ns"):
                lst = getattr(table, attr)
                lst[:] = [lst[i] for i in order]
            if table.shapes:
                table.shapes = [table.shapes[i] for i in order]
            if self.locations is not None:
                self.locations = [self.locations[i] for i in order]
        self.exts = []
        self.shapes = []
        table.others = self.others if len(self.others) else None
        return table


def _innermost_open(rows: list[int], starts: list[int], ends: list[int], instants: list[tuple[int, int]]) -> list[int]:
    """For each ``(instant, key)`` (in time order), the innermost of ``rows`` (one thread's
    events, parents first) open at that instant, or -1: one sweep with a stack."""
    out: list[int] = []
    stack: list[int] = []
    j, n = 0, len(rows)
    for when, _ in instants:
        # Open every row that starts at or before the instant...
        while j < n and starts[rows[j]] <= when:
            i = rows[j]
            while stack and ends[stack[-1]] <= starts[i]:
                stack.pop()
            stack.append(i)
            j += 1
        # ...close those that ended before it; the innermost still open holds it.
        while stack and ends[stack[-1]] < when:
            stack.pop()
        out.append(stack[-1] if stack else -1)
    return out


def _order_keys(starts: list[int], ends: list[int]) -> list[int]:
    """One integer per row that sorts by start, and for equal starts the longer (the parent)
    first: cheaper to build and compare than (start, -end) tuples."""
    return [(s << 64) - e for s, e in zip(starts, ends)]


def _guard_io(path: Path, name: str) -> Iterator[bytes]:
    """:func:`_blocks` with I/O and decompression errors turned into TraceFormatError."""
    try:
        yield from _blocks(path)
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


# ---- files and ranks -------------------------------------------------------------------------
_TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json")
_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)
_NAMED_TRACES = ("trace.json", "trace.json.gz", "pytorch_trace.json", "pytorch_trace.json.gz")


def find_trace_files(directory: TracePath) -> list[Path]:
    """The torch.profiler traces in ``directory``, sorted by name.

    First ``*.pt.trace.json[.gz]`` (what ``tensorboard_trace_handler`` writes), searched
    recursively; failing those, Neuron's and neuronscope's ``trace.json``,
    ``pytorch_trace.json`` and ``neuron_framework_trace_rank_*.json``.
    """
    root = Path(directory)
    found = sorted(p for p in root.rglob("*.pt.trace.json*") if p.name.endswith((".json", ".json.gz")))
    if not found:
        found = sorted(
            p
            for p in root.rglob("*.json*")
            if p.is_file()
            and (p.name in _NAMED_TRACES or re.fullmatch(r"neuron_framework_trace_rank_\d+\.json(\.gz)?", p.name))
        )
    return [p for p in found if p.is_file()]


def _stem(path: Path) -> str:
    """The default result name: the file's name less its suffixes, or for a generic name
    (``trace.json``, written into a run or session directory) that directory's name."""
    name = path.name
    if name in _NAMED_TRACES and path.resolve().parent.name:
        return path.resolve().parent.name
    for suffix in _TRACE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)] or name
    return name


def _peek_rank(path: Path) -> tuple[int | None, int | None]:
    """(rank, world_size) from ``distributedInfo`` in the file's first megabyte, if there."""
    try:
        head = b""
        for block in _blocks(path):
            head += block
            if len(head) >= 1 << 20:
                break
    except (OSError, EOFError, zlib.error):
        return None, None
    cut = head.find(b'"traceEvents"')
    if cut >= 0:
        head = head[:cut]
    at = head.find(b'"distributedInfo"')
    if at < 0:
        return None, None
    info = head[at:]
    rank = re.search(rb'"rank"\s*:\s*(\d+)', info)
    world = re.search(rb'"world_size"\s*:\s*(\d+)', info)
    return (int(rank.group(1)) if rank else None, int(world.group(1)) if world else None)


def _group_by_rank(files: Sequence[Path]) -> list[tuple[int, list[Path]]]:
    """Files grouped by rank: ``distributedInfo.rank``, else ``rank<N>`` in the file's or its
    directory's name (``neuron_framework_trace_rank_3.json``, neuronscope's ``..._rank3/``),
    else one rank per worker (``tensorboard_trace_handler`` names files
    ``<worker>.<ms>.pt.trace.json``; a fixed name such as ``trace.json`` is its directory's),
    numbered in name order after the known ranks."""
    known: dict[int, list[Path]] = {}
    unknown: dict[str, list[Path]] = {}
    for p in files:
        rank = _known_rank(p)
        if rank is None:
            worker = str(p.parent) if p.name in _NAMED_TRACES else p.name.split(".", 1)[0]
            unknown.setdefault(worker, []).append(p)
        else:
            known.setdefault(rank, []).append(p)
    nxt = max(known, default=-1) + 1
    for worker in sorted(unknown):
        known[nxt] = unknown[worker]
        nxt += 1
    return sorted(known.items())


def _known_rank(path: Path) -> int | None:
    """The rank a trace says it is: ``distributedInfo.rank``, else ``rank<N>`` in the file's or
    its directory's name; None when neither says."""
    rank, _ = _peek_rank(path)
    if rank is None:
        m = _RANK_IN_NAME.search(path.name) or _RANK_IN_NAME.search(path.parent.name)
        rank = int(m.group(1)) if m else None
    return rank


def _refuse_separate_runs(directory: Path, files: list[Path]) -> None:
    """A directory holding several run directories (neuronscope's, Neuron's) whose traces say
    nothing of a rank holds separate runs, not the ranks of one job: reading them together
    would add up unrelated captures. (A list of such files, given by hand, is read as ranks.)"""
    dirs = {p.parent for p in files if p.name in _NAMED_TRACES}
    if len(dirs) < 2 or any(_known_rank(p) is not None for p in files):
        return
    newest = max(dirs, key=lambda d: d.name)
    raise TraceFormatError(
        f"{directory}: {len(dirs)} run directories, and no trace says which rank it is: these "
        f"look like separate runs; pass one of them (the newest is {newest}), or a list of one "
        f"job's per-rank traces"
    )


def _resolve(path: TracePath | Sequence[TracePath]) -> tuple[list[Path], str]:
    """The trace files named by ``path`` (a file, a directory or a list), and a default name."""
    if isinstance(path, (str, os.PathLike)):
        p = Path(path)
        if p.is_dir():
            found = find_trace_files(p)
            if not found:
                raise TraceFormatError(
                    f"{p}: no torch.profiler trace files in this directory (looked for "
                    f"*.pt.trace.json[.gz], trace.json[.gz], pytorch_trace.json)"
                )
            _refuse_separate_runs(p, found)
            return found, p.resolve().name or "trace"
        if not p.exists():
            raise TraceFormatError(f"{p}: no such file or directory")
        return [p], _stem(p)
    try:
        paths = [Path(x) for x in path]
    except TypeError:
        raise TypeError(
            f"from_trace takes a path or a list of paths, got {type(path).__name__}"
        ) from None
    if not paths:
        raise TraceFormatError("from_trace got an empty list of trace files")
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(_resolve(p)[0])
        elif not p.exists():
            raise TraceFormatError(f"{p}: no such file or directory")
        else:
            files.append(p)
    return files, _stem(files[0])


# ---- public ----------------------------------------------------------------------------------
def _read(files: Sequence[Path]) -> tuple[EventTable, dict[str, Any]]:
    reader = _Reader()
    with gc_paused():
        for p in files:
            reader.read(p)
        table = reader.finish()
        table.processes = {i: key[0] for key, i in reader.thread_ids.items()}
        return table, _metadata(reader)


def _metadata(reader: _Reader) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for m in reader.metas:  # the first file's values win
        for k, v in m.items():
            meta.setdefault(k, v)
    dist_raw, devices_raw = meta.get("distributedInfo"), meta.get("deviceProperties")
    dist: dict[str, Any] = dist_raw if isinstance(dist_raw, dict) else {}
    devices: list[Any] = devices_raw if isinstance(devices_raw, list) else []
    names = [str(d["name"]) for d in devices if isinstance(d, dict) and d.get("name")]
    device_name = ", ".join(dict.fromkeys(names)) or None
    table = reader.table
    looks_neuron = any(w in (device_name or "").lower() for w in ("neuron", "trainium", "inferentia"))
    if reader.saw_privateuse1 or looks_neuron:
        backend = "neuron"
    elif table.has_device:
        backend = "cuda"
    else:
        backend = "cpu"
    platform = {"neuron": "neuron", "cpu": "cpu"}.get(backend) or ("rocm" if reader.saw_hip else "cuda")
    pids = sorted({k[0] for k in reader.thread_ids}, key=str)

    def _int(v: Any) -> int | None:
        try:
            return None if v is None else int(v)
        except (TypeError, ValueError):
            return None

    return {
        "files": list(reader.files),
        "backend": backend,
        "platform": platform,
        "device_name": device_name,
        "rank": _int(dist.get("rank")),
        "world_size": _int(dist.get("world_size")),
        "distributed_backend": dist.get("backend"),
        "host_name": meta.get("host_name"),
        "pids": pids,
        "threads": {i: key for key, i in reader.thread_ids.items()},
        "wall_ns": reader.wall_ns,
        "trace_events": table.raw_event_count,
        "device_events": table.device_event_count,
        "device_linked_by_correlation": reader.linked_correlation,
        "device_linked_by_external_id": reader.linked_external,
        "device_unattributed_events": reader.unattributed_events,
        "device_categories": sorted(reader.device_categories),
        "record_shapes": bool(table.shapes),
        "locations": reader.locations,
        "top_level": {k: v for k, v in meta.items() if k not in ("deviceProperties", "INFO")},
    }


def table_from_trace(path: TracePath | Sequence[TracePath]) -> tuple[EventTable, dict[str, Any]]:
    """Read a torch.profiler Chrome trace into an :class:`EventTable`, plus what the file says.

    ``path`` is a ``.json`` or ``.json.gz`` file, or a directory or list of files, which are
    then read into one table (use :func:`from_trace` to keep ranks apart). The metadata dict
    holds ``backend`` ("cuda", "neuron" or "cpu"), ``device_name``, ``rank``, ``world_size``,
    ``threads`` (table thread id to its ``(pid, tid)``), ``wall_ns``, ``locations`` (per row,
    the user's ``file:line`` where stacks were recorded, else None) and link counts.

    Raises :class:`TraceFormatError` for a missing, empty, truncated or non-trace file.
    """
    files, _ = _resolve(path)
    return _read(files)


def _result(table: EventTable, meta: dict[str, Any], name: str, hints: bool = True) -> ProfileResult:
    locations = meta.get("locations")
    result = build_result(
        table,
        name=name,
        backend=meta["backend"],
        wall_time_us=meta["wall_ns"] / 1e3,
        source="trace",
        hints=hints,
        extra={"locations": locations, "trace": {k: v for k, v in meta.items() if k != "locations"}},
    )
    result.device_name = meta.get("device_name")
    if meta.get("host_name"):
        result.host = str(meta["host_name"])
    if len(meta["pids"]) == 1 and isinstance(meta["pids"][0], int):
        result.pid = meta["pids"][0]
    result.artifacts["trace_files"] = list(meta["files"])
    if table.has_device and table.unattributed_device_ns:
        total = sum(d for d, kind in zip(table.device_ns, table.kinds) if kind == KIND_OP) + table.unattributed_device_ns
        share = 100.0 * table.unattributed_device_ns / total if total else 0.0
        result.notes.append(
            f"{share:.1f}% of device time ({meta['device_unattributed_events']} device events) "
            f"was launched outside any op"
        )
    return result


def from_trace(path: TracePath | Sequence[TracePath], name: str | None = None) -> ProfileResult:
    """Build a :class:`ProfileResult` from Chrome traces written by ``torch.profiler``.

    ``path`` is one trace file (``.json`` or ``.json.gz``, from ``export_chrome_trace``,
    ``tensorboard_trace_handler`` or the Neuron profiler's ``export_trace``), a directory of
    them, or a list of files. Several files are read as the ranks of one run (by
    ``distributedInfo.rank``, else ``rank<N>`` in the name, else one rank per worker); the
    result is rank 0's, with ``ranks`` holding one entry per rank (its wall time, op time and
    top op) and ``world_size`` set, as a live multi-process capture has them. Files of one
    rank (a schedule's successive captures) are read together.

    Device time comes from the kernels, copies and sets (or Neuron device events) linked to
    the op that launched them; time launched outside any op is kept as
    ``device_unattributed_us``. Raises :class:`TraceFormatError` naming the file and the
    problem for a missing, empty, truncated, malformed or non-trace file, or a directory with
    no traces.
    """
    files, default_name = _resolve(path)
    with gc_paused():
        return _from_files(files, name or default_name)


def _from_files(files: list[Path], label: str) -> ProfileResult:
    if len(files) == 1:
        table, meta = _read(files)
        result = _result(table, meta, label)
        result.rank, result.world_size = meta["rank"], meta["world_size"]
        return result

    groups = _group_by_rank(files)
    if len(groups) == 1:
        table, meta = _read(groups[0][1])
        result = _result(table, meta, label)
        result.rank, result.world_size = meta["rank"], meta["world_size"]
        if len(groups[0][1]) > 1:
            result.notes.append(f"{len(groups[0][1])} trace files of one rank read together")
        return result

    main_rank = groups[0][0]  # rank 0, or the lowest present
    entries: list[dict[str, Any]] = []
    main: ProfileResult | None = None
    worlds: set[int] = set()
    for rank, group in groups:  # one rank in memory at a time
        table, meta = _read(group)
        if meta["world_size"] is not None:
            worlds.add(meta["world_size"])
        # The other ranks need their totals only: no hint rules.
        res = _result(table, meta, label, hints=rank == main_rank)
        del table
        # "run_dir" names the rank's trace: `neuronscope show` opens it as it opens a run.
        entries.append(rank_entry(rank, res, run_dir=group[0]))
        if rank == main_rank:
            main = res
    assert main is not None
    main.rank = main_rank
    main.world_size = worlds.pop() if len(worlds) == 1 else len(groups)
    main.ranks = entries
    if main.world_size > len(groups):
        main.notes.append(f"traces of {len(groups)} of {main.world_size} ranks found")
    main.artifacts["trace_files"] = [str(p) for _, g in groups for p in g]
    found = straggler_hints(entries)
    if found:
        main.hints.extend(found)
        main.hints.sort(key=lambda h: h.est_saving_us, reverse=True)
    return main
