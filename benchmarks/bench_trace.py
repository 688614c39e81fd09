"""How fast, and how lean, is ``neuronscope.from_trace`` on a big trace?

Builds a trace of 200,000 events (``--quick``: 20,000) and times ``from_trace`` (reading,
op table, hint rules: all of it) against the least any reader must do: decompress the file and
``json.loads`` it. The baseline runs as a user would run it (``json``), and, stricter, with the
cyclic garbage collector paused as ``from_trace`` pauses it (``json_nogc``, ``orjson_nogc``).
Prints medians of wall and CPU time (runs interleaved), the ratios (the target is at most 1.5x
the plain baseline), and the peak memory of both (tracemalloc, and the resident-set growth of a
fresh process).

Two sources of events:

- ``a100``: the events of ``tests/data/traces/a100_training_step.json.gz`` (a real CUDA training
  step, 109k events with kernels and launches) repeated with shifted timestamps and ids;
- ``cpu``: a real ``torch.profiler`` CPU capture of a loop, written by ``export_chrome_trace``.

With Holistic Trace Analysis importable (``pip install --no-deps HolisticTraceAnalysis``
and its few pure-Python dependencies), also times HTA's load plus its temporal breakdown
(``include_last_profiler_step=True``, ns rounding off) on the same file. ``--shared`` times
each trace in ``tests/data/traces`` as it is (from_trace includes the step breakdown): the
steady state (repeated calls in one process; wall and CPU-time ratios) and the first call of a
fresh process, each against gunzip + ``json.loads`` measured the same way.

    python benchmarks/bench_trace.py [--quick] [--source a100|cpu|both] [--runs N] [--keep DIR] [--shared]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHARED = REPO / "tests" / "data" / "traces" / "a100_training_step.json.gz"


# ---- building the traces ---------------------------------------------------------------------
def build_a100(n_events: int, out: Path) -> Path:
    """Repeat the real A100 step's events, shifted in time and in ids, up to ``n_events``."""
    with gzip.open(SHARED, "rb") as fh:
        doc = json.loads(fh.read())
    base = doc.pop("traceEvents")
    meta_events = [e for e in base if e.get("ph") == "M"]
    timed = [e for e in base if e.get("ph") != "M"]
    # In time order, so that a trace cut short of one copy still mixes ops, launches and kernels.
    timed.sort(key=lambda e: e["ts"] if isinstance(e.get("ts"), (int, float)) else 0)
    t0 = min(e["ts"] for e in timed if isinstance(e.get("ts"), (int, float)))
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed if isinstance(e.get("ts"), (int, float)))
    span = int(t1 - t0) + 1000
    id_step = 10_000_000
    events: list[Any] = list(meta_events)
    copy = 0
    while len(events) < n_events:
        for e in timed:
            if len(events) >= n_events:
                break
            if copy == 0:
                events.append(e)
                continue
            e2 = dict(e)
            if isinstance(e2.get("ts"), (int, float)):
                e2["ts"] = e2["ts"] + copy * span
            if "id" in e2:
                e2["id"] = e2["id"] + copy * id_step
            args = e2.get("args")
            if args and ("correlation" in args or "External id" in args):
                args = dict(args)
                for k in ("correlation", "External id"):
                    if k in args:
                        args[k] = args[k] + copy * id_step
                e2["args"] = args
            events.append(e2)
        copy += 1
    doc["traceEvents"] = events
    out.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=6))
    return out


def build_cpu(n_events: int, out: Path) -> Path:
    """A real CPU capture of a loop with shapes recorded, exported by torch.profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(16, 16)
    w = torch.randn(16, 16)
    # One iteration writes about 20 events (ops and their aten children, one annotation).
    iters = max(1, n_events // 20)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i in range(iters):
            with record_function("step"):
                y = torch.nn.functional.linear(x, w)
                y = (y * 2 + 1).relu()
                y = y.softmax(-1).sum()
    plain = out.with_suffix("")  # .json
    prof.export_chrome_trace(str(plain))
    doc = json.loads(plain.read_bytes())
    events = doc["traceEvents"]
    if len(events) > n_events:  # trim to the exact size, keeping the metadata events
        keep = [e for e in events if e.get("ph") == "M"]
        rest = [e for e in events if e.get("ph") != "M"]
        doc["traceEvents"] = keep + rest[: n_events - len(keep)]
    out.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=6))
    plain.unlink()
    return out


# ---- measuring -------------------------------------------------------------------------------
def baseline(path: Path) -> Any:
    """What any reader must do at the least: decompress and json.loads (collector as it is)."""
    with open(path, "rb") as fh:
        return json.loads(gzip.decompress(fh.read()))


def _no_gc(loads: Callable[[bytes], Any], path: Path) -> Any:
    was = gc.isenabled()
    gc.disable()
    try:
        with open(path, "rb") as fh:
            return loads(gzip.decompress(fh.read()))
    finally:
        if was:
            gc.enable()


def baseline_nogc(path: Path) -> Any:
    """The strict floor: decompress and json.loads with the cyclic collector paused, as
    from_trace pauses it."""
    return _no_gc(json.loads, path)


def baseline_orjson_nogc(path: Path) -> Any:
    import orjson

    return _no_gc(orjson.loads, path)


def analyse(path: Path) -> Any:
    from neuronscope.drive.traces import from_trace

    return from_trace(path)


def hta_available() -> bool:
    try:
        import hta.trace_analysis  # noqa: F401
    except ImportError:
        return False
    return True


def hta_breakdown(path: Path) -> Any:
    """HTA's load and temporal breakdown of one trace (a folder holding only that file)."""
    import logging

    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as d:
        os.symlink(path.resolve(), Path(d) / path.name)
        ta = TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
        return ta.get_temporal_breakdown(visualize=False)


