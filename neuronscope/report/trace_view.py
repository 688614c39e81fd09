"""What the report's pictures need from a run's saved trace: a timeline and memory over time.

``result.json`` holds totals; the timeline (which op ran when, on which thread or stream, in
which module) and the memory curve (``profile_memory``'s allocation records) are in the trace
the run saved. :func:`read_trace_view` reads that file once, bounded (a file over
:data:`MAX_TRACE_BYTES` is not read; at most :data:`MAX_BARS` bars are kept, the longest), and
returns plain data for :mod:`neuronscope.report.pictures`.

Backward work runs outside every module call; the trace names, for each backward function
autograd ran, the sequence number of the forward op that made it (``args["Sequence number"]``),
which the forward op carries too: a backward op is coloured, and its allocations held, by the
module whose forward made it.
"""

from __future__ import annotations

import bisect
import gzip
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronscope.events.modules import BACKWARD_PREFIX, MODULE_RANGE_PREFIX
from neuronscope.events.table import KIND_ANNOTATION, KIND_DEVICE, KIND_OP, category_kind

__all__ = ["MAX_BARS", "MAX_TRACE_BYTES", "TraceView", "read_trace_view"]

#: Largest trace file read for the pictures (a bigger one gets the tables only, and a note).
MAX_TRACE_BYTES = 256 << 20
#: Bars drawn in the timeline: enough for a step of a large model, light enough for a browser.
MAX_BARS = 6000
#: Module nesting levels drawn as lanes of their own (deeper modules colour the ops instead).
MODULE_LANES = 4
#: Allocations named as the peak's holders.
TOP_HOLDERS = 8


@dataclass
class TraceView:
    """Bars (``lane``, start and length in us from the capture's start, name, colour key,
    module), lanes in display order, memory series per device, the peak and its holders."""

    bars: list[dict[str, Any]] = field(default_factory=list)
    lanes: list[str] = field(default_factory=list)
    left_out: int = 0
    memory: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    peak: dict[str, Any] | None = None
    note: str | None = None


def _trace_file(run_dir: str | Path) -> Path | None:
    for name in ("trace.json", "trace.json.gz"):
        path = Path(run_dir) / name
        if path.is_file():
            return path
    return None


def _load(path: Path) -> Any:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        return json.load(fh)


