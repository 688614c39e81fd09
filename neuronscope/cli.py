"""The ``neuronscope`` command: show, ls, diff, report and demo.

``main(argv)`` returns the exit status: 0 on success, 2 for a bad argument or an unreadable
run, with a one-line message and no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from .errors import NeuronscopeError

__all__ = ["main", "build_parser"]


def _open(path_text: str) -> Any:
    """A run directory, a result.json, or a trace file, as a result object."""
    from .export import load

    path = Path(path_text)
    if path.is_file() and (path.name.endswith((".json.gz", ".pt.trace.json")) or _looks_like_trace(path)):
        from .trace import from_trace

        return from_trace(path)
    return load(path)


def _looks_like_trace(path: Path) -> bool:
    if path.name == "result.json":
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b"traceEvents" in head


def cmd_show(args: argparse.Namespace) -> int:
    from .result import Comparison

    obj = _open(args.run)
    if args.json:
        print(obj.to_json())
    elif isinstance(obj, Comparison):
        print(obj.table())
        for result in obj.results.values():
            print(result.table(row_limit=args.rows))
    else:
        print(obj.table(row_limit=args.rows))
    return 0


def _run_rows(root: Path) -> list[dict[str, Any]]:
    from .export import INCOMPLETE_MARKER, find_runs, load

    rows = []
    for run in find_runs(root):
        row: dict[str, Any] = {"run_dir": str(run), "name": run.parent.name, "time": run.name.split("_", 1)[0]}
        if (run / INCOMPLETE_MARKER).exists() and not (run / "result.json").exists():
            row.update(status="incomplete")
            rows.append(row)
            continue
        try:
            obj = load(run)
        except NeuronscopeError as exc:
            row.update(status="unreadable", error=str(exc))
            rows.append(row)
            continue
        from .result import Comparison

        if isinstance(obj, Comparison):
            best = max(obj.rows, key=lambda r: r.speedup, default=None)
            row.update(
                kind="comparison",
                backend=obj.backend,
                status="ok",
                total_us=sum(r.time_us for r in obj.rows),
                top_hint=f"fastest: {best.label} ({best.speedup:.2f}x)" if best else None,
            )
        else:
            row.update(
                kind="result",
                name=obj.name,
                backend=obj.backend,
                status=obj.status,
                total_us=obj.wall_time_us,
                top_hint=obj.hints[0].pattern if obj.hints else None,
            )
        rows.append(row)
    return rows


def cmd_ls(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from .config import default_output_root
    from .report import fmt_us

    root = Path(args.root) if args.root else default_output_root()
    if not root.is_dir():
        raise NeuronscopeError(f"{root}: no such directory (pass the output root that holds your runs)")
    rows = _run_rows(root)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no runs under {root}")
        return 0
    table = [
        [r["name"], r["time"], r.get("backend") or "-", r["status"], fmt_us(r.get("total_us")), r.get("top_hint") or "", r["run_dir"]]
        for r in rows
    ]
    print(tabulate(table, headers=["Name", "Time", "Backend", "Status", "Total", "Top hint", "Run"], tablefmt="simple", disable_numparse=True))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from .diff import diff_results, render_diff
    from .result import Comparison

    a, b = _open(args.run_a), _open(args.run_b)
    for obj, label in ((a, args.run_a), (b, args.run_b)):
        if isinstance(obj, Comparison):
            raise NeuronscopeError(f"{label}: is a comparison; diff takes two single runs (show it instead)")
    d = diff_results(a, b)
    print(json.dumps(d, indent=2) if args.json else render_diff(d))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .html_report import write_report

    path = write_report(args.run)
    print(path)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    cmp = run_demo(backend=args.backend, output_dir=args.output_dir, export=not args.no_export, compile=not args.no_compile)
    print(cmp.table())
    for result in cmp.results.values():
        print(result.table(row_limit=8))
    if cmp.run_dir:
        print(f"written to {cmp.run_dir}\nreopen with: neuronscope show {cmp.run_dir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neuronscope",
        description="Show, list and compare neuronscope runs and torch.profiler traces.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser("show", help="print a run's tables and hints (a run directory or a trace file)")
    p.add_argument("run", help="run directory, result.json, or a torch.profiler trace (.json / .json.gz)")
    p.add_argument("--rows", type=int, default=20, help="ops to show (default 20)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("ls", help="list runs, newest first")
    p.add_argument("root", nargs="?", help="output root (default: $NEURONSCOPE_OUTPUT_DIR or ./neuronscope-runs)")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=cmd_ls)
    p = sub.add_parser("diff", help="compare two runs op by op")
    p.add_argument("run_a", help="the baseline run (directory or trace file)")
    p.add_argument("run_b", help="the run to compare with it")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p.set_defaults(func=cmd_diff)
    p = sub.add_parser("report", help="write a self-contained report.html into a run directory")
    p.add_argument("run", help="run directory")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("demo", help="hand-written RMSNorm vs torch.rms_norm vs torch.compile")
    p.add_argument("--backend", default="auto", choices=["auto", "neuron", "cuda", "cpu"], help="backend (default auto)")
    p.add_argument("--output-dir", default=None, help="where runs go (default ./neuronscope-runs)")
    p.add_argument("--no-export", action="store_true", help="keep the results in memory only")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 2 bad argument or unreadable run)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    try:
        return int(args.func(args))
    except NeuronscopeError as exc:
        print(f"neuronscope: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("neuronscope: interrupted", file=sys.stderr)
        return 130
