"""Reading Neuron Explorer's ``SystemProfileEvents`` rows into the figures a result carries.

Column names are the profile schema reference's: ``name``, ``start_ts``, ``end_ts`` (ns),
``duration_ns``, ``trace_event_source`` (``framework`` / ``neuron_rt`` / ``neuron_hw``),
``nc_idx``, ``flow_id`` (a list of ids in the parquet a third party read, a number in others:
both are taken), ``framework_stream_id``, ``extra_attributes_json``. Event names are those seen
in a public Trainium run (``nc_exec_running``: one hardware execution per NeuronCore;
``nrt_model_submit``; ``nc_model_switch``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["EXECUTION", "SUBMIT", "SWITCH", "core_activity", "device_ns_by_flow", "ops_by_flow", "read_parquet_rows", "submissions"]

EXECUTION = "nc_exec_running"
SUBMIT = "nrt_model_submit"
SWITCH = "nc_model_switch"
#: Columns read from SystemProfileEvents (others may be absent in older tools).
_COLUMNS = ("name", "start_ts", "end_ts", "duration_ns", "trace_event_source", "nc_idx", "flow_id")


def read_parquet_rows(path: Path, columns: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The rows of a parquet file as dicts (pyarrow; ImportError where it is missing)."""
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    wanted = [c for c in (columns or schema.names) if c in schema.names]
    return pq.read_table(path, columns=wanted).to_pylist()


def _flow_ids(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [v for v in value if v is not None]
    return [value]


def _executions(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        r for r in rows
        if r.get("name") == EXECUTION and r.get("start_ts") is not None and r.get("end_ts") is not None
    ]


def core_activity(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per NeuronCore: executions, busy time (the union of its executions) and idle time
    within the window from the first execution's start to the last's end on any core (us)."""
    execs = _executions(rows)
    if not execs:
        return []
    lo = min(int(r["start_ts"]) for r in execs)
    hi = max(int(r["end_ts"]) for r in execs)
    by_core: dict[Any, list[tuple[int, int]]] = {}
    for r in execs:
        by_core.setdefault(r.get("nc_idx"), []).append((int(r["start_ts"]), int(r["end_ts"])))
    out = []
    for core, spans in sorted(by_core.items(), key=lambda kv: (kv[0] is None, kv[0])):
        spans.sort()
        busy = 0
        cur_s, cur_e = spans[0]
        for s, e in spans[1:]:
            if s > cur_e:
                busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        busy += cur_e - cur_s
        out.append({
            "nc_idx": core,
            "executions": len(spans),
            "busy_us": busy / 1e3,
            "idle_us": (hi - lo - busy) / 1e3,
            "busy_share": busy / (hi - lo) if hi > lo else None,
        })
    return out


def submissions(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many NEFF submissions (``nrt_model_submit``), model switches (``nc_model_switch``)
    and hardware executions (``nc_exec_running``) the system profile holds."""
    counts = {SUBMIT: 0, SWITCH: 0, EXECUTION: 0}
    for r in rows:
        name = r.get("name")
        if name in counts:
            counts[name] += 1
    return counts


def device_ns_by_flow(rows: list[dict[str, Any]]) -> dict[Any, int]:
    """Device time per flow id: a flow's executions on several cores (LNC > 1 runs one
    execution as a row per physical core) count once, from the first start to the last end."""
    spans: dict[Any, tuple[int, int]] = {}
    for r in _executions(rows):
        for fid in _flow_ids(r.get("flow_id")):
            s, e = int(r["start_ts"]), int(r["end_ts"])
            old = spans.get(fid)
            spans[fid] = (s, e) if old is None else (min(old[0], s), max(old[1], e))
    return {fid: e - s for fid, (s, e) in spans.items()}


def _open_at(
    spans: list[tuple[float, float, str, bool]], wanted: list[tuple[float, int]]
) -> list[tuple[list[tuple[float, float, str, bool]], int]]:
    """For each (instant, value) in ``wanted``: the spans open at the instant (start <= it <=
    end), outermost first as sorted by (start, longest first), with its value. One sweep: spans
    pushed in start order, those ended popped off the top; a span left under one still open
    (overlapping, not nested) is filtered out at each instant."""
    spans = sorted(spans, key=lambda s: (s[0], -s[1]))
    out = []
    stack: list[tuple[float, float, str, bool]] = []
    i = 0
    for at, value in sorted(wanted, key=lambda w: w[0]):
        while i < len(spans) and spans[i][0] <= at:
            while stack and stack[-1][1] < spans[i][0]:
                stack.pop()
            stack.append(spans[i])
            i += 1
        while stack and stack[-1][1] < at:
            stack.pop()
        out.append(([s for s in stack if s[1] >= at], value))
    return out


def ops_by_flow(trace: Path, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, float], int]:
    """Device time per op and per range of the framework trace, joined by flow ids: each
    execution's flow starts at a dispatch (an ``ac2g`` flow start), and the dispatch runs inside
    the op that launched it (the innermost ``cpu_op`` open on its thread then; ranges likewise,
    each range counting what ran inside it). Returns (ops, costliest first; ranges; executions
    that matched no dispatch)."""
    import json

    device = device_ns_by_flow(rows)
    if not device:
        return [], {}, 0
    with open(trace, "rb") as fh:
        events = json.load(fh).get("traceEvents", [])
    flows: dict[Any, tuple[Any, float]] = {}
    spans: dict[tuple[Any, Any], list[tuple[float, float, str, bool]]] = {}
    for e in events:
        if not isinstance(e, dict):
            continue
        cat = e.get("cat")
        if cat in ("ac2g", "async_cpu_to_gpu") and e.get("ph") == "s":
            flows[e.get("id")] = ((e.get("pid"), e.get("tid")), float(e.get("ts", 0)))
        elif cat in ("cpu_op", "user_annotation") and isinstance(e.get("dur"), (int, float)):
            ts = float(e.get("ts", 0))
            spans.setdefault((e.get("pid"), e.get("tid")), []).append((ts, ts + float(e["dur"]), str(e.get("name")), cat == "cpu_op"))
    # Each execution's launch, grouped by thread, to sweep each thread's spans once (sort,
    # then a stack of the spans open): O(n log n), not executions x spans. Sums then run in
    # the executions' own order, as before.
    items = list(device.items())
    queries: dict[tuple[Any, Any], list[tuple[float, int]]] = {}
    for k, (fid, _) in enumerate(items):
        launch = flows.get(fid)
        if launch is not None:
            queries.setdefault(launch[0], []).append((launch[1], k))
    open_at: dict[int, list[tuple[float, float, str, bool]]] = {}
    for thread, wanted in queries.items():
        open_at.update((k, here) for here, k in _open_at(spans.get(thread, []), wanted))
    ops: dict[str, list[float]] = {}
    regions: dict[str, float] = {}
    unmatched = 0
    for k, (_, ns) in enumerate(items):
        open_here = open_at.get(k, [])
        inner_op = next((s for s in reversed(open_here) if s[3]), None)
        if inner_op is None:
            unmatched += 1
            continue
        entry = ops.setdefault(inner_op[2], [0, 0.0])
        entry[0] += 1
        entry[1] += ns / 1e3
        for name in {s[2] for s in open_here if not s[3]}:
            regions[name] = regions.get(name, 0.0) + ns / 1e3
    table: list[dict[str, Any]] = [
        {"name": n, "executions": int(c), "device_us": round(us, 3)} for n, (c, us) in ops.items()
    ]
    table.sort(key=lambda r: -float(r["device_us"]))
    return table, {k: round(v, 3) for k, v in regions.items()}, unmatched