def read_trace_view(run_dir: str | Path | None, types: dict[str, str] | None = None) -> TraceView | None:
    """The timeline and memory of the run's trace, or None where it has no readable trace.
    ``types`` maps module names to their classes (the ops' colours)."""
    if not run_dir:
        return None
    path = _trace_file(run_dir)
    if path is None:
        return None
    try:
        if path.stat().st_size > MAX_TRACE_BYTES:
            return TraceView(note=f"the trace is over {MAX_TRACE_BYTES >> 20} MB: no timeline drawn (open it in Perfetto)")
        doc = _load(path)
    except (OSError, ValueError, EOFError) as err:
        return TraceView(note=f"the trace could not be read for the timeline ({type(err).__name__})")
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return None
    return _view(events, types or {})


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _view(events: list[Any], types: dict[str, str]) -> TraceView:
    ops: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
    mods: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
    regions: list[tuple[float, float, str]] = []
    device: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
    memory_raw: list[dict[str, Any]] = []
    numbered: list[tuple[Any, float, float, int]] = []  # forward ops autograd numbered
    backward: dict[tuple[Any, float, float], int] = {}  # backward functions: their number
    for e in events:
        if not isinstance(e, dict):
            continue
        name = e.get("name")
        ts = _num(e.get("ts"))
        if not isinstance(name, str) or ts is None:
            continue
        if e.get("ph") == "i" and name == "[memory]" and isinstance(e.get("args"), dict):
            memory_raw.append({"ts": ts, "tid": (e.get("pid"), e.get("tid")), **e["args"]})
            continue
        dur = _num(e.get("dur"))
        if e.get("ph") != "X" or dur is None or dur < 0:
            continue
        kind = category_kind(str(e.get("cat", "")))
        thread = (e.get("pid"), e.get("tid"))
        if name.startswith(MODULE_RANGE_PREFIX) and kind in (KIND_OP, KIND_ANNOTATION):
            mods[thread].append((ts, ts + dur, name[len(MODULE_RANGE_PREFIX):]))
        elif kind == KIND_OP:
            ops[thread].append((ts, ts + dur, name))
            seq = _sequence(e)
            if seq is not None:
                if name.startswith(BACKWARD_PREFIX):
                    backward[(thread, ts, ts + dur)] = seq
                elif not (e.get("args") or {}).get("Fwd thread id"):
                    numbered.append((thread, ts, ts + dur, seq))
        elif kind == KIND_ANNOTATION:
            regions.append((ts, ts + dur, name))
        elif kind == KIND_DEVICE:
            device[thread].append((ts, ts + dur, name))
    starts = [s for group in (*ops.values(), *mods.values(), *device.values(), regions) for s, _, _ in group]
    if not starts:
        return TraceView()
    t0 = min(starts)
    view = TraceView()
    bars: list[dict[str, Any]] = []
    for s, end, name in sorted(regions):
        bars.append(_bar("regions and steps", s - t0, end - s, name, "region", None))
    module_index = {t: _Nesting(v) for t, v in mods.items()}
    made_by = _backward_owners(module_index, numbered, backward)
    for thread in sorted(mods, key=str):
        for s, end, name, depth in module_index[thread].with_depth():
            if depth < MODULE_LANES:
                bars.append(_bar(f"modules, level {depth + 1}", s - t0, end - s, name, types.get(name, name), name))
    for thread, items in sorted(ops.items(), key=lambda kv: str(kv[0])):
        lane = f"CPU thread {thread[1]}"
        nest = module_index.get(thread)
        for s, end, name in _outermost(items):
            owner = nest.innermost(s, end) if nest else None
            later = made_by.get((thread, s, end)) if owner is None else None
            owner = owner or later
            bars.append(_bar(lane, s - t0, end - s, name, types.get(owner, owner) if owner else "outside modules", owner, later is not None))
    for thread, items in sorted(device.items(), key=lambda kv: str(kv[0])):
        lane = f"device {thread[0]} stream {thread[1]}"
        for s, end, name in items:
            bars.append(_bar(lane, s - t0, end - s, name, "device", None))
    if len(bars) > MAX_BARS:
        view.left_out = len(bars) - MAX_BARS
        bars = sorted(bars, key=lambda b: -b["dur"])[:MAX_BARS]
    view.bars = bars
    order = {"regions and steps": 0}
    view.lanes = sorted({b["lane"] for b in bars}, key=lambda lane: (order.get(lane, 1 if lane.startswith("modules") else 2), lane))
    if memory_raw:
        _memory(view, memory_raw, t0, module_index, ops, made_by)
    return view


def _bar(lane: str, start: float, dur: float, name: str, color: str, module: str | None, backward: bool = False) -> dict[str, Any]:
    return {"lane": lane, "start": start, "dur": dur, "name": name, "color": color, "module": module, "backward": backward}


def _sequence(e: dict[str, Any]) -> int | None:
    """The autograd sequence number the trace gives an op (None where it has none)."""
    seq = (e.get("args") or {}).get("Sequence number")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else None


def _backward_owners(
    modules: dict[Any, _Nesting], numbered: list[tuple[Any, float, float, int]], backward: dict[tuple[Any, float, float], int]
) -> dict[tuple[Any, float, float], str]:
    """Each backward function (thread, start, end) -> the module whose forward op has its
    sequence number. The trace's forward thread id is not its ``tid``, so the number alone
    links them: a number that forward ops of two modules carry (two forward threads) links none."""
    if not backward or not modules:
        return {}
    owner_of: dict[int, set[str]] = defaultdict(set)
    for thread, s, end, seq in numbered:
        nest = modules.get(thread)
        owner = nest.innermost(s, end) if nest else None
        if owner is not None:
            owner_of[seq].add(owner)
    return {key: next(iter(owners)) for key, seq in backward.items() if len(owners := owner_of.get(seq, set())) == 1}


