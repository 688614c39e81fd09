"""Readable units: the one formatting helper every stage shares (results' reprs, tables, HTML)."""

from __future__ import annotations

import math

__all__ = ["fmt_us"]


def fmt_us(us: float | None) -> str:
    """A duration in readable units: '812.0 us', '3.41 ms', '2.05 s'; 'n/a' for None, and the
    value as it is for NaN or infinity (a corrupt file must not raise here)."""
    if us is None:
        return "n/a"
    if not isinstance(us, (int, float)) or isinstance(us, bool):
        return str(us)[:40]
    if not math.isfinite(us):
        return f"{us} us"
    if abs(us) >= 1e6:
        return f"{us / 1e6:.2f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} us"
