"""How does ``from_trace`` scale: traces of 0.1 M to 3 M events, and a job of 64 rank files?

Builds the traces as ``bench_trace.py``'s ``build_a100`` does (the real A100 training step of
``tests/data/traces`` repeated, timestamps and ids shifted), then times each reader on each
file in a fresh process (imports outside the timing, one process per reading):

- ``from_trace``: reading, op table, regions, hints, step breakdown: all of it;
- gunzip + ``json.loads``: the least any reader of the JSON must do;
- Holistic Trace Analysis (``pip install HolisticTraceAnalysis``, where importable): its load
  and temporal breakdown, as ``bench_trace.py`` runs it.

Prints wall time, time per event and the peak resident-set growth of the call (the kernel's
high-water mark, reset after the imports). The job: 64 rank files of 20,000 events, read by
``from_trace`` one rank after another (``executor=False``) and in parallel (the default: local
processes), by gunzip + ``json.loads`` one after another, and by HTA (which parses ranks in
parallel processes itself).

    python benchmarks/bench_scale.py [--quick] [--sizes 100000,1500000] [--ranks 64] [--no-hta]
        [--runs N] [--compare DIR_OF_ANOTHER_CHECKOUT] [--keep DIR] [--no-job]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_trace import build_a100, hta_available

SIZES = (100_000, 300_000, 1_000_000, 1_500_000, 3_000_000)
RANK_EVENTS = 20_000
#: A reading that takes longer is stopped and reported as such (HTA on the biggest files).
LIMIT_S = 900


# ---- one reading in a fresh process ---------------------------------------------------------
def _child(what: str, path: Path) -> None:
    """Run one reader on ``path`` (a file, or a directory of rank files) and print its time and
    peak resident-set growth as JSON."""
    import gc

    import bench_trace as b

    if os.environ.get("BENCH_NS_REPO"):  # --compare: another checkout's neuronscope
        sys.path.insert(0, os.environ["BENCH_NS_REPO"])
    import neuronscope.drive.traces  # noqa: F401  (imports outside the timing)

    files = sorted(path.iterdir()) if path.is_dir() else [path]
    if what == "hta":
        import hta.trace_analysis  # noqa: F401
    gc.collect()

    def status(key: str) -> int:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
        return 0

    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # the high-water mark from here on: the call's own
    except OSError:
        pass
    before = status("VmRSS:")
    t = time.perf_counter()
    if what == "json":
        for p in files:
            out: Any = b.baseline(p)
            del out
    elif what == "hta":
        if path.is_dir():
            out = _hta_dir(path)
        else:
            out = b.hta_breakdown(path)
    else:
        from neuronscope.drive.traces import from_trace

        out = from_trace(path, executor=False) if what == "from_trace_serial" else from_trace(path)
    wall = time.perf_counter() - t
    print(json.dumps({"s": wall, "rss_mib": (status("VmHWM:") - before) / 1024}))


def _hta_dir(path: Path) -> Any:
    import logging

    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis(trace_dir=str(path), include_last_profiler_step=True)
    return ta.get_temporal_breakdown(visualize=False)


def measure(what: str, path: Path, runs: int = 1, repo: Path | None = None) -> dict[str, Any]:
    """The quickest of ``runs`` readings, each in a fresh process: {"s", "rss_mib"} (the
    largest growth), or {"error"}. ``repo``: time that checkout's neuronscope."""
    got = [_measure_once(what, path, repo) for _ in range(runs)]
    ok = [m for m in got if "error" not in m]
    if not ok:
        return got[0]
    return {"s": min(m["s"] for m in ok), "rss_mib": max(m["rss_mib"] for m in ok)}


def _measure_once(what: str, path: Path, repo: Path | None) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "benchmarks"), str(REPO)]))
    if repo is not None:
        env["BENCH_NS_REPO"] = str(repo)
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", what, str(path)],
            capture_output=True, text=True, env=env, timeout=LIMIT_S, check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"over {LIMIT_S} s"}
    try:
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:120]}"}


# ---- the traces -------------------------------------------------------------------------------
def json_bytes(path: Path) -> int:
    with gzip.open(path, "rb") as fh:
        n = 0
        while chunk := fh.read(1 << 24):
            n += len(chunk)
        return n


