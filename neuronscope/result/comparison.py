"""Variants run side by side, as plain data: :class:`Comparison` and its :class:`ComparisonRow`.

Rendering composes the renderers of :mod:`neuronscope.result.text` (which reads parts of
results and never imports this module).
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from tabulate import tabulate

from neuronscope.errors import RunLoadError
from neuronscope.result.serial import (
    SCHEMA_VERSION,
    as_dict,
    check_schema,
    dumps_json,
    float_or,
    known_fields,
    malformed,
    opt_float,
    opt_int,
    opt_str,
)
from neuronscope.result.text import display_name, html_cell, html_table, records_dataframe
from neuronscope.result.types import ProfileResult, hints_and_regions_html
from neuronscope.units import MAX_NAME_CHARS, fmt_us, printable, safe_text, shorten

__all__ = ["Comparison", "ComparisonRow"]


@dataclass(frozen=True)
class ComparisonRow:
    """One variant of a comparison: its time, op count, top op and speedup over the first."""

    label: str
    time_us: float
    op_count: int
    top_op: str | None
    speedup: float
    top_hint: str | None = None
    spread_us: float | None = None
    repeats: int = 1
    outputs_match: bool | None = None
    #: Seconds the unprofiled warm-up calls took (compilation shows here, not in ``time_us``).
    warmup_s: float | None = None
    #: The speedup's interval (``stats.DEFAULT_CONFIDENCE``, a paired bootstrap over the
    #: rounds); None for the first variant and for runs saved before intervals existed.
    speedup_low: float | None = None
    speedup_high: float | None = None
    #: ``"baseline"``, ``"faster"``, ``"slower"``, ``"noise"`` (the interval holds 1.0) or
    #: ``"unsure"`` (the interval is too wide to act on: the machine was too busy).
    verdict: str | None = None
    #: Calls per timed sample, despite its name (each of the ``repeats`` rounds times several
    #: samples and keeps its quickest; ``Comparison.timing['samples_per_round']`` says how many).
    calls_per_round: int | None = None
    #: Every op a call ran, the ops nested inside other ops included (``op_count`` counts only
    #: the ops the variant's own code dispatched), from the profiled calls.
    all_op_count: int | None = None
    #: Device time per profiled call (median), where the backend records device time.
    device_time_us: float | None = None
    #: Calls run under the profiler for the op table and hints (not timed).
    profiled_calls: int | None = None

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def within_noise(self, base: ComparisonRow | None) -> bool:
        """True where this speedup is not told apart from 1.0: its interval holds 1.0 (verdict
        ``"noise"``) or, for a row saved without an interval, the two times differ by less
        than their spreads together."""
        if self.verdict is not None:
            return self.verdict in ("noise", "unsure")
        if base is None or base is self or self.spread_us is None or base.spread_us is None:
            return False
        return abs(self.time_us - base.time_us) <= self.spread_us + base.spread_us

    def speedup_text(self, base: ComparisonRow | None) -> str:
        """``"1.43x [1.30-1.58]"``, ``"1.02x [0.97-1.08] (noise)"`` where :meth:`within_noise`."""
        text = f"{self.speedup:.2f}x"
        if self.speedup_low is not None and self.speedup_high is not None:
            text += f" [{self.speedup_low:.2f}-{self.speedup_high:.2f}]"
        if self.verdict == "unsure":
            return text + " (unsure: the machine was too busy)"
        return text + (" (noise)" if self.within_noise(base) else "")

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ComparisonRow:
        d = known_fields(cls, data)
        return cls(
            label=str(d["label"]),
            time_us=float_or(d.get("time_us"), 0.0),
            op_count=int(d.get("op_count", 0)),
            top_op=opt_str(d.get("top_op")),
            speedup=float_or(d.get("speedup"), 1.0),
            top_hint=opt_str(d.get("top_hint")),
            spread_us=opt_float(d.get("spread_us")),
            repeats=int(d.get("repeats", 1)),
            outputs_match=d.get("outputs_match"),
            warmup_s=opt_float(d.get("warmup_s")),
            speedup_low=opt_float(d.get("speedup_low")),
            speedup_high=opt_float(d.get("speedup_high")),
            verdict=opt_str(d.get("verdict")),
            calls_per_round=opt_int(d.get("calls_per_round")),
            all_op_count=opt_int(d.get("all_op_count")),
            device_time_us=opt_float(d.get("device_time_us")),
            profiled_calls=opt_int(d.get("profiled_calls")),
        )


@dataclass(frozen=True)
class Comparison:
    """Variants run on the same arguments, side by side. ``rows`` keep the order given;
    ``speedup`` is against the first variant."""

    name: str
    rows: list[ComparisonRow] = field(default_factory=list)
    results: dict[str, ProfileResult] = field(default_factory=dict)
    run_dir: str | None = None
    backend: str | None = None
    notes: list[str] = field(default_factory=list)
    started_at: str | None = None
    #: How long compare() ran, warm-up, timing and profiling included (not a sum of rows).
    wall_time_us: float | None = None
    #: How the times and intervals were taken (rounds, time budget, confidence, seed, ...).
    timing: dict[str, Any] = field(default_factory=dict)

    def __iter__(self) -> Iterator[ComparisonRow]:
        return iter(self.rows)

    def row(self, label: str) -> ComparisonRow:
        for r in self.rows:
            if r.label == label:
                return r
        raise KeyError(label)

    def table(self) -> str:
        """The comparison as text, like the motivating study's table: variant, time, spread,
        speedup, ops, top op, top hint, then what the columns mean and the notes."""
        headers, rows = self._cells()
        text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
        head = f"neuronscope compare: {display_name(self.name)}" + (f" [{display_name(self.backend)}]" if self.backend else "")
        notes = "".join(f"\n{line}" for line in self.legend())
        notes += "".join(f"\nnote: {printable(shorten(n, 4 * MAX_NAME_CHARS))}" for n in self.notes)
        return f"{head}\n{text}{notes}\n"

    def _repr_html_(self) -> str:
        """The notebook view: the comparison table, then each variant's hints and regions."""
        headers, rows = self._cells()
        caption = self.name + (f" [{self.backend}]" if self.backend else "")
        # Whole sentences: the legend's lines run past a name's limit, and cut they said half a rule.
        notes = "".join(f"<li>{html.escape(safe_text(n, 4 * MAX_NAME_CHARS))}</li>" for n in self.legend() + self.notes)
        variants = "".join(
            f"<details><summary>{html_cell(label)}</summary>{hints_and_regions_html(result)}</details>"
            for label, result in self.results.items()
            if result.hints or len(result.regions) > 1 or result.notes
        )
        return f"<div><b>{html_cell(caption)}</b>" + html_table(headers, rows) + (f"<ul>{notes}</ul>" if notes else "") + variants + "</div>"

    def to_dataframe(self) -> Any:
        """The comparison table as a pandas DataFrame indexed by variant (needs pandas)."""
        columns = [f.name for f in fields(ComparisonRow)]
        return records_dataframe([r.to_dict() for r in self.rows], columns=columns).set_index("label")

    def legend(self) -> list[str]:
        """What the columns mean, for a comparison timed in rounds (none for older runs)."""
        if not self.rows or self.rows[-1].verdict is None:
            return []
        first = self.rows[0]
        conf = self.timing.get("confidence")
        level = f"{conf * 100:g}% " if isinstance(conf, (int, float)) else ""
        samples = self.timing.get("samples_per_round")
        width = self.timing.get("unsure_width", 2.0)
        quickest = f", each round's quickest of {samples} samples" if isinstance(samples, int) and samples > 1 else ""
        timing = (
            f"Time: median per call over {first.repeats} interleaved rounds of unprofiled calls{quickest} (Spread: half the IQR). "
            f"Speedup: median over the rounds of {first.label}'s time over the variant's in the same round, "
            f"[{level}interval]; (noise): the interval holds 1.0, the speedup is within 2% of it, or the median times point the other way; "
            f"(unsure): the interval's ends are over {width:g}x apart, the machine too busy to tell anything."
        )
        ops = (
            "Ops/call: ops the variant's own code dispatched per profiled call (all: with the ops they ran inside); "
            "Top op: the costliest of those."
        )
        return [timing, ops]

    def _cells(self) -> tuple[list[str], list[list[Any]]]:
        """The headers and rows shared by the text and the HTML table."""
        base = self.rows[0] if self.rows else None
        device = any(r.device_time_us is not None for r in self.rows)
        headers = ["Variant", "Time", "Spread", "Speedup", "Ops/call (all)", "Top op"]
        headers += ["Device/call"] if device else []
        headers += ["Outputs agree", "Top hint"]
        rows = []
        for r in self.rows:
            ops = f"{r.op_count}" + ("" if r.all_op_count is None else f" ({r.all_op_count})")
            spread = "" if r.spread_us is None else f"±{fmt_us(r.spread_us)}"
            row = [display_name(r.label), fmt_us(r.time_us), spread, r.speedup_text(base), ops, display_name(r.top_op or "-")]
            row += [fmt_us(r.device_time_us)] if device else []
            row += ["" if r.outputs_match is None else ("yes" if r.outputs_match else "NO"), display_name(r.top_hint or "")]
            rows.append(row)
        return headers, rows

    def __repr__(self) -> str:
        parts = ", ".join(f"{r.label}={fmt_us(r.time_us)} ({r.speedup:.2f}x)" for r in self.rows)
        return f"Comparison({self.name!r}: {parts})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "type": "Comparison",
            "name": self.name,
            "rows": [r.to_dict() for r in self.rows],
            "results": {k: v.to_dict() for k, v in self.results.items()},
            "run_dir": self.run_dir,
            "backend": self.backend,
            "notes": self.notes,
            "started_at": self.started_at,
            "wall_time_us": self.wall_time_us,
            "timing": self.timing,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return dumps_json(self.to_dict(), indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        check_schema(data, "Comparison")
        try:
            return cls(
                name=str(data["name"]),
                rows=[ComparisonRow.from_dict(r) for r in data.get("rows") or []],
                results={str(k): ProfileResult.from_dict(v) for k, v in (data.get("results") or {}).items()},
                run_dir=opt_str(data.get("run_dir")),
                backend=opt_str(data.get("backend")),
                notes=[str(n) for n in data.get("notes") or []],
                started_at=opt_str(data.get("started_at")),
                wall_time_us=opt_float(data.get("wall_time_us")),
                timing=dict(data.get("timing") or {}),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise RunLoadError(malformed("comparison", exc)) from exc
