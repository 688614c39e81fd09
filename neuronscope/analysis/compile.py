"""torch.compile inside a capture: ``recompile``, ``graph_break`` and ``compile`` hints.

:func:`compile_hints` turns Dynamo's records, as the capture stage gathered them
(:mod:`neuronscope.capture.dynamo`, in ``AnalysisContext.extra["compile"]``), and the captured
events into hints. The op table's names for compiled code, which the hints use too, are the
result's (:mod:`neuronscope.result.compiled_names`).

What torch exposes (read on torch 2.13; ``getattr`` everywhere, so older versions just give
less):

- ``torch._dynamo.utils.get_compilation_metrics()``: one ``CompilationMetrics`` per frame
  compile (the last 64 kept): ``compile_id`` ("F/A": frame F, attempt A; A >= 1 is a
  recompile), ``co_name`` / ``co_filename`` / ``co_firstlineno``, the compile's duration and
  ``recompile_reason`` (the first failing guard, e.g. "0/0: tensor 'x' size mismatch at index
  0. expected 4, actual 8"; present since torch 2.6). There is no "recompiles" counter.
- ``torch._dynamo.utils.counters["graph_break"]``: reason text -> count, counted when a frame
  is compiled (not when it runs); ``torch._dynamo.utils.graph_break_reasons``: the same
  breaks with ``user_stack`` (the user's ``file:line``), cleared by ``torch._dynamo.reset()``.
- A graph break makes Dynamo compile the rest of the function as a new frame named
  ``torch_dynamo_resume_in_<fn>_at_<line>``; each call of it in a capture is a
  ``Torch-Compiled Region: F/A`` event. So a break is seen even when its function was compiled
  before the capture (the usual case after a warm-up), where the counters do not move.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from neuronscope.result.compiled_names import REGION, REGION_PREFIX, RESUME, compiled_label
from neuronscope.result.hint import Hint
from neuronscope.result.stats import OpStat

if TYPE_CHECKING:
    from neuronscope.analysis.context import AnalysisContext
    from neuronscope.events import EventTable
    from neuronscope.result.summary import Summary

__all__ = ["compile_hints"]

_COMPILE_ID = re.compile(r"(\d+)/(\d+)")


def _split_id(cid: Any) -> tuple[int, int] | None:
    m = _COMPILE_ID.search(str(cid or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _owner(co_name: str | None) -> str | None:
    """The user's function a frame belongs to: a resume frame's is the function it resumes."""
    m = RESUME.match(co_name or "")
    return m.group(1) if m else co_name or None


def _region_events(table: EventTable) -> dict[str, int]:
    """Compile id -> number of ``Torch-Compiled Region`` events in the capture."""
    regions = (REGION.match(name) for name in table.names if name.startswith(REGION_PREFIX))
    return collections.Counter(m.group(1) for m in regions if m)


def _op_by_name(summary: Summary | None, name: str) -> OpStat | None:
    return next((op for op in summary.ops if op.name == name), None) if summary is not None else None


# ---- 2. rules -------------------------------------------------------------------------------
#: Recompile reasons by the guard that failed, with what to do about each. Matched in order on
#: the reason text of torch 2.x ("tensor 'x' size mismatch at index 0. expected 4, actual 8").
_RECOMPILE_KINDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "shape",
        ("size mismatch", "rank mismatch", "stride mismatch", "dimensionality"),
        (
            "input shapes changed: mark the varying dimension dynamic (torch._dynamo.mark_dynamic(x, dim) "
            "or torch.compile(dynamic=True)), or pad inputs to a few fixed sizes"
        ),
    ),
    ("dtype", ("dtype mismatch",), "input dtypes changed: cast inputs to one dtype before the compiled call"),
    ("device", ("device mismatch",), "inputs moved between devices: keep them on one device"),
    (
        "grad_mode",
        ("requires_grad mismatch", "grad_mode", "GradMode", "autocast"),
        (
            "grad mode, requires_grad or autocast changed between calls: call the compiled function under "
            "one mode, or compile one function per mode"
        ),
    ),
    (
        "object_identity",
        ("id_match", "___check_obj_id", "type_match", "___check_type_id"),
        (
            "a Python object the function reads (a module, parameter or global) was replaced: keep the same "
            "object, or pass it as a tensor argument"
        ),
    ),
    (
        "python_value",
        (" == ",),
        (
            "a Python number or flag the function reads changed: pass it as a tensor, or mark it dynamic "
            "(torch._dynamo.config.specialize_int=False for ints)"
        ),
    ),
)
_GUARD = ("guard", "a guard failed: keep what it checks the same between calls (TORCH_LOGS=recompiles prints them)")


def _kind_of(reason: str) -> tuple[str, str]:
    """The kind of guard that ``reason`` says failed, and the advice for it."""
    for kind, needles, advice in _RECOMPILE_KINDS:
        if any(n in reason for n in needles):
            return kind, advice
    return _GUARD


def _recompile_kind(reasons: list[str]) -> tuple[str, list[str]]:
    """The most common kind among ``reasons`` (the latest on a tie), and the advice for each
    kind present, most common first."""
    kinds = [_kind_of(r) for r in reasons] or [_GUARD]
    counts = collections.Counter(kind for kind, _ in kinds)
    latest = {kind: i for i, (kind, _) in enumerate(kinds)}
    order = sorted(counts, key=lambda k: (counts[k], latest[k]), reverse=True)
    advice_by_kind = dict(kinds)
    return order[0], [advice_by_kind[k] for k in order]


def _reason_line(reason: str) -> str:
    """``0/0: n == 0`` out of Dynamo's multi-line reason (guard source comment and stack cut)."""
    line = reason.strip().splitlines()[0] if reason.strip() else reason
    return line.split("  #", 1)[0].strip()


