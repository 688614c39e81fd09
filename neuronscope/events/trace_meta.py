"""What trace files say besides their events: backend and platform, device, rank, notes."""

from __future__ import annotations

from typing import Any

__all__ = ["trace_metadata"]


def trace_metadata(reader: Any) -> dict[str, Any]:
    """What a rank's files say besides their events (see :func:`neuronscope.trace.table_from_trace`),
    from a finished reader (:class:`neuronscope.trace.reader._Reader`'s public attributes)."""
    meta: dict[str, Any] = {}
    for m in reader.metas:  # the first file's values win
        for k, v in m.items():
            meta.setdefault(k, v)
    dist_raw, devices_raw = meta.get("distributedInfo"), meta.get("deviceProperties")
    dist: dict[str, Any] = dist_raw if isinstance(dist_raw, dict) else {}
    devices: list[Any] = devices_raw if isinstance(devices_raw, list) else []
    names = [str(d["name"]) for d in devices if isinstance(d, dict) and d.get("name")]
    device_name = ", ".join(dict.fromkeys(names)) or None
    table = reader.table
    looks_neuron = any(w in (device_name or "").lower() for w in ("neuron", "trainium", "inferentia"))
    if reader.saw_privateuse1 or looks_neuron:
        backend = "neuron"
    elif reader.saw_mtia:
        backend = "mtia"
    elif table.has_device:
        backend = "cuda"
    else:
        backend = "cpu"
    platform = {"neuron": "neuron", "cpu": "cpu", "mtia": "mtia"}.get(backend) or ("rocm" if reader.saw_hip else "cuda")
    notes = []
    if reader.saw_mtia and table.has_device:
        notes.append(
            "MTIA trace: device time from its mtia_ccp_events (a stream waiting on another, "
            "event_wait, is neither busy time nor any op's device time)"
        )
    if reader.saw_counters:
        notes.append(
            "CUPTI counter-mode trace: device times are cuda_profiler_range records, each kernel "
            "replayed to read hardware counters, so they are the replays' durations, not the run's "
            "timing, and carry no correlation to their launch (all outside any op; no busy/idle "
            "breakdown); use a trace without counters for times"
        )
    if reader.negative:
        notes.append(f"{reader.negative:,} event(s) with a negative duration were read as 0")
    pids = sorted({k[0] for k in reader.thread_ids}, key=str)

    def _int(v: Any) -> int | None:
        # A rank or world size is a small non-negative integer; anything else is not one.
        if v.__class__ is str and v.isdigit() and len(v) <= 9:
            return int(v)
        if v.__class__ is not int or not 0 <= v < 1 << 31:
            return None
        return int(v)

    return {
        "files": list(reader.files),
        "backend": backend,
        "platform": platform,
        "device_name": device_name,
        "rank": _int(dist.get("rank")),
        "world_size": _int(dist.get("world_size")),
        "distributed_backend": dist.get("backend"),
        "host_name": meta.get("host_name"),
        "pids": pids,
        "threads": {i: key for key, i in reader.thread_ids.items()},
        "wall_ns": reader.wall_ns,
        "trace_events": table.raw_event_count,
        "device_events": table.device_event_count,
        "device_linked_by_correlation": reader.linked_correlation,
        "device_linked_by_external_id": reader.linked_external,
        "device_unattributed_events": reader.unattributed_events,
        "device_categories": sorted(reader.device_categories),
        "record_shapes": bool(table.shapes),
        "notes": notes,
        "counter_mode": reader.saw_counters,
        "locations": reader.locations,
        "top_level": {k: v for k, v in meta.items() if k not in ("deviceProperties", "INFO")},
    }


