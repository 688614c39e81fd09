"""A process that exports runs for tests/test_reliability.py to kill, or to race.

Modes (argv[1]):

``block ROOT POINT READY [--real]``
    Export one run under ROOT and stop for good at POINT, after writing READY (a file holding
    the run directory). The test then SIGKILLs the process, which is what a crash, an OOM kill
    or a pre-empted instance does to a training job in the middle of an export. POINT is one of
    ``trace-mid``, ``summary-mid``, ``result-mid`` (the file's temporary copy holds half its
    bytes, as if the kill came during the write) or ``result-renamed`` (result.json is in place,
    the incomplete marker not yet removed). With ``--real`` the run is a real torch.profiler
    capture through ``neuron_region`` (its trace written by ``export_chrome_trace``); without,
    a synthetic result written through the same export functions (no torch import, so the
    process starts in well under a second).

``loop ROOT``
    Export synthetic runs (with a trace of about 0.7 MB) one after another, printing the count
    after each, until killed: the test kills it at random moments.

``captures ROOT N BARRIER K [--then-block READY]``
    Real captures: warm torch.profiler up, leave a file in the directory BARRIER and wait until
    K processes have (so that they export at the same moment), run N exported captures of the
    name ``shared``, print ``done``; then, with ``--then-block``, one more capture that blocks
    in the middle of writing its trace (as ``block trace-mid --real``).

The hook patches ``neuronscope.export.run_dir.atomic_write_with`` from outside: the library carries no
test code.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neuronscope.export import run_dir as export
from neuronscope.result.stats import OpStat
from neuronscope.result.types import ProfileResult

POINT_FILES = {
    "trace-mid": "trace.json",
    "summary-mid": "summary.txt",
    "result-mid": "result.json",
    "result-renamed": "result.json",
}


def _signal_ready(ready: Path, run_dir: Path) -> None:
    tmp = ready.with_name(ready.name + ".tmp")
    tmp.write_text(os.path.realpath(run_dir))  # the export writes through /proc/self/fd/N
    os.replace(tmp, ready)


def _hang() -> None:
    while True:
        time.sleep(60)


def install_block(point: str, ready: Path) -> None:
    """Make the export stop for good at ``point``, after telling the test where."""
    target = POINT_FILES[point]
    original = export.atomic_write_with

    def hooked(path: Path, write: Callable[[Path], None]) -> None:
        if path.name != target:
            original(path, write)
            return
        if point == "result-renamed":
            original(path, write)
            _signal_ready(ready, path.parent)
            _hang()

        def half_written(tmp: Path) -> None:
            write(tmp)  # the real bytes, then cut in half: the kill lands mid-write
            size = tmp.stat().st_size
            with open(tmp, "r+b") as fh:
                fh.truncate(size // 2)
                fh.flush()
                os.fsync(fh.fileno())
            _signal_ready(ready, path.parent)
            _hang()

        original(path, half_written)

    export.atomic_write_with = hooked  # type: ignore[assignment]
    if target == "trace.json":  # a real capture's trace: torch writes it in a private directory
        from neuronscope.export import trace_out

        saving = trace_out.save_chrome_trace

        def half_saved(prof: Any, path: Path) -> None:
            saving(prof, path)
            size = path.stat().st_size
            with open(path, "r+b") as fh:
                fh.truncate(size // 2)
                fh.flush()
                os.fsync(fh.fileno())
            _signal_ready(ready, Path(os.path.realpath(path.parent)).parent)  # the run, above the private one
            _hang()

        trace_out.save_chrome_trace = half_saved  # type: ignore[assignment]


def synthetic_result(i: int, n_ops: int = 300) -> ProfileResult:
    ops = [
        OpStat(f"aten::op{j}", calls=j + 1, self_cpu_us=10.0 * j, cpu_total_us=12.0 * j, input_shapes=[[[4, j]]])
        for j in range(n_ops)
    ]
    return ProfileResult(name="killed", backend="cpu", wall_time_us=1000.0 + i, ops=ops, pid=os.getpid())


def synthetic_trace_writer(n_events: int) -> Callable[[Path], Path]:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{j % 300}", "pid": 1, "tid": 1, "ts": j * 10, "dur": 5,
         "args": {"Input Dims": [[4, j % 300]], "pad": "x" * 40}}
        for j in range(n_events)
    ]
    text = json.dumps({"traceEvents": events})

    def write(run_dir: Path) -> Path:
        path = run_dir / "trace.json"
        export.atomic_write_with(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        return path

    return write


def synthetic_export(root: Path, i: int, n_events: int) -> Path:
    run_dir = export.new_run_dir(root, "killed")
    result = synthetic_result(i)
    export.fill_run(run_dir, result, summary=f"summary of export {i}\n" * 50, trace_writer=synthetic_trace_writer(n_events))
    return run_dir


def real_capture(root: Path, name: str, n_ops: int = 400) -> Any:
    import torch

    from neuronscope import neuron_region

    x = torch.randn(32, 32)
    with neuron_region(name, backend="cpu", output_dir=str(root), trace_format="json") as region:
        for _ in range(n_ops):
            x = torch.tanh(x) * 0.5
    return region.result


def main(argv: list[str]) -> int:
    mode = argv[1]
    if mode == "block":
        root, point, ready = Path(argv[2]), argv[3], Path(argv[4])
        install_block(point, ready)
        if "--real" in argv:
            real_capture(root, "killed")
        else:
            synthetic_export(root, 0, n_events=5_000)
        print("the export was not blocked", file=sys.stderr)
        return 3
    if mode == "loop":
        root = Path(argv[2])
        i = 0
        while True:
            synthetic_export(root, i, n_events=4_000)
            i += 1
            print(i, flush=True)
    if mode == "captures":
        root, n, barrier, k = Path(argv[2]), int(argv[3]), Path(argv[4]), int(argv[5])
        import logging

        logging.getLogger("neuronscope").setLevel(logging.WARNING)
        import torch

        from neuronscope import neuron_region

        with neuron_region("warm-up", backend="cpu", export=False):
            torch.ones(2) * 2  # first profiler start in a process is the slow one
        barrier.mkdir(parents=True, exist_ok=True)
        (barrier / f"ready-{os.getpid()}").touch()
        deadline = time.monotonic() + 300
        while len(list(barrier.iterdir())) < k:
            if time.monotonic() > deadline:
                return 4
            time.sleep(0.002)
        for _ in range(n):
            result = real_capture(root, "shared", n_ops=50)
            assert result.run_dir is not None, result.notes
        print("done", flush=True)
        if "--then-block" in argv:
            ready = Path(argv[argv.index("--then-block") + 1])
            install_block("trace-mid", ready)
            real_capture(root, "killed")
            return 3
        return 0
    print(f"unknown mode {mode!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
