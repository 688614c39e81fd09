"""Two results op by op: time and calls side by side, ops that appeared or disappeared, and
the change in total.

Times are each op's ranking time (self device time where the run has it, else self CPU time),
summed over the capture, as in the op tables; the total is the sum over all ops.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from neuronscope.result.types import ProfileResult
from neuronscope.units import fmt_us, safe_text

__all__ = ["diff_results", "render_diff"]


def _side(r: ProfileResult) -> dict[str, Any]:
    return {
        "name": r.name,
        "run_dir": r.run_dir,
        "backend": r.backend,
        "status": r.status,
        "total_us": r.total_op_us,
        "wall_time_us": r.wall_time_us,
        "time_kind": "device" if r.has_device_time else "cpu",
    }


def diff_results(a: ProfileResult | Sequence[ProfileResult], b: ProfileResult | Sequence[ProfileResult]) -> dict[str, Any]:
    """A JSON-ready diff of ``b`` against the baseline ``a``.

    ``ops`` holds one row per op name in either run (status ``common``, ``added`` in ``b`` or
    ``removed`` from it), largest absolute change first; ``added`` / ``removed`` list the names.

    Each side may be several captures of the same code (a decorated function's ``results``):
    the op table compares the first of each, and the totals' spread over the captures says
    whether the change in total stands out from run-to-run variation (``told_apart``). With
    one capture a side nothing can say that, and a note says so: on a shared machine one
    capture of identical steps took 0.41x of another.
    """
    side_a, side_b = _captures(a), _captures(b)
    a, b = side_a[0], side_b[0]
    rows = [
        {"op": name, **row, "calls_a": oa.calls if oa else 0, "calls_b": ob.calls if ob else 0}
        for name, oa, ob, row in _paired(a.ops, b.ops)
    ]
    rows.sort(key=lambda r: (abs(r["delta_us"]), r["time_a_us"] + r["time_b_us"]), reverse=True)
    total_a, total_b = a.total_op_us, b.total_op_us
    notes = []
    if a.has_device_time != b.has_device_time:
        notes.append("one run has device time and the other not: times compare device with CPU time")
    spread_a = [r.total_op_us for r in side_a]
    spread_b = [r.total_op_us for r in side_b]
    told_apart: bool | None = None
    if len(side_a) < 2 or len(side_b) < 2:
        notes.append(
            f"{len(side_a)} and {len(side_b)} capture(s): one capture's time varies from run to run (on a busy machine "
            "by 2x and more), so no change here, however large, is told apart from that variation; capture several "
            "(active=N) and diff them all, or time the two with neuronscope.compare()"
        )
    else:
        told_apart = max(spread_a) < min(spread_b) or max(spread_b) < min(spread_a)
        total_a, total_b = statistics.median(spread_a), statistics.median(spread_b)
        notes.append(
            f"totals over {len(side_a)} and {len(side_b)} captures (medians compared): A {fmt_us(min(spread_a))} to "
            f"{fmt_us(max(spread_a))}, B {fmt_us(min(spread_b))} to {fmt_us(max(spread_b))}; "
            + ("the ranges do not overlap: told apart" if told_apart else "the ranges overlap: not told apart")
        )
    return {
        "a": _side(a),
        "b": _side(b),
        "captures": [len(side_a), len(side_b)],
        "told_apart": told_apart,
        "total_delta_us": total_b - total_a,
        "total_ratio": (total_b / total_a) if total_a else None,
        "modules": _module_rows(a, b),
        "ops": rows,
        "added": [r["op"] for r in rows if r["status"] == "added"],
        "removed": [r["op"] for r in rows if r["status"] == "removed"],
        "notes": notes,
    }


def _captures(side: ProfileResult | Sequence[ProfileResult]) -> list[ProfileResult]:
    captures = [side] if isinstance(side, ProfileResult) else list(side)
    if not captures:
        raise ValueError("diff_results needs at least one result on each side")
    return captures


def _paired(items_a: Sequence[Any], items_b: Sequence[Any]) -> list[tuple[str, Any, Any, dict[str, Any]]]:
    """Each name in either list (A's order, then B's new ones), its item on each side (None
    where missing) and the row both tables share: status, time on each side and the change."""
    by_a = {i.name: i for i in items_a}
    by_b = {i.name: i for i in items_b}
    out = []
    for name in list(by_a) + [n for n in by_b if n not in by_a]:
        ia, ib = by_a.get(name), by_b.get(name)
        ta = ia.time_us if ia else 0.0
        tb = ib.time_us if ib else 0.0
        status = "removed" if ib is None else "added" if ia is None else "common"
        out.append((name, ia, ib, {"status": status, "time_a_us": ta, "time_b_us": tb, "delta_us": tb - ta}))
    return out


def _module_rows(a: ProfileResult, b: ProfileResult) -> list[dict[str, Any]]:
    """One row per module (qualified name) in either run: inclusive time in each (forward and
    backward) and the change, largest change first; empty where neither run has a module tree."""
    rows = []
    for name, ma, mb, row in _paired(a.modules, b.modules):
        # Forward and backward: a training step's module got slower in either.
        ta, tb = _module_time(ma), _module_time(mb)
        sa, sb = _module_time(ma, own=True), _module_time(mb, own=True)
        row = {**row, "time_a_us": ta, "time_b_us": tb, "delta_us": tb - ta, "self_a_us": sa, "self_b_us": sb, "self_delta_us": sb - sa}
        rows.append({"module": name, **row, "ratio": (tb / ta) if ta and mb is not None else None})
    rows.sort(key=lambda r: abs(r["delta_us"]), reverse=True)
    return rows


def _module_time(m: Any, own: bool = False) -> float:
    """A module's time, forward and backward (0 for a module the run lacks): inclusive, or
    its ``own`` (its children's left out)."""
    if m is None:
        return 0.0
    if not own:
        return float(m.time_us + (m.backward_us or 0.0))
    device = m.device_total_us is not None
    fwd = (m.self_device_us if device else m.self_cpu_us) or 0.0
    bwd = (m.self_backward_device_us if device else m.self_backward_cpu_us) or 0.0
    return float(fwd + bwd)


#: Module rows shown by the text diff (the costliest changes).
MODULE_ROWS = 10


#: Op names listed after the table for each of "appeared" and "gone" (largest first).
NAMES_LISTED = 10


def _signed(us: float) -> str:
    return ("+" if us >= 0 else "-") + fmt_us(abs(us))


def render_diff(d: dict[str, Any], row_limit: int = 25) -> str:
    """The diff as text: the two totals and the change, then the op table."""
    table = [
        [
            safe_text(r["op"]),
            r["status"],
            fmt_us(r["time_a_us"]) if r["status"] != "added" else "-",
            fmt_us(r["time_b_us"]) if r["status"] != "removed" else "-",
            _signed(r["delta_us"]),
            f"{r['calls_a']} -> {r['calls_b']}",
        ]
        for r in d["ops"][: max(row_limit, 0)]
    ]
    ratio = d["total_ratio"]
    head = "\n".join(
        f"{key.upper()}: {safe_text(side['name'])} ({safe_text(side['backend'])}) total {fmt_us(side['total_us'])}"
        f" (wall {fmt_us(side['wall_time_us'])})" + (f"  {safe_text(side['run_dir'], 4096)}" if side.get("run_dir") else "")
        for key, side in (("a", d["a"]), ("b", d["b"]))
    )
    told = d.get("told_apart")
    caveat = "" if told else " (not told apart from run-to-run variation: see the note)"
    head += f"\nchange in total: {_signed(d['total_delta_us'])}" + (
        f" (B takes {ratio:.2f}x of A){caveat}" if ratio is not None else caveat
    )
    body = tabulate(table, headers=["Op", "Status", "A", "B", "Change", "Calls A -> B"], tablefmt="simple", disable_numparse=True)
    modules = d.get("modules") or []
    if modules:
        mrows = [
            [
                safe_text(r["module"]),
                r["status"],
                fmt_us(r["time_a_us"]) if r["status"] != "added" else "-",
                fmt_us(r["time_b_us"]) if r["status"] != "removed" else "-",
                _signed(r["delta_us"]),
                "" if r["ratio"] is None else f"{r['ratio']:.2f}x",
            ]
            for r in modules[:MODULE_ROWS]
        ]
        more = f"\n... {len(modules) - MODULE_ROWS} more modules" if len(modules) > MODULE_ROWS else ""
        body = (
            "Modules (inclusive time), largest change first:\n"
            + tabulate(mrows, headers=["Module", "Status", "A", "B", "Change", "B/A"], tablefmt="simple", disable_numparse=True)
            + more + "\n\n" + body
        )
    extra = ""
    hidden = len(d["ops"]) - len(table)
    if hidden > 0:
        extra += f"\n... {hidden} more ops"
    for label, names in (("appeared in B", d["added"]), ("gone in B", d["removed"])):
        if names:
            shown = ", ".join(safe_text(n) for n in names[:NAMES_LISTED])
            more = f", and {len(names) - NAMES_LISTED} more (--json lists them all)" if len(names) > NAMES_LISTED else ""
            extra += f"\n{label} ({len(names)}): {shown}{more}"
    for note in d.get("notes") or []:
        extra += f"\nnote: {safe_text(note, 2000)}"
    return f"{head}\n\n{body}{extra}\n"
