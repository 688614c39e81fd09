"""The ``neuronscope`` command: show, ls, diff, report and demo.

``main(argv)`` returns the exit status: 0 on success, 2 for a bad argument or an unreadable
run, with a one-line message and no traceback. Only ``demo`` starts the profiler; the other
commands read exported runs and trace files.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from neuronscope.errors import NeuronscopeError
from neuronscope.result.serial import dumps_json
from neuronscope.units import printable

__all__ = ["build_parser", "main"]

#: Separates a comparison's run directory from one of its variants: ``RUN_DIR#fused``.
VARIANT_SEP = "#"


def _print(text: str) -> None:
    """Print text from a run or a trace as text only: escape sequences in a name (which would
    retitle, clear or write the clipboard of the terminal) are shown escaped."""

    print(printable(text, keep="\n\t"))


def _rows_arg(text: str) -> int:
    """``--rows``: a count of rows, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of rows, got {text[:40]!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more rows, got {value}")
    return value


def _looks_like_trace(path: Path) -> bool:
    if path.name == "result.json":
        return False
    if path.name.endswith((".json.gz", ".pt.trace.json")):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    # The object format names its event list; the array format (a bare list of events, which
    # from_trace reads too) starts with '[' and its events have a phase.
    array = head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"[") and b'"ph"' in head
    return b"traceEvents" in head or array


def _read_trace(path: Path | list[Path]) -> Any:
    from neuronscope.drive.traces import from_trace

    try:
        return from_trace(path)
    except NotImplementedError as exc:
        raise NeuronscopeError(f"{path}: this neuronscope cannot read trace files yet") from exc


def _open(path_text: str) -> Any:
    """A run directory, a result.json, a trace file, or ``RUN_DIR#LABEL`` (one variant of a
    comparison), as a result object."""
    from neuronscope.export.runs import load
    from neuronscope.result.comparison import Comparison

    path = Path(path_text)
    if not path.exists() and VARIANT_SEP in path_text:
        run_text, label = path_text.rsplit(VARIANT_SEP, 1)
        if Path(run_text).exists():
            obj = load(run_text)
            if not isinstance(obj, Comparison):
                raise NeuronscopeError(f"{run_text}: not a comparison, so it has no variant {label!r}")
            if label not in obj.results:
                known = ", ".join(obj.results) or "none"
                raise NeuronscopeError(f"{run_text}: no variant {label!r} (variants: {known})")
            return obj.results[label]
    if path.is_file() and _looks_like_trace(path):
        return _read_trace(path)
    # A folder of rank traces, or what tensorboard_trace_handler wrote (traces inside); not a
    # neuronscope run directory (its own trace.json beside a missing result.json: load says so).
    own = ("result.json", "trace.json", "trace.json.gz", ".incomplete")
    if path.is_dir() and not any((path / n).exists() for n in own):
        from neuronscope.events.trace_files import find_trace_files

        if find_trace_files(path):
            return _read_trace(path)
    return load(path)


def cmd_show(args: argparse.Namespace) -> int:
    from neuronscope.export.runs import incomplete_trace_text, is_incomplete
    from neuronscope.result.comparison import Comparison

    runs = args.run if isinstance(args.run, list) else [args.run]
    if not runs:  # no argument: the newest run under the output root
        newest = _newest_run()
        if newest is None:
            return 2
        runs = [str(newest)]
    if len(runs) > 1:  # several trace files: the ranks of one job
        obj = _read_trace([Path(r) for r in runs])
    else:
        obj = _open(runs[0])
    rows = {} if args.rows is None else {"row_limit": args.rows}
    if args.json:
        print(dumps_json(obj.to_dict()))
    elif isinstance(obj, Comparison):
        _print(obj.table())
        for result in obj.results.values():
            _print(result.table(**rows))
    else:
        _print(obj.table(**rows))
    if not args.json and getattr(obj, "run_dir", None):
        _print(f"run: {obj.run_dir}")
        if is_incomplete(obj.run_dir):
            _print(f"note: this run is incomplete (its export was interrupted){incomplete_trace_text(obj.run_dir)}")
    return 0


def _newest_run() -> Path | None:
    """The newest complete run under the default output root, or None (said on stderr)."""
    from neuronscope.config import default_output_root
    from neuronscope.export.runs import RESULT_FILE, find_runs

    root = default_output_root()
    for run in find_runs(root):
        if (run / RESULT_FILE).is_file():
            return run
    _error(f"no runs under {root} to show (captures write there; set NEURONSCOPE_OUTPUT_DIR or pass a run directory)")
    return None


