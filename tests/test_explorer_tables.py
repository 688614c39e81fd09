"""Neuron Explorer's system-profile rows joined to the framework trace's ops by flow ids
(:func:`neuronscope.capture.explorer_tables.ops_by_flow`): the one-sweep join gives what the
straightforward scan of every span per execution gave, on a large synthetic trace."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from neuronscope.capture.explorer_tables import EXECUTION, device_ns_by_flow, ops_by_flow


def _scan_per_execution(trace: Path, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, float], int]:
    """The join as it was first written: for each execution, every span of its thread."""
    device = device_ns_by_flow(rows)
    events = json.loads(trace.read_text())["traceEvents"]
    flows: dict[Any, tuple[Any, float]] = {}
    spans: dict[Any, list[tuple[float, float, str, bool]]] = {}
    for e in events:
        if e.get("cat") == "ac2g" and e.get("ph") == "s":
            flows[e["id"]] = ((e["pid"], e["tid"]), float(e["ts"]))
        elif e.get("cat") in ("cpu_op", "user_annotation"):
            ts = float(e["ts"])
            spans.setdefault((e["pid"], e["tid"]), []).append((ts, ts + float(e["dur"]), e["name"], e["cat"] == "cpu_op"))
    for lst in spans.values():
        lst.sort(key=lambda s: (s[0], -s[1]))
    ops: dict[str, list[float]] = {}
    regions: dict[str, float] = {}
    unmatched = 0
    for fid, ns in device.items():
        launch = flows.get(fid)
        if launch is None:
            unmatched += 1
            continue
        open_here = [s for s in spans.get(launch[0], ()) if s[0] <= launch[1] <= s[1]]
        inner = next((s for s in reversed(open_here) if s[3]), None)
        if inner is None:
            unmatched += 1
            continue
        entry = ops.setdefault(inner[2], [0, 0.0])
        entry[0] += 1
        entry[1] += ns / 1e3
        for name in {s[2] for s in open_here if not s[3]}:
            regions[name] = regions.get(name, 0.0) + ns / 1e3
    table = [{"name": n, "executions": int(c), "device_us": round(us, 3)} for n, (c, us) in ops.items()]
    table.sort(key=lambda r: -float(r["device_us"]))
    return table, {k: round(v, 3) for k, v in regions.items()}, unmatched


def _synthetic(tmp_path: Path, steps: int, seed: int = 7) -> tuple[Path, list[dict[str, Any]]]:
    """Threads of regions holding ops holding nested ops, each innermost op dispatching one
    device execution by a flow; some dispatches outside any op, some flows with no start, some
    ranges overlapping instead of nesting, executions split over two cores."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    fid = 0
    for tid in (1, 2, 3):
        t = 0.0
        for step in range(steps):
            region_start = t
            for _ in range(rng.randint(1, 4)):
                outer = t + rng.random()
                inner = outer + 0.5
                fid += 1
                at = inner + 0.25 if rng.random() > 0.1 else outer - 0.3  # some outside every op
                events += [
                    {"ph": "X", "cat": "cpu_op", "name": f"aten::op{rng.randint(0, 40)}", "pid": 1, "tid": tid, "ts": outer, "dur": 3.0},
                    {"ph": "X", "cat": "cpu_op", "name": f"aten::inner{rng.randint(0, 9)}", "pid": 1, "tid": tid, "ts": inner, "dur": 1.0},
                ]
                if rng.random() > 0.05:  # a few executions whose flow never started
                    events.append({"ph": "s", "cat": "ac2g", "id": fid, "pid": 1, "tid": tid, "ts": at})
                start = int(at * 1000) + 5000
                for core in (0, 1) if rng.random() < 0.2 else (0,):
                    rows.append({"name": EXECUTION, "start_ts": start + core, "end_ts": start + rng.randint(100, 9000), "nc_idx": core, "flow_id": [fid]})
                t = outer + 4.0
            events.append({"ph": "X", "cat": "user_annotation", "name": f"step{step % 5}", "pid": 1, "tid": tid, "ts": region_start, "dur": t - region_start})
            if step % 7 == 0:  # a range overlapping the next step's start, not nested in it
                events.append({"ph": "X", "cat": "user_annotation", "name": "overlap", "pid": 1, "tid": tid, "ts": t - 2.0, "dur": 4.5})
            t += 1.0
    rng.shuffle(events)
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    return trace, rows


def test_the_sweep_join_equals_the_scan_per_execution(tmp_path):
    trace, rows = _synthetic(tmp_path, steps=400)
    got = ops_by_flow(trace, rows)
    assert got == _scan_per_execution(trace, rows)
    ops, regions, unmatched = got
    assert sum(o["executions"] for o in ops) > 2000 and unmatched > 50 and "overlap" in regions


def test_a_large_trace_is_joined(tmp_path):
    # 27,000 executions over 3 threads: the scan per execution took 135 s here, the sweep 1.7 s.
    trace, rows = _synthetic(tmp_path, steps=3000, seed=3)
    ops, regions, unmatched = ops_by_flow(trace, rows)
    assert sum(o["executions"] for o in ops) + unmatched == len({r["flow_id"][0] for r in rows})
    assert set(regions) == {f"step{i}" for i in range(5)} | {"overlap"}