def timed(fn: Callable[[Path], Any], path: Path) -> tuple[float, float]:
    gc.collect()
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn(path)
    w1, c1 = time.perf_counter(), time.process_time()
    del out
    gc.collect()
    return w1 - w0, c1 - c0


def traced_peak(fn: Callable[[Path], Any], path: Path) -> float:
    gc.collect()
    tracemalloc.start()
    out = fn(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del out
    return peak / 2**20


def rss_growth(which: str, path: Path) -> float | None:
    """Peak resident-set growth (MiB) of ``which`` in a fresh process, torch already imported.

    Resets the kernel's high-water mark (``/proc/self/clear_refs``) after the imports, so the
    peak is the call's own; None where that is not possible (not Linux, say).
    """
    code = (
        f"import sys, gc; sys.path.insert(0, {str(REPO)!r})\n"
        "import torch, neuronscope.drive.traces, neuronscope.drive.pipeline, bench_trace as b\n"
        "from pathlib import Path\n"
        f"b.analyse(Path({str(path)!r})); gc.collect()\n"  # warm: imports of the analysis rules
        "def status(key):\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith(key): return int(line.split()[1])\n"
        "open('/proc/self/clear_refs', 'w').write('5')\n"
        "before = status('VmRSS:')\n"
        f"out = b.{which}(Path({str(path)!r}))\n"
        "print((status('VmHWM:') - before) / 1024)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "benchmarks"), str(REPO)]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    try:
        return float(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def run(source: str, n_events: int, runs: int, tmp: Path) -> dict[str, Any]:
    path = tmp / f"{source}_{n_events}.json.gz"
    t = time.perf_counter()
    if not path.exists():  # --keep: built once, reused
        (build_a100 if source == "a100" else build_cpu)(n_events, path)
    built = time.perf_counter() - t
    with open(path, "rb") as fh:
        text_bytes = len(gzip.decompress(fh.read()))
    res = analyse(path)  # warm-up: imports (torch, analysis) happen once, outside the timing
    print(
        f"\n[{source}] {n_events:,} events, {path.stat().st_size / 2**20:.1f} MiB gzip, "
        f"{text_bytes / 2**20:.1f} MiB JSON (built in {built:.1f} s); "
        f"{len(res.ops)} ops, backend {res.backend}"
    )
    fns: dict[str, Callable[[Path], Any]] = {
        "json": baseline,
        "json_nogc": baseline_nogc,
        "from_trace": analyse,
    }
    try:
        import orjson  # noqa: F401

        fns["orjson_nogc"] = baseline_orjson_nogc
    except ImportError:
        pass
    if hta_available() and source != "cpu":
        fns["hta"] = hta_breakdown
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(runs):  # interleaved, so that load from other processes hits all alike
        for k, fn in fns.items():
            w, c = timed(fn, path)
            wall[k].append(w)
            cpu[k].append(c)
    med = {k: statistics.median(v) for k, v in wall.items()}
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    for k in fns:
        print(f"  {k:<12} wall median {med[k]:.3f} s (min {min(wall[k]):.3f})   cpu median {cmed[k]:.3f} s")
    for k, label in (
        ("json", "gunzip + json.loads"),
        ("json_nogc", "gunzip + json.loads, gc paused"),
        ("orjson_nogc", "gunzip + orjson.loads, gc paused"),
    ):
        if k in med:
            print(
                f"  from_trace / ({label}): wall {med['from_trace'] / med[k]:.2f}x, "
                f"cpu {cmed['from_trace'] / cmed[k]:.2f}x"
            )
    if "hta" in med:
        print(f"  HTA load + temporal breakdown / from_trace: wall {med['hta'] / med['from_trace']:.2f}x")
    ratio = med["from_trace"] / med["json"]
    cratio = cmed["from_trace"] / cmed["json"]
    peak_ft = traced_peak(analyse, path)
    peak_js = traced_peak(baseline, path)
    print(f"  tracemalloc peak: from_trace {peak_ft:.0f} MiB, gunzip + json.loads {peak_js:.0f} MiB")
    rss_ft = rss_growth("analyse", path)
    rss_js = rss_growth("baseline", path)
    if rss_ft is not None and rss_js is not None:
        print(f"  peak RSS growth (fresh process): from_trace {rss_ft:.0f} MiB, gunzip + json.loads {rss_js:.0f} MiB")
    return {"ratio": ratio, "cpu_ratio": cratio, "peak_mib": peak_ft, "baseline_peak_mib": peak_js}


def first_call(which: str, path: Path) -> float:
    """Seconds of the first call in a fresh process: ``from_trace`` right after ``from
    neuronscope import from_trace`` (whatever it still loads on first use counts), or gunzip +
    ``json.loads`` right after ``import gzip, json``."""
    if which == "from_trace":
        setup, call = "from neuronscope import from_trace", f"from_trace({str(path)!r})"
    else:
        setup, call = "import gzip, json", f"json.loads(gzip.decompress(open({str(path)!r}, 'rb').read()))"
    code = (
        f"import sys, time; sys.path.insert(0, {str(REPO)!r})\n{setup}\n"
        f"t = time.perf_counter(); {call}; print(time.perf_counter() - t)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(proc.stdout.strip().splitlines()[-1])


#: Trace files (gzip) under this size get ten times the timed runs in ``--shared``.
SMALL_FILE = 1 << 20


def run_shared(runs: int, fresh: int = 3) -> None:
    """Each trace of tests/data/traces as it is: from_trace (with the step breakdown) against
    gunzip + json.loads, and against HTA's load + temporal breakdown where HTA is installed.

    The main figure is the steady state (repeated calls in one process, interleaved, medians of
    wall and CPU time; the CPU-time ratio is the steadier on a loaded machine), and beside it the
    ratio of the quickest calls (the least disturbed by load); the first call
    of a fresh process (medians of ``fresh`` processes, each against a fresh process's gunzip +
    json.loads) is shown beside it."""
    fns: dict[str, Callable[[Path], Any]] = {"json": baseline, "from_trace": analyse}
    if hta_available():
        fns["hta"] = hta_breakdown
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {runs} runs, {fresh} fresh processes")
    print(f"  {'trace':<36} {'from_trace':>10} {'json':>9}  wall   cpu   best  first call (fresh process)")
    for path in sorted(SHARED.parent.glob("*.json.gz")):
        analyse(path)
        wall: dict[str, list[float]] = {k: [] for k in fns}
        cpu: dict[str, list[float]] = {k: [] for k in fns}
        # Calls of a few ms: ten times the runs, or one slice lost to another process decides.
        for _ in range(runs * 10 if path.stat().st_size < SMALL_FILE else runs):
            for k, fn in fns.items():
                try:
                    w, c = timed(fn, path)
                except Exception:  # HTA fails on some traces (no kernels)
                    w = c = float("nan")
                wall[k].append(w)
                cpu[k].append(c)
        med = {k: statistics.median(v) for k, v in wall.items()}
        cmed = {k: statistics.median(v) for k, v in cpu.items()}
        first_ft = statistics.median(first_call("from_trace", path) for _ in range(fresh))
        first_js = statistics.median(first_call("json", path) for _ in range(fresh))
        line = (
            f"  {path.name:<36} {med['from_trace'] * 1e3:8.2f}ms {med['json'] * 1e3:7.2f}ms"
            f" {med['from_trace'] / med['json']:5.2f}x {cmed['from_trace'] / cmed['json']:5.2f}x"
            f" {min(wall['from_trace']) / min(wall['json']):5.2f}x"
            f"   {first_ft * 1e3:.2f} ms = {first_ft / first_js:.2f}x"
        )
        if "hta" in med:
            hta = med["hta"]
            line += "; HTA fails" if math.isnan(hta) else f"; HTA {hta:.3f} s = {hta / med['from_trace']:.1f}x from_trace"
        print(line, flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20,000 events and 3 runs: a smoke test")
    ap.add_argument("--events", type=int, default=None, help="events in the trace (default 200,000)")
    ap.add_argument("--runs", type=int, default=None, help="timed runs of each (default 5)")
    ap.add_argument("--source", choices=["a100", "cpu", "both"], default="both")
    ap.add_argument("--keep", type=Path, default=None, help="build the traces into DIR once and reuse them")
    ap.add_argument("--shared", action="store_true", help="time each trace of tests/data/traces as it is")
    args = ap.parse_args(argv)
    if args.shared:
        run_shared(args.runs or 5)
        return 0
    n = args.events or (20_000 if args.quick else 200_000)
    runs = args.runs or (3 if args.quick else 5)
    sources = ["a100", "cpu"] if args.source == "both" else [args.source]
    if "a100" in sources and not SHARED.exists():
        print(f"{SHARED} is absent: skipping the a100 source")
        sources.remove("a100")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            where = args.keep
        for source in sources:
            worst = max(worst, run(source, n, runs, where)["ratio"])
    return 0 if worst <= 1.5 or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
