"""Does reading a trace cost what its events cost, however they are arranged?

Writes traces of hostile but valid shapes (each a few megabytes at most) and reads each with
``from_trace`` in a fresh process, printing the wall time and the peak resident memory of that
process (Linux ``VmHWM``). Before issue 18's hardening, each of these took time or memory
that grew with the square of a size (nesting depth, streams, threads, files); the figures before
and after are in ``benchmarks/README.md``.

    python benchmarks/bench_hostile.py [--quick] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _event(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def deep_ops(n: int) -> list[dict[str, Any]]:
    """``n`` ops nested, each launching a kernel after the ones inside it closed."""
    ev = [_event("cpu_op", f"aten::op{i % 7}", i, 4 * n - 2 * i) for i in range(n)]
    for i in range(n):
        t = 4 * n - i - 1 + 0.25
        ev.append(_event("cuda_runtime", "cudaLaunchKernel", t, 0.1, correlation=i + 1))
        ev.append(_event("kernel", f"k{i % 5}", t + 1e6, 0.5, pid=0, tid=7, correlation=i + 1, stream=7, device=0))
    return ev


def deep_ranges(n: int) -> list[dict[str, Any]]:
    """``n`` ranges of 7 names nested, an op in each after the ones inside it closed."""
    ev = [_event("user_annotation", f"r{i % 7}", i, 4 * n - 2 * i) for i in range(n)]
    return ev + [_event("cpu_op", f"aten::op{i % 5}", 4 * n - i - 1 + 0.25, 0.1) for i in range(n)]


def deep_names(n: int) -> list[dict[str, Any]]:
    """1,000 ranges of distinct names nested around ``n`` ops."""
    ev = [_event("user_annotation", f"block{d}", d, 10**7 - 2 * d) for d in range(1000)]
    return ev + [_event("cpu_op", "aten::add", 1010 + 5 * k, 3) for k in range(n)]


def streams(n: int) -> list[dict[str, Any]]:
    """``n`` kernels, each on a stream of its own."""
    return [_event("cpu_op", "aten::mm", 0, 10 * n)] + [
        _event("kernel", "gemm", 7 + 10 * k, 3, pid=0, tid=7, stream=k, device=0) for k in range(n)
    ]


def threads(n: int) -> list[dict[str, Any]]:
    """``n`` threads of two ops each, and one range on another thread open over them all."""
    ev = [_event("user_annotation", "ProfilerStep#1", 0, 10**6, tid=0)]
    return ev + [_event("cpu_op", "aten::add", 3 * t + k, 1, tid=t) for t in range(1, n + 1) for k in range(2)]


def files(n: int) -> list[list[dict[str, Any]]]:
    """``n`` captures of one rank (a schedule's repeats), a step of 50 launches each."""
    out = []
    for f in range(n):
        t0, c = f * 10**6, f * 50
        ev = [_event("user_annotation", f"ProfilerStep#{f}", t0, 550)]
        for k in range(50):
            ev.append(_event("cpu_op", "aten::mm", t0 + 5 + 10 * k, 8, **{"External id": c + k}))
            ev.append(_event("cuda_runtime", "cudaLaunchKernel", t0 + 6 + 10 * k, 2, correlation=c + k))
            ev.append(_event("kernel", "gemm", t0 + 7 + 10 * k, 3, pid=0, tid=7, correlation=c + k, stream=7, device=0))
        out.append(ev)
    return out


#: (what it is, its builder, the size read, the size with --quick)
SHAPES: list[tuple[str, Callable[[int], Any], int, int]] = [
    ("ops nested deep, launching kernels", deep_ops, 200_000, 20_000),
    ("ranges nested deep", deep_ranges, 20_000, 5_000),
    ("1,000 range names nested around ops", deep_names, 50_000, 5_000),
    ("a stream per kernel", streams, 300_000, 30_000),
    ("threads under one range", threads, 150_000, 15_000),
    ("files of one rank", files, 2_000, 200),
]

#: In a fresh process: the wall time of from_trace, and the process's peak resident memory
#: (VmHWM: ru_maxrss would carry the parent's over from before the exec).
_READ = (
    "import re, sys, time\n"
    "from neuronscope import from_trace\n"
    "t = time.perf_counter(); r = from_trace(sys.argv[1]); wall = time.perf_counter() - t\n"
    "print(wall, re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1))\n"
)


def write(path: Path, events: Any) -> Path:
    """One trace file, or a folder of them (a list of event lists)."""
    if events and isinstance(events[0], list):
        path.mkdir()
        for k, part in enumerate(events):
            write(path / f"worker0.{k:06d}.pt.trace.json.gz", part)
        return path
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the sizes")
    ap.add_argument("--keep", type=Path, help="write the traces here and keep them")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        print(f"{'shape':40s} {'size':>9s} {'on disk':>9s} {'from_trace':>11s} {'peak RSS':>10s}")
        for k, (what, build, size, quick) in enumerate(SHAPES):
            n = quick if args.quick else size
            path = write(out / (f"shape{k}" + ("" if build is files else ".json.gz")), build(n))
            disk = sum(p.stat().st_size for p in path.rglob("*")) if path.is_dir() else path.stat().st_size
            proc = subprocess.run([sys.executable, "-c", _READ, str(path)], capture_output=True, text=True, cwd=REPO, check=True)
            wall, rss_kb = proc.stdout.split()
            print(f"{what:40s} {n:>9,} {disk / 2**20:>7.1f} MB {float(wall):>9.2f} s {int(rss_kb) / 1024:>7.0f} MiB")


if __name__ == "__main__":
    main()
