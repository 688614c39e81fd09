"""What a capture measured, as plain data: :class:`ProfileResult`.

Results are dataclasses with derived properties and ``to_dict`` / ``from_dict`` that still load
files written by older schema versions. The parts (:class:`~neuronscope.result.stats.OpStat`,
:class:`~neuronscope.result.stats.RegionStat`, :class:`~neuronscope.result.hint.Hint`) have
their own modules, and so does :class:`~neuronscope.result.comparison.Comparison`.
``table()``, ``_repr_html_`` and ``to_dataframe()`` compose the renderers of the parts in
:mod:`neuronscope.result.text`; this module never imports tabulate.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from neuronscope.errors import NeuronscopeError, RunLoadError
from neuronscope.result.device_profile import device_profile_dataframe, render_device_profile
from neuronscope.result.hint import Hint
from neuronscope.result.modules import ModuleStat
from neuronscope.result.serial import (
    SCHEMA_VERSION,
    breakdown_from,
    breakdown_problem,
    check_schema,
    dumps_json,
    float_or,
    known_fields,
    malformed,
    opt_float,
    opt_str,
    ranks_list,
)
from neuronscope.result.stats import OpStat, RegionStat
from neuronscope.result.text import (
    breakdown_dataframe,
    display_name,
    hints_dataframe,
    html_cell,
    html_table,
    ops_dataframe,
    regions_dataframe,
    render_breakdown,
    render_hints,
    render_ops,
    render_ranks,
    render_regions,
    share_text,
)
from neuronscope.result.tree import modules_dataframe, modules_html, render_modules
from neuronscope.units import MAX_NAME_CHARS, fmt_us, printable, safe_text, shorten

__all__ = ["HINTS_OFF_NOTE", "ProfileResult", "hints_and_regions_html"]

#: The note of a result built with ``hints=False``: its empty hint list says nothing.
HINTS_OFF_NOTE = "hint rules off (hints=False)"



@dataclass(frozen=True)
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
    #: options the capture turned on by itself beyond ``options`` (the user's, as given):
    #: ``{option: {"value": ..., "why": ...}}``; empty where it ran the options as given
    options_added: dict[str, Any] = field(default_factory=dict)

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
        """The op table, regions and hints as text, as printed after a capture: a header,
        the op table, regions, per-rank table, hints and notes."""
        device_label = {"neuron": "NEURON", "cuda": "CUDA"}.get(self.backend, "device")
        device_label = {"rocm": "HIP", "mtia": "MTIA"}.get(self.platform or "", device_label)
        head = (
            f"neuronscope: {display_name(self.name)} [{display_name(self.platform or self.backend)}] "
            f"{display_name(self.status)}, wall {fmt_us(self.wall_time_us)}"
        )
        if self.rank is not None:
            head += f", rank {self.rank}" + (f"/{self.world_size}" if self.world_size is not None else "")
        parts = [head]
        if self.error:
            parts.append(f"error: {printable(shorten(self.error, 4 * MAX_NAME_CHARS))}")
        if self.ops:
            outside = self.device_unattributed_us or 0.0
            parts.append(render_ops(self.ops, row_limit=row_limit, device_label=device_label, outside_us=outside))
        else:
            parts.append("(no ops recorded)")
        if self.device_unattributed_us:
            parts.append(f"device time launched outside any op: {fmt_us(self.device_unattributed_us)}")
        if self.modules:
            parts.append(render_modules(self.modules, name=display_name))
        if self.breakdown:
            try:
                parts.append(render_breakdown(self.breakdown))
            except (KeyError, TypeError, ValueError, AttributeError):  # built by hand, not loaded
                parts.append("device breakdown: present but unreadable in this result")
        if self.device_profile:
            parts.append(render_device_profile(self.device_profile))
        nested = {k: v for k, v in self.regions.items() if k != self.name}
        if nested:
            parts.append("Regions:\n" + render_regions(nested))
        if self.ranks:
            parts.append("Ranks:\n" + render_ranks(self.ranks))
        if self.hints:
            parts.append("Hints (largest saving first):\n" + render_hints(self.hints))
        elif self.ops and not self.hints_off:
            parts.append("Hints: none found (no fusion candidate, recompile, graph break or straggler)")
        for note in self.notes:
            parts.append(f"note: {printable(shorten(note, 4 * MAX_NAME_CHARS))}")
        if self.skipped_calls:
            parts.append(f"note: {self.skipped_calls} call(s) ran uncaptured while another capture was running")
        return printable("\n\n".join(parts) + "\n", keep="\n\t")

    def _repr_html_(self, row_limit: int = 15) -> str:
        """The notebook view: the top ops, the hints, the nested regions and the notes (what
        ``table()`` prints, as HTML)."""
        total = self.share_total_us
        rows = [
            [o.name, o.calls, fmt_us(o.self_cpu_us), fmt_us(o.self_device_us), share_text(o.time_us, total)]
            for o in self.ops[:row_limit]
        ]
        caption = f"{self.name} [{self.backend}] {self.status}, wall {fmt_us(self.wall_time_us)}"
        more = f"<p>… {len(self.ops) - row_limit} more ops</p>" if len(self.ops) > row_limit else ""
        return (
            f"<div><b>{html_cell(caption)}</b>"
            + html_table(["Op", "Calls", "Self CPU", "Self device", "Share"], rows)
            + more
            + modules_html(self.modules)
            + hints_and_regions_html(self)
            + "</div>"
        )

    def to_dataframe(self, table: str = "ops") -> Any:
        """A table of this result as a pandas DataFrame (needs pandas, an optional extra):
        ``"ops"`` (one row per op), ``"regions"`` (one per region, indexed by name) or
        ``"hints"`` (one per hint, largest estimated saving first) or ``"steps"`` (the device's
        busy and idle time per step, from :attr:`breakdown`) or ``"modules"`` (one row per
        module, indexed by qualified name, parents first)."""
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
            "options_added": self.options_added,
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
            # An older file's breakdown, or an edited one, is left out whole: the measurement
            # still loads, and its notes say what was left out.
            breakdown = breakdown_from(d.get("breakdown"))
            malformed_breakdown = breakdown is None and d.get("breakdown") is not None
            why = breakdown_problem(d.get("breakdown")) if malformed_breakdown else ""
            left_out = [f"the step breakdown in this file is left out ({why}): the file was edited or not written by neuronscope"] if why else []
            return cls(
                name=str(d["name"]),
                backend=str(d.get("backend", "unknown")),
                status=str(d.get("status", "ok")),
                wall_time_us=float_or(d.get("wall_time_us"), 0.0),
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
                notes=[str(n) for n in d.get("notes") or []] + left_out,
                breakdown=breakdown,
                platform=opt_str(d.get("platform")),
                options_added=dict(d.get("options_added") or {}),
                modules=[ModuleStat.from_dict(m) for m in d.get("modules") or []],
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise RunLoadError(malformed("result", exc)) from exc


def hints_and_regions_html(result: ProfileResult) -> str:
    """The hints (or why there are none) and the nested regions, for the notebook views."""
    parts = []
    if result.hints:
        items = "".join(
            f"<li>{html.escape(shorten(h.message, 4 * MAX_NAME_CHARS))}"
            + (f"<br><small>at <code>{html.escape(safe_text(h.location, 4 * MAX_NAME_CHARS))}</code></small>" if h.location else "")
            + "</li>"
            for h in result.hints
        )
        parts.append(f"<p><b>Hints</b> (largest saving first)</p><ol>{items}</ol>")
    elif result.ops and not result.hints_off:
        parts.append("<p><b>Hints</b>: none found (no fusion candidate, recompile, graph break or straggler)</p>")
    nested = {k: v for k, v in result.regions.items() if k != result.name}
    if nested:
        rows = [
            [name, reg.calls, fmt_us(reg.time_us), fmt_us(reg.device_time_us), len(reg.ops), reg.ops[0].name if reg.ops else "-"]
            for name, reg in sorted(nested.items(), key=lambda kv: kv[1].time_us, reverse=True)
        ]
        parts.append("<p><b>Regions</b></p>" + html_table(["Region", "Calls", "Time (incl.)", "Device time", "Distinct ops", "Top op"], rows))
    notes = list(result.notes) + ([f"{result.skipped_calls} call(s) ran uncaptured"] if result.skipped_calls else [])
    if notes:
        parts.append("<ul>" + "".join(f"<li>note: {html.escape(shorten(n, 4 * MAX_NAME_CHARS))}</li>" for n in notes) + "</ul>")
    return "".join(parts)
