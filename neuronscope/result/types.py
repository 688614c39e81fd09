"""What a capture measured, as plain data: ``ProfileResult``, ``OpStat``, ``Hint``, ``Comparison``.

Results are dataclasses with derived properties and ``to_dict`` / ``from_dict`` that still load
files written by older schema versions. Rendering lives in :mod:`neuronscope.report`; the
``table()`` methods import it lazily so this module stays free of tabulate.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from neuronscope.errors import NeuronscopeError, RunLoadError
from neuronscope.result.modules import ModuleStat
from neuronscope.result.serial import (
    SCHEMA_VERSION,
    check_schema,
    dumps_json,
    known_fields,
    malformed,
    opt_float,
    opt_int,
    opt_str,
    ranks_list,
)
from neuronscope.result.stats import OpStat, RegionStat
from neuronscope.units import fmt_us

__all__ = [
    "SCHEMA_VERSION",
    "Comparison",
    "ComparisonRow",
    "Hint",
    "ModuleStat",
    "OpStat",
    "ProfileResult",
    "RegionStat",
]

#: The note of a result built with ``hints=False``: its empty hint list says nothing.
HINTS_OFF_NOTE = "hint rules off (hints=False)"



#: Kept under its old private name for modules not yet moved to :func:`neuronscope.units.fmt_us`.
_fmt_us = fmt_us


#: A fusion hint's text once ``hint.verify()`` measured the fused form slower, beyond noise.
VERIFIED_SLOWER_TEXT = "verify measured the fused form slower here: keep the code as it is on this device"
#: A fusion hint's text where this device's measured costs put its fused forms no faster
#: (``details["fused_no_faster"]``): naming a replacement there would promise a gain.
NO_SAVING = "no saving expected"
NO_FASTER_TEXT = f"{NO_SAVING}: its fused forms are estimated no faster on this device (hint.verify() measures it)"


@dataclass
class Hint:
    """One finding about the capture: a fusion candidate, compile trouble, a slow rank...

    Hints are data: ``pattern`` names the idiom (the fusion vocabulary in the README),
    ``ops`` / ``calls`` / ``time_us`` are the evidence, ``est_saving_us`` the estimate, and
    ``suggestion`` names the replacement API. ``confidence`` says how the evidence was found:
    ``"dataflow"`` (producer and consumer linked through tensor identities), ``"inferred"``
    (links guessed from storage pointers and shapes, for a profile the user ran without memory
    records; never an ``elementwise_chain``), ``"sequence"`` (op order and shapes only, as in a
    trace file), or ``"measured"`` (counters, timings).
    """

    kind: str
    pattern: str
    ops: list[str] = field(default_factory=list)
    calls: int = 1
    time_us: float = 0.0
    est_saving_us: float = 0.0
    suggestion: str = ""
    location: str | None = None
    confidence: str = "dataflow"
    verified_saving_us: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def message(self) -> str:
        """One line for people: pattern, evidence and suggestion."""
        where = f" at {self.location}" if self.location else ""
        ops = " -> ".join(self.ops)
        times = f"x{self.calls}" if self.calls > 1 else ""
        measured = (
            f" (measured: {fmt_us(self.verified_saving_us)})" if self.verified_saving_us is not None else ""
        )
        head = f"[{self.kind}:{self.pattern}]{where} {ops} {times} costs {fmt_us(self.time_us)}, "
        if self.details.get("verified_slower"):
            # hint.verify() measured a loss beyond noise: recommending the fused form would be false.
            loss = fmt_us(-(self.verified_saving_us or 0.0))
            return (head + f"{VERIFIED_SLOWER_TEXT} ({loss} slower in all)").replace("  ", " ")
        if self.expects_no_saving:
            return (head + NO_FASTER_TEXT + measured).replace("  ", " ")
        return (head + f"save {self.saving_text}{measured}: {self.suggestion}").replace("  ", " ")

    @property
    def expects_no_saving(self) -> bool:
        """This device's measured costs put the fused forms no faster (``details["fused_no_faster"]``)
        and no ``hint.verify()`` measured a gain since: the hint recommends nothing."""
        return bool(self.details.get("fused_no_faster")) and not (self.verified_saving_us or 0.0) > 0

    @property
    def saving_text(self) -> str:
        """The estimate as people read it: ``~1.2 ms``; ``up to ~1.2 ms`` where it is only an
        upper bound (``details["saving_upper_bound"]``: a CPU capture that recorded no shapes,
        whose profiled op times alone, with the profiler's own per-op overhead in them, were
        5-150x what ``hint.verify()`` measured); ``no saving expected`` where
        :attr:`expects_no_saving`."""
        return self.describe_saving(fmt_us(self.est_saving_us))

    def describe_saving(self, amount: str) -> str:
        """``amount`` (the saving as a time, or as a share) as :attr:`saving_text` words it."""
        if self.expects_no_saving:
            return NO_SAVING
        return f"{'up to ' if self.details.get('saving_upper_bound') else ''}~{amount}"

    def verify(self, **options: Any) -> Any:
        """Measure the saving: time the hand-written chain against the suggested replacement.

        Builds inputs of the recorded shapes and dtypes, times both forms and stores the
        measured saving in ``verified_saving_us``. See :mod:`neuronscope.analysis.verify`.
        """
        from neuronscope.analysis.verify import verify_hint

        return verify_hint(self, **options)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Hint:
        d = known_fields(cls, data)
        return cls(
            kind=str(d["kind"]),
            pattern=str(d.get("pattern", "")),
            ops=[str(o) for o in d.get("ops") or []],
            calls=int(d.get("calls", 1)),
            time_us=float(d.get("time_us", 0.0)),
            est_saving_us=float(d.get("est_saving_us", 0.0)),
            suggestion=str(d.get("suggestion", "")),
            location=opt_str(d.get("location")),
            confidence=str(d.get("confidence", "dataflow")),
            verified_saving_us=opt_float(d.get("verified_saving_us")),
            details=dict(d.get("details") or {}),
        )

    def __repr__(self) -> str:
        return f"Hint({self.message})"


@dataclass
class ProfileResult:
    """Everything one capture measured, plus a pointer back to what was asked.

    ``ops`` is sorted costliest first (device time where the backend has it, else self CPU).
    ``run_dir`` is where the capture was exported, or ``None`` (``export=False``, or the export
    failed and a warning said why). In a multi-process run ``rank`` / ``world_size`` are set, and
    rank 0's result has ``ranks``: one entry per rank with its wall time and top op.
    """

    name: str
    backend: str
    status: str = "ok"
    wall_time_us: float = 0.0
    ops: list[OpStat] = field(default_factory=list)
    hints: list[Hint] = field(default_factory=list)
    regions: dict[str, RegionStat] = field(default_factory=dict)
    run_dir: str | None = None
    rank: int | None = None
    world_size: int | None = None
    ranks: list[dict[str, Any]] | None = None
    # What was asked, and the context of the measurement.
    target: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    started_at: str | None = None
    host: str | None = None
    pid: int | None = None
    torch_version: str | None = None
    device_name: str | None = None
    event_count: int = 0
    device_unattributed_us: float | None = None
    skipped_calls: int = 0
    artifacts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: the device's busy / idle time per step (see :mod:`neuronscope.events.timeline`), or None
    breakdown: dict[str, Any] | None = None
    #: the device's software stack where ``backend`` does not tell it: "rocm", "mtia"
    platform: str | None = None
    #: the module tree (:class:`ModuleStat`, parents before children) where the code ran
    #: ``nn.Module``s inside the capture; empty otherwise
    modules: list[ModuleStat] = field(default_factory=list)

    # ---- derived -------------------------------------------------------------------------
    @property
    def device_profile(self) -> dict[str, Any] | None:
        """Neuron's device-level profile read through neuron-explorer (Summary figures, busy
        time per NeuronCore, device time per op by flow id), or None; kept in ``artifacts``."""
        found = self.artifacts.get("device_profile")
        return found if isinstance(found, dict) else None

    @property
    def has_device_time(self) -> bool:
        return any(o.self_device_us is not None for o in self.ops)

    @property
    def total_cpu_us(self) -> float:
        """Sum of self CPU time over all ops."""
        return sum(o.self_cpu_us for o in self.ops)

    @property
    def total_device_us(self) -> float | None:
        """Sum of self device time over all ops, or None where there is no device time."""
        if not self.has_device_time:
            return None
        return sum(o.self_device_us or 0.0 for o in self.ops)

    @property
    def total_op_us(self) -> float:
        """The total that comparisons rank by: device time where there is one, else CPU."""
        dev = self.total_device_us
        return dev if dev is not None else self.total_cpu_us

    @property
    def share_total_us(self) -> float:
        """What op shares are of: the ops' time, plus (where there is device time) the device
        time launched outside any op (a replayed CUDA graph, C++ launches), which ran too."""
        total = sum(o.time_us for o in self.ops)
        return total + (self.device_unattributed_us or 0.0) if self.has_device_time else total

    @property
    def top_op(self) -> OpStat | None:
        return self.ops[0] if self.ops else None

    def op(self, name: str) -> OpStat | None:
        """The ``OpStat`` named ``name`` (e.g. ``"aten::mul"``), or None."""
        for o in self.ops:
            if o.name == name:
                return o
        return None

    @property
    def fusion_hints(self) -> list[Hint]:
        return [h for h in self.hints if h.kind == "fusion"]

    @property
    def hints_off(self) -> bool:
        """True when the hint rules were off for this capture (its empty hint list says nothing)."""
        return HINTS_OFF_NOTE in self.notes

    # ---- rendering -----------------------------------------------------------------------
    def table(self, row_limit: int = 15) -> str:
        """The op table, regions and hints as text, as printed after a capture."""
        from neuronscope.report.text import render_result

        return render_result(self, row_limit=row_limit)

    def _repr_html_(self) -> str:
        """The notebook view: the top ops, the hints and the nested regions."""
        from neuronscope.report.text import result_html_table

        return result_html_table(self)

    def to_dataframe(self, table: str = "ops") -> Any:
        """A table of this result as a pandas DataFrame (needs pandas, an optional extra):
        ``"ops"`` (one row per op), ``"regions"`` (one per region, indexed by name) or
        ``"hints"`` (one per hint, largest estimated saving first) or ``"steps"`` (the device's
        busy and idle time per step, from :attr:`breakdown`) or ``"modules"`` (one row per
        module, indexed by qualified name, parents first)."""
        from neuronscope.report.device_profile import device_profile_dataframe
        from neuronscope.report.text import (
            breakdown_dataframe,
            hints_dataframe,
            modules_dataframe,
            ops_dataframe,
            regions_dataframe,
        )

        makers = {
            "ops": lambda: ops_dataframe(self.ops, columns=[f.name for f in fields(OpStat)]),
            "regions": lambda: regions_dataframe(self.regions),
            "hints": lambda: hints_dataframe(self.hints),
            "steps": lambda: breakdown_dataframe(self.breakdown),
            "device_profile": lambda: device_profile_dataframe(self.device_profile),
            "modules": lambda: modules_dataframe(self.modules),
        }
        if table not in makers:
            raise NeuronscopeError(
                f"to_dataframe() makes the 'ops', 'regions', 'hints', 'steps' or 'modules' table, not {table!r}"
            )
        return makers[table]()

    def __repr__(self) -> str:
        # One line, so that a list of results prints as a list; table() has the rest.
        top = self.top_op
        parts = [
            f"{self.name!r}, {self.backend}, {self.status}, wall {fmt_us(self.wall_time_us)}",
            f"{len(self.ops)} ops, {len(self.hints)} hints",
        ]
        if top is not None:
            parts.append(f"top op {top.name} ({fmt_us(top.time_us)})")
        if self.run_dir:
            parts.append(f"run_dir={self.run_dir!r}")
        return f"ProfileResult({', '.join(parts)})"

    # ---- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "type": "ProfileResult",
            "name": self.name,
            "backend": self.backend,
            "status": self.status,
            "wall_time_us": self.wall_time_us,
            "ops": [o.to_dict() for o in self.ops],
            "hints": [h.to_dict() for h in self.hints],
            "regions": {k: r.to_dict() for k, r in self.regions.items()},
            "run_dir": self.run_dir,
            "rank": self.rank,
            "world_size": self.world_size,
            "ranks": self.ranks,
            "target": self.target,
            "options": self.options,
            "error": self.error,
            "started_at": self.started_at,
            "host": self.host,
            "pid": self.pid,
            "torch_version": self.torch_version,
            "device_name": self.device_name,
            "event_count": self.event_count,
            "device_unattributed_us": self.device_unattributed_us,
            "skipped_calls": self.skipped_calls,
            "artifacts": self.artifacts,
            "notes": self.notes,
            "breakdown": self.breakdown,
            "platform": self.platform,
            "modules": [m.to_dict() for m in self.modules],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return dumps_json(self.to_dict(), indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProfileResult:
        """Build a result from ``to_dict()`` output of this or any older schema version."""
        check_schema(data, "ProfileResult")
        try:
            d = known_fields(cls, data)
            regions_raw = d.get("regions") or {}
            return cls(
                name=str(d["name"]),
                backend=str(d.get("backend", "unknown")),
                status=str(d.get("status", "ok")),
                wall_time_us=float(d.get("wall_time_us") or 0.0),
                ops=[OpStat.from_dict(o) for o in d.get("ops") or []],
                hints=[Hint.from_dict(h) for h in d.get("hints") or []],
                regions={str(k): RegionStat.from_dict({"name": k, **v}) for k, v in regions_raw.items()},
                run_dir=opt_str(d.get("run_dir")),
                rank=None if d.get("rank") is None else int(d["rank"]),
                world_size=None if d.get("world_size") is None else int(d["world_size"]),
                ranks=ranks_list(d.get("ranks")),
                target=opt_str(d.get("target")),
                options=dict(d.get("options") or {}),
                error=opt_str(d.get("error")),
                started_at=opt_str(d.get("started_at")),
                host=opt_str(d.get("host")),
                pid=None if d.get("pid") is None else int(d["pid"]),
                torch_version=opt_str(d.get("torch_version")),
                device_name=opt_str(d.get("device_name")),
                event_count=int(d.get("event_count") or 0),
                device_unattributed_us=opt_float(d.get("device_unattributed_us")),
                skipped_calls=int(d.get("skipped_calls") or 0),
                artifacts=dict(d.get("artifacts") or {}),
                notes=[str(n) for n in d.get("notes") or []],
                breakdown=dict(d["breakdown"]) if isinstance(d.get("breakdown"), Mapping) else None,
                platform=opt_str(d.get("platform")),
                modules=[ModuleStat.from_dict(m) for m in d.get("modules") or []],
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise RunLoadError(malformed("result", exc)) from exc


@dataclass
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
    #: ``"baseline"``, ``"faster"``, ``"slower"`` or ``"noise"`` (the interval holds 1.0).
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
            return self.verdict == "noise"
        if base is None or base is self or self.spread_us is None or base.spread_us is None:
            return False
        return abs(self.time_us - base.time_us) <= self.spread_us + base.spread_us

    def speedup_text(self, base: ComparisonRow | None) -> str:
        """``"1.43x [1.30-1.58]"``, ``"1.02x [0.97-1.08] (noise)"`` where :meth:`within_noise`."""
        text = f"{self.speedup:.2f}x"
        if self.speedup_low is not None and self.speedup_high is not None:
            text += f" [{self.speedup_low:.2f}-{self.speedup_high:.2f}]"
        return text + (" (noise)" if self.within_noise(base) else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ComparisonRow:
        d = known_fields(cls, data)
        return cls(
            label=str(d["label"]),
            time_us=float(d.get("time_us", 0.0)),
            op_count=int(d.get("op_count", 0)),
            top_op=opt_str(d.get("top_op")),
            speedup=float(d.get("speedup", 1.0)),
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


@dataclass
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
        """The comparison as text, like the motivating study's table."""
        from neuronscope.report.text import render_comparison

        return render_comparison(self)

    def _repr_html_(self) -> str:
        """The notebook view: the comparison table, then each variant's hints and regions."""
        from neuronscope.report.text import comparison_html_table

        return comparison_html_table(self)

    def to_dataframe(self) -> Any:
        """The comparison table as a pandas DataFrame indexed by variant (needs pandas)."""
        from neuronscope.report.text import comparison_dataframe

        return comparison_dataframe(self, columns=[f.name for f in fields(ComparisonRow)])

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