def _location(file: Any, line: Any) -> str | None:
    return f"{file}:{line}" if file and line is not None else None


def _frame_function(frame: int, compiles: list[dict[str, Any]], functions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Function, file and line of Dynamo frame ``frame`` (a compile that failed has none)."""
    for c in compiles:
        if c.get("function"):
            return c
    for cid, info in functions.items():
        ids = _split_id(cid)
        if ids is not None and ids[0] == frame and info.get("function"):
            return info
    return {}


def _recompile_hints(fx: dict[str, Any]) -> list[Hint]:
    groups: dict[int, list[dict[str, Any]]] = {}
    for c in fx.get("compiles", []):
        ids = _split_id(c.get("compile_id"))
        if ids is None or (ids[1] == 0 and not c.get("recompile_reason")):
            continue
        groups.setdefault(ids[0], []).append(c)
    functions: dict[str, dict[str, Any]] = fx.get("functions", {})
    hints = []
    for frame, compiles in groups.items():
        info = _frame_function(frame, compiles, functions)
        fn = _owner(info.get("function")) or f"frame {frame}"
        reasons = list(dict.fromkeys(_reason_line(str(c["recompile_reason"])) for c in compiles if c.get("recompile_reason")))
        kind, advice = _recompile_kind(reasons)
        spent = sum(c.get("compile_time_us") or 0.0 for c in compiles)
        limit_hit = any("recompile limit" in str(c.get("fail_reason") or "").lower() for c in compiles)
        shown = "; ".join(reasons[-3:])
        why = f" (guards that failed: {shown})" if reasons else " (torch gave no reason: TORCH_LOGS=recompiles prints it)"
        limit = (
            "; it hit torch._dynamo.config.recompile_limit and now runs uncompiled (eager)" if limit_hit else ""
        )
        hints.append(
            Hint(
                kind="recompile",
                pattern=kind,
                ops=[compiled_label(str(compiles[-1].get("compile_id")), functions) if info else f"compiled: {fn}"],
                calls=len(compiles),
                time_us=spent,
                est_saving_us=spent,
                suggestion=f"{fn} recompiled {len(compiles)}x in the capture{why}{limit}; " + "; ".join(advice[:2]),
                location=_location(info.get("file"), info.get("line")),
                confidence="measured",
                details={
                    "function": fn,
                    "reasons": reasons,
                    "compile_ids": [c.get("compile_id") for c in compiles],
                    "compile_time_us": spent,
                    "recompile_limit_hit": limit_hit,
                },
            )
        )
    return hints


@dataclass
class _Break:
    """One graph break, as its hint reports it."""

    file: Any
    line: Any
    function: Any
    reason: str | None
    calls: int = 0  # crossings at run time: calls of the frame after the break
    compiled_in_capture: int = 0
    graphs: list[str] = field(default_factory=list)
    overhead_us: float = 0.0
    time_us: float = 0.0


def _graph_break_hints(fx: dict[str, Any], table: EventTable, summary: Summary | None) -> list[Hint]:
    functions: dict[str, dict[str, Any]] = fx.get("functions", {})
    # Break records by every user frame on their stack, the innermost (the break itself) last,
    # so it wins: a resume frame "at line N" is found by the frame that reads N.
    by_frame: dict[tuple[Any, Any], dict[str, Any]] = {}
    for rec in fx.get("known_breaks", []) + fx.get("break_records", []):
        for f, ln in rec.get("frames") or [[rec.get("file"), rec.get("line")]]:
            by_frame.setdefault((f, ln), rec)
        by_frame[(rec.get("file"), rec.get("line"))] = rec
    # One entry per break: keyed by its record (where it broke) where one is known, else by the
    # resume frame's file and line.
    sites: dict[tuple[Any, ...], _Break] = {}

    def site(rec: dict[str, Any] | None, file: Any, line: Any, fn: Any) -> _Break:
        if rec is not None:
            key: tuple[Any, ...] = ("record", rec.get("file"), rec.get("line"), rec.get("reason"))
            file, line, fn = rec.get("file"), rec.get("line"), rec.get("function") or fn
        else:
            key = ("resume", file, line)
        if key not in sites:
            sites[key] = _Break(file, line, fn, None if rec is None else rec.get("reason"))
        return sites[key]

    # (a) breaks crossed at run time: each call of a resume frame enters one more graph.
    regions = _region_events(table)
    for cid, count in regions.items():
        info = functions.get(cid) or {}
        m = RESUME.match(info.get("function") or "")
        if not m:
            continue
        file, line = info.get("file"), int(m.group(2))
        entry = site(by_frame.get((file, line)), file, line, m.group(1))
        entry.calls += count
        entry.graphs.append(compiled_label(cid, functions))
        op = _op_by_name(summary, REGION_PREFIX + cid)
        if op is not None:
            # Entering one more compiled graph: Dynamo's own time around it, as measured.
            entry.overhead_us += op.self_cpu_us
            entry.time_us += op.cpu_total_us
    # (b) breaks compiled during the capture (the counters moved).
    counted = set()
    for rec in fx.get("break_records", []):
        entry = site(rec, rec.get("file"), rec.get("line"), rec.get("function"))
        entry.compiled_in_capture += rec.get("count", 1)
        counted.add(rec.get("reason"))
    for reason, count in fx.get("graph_breaks", {}).items():
        if reason not in counted:  # a counter with no record: the location is unknown
            entry = site(None, None, reason, None)
            entry.reason = reason
            entry.compiled_in_capture += count
    hints = []
    for e in sites.values():
        file, fn = e.file, e.function
        # The op-table rows of the function's own (first) graph, where it ran in the capture.
        parents = [
            compiled_label(cid, functions)
            for cid in regions
            if (functions.get(cid) or {}).get("function") == fn and (functions.get(cid) or {}).get("file") == file
        ]
        reason = e.reason or "reason not recorded (TORCH_LOGS=graph_breaks prints it)"
        hints.append(
            Hint(
                kind="graph_break",
                pattern="graph_break",
                ops=(parents or ([f"compiled: {fn}"] if fn else [])) + e.graphs,
                calls=e.calls or e.compiled_in_capture,
                time_us=e.time_us,
                est_saving_us=e.overhead_us,
                suggestion=(
                    f"{fn or 'a compiled function'} breaks into separate graphs here: {reason}; move that code out "
                    f"of the compiled function or replace it with something Dynamo traces "
                    f"(torch.compile(fullgraph=True) turns the break into an error that names it)"
                ),
                location=_location(file, e.line),
                confidence="measured",
                details={
                    "function": fn,
                    "reason": reason,
                    "crossings_in_capture": e.calls,
                    "compiled_in_capture": e.compiled_in_capture,
                    "graphs": e.graphs,
                },
            )
        )
    return hints


def _compile_in_capture_hints(fx: dict[str, Any]) -> list[Hint]:
    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for c in fx.get("compiles", []):
        ids = _split_id(c.get("compile_id"))
        if ids is None or ids[1] != 0 or c.get("recompile_reason"):
            continue
        owner = _owner(c.get("function"))
        groups.setdefault((owner, c.get("file")), []).append(c)
    hints = []
    for (fn, file), compiles in groups.items():
        spent = sum(c.get("compile_time_us") or 0.0 for c in compiles)
        line = next((c.get("line") for c in compiles if c.get("function") == fn), None)
        hints.append(
            Hint(
                kind="compile",
                pattern="compile_in_capture",
                ops=[f"compiled: {fn}"],
                calls=len(compiles),
                time_us=spent,
                est_saving_us=spent,
                suggestion=(
                    f"{fn} was compiled inside the capture, so the op table holds the compiler's work: run one "
                    f"call before the capture (the decorator's warmup=1) to measure the compiled code"
                ),
                location=_location(file, line),
                confidence="measured",
                details={"function": fn, "compile_ids": [c.get("compile_id") for c in compiles], "compile_time_us": spent},
            )
        )
    return hints


def compile_hints(ctx: AnalysisContext) -> list[Hint]:
    """``recompile``, ``graph_break`` and ``compile`` hints for torch.compile work in the capture.

    Live captures use ``ctx.extra["compile"]`` (:func:`neuronscope.capture.dynamo.facts`); a
    trace file has none, so it gets no compile hints.
    """
    fx = ctx.extra.get("compile")
    if not fx or not fx.get("loaded"):
        return []
    return (
        _recompile_hints(fx)
        + _graph_break_hints(fx, ctx.table, ctx.summary)
        + _compile_in_capture_hints(fx)
    )
