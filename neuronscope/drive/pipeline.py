"""capture -> result -> analysis: turn an event table into a :class:`ProfileResult`, once.

Shared by live captures (:func:`result_from_record`, from the capture stage's record),
:func:`from_profiler` and :func:`from_trace`, so a trace file and a live capture give the same
tables and hints. Every fact a result holds is passed in, and the result is built in one go.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from neuronscope.analysis.context import AnalysisContext
from neuronscope.analysis.rules import analyze
from neuronscope.capture import CaptureRecord, torch_private
from neuronscope.capture.cells import readable_location
from neuronscope.config import Options, rank_info
from neuronscope.errors import NeuronscopeError
from neuronscope.events import EventTable, gc_paused, table_from_profiler
from neuronscope.events.flows import fold_system_profile
from neuronscope.events.modules import needs_links, sequence_links, split_module_ranges
from neuronscope.events.table import promote_compiled_events
from neuronscope.events.timeline import step_breakdown
from neuronscope.result.compiled_names import labelled_compiled_ops
from neuronscope.result.modules import build_modules
from neuronscope.result.placement import place_hints, without_spans
from neuronscope.result.summary import summarize
from neuronscope.result.trust import scale_hints, wall_notes
from neuronscope.result.types import HINTS_OFF_NOTE, ProfileResult

__all__ = ["CaptureFacts", "build_result", "from_profiler", "now_iso", "result_from_record"]


def now_iso() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="microseconds")


def _torch_version() -> str | None:
    """The running torch's version, without importing torch (a trace file needs no torch)."""
    torch = sys.modules.get("torch")
    return None if torch is None else str(getattr(torch, "__version__", None))


def build_result(
    table: EventTable,
    *,
    name: str,
    backend: str,
    status: str = "ok",
    wall_time_us: float | None = None,
    profiler: Any | None = None,
    source: str = "live",
    hints: bool = True,
    extra: dict[str, Any] | None = None,
    facts: dict[str, Any] | None = None,
    notes: list[str] | None = None,
    breakdown: bool = True,
    modules: Any = None,
    unprofiled_us: float | None = None,
    unprofiled_observed: bool = False,
) -> ProfileResult:
    """Summarise ``table``, run the hint rules, and return the result.

    ``wall_time_us`` defaults to the span of the recorded events (for trace files and
    captures the user ran themselves, where no clock ran around the work). ``facts`` are the
    result's other fields (``target``, ``options``, ``device_name``, ``rank``,
    ``world_size``, ``error``, ``skipped_calls``, ``artifacts``), and ``notes`` are added after
    the summary's own: the result is built with all of them, not patched afterwards.
    ``modules`` is the capture stage's :class:`~neuronscope.capture.modules.ModuleFacts`
    (the module calls' classes and sources), where it labelled them. ``unprofiled_us``, an
    unprofiled call's time, checks the profiled wall time (:mod:`neuronscope.result.trust`).
    """
    promote_compiled_events(table)  # compiled code recorded as a range is an op (torch 2.13)
    # The module calls' ranges are no regions of the user's: out of what is summarised. The
    # hint rules get the whole table, which they walk beside the profiler's event tree.
    # Backward functions go to the module whose forward made them, by autograd's numbers.
    links = sequence_links(profiler) if profiler is not None and needs_links(table) else None
    module_ranges, summarised = split_module_ranges(table, links)
    summary = summarize(summarised)
    # The device's busy and idle time; a CUPTI counter-mode trace replays each kernel, so its
    # timeline is the replays', not the run's (the caller says so with breakdown=False).
    steps = step_breakdown(summarised) if breakdown else None
    result_notes = list(summary.notes)
    result_notes.extend(notes or ())
    found = []
    if hints:
        ctx = AnalysisContext(
            table=table, summary=summary, backend=backend, profiler=profiler, source=source, extra={**(extra or {}), "breakdown": steps}
        )
        found = analyze(ctx)
    else:
        result_notes.append(HINTS_OFF_NOTE)
    # After the rules, which see torch's own names: compiled code gets readable op names.
    ops, regions = labelled_compiled_ops(summary.ops, summary.regions, summarised, (extra or {}).get("compile"))
    wall = summary.span_us if wall_time_us is None else wall_time_us
    tree = build_modules(
        module_ranges,
        types=getattr(modules, "types", None),
        root=getattr(modules, "root", None),
        wall_time_us=wall,
    )
    if tree and found:
        root = getattr(modules, "root", None)
        tree = place_hints(tree, found, getattr(modules, "sources", None) or {}, module_ranges, root=root)
    found = without_spans(found)
    # Cells of a notebook by the name the notebook shows (In [2], line 4), not a temp file.
    found = [h if readable_location(h.location) == h.location else replace(h, location=readable_location(h.location)) for h in found]
    if unprofiled_us is not None and wall_time_us is not None:
        found = scale_hints(found, wall, unprofiled_us)
        result_notes.extend(wall_notes(wall, unprofiled_us, observed=unprofiled_observed))
    return ProfileResult(
        name=name,
        backend=backend,
        status=status,
        wall_time_us=wall,
        ops=ops,
        hints=found,
        regions=regions,
        notes=result_notes,
        torch_version=_torch_version() if source == "live" else None,
        event_count=table.raw_event_count or len(table),
        device_unattributed_us=(table.unattributed_device_ns / 1e3) if table.has_device else None,
        breakdown=steps,
        modules=tree,
        **{"started_at": now_iso(), "host": socket.gethostname(), "pid": os.getpid(), **(facts or {})},
    )


