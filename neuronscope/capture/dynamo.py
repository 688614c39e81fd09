"""What Dynamo recorded while a capture ran: read before the profiler starts and after it stops.

Part of the capture stage: :func:`snapshot` before the profiler starts and :func:`facts` after
it stops read Dynamo's own records and return plain data, which the analysis stage turns into
``recompile`` and ``graph_break`` hints (:mod:`neuronscope.analysis.compile`). Nothing is
imported: when the program has not imported ``torch._dynamo``, nothing was compiled.
"""

from __future__ import annotations

from typing import Any

from neuronscope.capture import torch_private

__all__ = ["MAX_BREAK_RECORDS", "REASON_CHARS", "facts", "snapshot"]

#: Most graph-break records kept for looking up the reason of a break seen at run time: one
#: per break site, so a few hundred cover any real program while keeping result.json small.
MAX_BREAK_RECORDS = 256
#: Reason text kept per hint: Dynamo's reasons run to ten lines of hints and links; the first
#: lines say what broke.
REASON_CHARS = 400


def _dynamo_utils() -> Any | None:
    """``torch._dynamo.utils`` if the program imported Dynamo, else None (never imports it:
    that costs seconds, and a program that never imported it compiled nothing)."""
    return torch_private.dynamo_utils()


def snapshot() -> dict[str, Any]:
    """Dynamo's counters before a capture (cheap: a dict copy and two list references)."""
    utils = _dynamo_utils()
    if utils is None:
        return {"loaded": False}
    try:
        counters = getattr(utils, "counters", {})
        breaks = getattr(utils, "graph_break_reasons", None)
        metrics = _metrics(utils)
        return {
            "loaded": True,
            "graph_break": dict(counters.get("graph_break", {})),
            "break_records": len(breaks) if breaks is not None else 0,
            # The objects themselves, not their ids: holding them keeps an id from being reused
            # by a new record after the deque (64 entries) drops an old one.
            "metrics": metrics,
        }
    except Exception:
        return {"loaded": False}


def _metrics(utils: Any) -> list[Any]:
    get = getattr(utils, "get_compilation_metrics", None)
    if get is None:
        return []
    try:
        return [m for m in get() if not getattr(m, "is_runtime", False)]
    except Exception:
        return []


def _frame(summary: Any) -> tuple[str | None, int | None, str | None]:
    return getattr(summary, "filename", None), getattr(summary, "lineno", None), getattr(summary, "name", None)


def _break_record(rec: Any) -> dict[str, Any]:
    """A break's reason, its innermost user frame (where it broke) and every user frame on the
    way there: a break inside a helper also splits each compiled caller at its call line."""
    stack = getattr(rec, "user_stack", None) or []
    file, line, func = _frame(stack[-1]) if stack else (None, None, None)
    frames = [[f, ln] for f, ln, _ in map(_frame, stack)]
    return {"reason": _short(str(getattr(rec, "reason", ""))), "file": file, "line": line, "function": func, "frames": frames}


def _short(reason: str) -> str:
    """Dynamo's reason without its trailing hints, links and debug context."""
    keep: list[str] = []
    for line in reason.strip().splitlines():
        text = line.strip()
        if not text:
            break
        if text.startswith(("Hint:", "Developer debug context", "For more details")):
            continue
        keep.append(text)
    out = " ".join(keep) or reason.strip()
    return out if len(out) <= REASON_CHARS else out[: REASON_CHARS - 3] + "..."


def _compile_record(m: Any) -> dict[str, Any]:
    duration = getattr(m, "duration_us", None)
    if duration is None and getattr(m, "entire_frame_compile_time_s", None) is not None:
        duration = m.entire_frame_compile_time_s * 1e6
    return {
        "compile_id": getattr(m, "compile_id", None),
        "function": getattr(m, "co_name", None),
        "file": getattr(m, "co_filename", None),
        "line": getattr(m, "co_firstlineno", None),
        "recompile_reason": getattr(m, "recompile_reason", None),
        "compile_time_us": float(duration) if duration is not None else None,
        "graph_breaks": getattr(m, "num_graph_breaks", None),
        "failed": getattr(m, "fail_type", None),
        "fail_reason": _short(str(m.fail_reason)) if getattr(m, "fail_reason", None) else None,
    }


def facts(before: dict[str, Any] | None) -> dict[str, Any]:
    """What Dynamo recorded during the capture, against ``before`` (from :func:`snapshot`).

    Plain data (it goes into ``AnalysisContext.extra["compile"]``): ``compiles`` (the frame
    compiles that ran in the capture), ``graph_breaks`` (``{reason: count}`` added to Dynamo's
    counter), ``break_records`` (the breaks recorded in the capture, with locations),
    ``known_breaks`` (every break record Dynamo holds, to name the reason of a break that was
    compiled before the capture) and ``functions`` (compile id -> function, file, line).
    """
    utils = _dynamo_utils()
    if utils is None:
        return {"loaded": False}
    before = before or {}
    out: dict[str, Any] = {"loaded": True}
    try:
        metrics = _metrics(utils)
        old = {id(m) for m in before.get("metrics", [])}
        out["compiles"] = [_compile_record(m) for m in metrics if id(m) not in old]
        functions: dict[str, dict[str, Any]] = {}
        for m in metrics:  # oldest first: after torch._dynamo.reset() ids restart; the newest wins
            cid = getattr(m, "compile_id", None)
            if cid:
                functions[str(cid)] = {
                    "function": getattr(m, "co_name", None),
                    "file": getattr(m, "co_filename", None),
                    "line": getattr(m, "co_firstlineno", None),
                }
        out["functions"] = functions
        counters = getattr(utils, "counters", {})
        was = before.get("graph_break", {})
        now = dict(counters.get("graph_break", {}))
        out["graph_breaks"] = {_short(k): v - was.get(k, 0) for k, v in now.items() if v - was.get(k, 0) > 0}
        records = list(getattr(utils, "graph_break_reasons", None) or [])
        start = before.get("break_records", 0)
        if start > len(records):  # torch._dynamo.reset() cleared the list during the capture
            start = 0
        new = [r for r in records[start:] if getattr(r, "graph_break", True)]
        out["break_records"] = _dedupe([_break_record(r) for r in new])
        known = [r for r in records if getattr(r, "graph_break", True)]
        out["known_breaks"] = _dedupe([_break_record(r) for r in known])[-MAX_BREAK_RECORDS:]
    except Exception as err:  # Dynamo's internals move between versions: lose the hints, not the capture
        out["error"] = f"{type(err).__name__}: {err}"
    return out


def _dedupe(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[tuple[Any, Any, str], dict[str, Any]] = {}
    for r in records:
        key = (r["file"], r["line"], r["reason"])
        if key in seen:
            seen[key]["count"] += 1
            seen[key]["frames"] += [f for f in r.get("frames", []) if f not in seen[key]["frames"]]
        else:
            seen[key] = {**r, "count": 1, "frames": list(r.get("frames", []))}
    return list(seen.values())