def _outermost(items: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """The ops not nested in another op of the thread (the timeline's bars do not overlap)."""
    out = []
    end = float("-inf")
    for s, e, name in sorted(items, key=lambda t: (t[0], -t[1])):
        if s >= end:
            out.append((s, e, name))
            end = e
    return out


class _Nesting:
    """A thread's module calls, for the innermost call around a moment or an interval."""

    def __init__(self, ranges: list[tuple[float, float, str]]) -> None:
        self.ranges = sorted(ranges, key=lambda t: (t[0], -t[1]))
        self.starts = [r[0] for r in self.ranges]

    def with_depth(self) -> list[tuple[float, float, str, int]]:
        out = []
        stack: list[float] = []
        for s, e, name in self.ranges:
            while stack and stack[-1] <= s:
                stack.pop()
            out.append((s, e, name, len(stack)))
            stack.append(e)
        return out

    def innermost(self, s: float, e: float) -> str | None:
        """The latest-starting call that holds [s, e] (calls nest, so it is the innermost)."""
        found = self.around(s, e)
        return found[2] if found else None

    def around(self, s: float, e: float) -> tuple[float, float, str] | None:
        """:meth:`innermost`'s call as (start, end, name)."""
        k = bisect.bisect_right(self.starts, s)
        for j in range(k - 1, max(k - 64, 0) - 1, -1):  # a few back: calls nest shallowly
            rs, re_, _name = self.ranges[j]
            if rs <= s and e <= re_:
                return self.ranges[j]
        return None


def _memory(
    view: TraceView,
    raw: list[dict[str, Any]],
    t0: float,
    modules: dict[Any, _Nesting],
    ops: dict[Any, list[tuple[float, float, str]]],
    made_by: dict[tuple[Any, float, float], str],
) -> None:
    """Total allocated over time per device, the peak, and what was live at the peak by where
    it was allocated (module and op)."""
    raw.sort(key=lambda r: r["ts"])
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    live: dict[str, dict[Any, dict[str, Any]]] = defaultdict(dict)
    best: dict[str, Any] = {"bytes": -1.0}
    for r in raw:
        dev = "CPU" if r.get("Device Type") == 0 else f"device {r.get('Device Id')}"
        total = _num(r.get("Total Allocated"))
        delta = _num(r.get("Bytes"))
        if total is None or delta is None:
            continue
        series[dev].append((r["ts"] - t0, total))
        if delta > 0:
            live[dev][r.get("Addr")] = r
        else:
            live[dev].pop(r.get("Addr"), None)
        if total > best["bytes"]:
            best = {"bytes": total, "t": r["ts"] - t0, "device": dev, "live": list(live[dev].values())}
    view.memory = {dev: points for dev, points in series.items()}
    if best["bytes"] < 0:
        return
    # the outermost op around an allocation (aten::linear, not the aten::empty inside it)
    op_index = {t: _Nesting(_outermost(v)) for t, v in ops.items()}
    holders: dict[str, float] = defaultdict(float)
    for r in best.pop("live"):
        nest = modules.get(r["tid"])
        owner = nest.innermost(r["ts"], r["ts"]) if nest else None
        op_nest = op_index.get(r["tid"])
        around = op_nest.around(r["ts"], r["ts"]) if op_nest else None
        op = around[2] if around else None
        if owner is None and around is not None and (r["tid"], around[0], around[1]) in made_by:
            owner = f"{made_by[(r['tid'], around[0], around[1])]} (backward)"
        holders[f"{owner or '(outside modules)'} / {op or '?'}"] += float(r.get("Bytes") or 0)
    best["holders"] = sorted(holders.items(), key=lambda kv: -kv[1])[:TOP_HOLDERS]
    view.peak = best
