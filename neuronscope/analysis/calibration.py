"""The cost model's constants, measured once per machine and kept (``neuronscope calibrate``).

A capture's analysis runs no torch benchmark: it reads these constants from a small JSON cache
in the user's cache directory (``$NEURONSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/neuronscope``,
else ``~/.cache/neuronscope``), keyed by device, torch version, dtype and torch's thread count.
Where the cache holds no entry for a capture, its estimates come from its own op times alone
(and say so), except on a CPU: there :data:`DEFAULT_CPU` stands in, constants measured once on a
stated machine and shipped, so that a new user's estimates are of the right size before any
calibration (the capture's own op times carry the profiler's per-op overhead: 10-25x what
``hint.verify()`` measured on real models). :func:`calibrate` measures an entry and writes it:
what one op's call costs, the bandwidth at four tensor sizes, what entering torch.compile'd
code costs, what each idiom's eager replacement removes per launch and per intermediate byte,
and what each fused optimizer saves per parameter and per element. The probes that run torch
for it are the capture stage's (:mod:`neuronscope.capture.machine`, beside ``hint.verify()``'s
:mod:`neuronscope.capture.verify`); this module solves their timings for the rates it keeps.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from neuronscope.analysis.patterns import REGISTRY, pattern_named

__all__ = [
    "CACHE_VERSION",
    "DEFAULT_CPU",
    "DEFAULT_CPU_MACHINE",
    "Calibration",
    "cache_path",
    "calibrate",
    "calibration_key",
    "constants",
    "load",
    "save",
]

#: Bumped when what an entry holds changes: an older file's entries are then not read.
CACHE_VERSION = 1
#: Largest share of the launches an eager replacement is credited with removing: the chain's
#: calls cost somewhat more than the tiny op the per-op cost is measured with, but a share
#: beyond this is noise.
MAX_SHARE = 3.0
#: Most a fused eager replacement removes per intermediate byte, in multiples of what writing
#: and reading the byte back costs at the probe's size: the traffic itself plus the per-element
#: work of the ops it replaces (GELU's tanh formula: 2.4 times the traffic on a 2-core CPU).
MAX_PER_BYTE_FACTOR = 8.0
#: Optimizers with a fused implementation (``fused=True``; CPU and CUDA since torch 2.4).
FUSED_OPTIMIZERS = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})


class Calibration(NamedTuple):
    """What ops cost on one device, measured outside any profiler by :func:`calibrate`: a small
    op's call and the bandwidth by tensor size (all the cost model asks of a device: a record
    of these two alone serves it), and what fusing removes."""

    #: one small op's call (dispatch, allocation, the Python call), ns
    per_op_ns: float
    #: (tensor bytes, bytes per ns), smallest first: a tensor in a cache moves faster
    bandwidth: tuple[tuple[int, float], ...]
    #: entering torch.compile'd code beyond the eager op it runs, ns (None: not measured)
    compiled_call_ns: float | None = None
    #: per pattern with an eager replacement: (share of the launches' cost, ns per byte)
    eager: Mapping[str, tuple[float, float]] = MappingProxyType({})
    #: per optimizer class: (ns saved per parameter, ns saved per element) by ``fused=True``
    optimizers: Mapping[str, tuple[float, float]] = MappingProxyType({})

    def bytes_per_ns(self, nbytes: int) -> float:
        """Bandwidth for tensors of ``nbytes``: interpolated in log size between the measured
        sizes, the nearest one outside them."""
        return float(self._rates([nbytes])[0])

    def moved_ns(self, tensors: list[int]) -> float:
        """Time to write each of ``tensors`` (bytes) and read it back once."""
        sizes = np.asarray(tensors, dtype=np.float64)
        return float(np.sum(2 * sizes / self._rates(sizes)))

    def _rates(self, sizes: Any) -> np.ndarray:
        known, rates = zip(*self.bandwidth)
        return np.interp(np.log(np.maximum(sizes, 1)), np.log(known), rates)


#: Where :data:`DEFAULT_CPU` was measured, as estimates that use it say.
DEFAULT_CPU_MACHINE = "a 2-core AMD EPYC virtual machine, torch 2.13 CPU, one thread"

#: A CPU's constants where this machine keeps none: ``neuronscope calibrate`` on
#: :data:`DEFAULT_CPU_MACHINE` (float32, 2026-12-07, load average 4-8 from other work), rounded;
#: the per-op cost, bandwidth, compiled entry and optimizers the median of three runs, the eager
#: replacements' rates the median of nine (their probes are the noisiest: RMSNorm's share ranged
#: 0.20-0.45). Another x86 server CPU's per-op cost and bandwidth are within about 2x of these;
#: its own calibration replaces them. Not for CUDA or Neuron, whose op times are their device's.
DEFAULT_CPU = Calibration(
    per_op_ns=2800.0,
    bandwidth=((64 << 10, 109.0), (512 << 10, 85.0), (4 << 20, 50.0), (32 << 20, 14.0)),
    compiled_call_ns=16_000.0,
    eager={
        "layer_norm": (0.89, 0.022),
        "rms_norm": (0.23, 0.0),
        "log_softmax": (0.88, 0.054),
        "softmax": (0.77, 0.057),
        "gelu": (0.48, 0.089),
    },
    optimizers={
        "Adagrad": (9_000.0, 0.60),
        "Adam": (17_300.0, 1.44),
        "AdamW": (24_600.0, 2.41),
        "SGD": (1_000.0, 0.0),
    },
)


def cache_path() -> Path:
    """The calibration file of this user."""
    root = os.environ.get("NEURONSCOPE_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(xdg) / "neuronscope")
    return Path(root) / "calibration.json"


def calibration_key(device: str, dtype: str = "float32") -> str:
    """What an entry is kept under: the device, torch's version, the dtype and thread count."""
    import torch

    return f"{device}|torch {torch.__version__}|{dtype}|threads {torch.get_num_threads()}"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    ok = isinstance(data, dict) and data.get("version") == CACHE_VERSION and isinstance(data.get("entries"), dict)
    return data["entries"] if ok else {}