def cmd_ls(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from neuronscope.config import default_output_root
    from neuronscope.report.run_list import run_rows
    from neuronscope.units import fmt_us, shorten

    root = Path(args.root) if args.root else default_output_root()
    if not root.exists() and not args.root:  # nothing captured here yet: not an error
        if args.json:
            print("[]")
        else:
            _print(f"no runs yet under {root} (captures write there; pass another output root to list it)")
        return 0
    if not root.exists():
        raise NeuronscopeError(f"{root}: no such directory (pass the output root that holds your runs)")
    if not root.is_dir():
        raise NeuronscopeError(f"{root}: not a directory (pass the output root that holds your runs)")
    rows = run_rows(root)
    if args.json:
        print(dumps_json(rows))
        return 0
    if not rows:
        _print(f"no runs under {root}")
        return 0
    table = [
        [
            r["name"],
            r["time"],
            r["backend"] or "-",
            r["status"],
            fmt_us(r["total_us"]) if r["total_us"] is not None else "-",
            r["top_hint"] or "",
            r["run_dir"],
        ]
        for r in rows
    ]
    headers = ["Name", "Time", "Backend", "Status", "Total", "Top hint", "Run"]
    _print(tabulate([[printable(shorten(c)) for c in row] for row in table], headers=headers, tablefmt="simple", disable_numparse=True))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from neuronscope.report.diff import diff_results, render_diff
    from neuronscope.result.comparison import Comparison

    sides: list[list[Any]] = []
    for paths in ([args.run_a, *(args.also_a or [])], [args.run_b, *(args.also_b or [])]):
        side = []
        seen: set[str] = set()
        for label in paths:
            # The same capture twice would count as two and shrink the side's spread, so a
            # change could look told apart from noise that one capture cannot tell.
            key = os.path.realpath(label.removesuffix("result.json").rstrip("/\\") or label)
            if key in seen:
                raise NeuronscopeError(f"{label}: given twice on one side; pass each capture once")
            seen.add(key)
            obj = _open(label)
            if isinstance(obj, Comparison):
                first = next(iter(obj.results), "LABEL")
                raise NeuronscopeError(
                    f"{label}: is a comparison; diff takes two single runs, or one variant of it "
                    f"as {label}{VARIANT_SEP}{first}"
                )
            side.append(obj)
        sides.append(side)
    # Several captures a side: their spread says whether the change stands out from noise.
    d = diff_results(sides[0], sides[1])
    if args.json:
        print(dumps_json(d))
    else:
        _print(render_diff(d, row_limit=args.rows).rstrip("\n"))
    if args.html:
        from neuronscope.report.html import render_diff_report

        try:
            Path(args.html).write_text(render_diff_report(d), encoding="utf-8")
        except OSError as exc:
            raise NeuronscopeError(f"{args.html}: cannot write the page ({exc.strerror or exc})") from exc
        if not args.json:  # the JSON alone on stdout
            _print(f"page: {args.html}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from neuronscope.report.html import write_report

    path = write_report(args.run)
    _print(str(path))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from neuronscope.doctor import main as doctor_main

    return doctor_main(args.out)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from neuronscope.analysis.calibration import cache_path, calibrate, describe

    if args.dtype not in ("float32", "float64", "float16", "bfloat16"):
        raise NeuronscopeError(f"calibrate --dtype takes float32, float64, float16 or bfloat16, not {args.dtype!r}")
    if args.threads is not None:
        if args.threads < 1:
            raise NeuronscopeError(f"calibrate --threads takes a count of at least 1, not {args.threads}")
        import torch

        torch.set_num_threads(args.threads)  # the costs are kept per thread count
    _print(describe(calibrate("cpu", args.dtype)))
    _print(f"kept in {cache_path()}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from neuronscope.demo import render_demo, run_demo

    cmp = run_demo(
        backend=args.backend,
        output_dir=args.output_dir,
        export=not args.no_export,
        compile=not args.no_compile,
    )
    _print(render_demo(cmp))
    if args.verbose:
        for result in cmp.results.values():
            _print(result.table(row_limit=8))
    if cmp.run_dir:
        _print(f"written to {cmp.run_dir}")
        if args.report:
            from neuronscope.report.html import write_report

            _print(f"report: {write_report(cmp.run_dir)}")
        else:
            _print(f"reopen with: neuronscope show {cmp.run_dir}\nreport with: neuronscope report {cmp.run_dir}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, the usage folded into it (a bad argument: exit
    status 2 and one line, as for every other error)."""

    def error(self, message: str) -> NoReturn:
        usage = " ".join(self.format_usage().split())
        _error(f"{message} ({usage})")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from neuronscope import __version__

    parser = _Parser(
        prog="neuronscope",
        description="Show, list, diff and report neuronscope runs and torch.profiler traces.",
        epilog="Exit status: 0 on success, 2 for a bad argument or an unreadable run.",
    )
    parser.add_argument("--version", action="version", version=f"neuronscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser(
        "show",
        help="print a run's tables and hints (a run directory or a trace file)",
        description="Print the op table, regions and hints of a run, as the capture printed them.",
    )
    p.add_argument(
        "run",
        nargs="*",
        help="(none: the newest run under the output root) run directory, its result.json, a torch.profiler trace (.json / .json.gz), a folder of "
        "traces (one per rank, or tensorboard_trace_handler's), several trace files (the ranks of one "
        f"job), or RUN_DIR{VARIANT_SEP}LABEL for one variant of a comparison",
    )
    p.add_argument("--rows", type=_rows_arg, default=None, help="ops to show per table (default: as many as the capture printed)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser(
        "ls",
        help="list runs, newest first",
        description="List the runs under an output root, newest first: name, time, backend, "
        "status, total time and top hint.",
    )
    p.add_argument("root", nargs="?", help="output root (default: $NEURONSCOPE_OUTPUT_DIR or ./neuronscope-runs)")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=cmd_ls)
    p = sub.add_parser(
        "diff",
        help="compare two runs op by op",
        description="Per-op time and calls of two runs side by side, the ops that appeared and "
        "disappeared, and the change in total.",
    )
    p.add_argument("run_a", help=f"the baseline run (directory, trace file, or RUN_DIR{VARIANT_SEP}LABEL)")
    p.add_argument("run_b", help="the run to compare with it")
    p.add_argument("--also-a", action="append", metavar="RUN", help="another capture of the baseline (repeat it): the spread of several tells a change from noise")
    p.add_argument("--also-b", action="append", metavar="RUN", help="another capture of the run compared (repeat it)")
    p.add_argument("--rows", type=_rows_arg, default=25, help="ops to show (default 25)")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p.add_argument("--html", metavar="PAGE", help="also write the diff as a page with its pictures (modules, ops)")
    p.set_defaults(func=cmd_diff)
    p = sub.add_parser(
        "report",
        help="write a self-contained report.html into a run directory",
        description="Write report.html (charts, hints, regions, ranks, speedups; opens offline) "
        "into the run directory and print its path.",
    )
    p.add_argument("run", help="run directory (or its result.json)")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser(
        "demo",
        help="hand-written RMSNorm vs torch.rms_norm vs torch.compile",
        description="Run the study that motivated neuronscope on this machine's backend and "
        "export it as one comparison run.",
    )
    p.add_argument("--backend", default="auto", choices=["auto", "neuron", "cuda", "cpu"], help="backend (default auto)")
    p.add_argument("--output-dir", default=None, help="where runs go (default: $NEURONSCOPE_OUTPUT_DIR or ./neuronscope-runs)")
    p.add_argument("--no-export", action="store_true", help="keep the results in memory only")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant (it compiles for seconds on a CPU)")
    p.add_argument("--report", action="store_true", help="also write report.html into the run")
    p.add_argument("--verbose", action="store_true", help="also print each variant's op table and hints")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser(
        "doctor",
        help="record what this host's TorchNeuron does (one JSON file for a bug report)",
        description="On a Trainium host: probe TorchNeuron's profiling API and one small capture "
        "and write one JSON file; elsewhere: say what it would do.",
    )
    p.add_argument("--out", default=None, help="where to write the JSON (default: ./neuronscope-doctor-<host>-<time>.json)")
    p.set_defaults(func=cmd_doctor)
    p = sub.add_parser(
        "calibrate",
        help="measure this machine's op costs once and keep them for the fusion estimates",
        description="Time a small op, the bandwidth, torch.compile's entry and each idiom's eager "
        "replacement on this CPU (some 20 s) and keep them in the user's cache directory "
        "($NEURONSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/neuronscope): captures then bound their "
        "estimated savings by them, and never time anything themselves.",
    )
    p.add_argument("--dtype", default="float32", help="dtype of the probes (default float32)")
    p.add_argument("--threads", type=int, default=None, help="torch threads to measure with, as your program sets them (default: torch's)")
    p.set_defaults(func=cmd_calibrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 2 bad argument or unreadable run)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help / --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        return int(args.func(args))
    except NeuronscopeError as exc:
        _error(str(exc))
        return 2
    except OSError as exc:  # a path that cannot be read or written
        if isinstance(exc, BrokenPipeError):  # `neuronscope ls | head`
            _silence_stdout()
            return 0
        where = f"{exc.filename}: " if exc.filename else ""
        _error(f"{where}{exc.strerror or exc}")
        return 2
    except KeyboardInterrupt:
        print("neuronscope: interrupted", file=sys.stderr)
        return 130


def _error(message: str) -> None:
    """One line on stderr, printable (a file name from a hostile directory is escaped)."""
    from neuronscope.units import shorten

    print(f"neuronscope: error: {printable(shorten(message, 2000))}", file=sys.stderr)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":  # ``python -m neuronscope.cli``, as well as ``python -m neuronscope``
    sys.exit(main())
