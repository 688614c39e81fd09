"""Captures of one window summarised together: each op's and module's mean and spread across
the captured steps, and the slowest step named.

``@profile_on_neuron(active=4)`` (or a trainer integration's chosen steps) gives one
``ProfileResult`` per step; :func:`summarize_steps` reads them together::

    steps = summarize_steps(train_step.results)
    print(steps.table())
    steps.slowest            # the label of the step with the longest wall time

Plain data, built from the results alone (no profiler, no report stage).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from neuronscope.errors import NeuronscopeError
from neuronscope.units import fmt_us

__all__ = ["StepRow", "StepsSummary", "summarize_steps"]

#: Rows of each table in :meth:`StepsSummary.table`.
ROWS = 15


@dataclass(frozen=True)
class StepRow:
    """One op or module over the steps: its time in each (0 where it did not run), their mean,
    standard deviation, least and most, and the step where it took longest."""

    name: str
    times_us: tuple[float, ...]
    calls: tuple[int, ...] = ()

    @property
    def mean_us(self) -> float:
        return statistics.fmean(self.times_us) if self.times_us else 0.0

    @property
    def stdev_us(self) -> float:
        return statistics.stdev(self.times_us) if len(self.times_us) > 1 else 0.0

    @property
    def min_us(self) -> float:
        return min(self.times_us, default=0.0)

    @property
    def max_us(self) -> float:
        return max(self.times_us, default=0.0)

    @property
    def slowest(self) -> int:
        """Index of the step where it took longest."""
        return max(range(len(self.times_us)), key=self.times_us.__getitem__) if self.times_us else 0


@dataclass(frozen=True)
class StepsSummary:
    """Steps (``labels``, their wall times) and, per op and per module, a :class:`StepRow`;
    rows are ordered by mean time, largest first."""

    labels: tuple[str, ...]
    wall_us: tuple[float, ...]
    ops: tuple[StepRow, ...] = ()
    modules: tuple[StepRow, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def slowest(self) -> str:
        """The label of the step with the longest wall time."""
        return self.labels[max(range(len(self.wall_us)), key=self.wall_us.__getitem__)]

    def op(self, name: str) -> StepRow | None:
        return next((r for r in self.ops if r.name == name), None)

    def module(self, name: str) -> StepRow | None:
        return next((r for r in self.modules if r.name == name), None)

    def table(self, rows: int = ROWS) -> str:
        """The steps' wall times, then the ops and the modules: mean, spread, least-most and
        the step where each took longest."""
        walls = ", ".join(f"{label} {fmt_us(w)}" for label, w in zip(self.labels, self.wall_us))
        lines = [f"{len(self.labels)} steps: {walls}; slowest: {self.slowest}"]
        for title, table in (("Ops", self.ops), ("Modules (inclusive, forward and backward)", self.modules)):
            if not table:
                continue
            width = max(len(title), *(len(r.name) for r in table[:rows]))
            width = min(width, 60)
            lines.append("")
            lines.append(f"{title:<{width}}  {'Mean':>10}  {'Stdev':>10}  {'Least-most':>23}  Slowest in")
            for r in table[:rows]:
                name = r.name if len(r.name) <= width else r.name[: width - 1] + "…"
                spread = f"{fmt_us(r.min_us)}-{fmt_us(r.max_us)}"
                lines.append(
                    f"{name:<{width}}  {fmt_us(r.mean_us):>10}  {fmt_us(r.stdev_us):>10}  {spread:>23}  {self.labels[r.slowest]}"
                )
            if len(table) > rows:
                lines.append(f"... {len(table) - rows} more")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"StepsSummary({len(self.labels)} steps, slowest {self.slowest!r}, {len(self.ops)} ops, {len(self.modules)} modules)"


def summarize_steps(results: Sequence[Any], labels: Sequence[str] | None = None) -> StepsSummary:
    """Summarise the captures of one window (``decorated.results``, ``region.results``, a
    trainer integration's results) together. ``labels`` name the steps (default ``step 1``,
    ``step 2``...). Raises :class:`NeuronscopeError` for an empty list."""
    results = list(results)
    if not results:
        raise NeuronscopeError("summarize_steps() needs at least one result (decorate with active=N to capture N steps)")
    names = tuple(labels) if labels is not None else tuple(f"step {i}" for i in range(1, len(results) + 1))
    if len(names) != len(results):
        raise NeuronscopeError(f"summarize_steps() got {len(names)} labels for {len(results)} results")
    ops = _rows([{o.name: (o.time_us, o.calls) for o in r.ops} for r in results])
    # A module's forward and backward (a training step's module got slower in either).
    modules = _rows([{m.name: (m.time_us + (m.backward_us or 0.0), m.calls) for m in r.modules} for r in results])
    notes = []
    if len({r.has_device_time for r in results}) > 1:
        notes.append("some steps have device time and others not: their op times mix device and CPU time")
    return StepsSummary(
        labels=names,
        wall_us=tuple(float(r.wall_time_us) for r in results),
        ops=ops,
        modules=modules,
        notes=tuple(notes),
    )


def _rows(per_step: list[dict[str, tuple[float, int]]]) -> tuple[StepRow, ...]:
    order: dict[str, None] = {}
    for step in per_step:
        order.update(dict.fromkeys(step))
    rows = [
        StepRow(
            name=name,
            times_us=tuple(step.get(name, (0.0, 0))[0] for step in per_step),
            calls=tuple(step.get(name, (0.0, 0))[1] for step in per_step),
        )
        for name in order
    ]
    return tuple(sorted(rows, key=lambda r: -r.mean_us))
