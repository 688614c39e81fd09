"""An operator's and a labelled range's totals over a capture: what the event stage makes of
the events (:mod:`neuronscope.events.summary`), and the rows of a result's op and region tables.
Plain data, re-exported by :mod:`neuronscope.result`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from neuronscope.result.serial import as_dict, float_or, known_fields, opt_float
from neuronscope.units import fmt_us

__all__ = ["OpStat", "RegionStat", "Shape"]

Shape = list[int]


@dataclass(frozen=True)
class OpStat:
    """One operator's totals over a capture, as ``key_averages()`` would give them.

    Device fields are ``None`` where the backend recorded no device time at all (a CPU capture,
    or a Neuron build that does not correlate device time), never a silent 0.
    """

    name: str
    calls: int
    self_cpu_us: float
    cpu_total_us: float
    self_device_us: float | None = None
    device_total_us: float | None = None
    input_shapes: list[list[Shape]] = field(default_factory=list)

    @property
    def time_us(self) -> float:
        """The time that ranks this op: self device time where there is one, else self CPU."""
        if self.self_device_us is not None:
            return self.self_device_us
        return self.self_cpu_us

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OpStat:
        d = known_fields(cls, data)
        return cls(
            name=str(d["name"]),
            calls=int(d.get("calls", 0)),
            self_cpu_us=float_or(d.get("self_cpu_us"), 0.0),
            cpu_total_us=float_or(d.get("cpu_total_us"), 0.0),
            self_device_us=opt_float(d.get("self_device_us")),
            device_total_us=opt_float(d.get("device_total_us")),
            input_shapes=[list(map(list, s)) for s in d.get("input_shapes") or []],
        )

    def __repr__(self) -> str:
        dev = "" if self.self_device_us is None else f", self device {fmt_us(self.self_device_us)}"
        return f"OpStat({self.name!r}, calls={self.calls}, self CPU {fmt_us(self.self_cpu_us)}{dev})"


@dataclass(frozen=True)
class RegionStat:
    """A labelled range inside a capture: a nested ``neuron_region``, a decorated call, or any
    ``record_function`` range. ``time_us`` is inclusive (children included), summed over
    ``calls``; ``ops`` are the operators that ran inside it.

    It also reads like a mapping (``region["time_us"]``), for code that treats ``regions`` as
    plain JSON.
    """

    name: str
    calls: int
    time_us: float
    device_time_us: float | None = None
    ops: list[OpStat] = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        if key in self.keys():
            return getattr(self, key)
        raise KeyError(key)

    def keys(self) -> list[str]:
        return [f.name for f in fields(self)]

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    @property
    def op_names(self) -> list[str]:
        return [o.name for o in self.ops]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "calls": self.calls,
            "time_us": self.time_us,
            "device_time_us": self.device_time_us,
            "ops": [o.to_dict() for o in self.ops],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RegionStat:
        return cls(
            name=str(data.get("name", "")),
            calls=int(data.get("calls", 1)),
            time_us=float_or(data.get("time_us"), 0.0),
            device_time_us=opt_float(data.get("device_time_us")),
            ops=[OpStat.from_dict(o) for o in data.get("ops") or []],
        )