def build_job(directory: Path, ranks: int, events: int) -> list[Path]:
    """``ranks`` rank files of ``events`` events each, with ``distributedInfo`` naming each."""
    one = build_a100(events, directory / "one.json.gz")
    doc = json.loads(gzip.decompress(one.read_bytes()))
    one.unlink()
    paths = []
    for r in range(ranks):
        doc["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": ranks}
        p = directory / f"rank{r}.pt.trace.json.gz"
        p.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=6))
        paths.append(p)
    return paths


def _cell(m: dict[str, Any], events: int) -> str:
    if "error" in m:
        return f"{m['error']}"
    return f"{m['s']:.2f} s, {m['s'] / events * 1e6:.2f} us/event, {m['rss_mib']:.0f} MiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", nargs=2, metavar=("WHAT", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="20,000 and 50,000 events, 8 ranks: a smoke test")
    ap.add_argument("--sizes", default=None, help="comma-separated event counts")
    ap.add_argument("--ranks", type=int, default=None, help="rank files in the job (default 64)")
    ap.add_argument("--no-hta", action="store_true", help="leave Holistic Trace Analysis out")
    ap.add_argument("--hta-max", type=int, default=1_500_000, help="HTA only on traces of at most this many events (its memory: about 8x the JSON)")
    ap.add_argument("--keep", type=Path, default=None, help="build the traces into DIR and keep them")
    ap.add_argument("--runs", type=int, default=1, help="fresh processes per reading; the quickest is shown")
    ap.add_argument("--compare", type=Path, default=None, help="also time from_trace of the checkout in DIR (the code before)")
    ap.add_argument("--no-job", action="store_true", help="leave the job of rank files out")
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child[0], Path(args.child[1]))
        return 0
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else ([20_000, 50_000] if args.quick else list(SIZES))
    ranks = args.ranks or (8 if args.quick else 64)
    hta = hta_available() and not args.no_hta
    if not hta and not args.no_hta:
        print("Holistic Trace Analysis is not importable (pip install HolisticTraceAnalysis): left out")
    where = Path(tempfile.mkdtemp(prefix="bench_scale_")) if args.keep is None else args.keep
    where.mkdir(parents=True, exist_ok=True)
    print(f"cores {len(os.sched_getaffinity(0))}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        readers = ["from_trace", "json", *(["hta"] if hta else [])]
        for n in sizes:
            path = where / f"a100_{n}.json.gz"
            if not path.exists():
                build_a100(n, path)
            mb = json_bytes(path) / 2**20
            print(f"\n{n:,} events: {path.stat().st_size / 2**20:.1f} MiB gzip, {mb:.0f} MiB JSON", flush=True)
            got = {}
            for what in readers:
                if what == "hta" and n > args.hta_max:
                    continue
                got[what] = m = measure(what, path, args.runs if what != "hta" else 1)
                print(f"  {what:<12} {_cell(m, n)}", flush=True)
                if what == "from_trace" and args.compare is not None:
                    m = measure("from_trace", path, args.runs, args.compare)
                    print(f"  {'  before':<12} {_cell(m, n)}", flush=True)
            ft, js = got["from_trace"], got["json"]
            if "error" not in ft and "error" not in js:
                print(
                    f"  from_trace / (gunzip + json.loads): {ft['s'] / js['s']:.2f}x time; "
                    f"peak RSS growth {ft['rss_mib'] / mb:.2f}x the JSON", flush=True,
                )
            if args.keep is None:
                path.unlink()
        if args.no_job:
            return 0
        job = where / f"job_{ranks}"
        if not job.exists():
            job.mkdir()
            build_job(job, ranks, RANK_EVENTS)
        mb = sum(json_bytes(p) for p in job.iterdir()) / 2**20
        events = ranks * RANK_EVENTS
        print(f"\njob: {ranks} rank files of {RANK_EVENTS:,} events, {mb:.0f} MiB JSON in all", flush=True)
        got = {}
        for what in ["from_trace_serial", "from_trace", "json", *(["hta"] if hta else [])]:
            got[what] = m = measure(what, job, args.runs if what != "hta" else 1)
            print(f"  {what:<18} {_cell(m, events)}", flush=True)
        s, p = got["from_trace_serial"], got["from_trace"]
        if "error" not in s and "error" not in p:
            print(f"  parallel / one after another: {p['s'] / s['s']:.2f}x", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(where, ignore_errors=True)
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
