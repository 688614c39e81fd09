"""Device records on another clock: found, left out of device time and the breakdown, counted.

Every torch.profiler session after the first in a process can hand back CUDA kernel records
whose timestamps are not on the profiler's clock (pytorch/pytorch#192021: libkineto registers
CUPTI's timestamp callback again per session, in ``CuptiActivityProfiler::configure()``, and
CUPTI then stamps some kernel records at the head of the buffer with its default clock, off by
about 1e14 ns; the number of bad records grows by one per session; #175790: "only the first
CUDA profile of the process is correct"). The runtime records stay right, so a bad kernel
claims to start long before its own ``cudaLaunchKernel``, or far outside the capture. Those
records are no measurement: their duration may be right, their place in time is not, and
read as they are they would stretch the breakdown's window by a day. They are dropped and
counted (:attr:`~neuronscope.events.EventTable.off_clock_device`); the summary says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from neuronscope.events.table import EventTable

__all__ = ["BEFORE_LAUNCH_SLACK_NS", "FAR_OUTSIDE_NS", "drop_off_clock_live", "host_window", "off_clock"]

#: How long before its launch call began a record may start and still be on the clock: none
#: can really, but clocks are aligned to a few microseconds only.
BEFORE_LAUNCH_SLACK_NS = 1_000_000
#: How far outside the host events' window a record may lie: queued work may end after the
#: last host event, never a minute after; the documented offset is about a day.
FAR_OUTSIDE_NS = 60_000_000_000


def off_clock(
    starts: Sequence[int], ends: Sequence[int], launch_starts: Sequence[int] | np.ndarray, window: tuple[int, int] | None
) -> np.ndarray:
    """Which device records are on another clock: they start more than
    :data:`BEFORE_LAUNCH_SLACK_NS` before their launch call (``launch_starts``: -1 where the
    launch is unknown), or lie more than :data:`FAR_OUTSIDE_NS` outside ``window`` (the host
    events' first start and last end; None where there are none)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    ls = np.asarray(launch_starts, dtype=np.int64)
    bad = (ls >= 0) & (s < ls - BEFORE_LAUNCH_SLACK_NS)
    if window is not None:
        lo, hi = window
        bad |= (s < lo - FAR_OUTSIDE_NS) | (e > hi + FAR_OUTSIDE_NS)
    return bad


def host_window(*columns: tuple[Sequence[int], Sequence[int]]) -> tuple[int, int] | None:
    """The first start and last end over (starts, ends) columns of host events; None for none."""
    los = [min(s) for s, _ in columns if len(s)]
    his = [max(e) for _, e in columns if len(e)]
    return (min(los), max(his)) if los else None


def drop_off_clock_live(table: EventTable, ev_type: Any, device_events: list[Any], other_events: list[Any]) -> list[Any]:
    """``device_events`` of a live capture less those on another clock (counted on ``table``).
    A record's launch is the runtime call with its correlation id, as Kineto pairs them."""
    if not device_events:
        return device_events
    starts = list(map(ev_type.start_ns, device_events))
    ends = list(map(ev_type.end_ns, device_events))
    others = table.others
    launch: dict[int, int] = {}
    if others is not None and other_events:
        for c, s in zip(map(ev_type.correlation_id, other_events), others.starts):
            if c:
                launch.setdefault(c, s)
    launch_starts = [launch.get(c, -1) for c in map(ev_type.correlation_id, device_events)]
    window = host_window((table.starts, table.ends), (others.starts, others.ends) if others is not None else ((), ()))
    bad = off_clock(starts, ends, launch_starts, window)
    if not bad.any():
        return device_events
    table.off_clock_device += int(bad.sum())
    table.off_clock_device_ns += int(sum(e - s for s, e, b in zip(starts, ends, bad.tolist()) if b))
    return [d for d, b in zip(device_events, bad.tolist()) if not b]
