"""Neuron's device-level profile (Neuron Explorer's figures) as text lines and a table.

The record is :attr:`ProfileResult.device_profile` (see
:mod:`neuronscope.capture.neuron_explorer`): ``summary`` (the Summary table's figures, under
the tool's own names), ``cores`` (busy and idle per NeuronCore), ``ops`` (device time per op,
joined by flow ids), ``submissions`` (NEFF submissions and model switches).
"""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from neuronscope.errors import NeuronscopeError
from neuronscope.units import fmt_us

__all__ = ["device_profile_dataframe", "render_device_profile"]

#: Summary figures shown first, with a short label; the rest follow under their own names.
_SHOWN = (
    ("mfu_estimated_percent", "MFU"),
    ("hfu_estimated_percent", "HFU"),
    ("mbu_estimated_percent", "MBU"),
    ("total_active_time_percent", "active"),
    ("tensor_engine_active_time_percent", "tensor engine"),
    ("vector_engine_active_time_percent", "vector engine"),
    ("scalar_engine_active_time_percent", "scalar engine"),
    ("gpsimd_engine_active_time_percent", "gpsimd engine"),
    ("dma_active_time_percent", "DMA active"),
)
#: Most ops listed under the device-level profile.
MAX_OPS = 10


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def render_device_profile(dp: dict[str, Any]) -> str:
    """A few lines: the Summary's utilisation figures, busy time per NeuronCore, submissions,
    and the ops' device time from the system profile."""
    lines = [f"Neuron device profile ({dp.get('version') or 'neuron-explorer'}):"]
    summary = dp.get("summary") or {}
    shown = [f"{label} {_num(summary[key])}%" for key, label in _SHOWN if key in summary]
    if shown:
        lines.append("  " + ", ".join(shown))
    if "total_time" in summary:
        lines.append(f"  total_time {_num(summary['total_time'])} (Summary, unit as the tool gives it)")
    for core in dp.get("cores") or []:
        share = core.get("busy_share")
        lines.append(
            f"  NeuronCore {core.get('nc_idx')}: {core['executions']:,} executions, busy {fmt_us(core['busy_us'])}"
            + (f" ({100 * share:.0f}%)" if share is not None else "")
            + f", idle {fmt_us(core['idle_us'])}"
        )
    subs = dp.get("submissions") or {}
    if subs:
        lines.append("  " + ", ".join(f"{k} {v:,}" for k, v in subs.items()))
    ops = dp.get("ops") or []
    if ops:
        rows = [[o["name"], o["executions"], fmt_us(o["device_us"])] for o in ops[:MAX_OPS]]
        table = tabulate(rows, headers=["Op (system profile)", "Executions", "Device"], tablefmt="simple", disable_numparse=True)
        lines.extend("  " + line for line in table.splitlines())
    return "\n".join(lines)


def device_profile_dataframe(dp: dict[str, Any] | None) -> Any:
    """The ops' device time from the system profile, one row per op (pandas)."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise NeuronscopeError("to_dataframe() needs pandas; pip install 'neuronscope[pandas]'") from exc
    rows = list((dp or {}).get("ops") or [])
    return pd.DataFrame.from_records(rows, columns=["name", "executions", "device_us"])