@functools.lru_cache(maxsize=16)
def _load_at(path: str, mtime_ns: int, key: str) -> Calibration | None:
    entry = _read(Path(path)).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        return Calibration(
            float(entry["per_op_ns"]),
            tuple((int(s), float(b)) for s, b in entry["bandwidth"]),
            None if entry.get("compiled_call_ns") is None else float(entry["compiled_call_ns"]),
            {str(k): (float(v[0]), float(v[1])) for k, v in entry.get("eager", {}).items()},
            {str(k): (float(v[0]), float(v[1])) for k, v in entry.get("optimizers", {}).items()},
        )
    except (KeyError, TypeError, ValueError, IndexError):  # a damaged entry: as if none
        return None


def load(device: str, dtype: str = "float32") -> Calibration | None:
    """This machine's kept constants for ``device`` and ``dtype`` (float32's where ``dtype`` has
    none of its own), or None: never calibrated here, under this torch and thread count."""
    path = cache_path()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return None
    for d in dict.fromkeys((dtype or "float32", "float32")):
        found = _load_at(str(path), mtime, calibration_key(device, d))
        if found is not None:
            return found
    return None


def constants(device: str, dtype: str = "float32") -> Calibration | None:
    """The constants the cost model uses for ``device``: this machine's kept ones, else for a
    CPU :data:`DEFAULT_CPU`; None for any other device (its op times are its own)."""
    if device != "cpu":
        return None
    return load(device, dtype) or DEFAULT_CPU


def save(device: str, dtype: str, cal: Calibration) -> Path:
    """Keep ``cal`` under its key (other keys left as they are); the file's path."""
    path = cache_path()
    entries = _read(path)
    measured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    # JSON writes the tuples as lists, as _load_at reads them back.
    entries[calibration_key(device, dtype)] = {**cal._asdict(), "measured_at": measured_at}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1))
    os.replace(tmp, path)  # a reader sees the old file or the new one, never half of one
    return path