@dataclass(frozen=True)
class CaptureFacts:
    """What the caller knows of a live capture beyond the capture stage's record."""

    name: str
    options: Options
    target: str | None = None
    #: The user's exception that ended the capture, as ``"Type: message"``.
    error: str | None = None
    skipped_calls: int = 0
    #: The backend's notes for the result, given whether device time was recorded.
    backend_notes: Callable[[bool], list[str]] | None = None
    #: The observation pass over the last warm-up call before this capture, if one ran
    #: (:mod:`neuronscope.capture.observe`): the hint rules take exact data flow from it.
    observation: Any = None
    #: How long an unprofiled warm-up call of the same callable took (us), where one ran.
    unprofiled_us: float | None = None
    #: Whether that call was observed (no faster than unprofiled: the ratio is a floor).
    unprofiled_observed: bool = False


def result_from_record(record: CaptureRecord, facts: CaptureFacts) -> ProfileResult:
    """The result of a live capture, built once from the capture stage's record."""
    error = facts.error or record.error
    status = "ok" if error is None else "error"
    notes = list(record.notes)
    try:
        table = table_from_profiler(record.prof, record_shapes=facts.options.record_shapes)
    except Exception as err:  # a profiler that failed to stop has no events to read
        table = EventTable()
        status = "error"
        error = error or f"profiler failed: {type(err).__name__}: {err}"
    if record.interrupted is not None and not len(table):
        notes.append("interrupted while the capture stopped: its events could not be read")
    # Device time a Neuron build's framework trace lacks, from Neuron Explorer's system profile.
    notes.extend(fold_system_profile(table, record.artifacts.get("device_profile")))
    if facts.backend_notes is not None:
        notes.extend(facts.backend_notes(table.has_device))
    ranks = rank_info()
    return build_result(
        table,
        name=facts.name,
        backend=record.backend,
        status=status,
        wall_time_us=record.wall_time_us,
        profiler=record.prof,
        hints=facts.options.hints,
        extra={
            "compile": record.compile_facts,
            "observed": facts.observation,
            "device_profile": record.artifacts.get("device_profile"),
        },
        notes=notes,
        modules=record.modules,
        unprofiled_us=facts.unprofiled_us,
        unprofiled_observed=facts.unprofiled_observed,
        facts={
            "target": facts.target,
            "options": facts.options.to_dict(),
            "options_added": dict(record.options_added),
            "device_name": record.device_name,
            "rank": None if ranks is None else ranks[0],
            "world_size": None if ranks is None else ranks[1],
            "error": error,
            "skipped_calls": facts.skipped_calls,
            "artifacts": dict(record.artifacts),
        },
    )


def _backend_of(prof: Any) -> str:
    """'cuda', 'neuron' or 'cpu', from the activities a user's profiler recorded."""
    activities = {str(a).rsplit(".", 1)[-1].lower() for a in getattr(prof, "activities", ()) or ()}
    # TorchNeuron renames PrivateUse1 to "neuron" (rename_privateuse1_backend), and then
    # str(ProfilerActivity.PrivateUse1) reads "ProfilerActivity.NEURON".
    if "privateuse1" in activities or "neuron" in activities:
        return "neuron"
    if "cuda" in activities:
        return "cuda"
    return "cpu"


def from_profiler(prof: Any, name: str | None = None) -> ProfileResult:
    """Build a :class:`ProfileResult` from a finished ``torch.profiler.profile`` the user ran.

    Reads the profiler's raw events (not ``key_averages()``), so it is fast on large captures.
    Raises :class:`NeuronscopeError` when ``prof`` is not a finished profiler.
    """
    kineto = torch_private.kineto_results(prof)
    if kineto is None:
        raise NeuronscopeError(
            f"from_profiler needs a finished torch.profiler.profile object (leave its 'with' "
            f"block, or call prof.stop(), first); got {type(prof).__name__}"
        )
    record_shapes = bool(getattr(prof, "record_shapes", False))
    # One pause of the collector over the reading and the analysis: each pause that ends
    # leaves its survivors for the next collection to walk (the table's objects, then the op
    # graph's: 50-80 ms each at 100,000 events); the table is freed before this one ends.
    with gc_paused():
        table = table_from_profiler(prof, record_shapes=record_shapes)
        result = build_result(table, name=name or "profile", backend=_backend_of(prof), profiler=prof)
        del table
    return result
