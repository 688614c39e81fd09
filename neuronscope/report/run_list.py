"""The runs under an output root as rows: what ``neuronscope ls`` lists.

Each row says what a run is without opening its trace: its name, when it ran, backend,
status, total, and its top hint (for a comparison, the fastest variant told apart from the
first, never a winner the noise picked).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from neuronscope.errors import NeuronscopeError
from neuronscope.export.runs import INCOMPLETE_MARKER, RESULT_FILE, find_runs, load
from neuronscope.result.comparison import Comparison

__all__ = ["best_variant", "fastest_text", "run_rows"]


def _stamp(run: Path) -> str:
    """'2026-12-02 17:49:21' from a run directory's name, or the name's first part."""
    head = run.name.split("_", 1)[0]
    try:
        return _dt.datetime.strptime(head, "%Y%m%d-%H%M%S-%f").strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return head


def _top_hint_text(obj: Any) -> str | None:
    if not obj.hints:
        return None
    hint = obj.hints[0]
    return f"{hint.pattern} ({hint.saving_text})"


def run_rows(root: Path) -> list[dict[str, Any]]:
    """One row per run under ``root``, newest first: name, time, backend, status, total and
    top hint (a comparison's answer: its fastest variant), or why it could not be read."""
    rows = []
    for run in find_runs(root):
        row: dict[str, Any] = {
            "run_dir": str(run),
            "name": run.parent.name,
            "time": _stamp(run),
            "kind": None,
            "backend": None,
            "status": None,
            "total_us": None,
            "top_hint": None,
        }
        incomplete = (run / INCOMPLETE_MARKER).exists()
        if incomplete and not (run / RESULT_FILE).exists():
            row["status"] = "incomplete"
            rows.append(row)
            continue
        try:
            obj = load(run)
        except NeuronscopeError as exc:
            row.update(status="unreadable", error=str(exc))
            rows.append(row)
            continue
        if isinstance(obj, Comparison):
            best = best_variant(obj)
            row.update(
                name=obj.name,
                kind="comparison",
                backend=obj.backend,
                status="ok",
                total_us=obj.wall_time_us,  # how long compare() ran: a sum of medians means nothing
                top_hint=fastest_text(obj, best),
            )
        else:
            row.update(
                name=obj.name,
                kind="result",
                backend=obj.backend,
                status=obj.status,
                total_us=obj.wall_time_us,
                top_hint=_top_hint_text(obj),
            )
        if incomplete:  # measured, but its trace (written last) did not finish
            row["status"] = "incomplete"
        rows.append(row)
    return rows


def best_variant(cmp: Any) -> Any:
    """The quickest variant told faster than the first, else the quickest of all (with its
    noise mark); the first itself when every other is told slower. A variant called noise (its
    median times contradicting its speedup) never hides one told faster."""
    others = cmp.rows[1:] or cmp.rows
    faster = [r for r in others if r.verdict == "faster"]
    best = max(faster or others, key=lambda r: r.speedup, default=None)
    return cmp.rows[0] if best is not None and best.verdict == "slower" else best


def fastest_text(cmp: Any, best: Any) -> str | None:
    """The comparison's answer in one cell: the fastest variant, or that none was told apart
    from the first (every speedup within the noise) — never a winner the noise picked."""
    if best is None:
        return None
    text = f"{best.label} ({best.speedup_text(cmp.rows[0])})"
    if best is not cmp.rows[0] and best.within_noise(cmp.rows[0]):
        return f"fastest: none told apart from {cmp.rows[0].label} (best {text})"
    return f"fastest: {text}"
