"""One finding about a capture, as plain data: :class:`Hint`.

Hints are data, not prose: a pattern name, the evidence (ops, times, location) and a
suggestion; :attr:`Hint.message` words them for people.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from neuronscope.capture.verify import measure
from neuronscope.result.serial import as_dict, float_or, known_fields, opt_float, opt_str
from neuronscope.units import fmt_us

__all__ = ["NO_FASTER_TEXT", "NO_SAVING", "VERIFIED_SLOWER_TEXT", "Hint"]


#: A fusion hint's text once ``hint.verify()`` measured the fused form slower, beyond noise.
VERIFIED_SLOWER_TEXT = "verify measured the fused form slower here: keep the code as it is on this device"
#: A fusion hint's text where this device's measured costs put its fused forms no faster
#: (``details["fused_no_faster"]``): naming a replacement there would promise a gain.
NO_SAVING = "no saving expected"
NO_FASTER_TEXT = f"{NO_SAVING}: its fused forms are estimated no faster on this device (hint.verify() measures it)"


@dataclass(frozen=True)
class Hint:
    """One finding about the capture: a fusion candidate, compile trouble, a slow rank...

    Hints are data: ``pattern`` names the idiom (the fusion vocabulary in the README),
    ``ops`` / ``calls`` / ``time_us`` are the evidence, ``est_saving_us`` the estimate, and
    ``suggestion`` names the replacement API. ``confidence`` says how the evidence was found:
    ``"dataflow"`` (producer and consumer linked through tensor identities), ``"sequence"``
    (op order and shapes only: a trace file, or a profile the user ran without memory records
    and nothing observed; never an ``elementwise_chain``), or ``"measured"`` (counters,
    timings).
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
        end = self.details.get("end_line")
        if where and isinstance(end, int):
            where += f"-{end}"  # a multi-line idiom: the location is its first line
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

    def verify(self, **options: Any) -> Hint:
        """Measure the saving: time the hand-written chain against the suggested replacement.

        Builds inputs of the recorded shapes and dtypes, times both forms
        (:func:`neuronscope.capture.verify.measure`; options: ``device``, ``compile``,
        ``repeats``, ``min_block_s``, ``seed``), and returns a new hint with the measured
        saving in ``verified_saving_us`` and the measurements in ``details["verification"]``.
        Where the fused form was measured slower beyond the noise, the new hint's
        ``est_saving_us`` is 0 (the estimate kept in ``details["est_saving_before_verify_us"]``)
        and its message and ``suggestion`` say to keep the code (the suggestion made before in
        ``details["suggestion_before_verify"]``). This hint, and the result it came from, are
        unchanged.
        """
        v = measure(self, **options)
        details = {k: val for k, val in self.details.items() if k != "verified_slower"}
        details["verification"] = v.to_dict()
        est, suggestion = self.est_saving_us, self.suggestion
        if v.slower:
            # The estimate was wrong here: neither what is printed nor the suggestion a program
            # reads may still recommend the fused form.
            details["est_saving_before_verify_us"] = self.est_saving_us
            details.setdefault("suggestion_before_verify", self.suggestion)
            details["verified_slower"] = True
            est, suggestion = 0.0, VERIFIED_SLOWER_TEXT
        else:
            suggestion = details.pop("suggestion_before_verify", suggestion)  # verified again: faster
        return replace(self, verified_saving_us=v.verified_saving_us, est_saving_us=est, suggestion=suggestion, details=details)

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Hint:
        d = known_fields(cls, data)
        return cls(
            kind=str(d["kind"]),
            pattern=str(d.get("pattern", "")),
            ops=[str(o) for o in d.get("ops") or []],
            calls=int(d.get("calls", 1)),
            time_us=float_or(d.get("time_us"), 0.0),
            est_saving_us=float_or(d.get("est_saving_us"), 0.0),
            suggestion=str(d.get("suggestion", "")),
            location=opt_str(d.get("location")),
            confidence=str(d.get("confidence", "dataflow")),
            verified_saving_us=opt_float(d.get("verified_saving_us")),
            details=dict(d.get("details") or {}),
        )

    def __repr__(self) -> str:
        return f"Hint({self.message})"