def calibrate(device: str = "cpu", dtype: str = "float32", write: bool = True) -> Calibration:
    """Measure this machine's constants for ``device`` (the CPU: the only device this process
    times without its backend's own timers) with the probes of
    :mod:`neuronscope.capture.machine`, and keep them (``write``). Some 20 s on an idle CPU, a minute on a busy one."""
    if device != "cpu":
        from neuronscope.errors import NeuronscopeError

        raise NeuronscopeError(f"calibrate measures the CPU only, not {device!r}: captures of {device} are costed from their own op times")
    from neuronscope.capture import machine

    with machine.measuring():
        costs = Calibration(*machine.device_costs())
        eager = {p.name: rates for p in REGISTRY if (rates := _eager_rates(p.name, costs, dtype)) is not None}
        optimizers = {cls: rates for cls in sorted(FUSED_OPTIMIZERS) if (rates := _optimizer_rates(cls, dtype)) is not None}
        cal = Calibration(costs.per_op_ns, costs.bandwidth, machine.compiled_call_ns(), eager, optimizers)
    if write:
        save(device, dtype, cal)
    return cal


def _solve(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """The two rates ``(x, y)`` with ``a * x + b * y == s`` for both probes ``(a, b, s)``."""
    (a1, b1, s1), (a2, b2, s2) = rows
    det = a1 * b2 - a2 * b1
    return (s1 * b2 - s2 * b1) / det, (a1 * s2 - a2 * s1) / det


def _eager_rates(pattern: str, costs: Calibration, dtype: str) -> tuple[float, float] | None:
    """What ``pattern``'s eager replacement removes: the savings its probes measured (at
    :data:`~neuronscope.capture.machine.PROBE_SHAPES`) solved for a share of the launches'
    cost and a cost per intermediate byte. None: no eager replacement, or a probe that cannot
    run."""
    from neuronscope.capture import machine

    record = pattern_named(pattern)
    if record is None or not record.eager_replacement or record.verify is None:
        return None
    probes = machine.eager_probes(pattern, record.verify, dtype)
    if probes is None:
        return None
    rows = [(max(0, ops - record.fused_passes) * costs.per_op_ns, float(sum(tensors)), saving) for ops, tensors, saving in probes]
    (l1, m1, s1), (l2, m2, _) = rows
    max_per_byte = MAX_PER_BYTE_FACTOR * 2 / costs.bytes_per_ns(int(m2) or 1)
    if m2 <= 0 or abs(l1 * m2 - l2 * m1) < 1e-9 * max(l1, 1.0) * m2:  # nothing tells the two rates apart
        return (min(max(s1, 0.0) / l1, MAX_SHARE), 0.0) if l1 > 0 else None
    share, per_byte = _solve(rows)
    return min(max(share, 0.0), MAX_SHARE), min(max(per_byte, 0.0), max_per_byte)


def _optimizer_rates(cls: str, dtype: str) -> tuple[float, float] | None:
    """What ``torch.optim.<cls>(fused=True)`` saves against its default form: its probes
    solved for ns per parameter and ns per element. None: an optimizer torch cannot fuse
    here."""
    from neuronscope.capture import machine

    probes = machine.optimizer_probes(cls, dtype)
    if probes is None:
        return None
    per_param, per_element = _solve([(float(p), float(e), s) for p, e, s in probes])
    return max(per_param, 0.0), max(per_element, 0.0)


def describe(cal: Calibration) -> str:
    """The constants in a few lines, for ``neuronscope calibrate``."""
    lines = [f"per-op call: {cal.per_op_ns:.0f} ns"]
    lines.append("bandwidth: " + ", ".join(f"{s >> 10} KiB {b:.1f} B/ns" for s, b in cal.bandwidth))
    if cal.compiled_call_ns is not None:
        lines.append(f"torch.compile entry: {cal.compiled_call_ns / 1e3:.1f} us")
    for k, (share, per_byte) in cal.eager.items():
        lines.append(f"{k} eager replacement: {share:.2f} of the launches, {per_byte:.3f} ns per intermediate byte")
    for k, (pp, pe) in cal.optimizers.items():
        lines.append(f"{k}(fused=True): {pp / 1e3:.1f} us per parameter, {pe:.3f} ns per element")
    return "\n".join(lines)

