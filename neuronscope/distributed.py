"""Multi-process runs: rank info, one start time per capture across ranks, and the per-rank table.

When ``torch.distributed`` is initialised (``torchrun``, ``init_process_group``), every rank's
capture of a name is one capture of the job:

- :func:`begin` (called when the capture starts) agrees on one timestamp: rank 0 publishes its
  start time and the other ranks use it, so the ranks' run directories
  (``<stamp>_<host>_pid<pid>_rank<r>``) share a prefix and sort together under a shared root.
- :func:`finish` (called when it stops, on every rank) sends each rank's wall time, total op
  time, top op and run directory to rank 0, which stores them as ``result.ranks`` and adds a
  ``straggler`` hint for a rank much slower than the median.

Both go through the key-value store of the default process group (the ``torchrun`` rendezvous
store), not through a collective:

- a store ``wait`` takes a timeout of its own, so a dead or late rank costs rank 0 at most
  :data:`DEFAULT_GATHER_TIMEOUT_S` and never hangs the job; a collective that times out leaves
  its process group unusable (a late rank joins a collective the others abandoned), and the
  user's NCCL or Neuron group must not be put at that risk;
- the other ranks never wait at the end of a capture: they write one small record and go on;
- it works the same under gloo, NCCL and the Neuron backend (the store belongs to the
  rendezvous, not to the backend) and needs no NumPy (the ``*_object`` collectives do).

Every rank must capture the same names the same number of times: records are matched by
capture name and by how many captures of that name the process has made. A name captured on
one rank only (``if rank == 0: ...``) costs the timeout once; from then on the ranks that never
reported are not waited for (only picked up if their record is already there), until one of
their records turns up again.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .analysis.straggler import STRAGGLER_MIN_US, STRAGGLER_THRESHOLD, straggler_hints
from .result import ProfileResult

__all__ = [
    "DEFAULT_GATHER_TIMEOUT_S",
    "STRAGGLER_MIN_US",
    "STRAGGLER_THRESHOLD",
    "TIMEOUT_ENV",
    "DistCapture",
    "begin",
    "finish",
    "gather_timeout_s",
    "rank_entry",
    "rank_info",
    "straggler_hints",
]

log = logging.getLogger("neuronscope")

#: How long rank 0 waits for the other ranks' records at the end of a capture, and a rank for
#: rank 0's start time at its start. Ranks leave a captured step at slightly different times
#: (a data-loader stall, a rank-0-only log line): seconds, rarely more. Long enough for that,
#: short enough that a dead rank or a name captured on rank 0 alone costs one pause instead of
#: a hang; launchers' own timeouts (NCCL's 10 minutes, torchrun's) are far longer.
DEFAULT_GATHER_TIMEOUT_S = 30.0
#: Environment variable overriding the timeout, in seconds; ``0`` never waits (records
#: already there are still read).
TIMEOUT_ENV = "NEURONSCOPE_DIST_TIMEOUT"

_KEY_ROOT = "neuronscope"

#: Seconds rank 0 spent gathering at its last capture (for diagnostics and the benchmarks).
last_gather_seconds: float | None = None


def rank_info() -> tuple[int, int] | None:
    """``(rank, world_size)`` when torch.distributed is initialised, else None."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a half-initialised or torn-down group counts as none
        pass
    return None


def gather_timeout_s() -> float:
    """The timeout: ``NEURONSCOPE_DIST_TIMEOUT`` seconds when set and valid, else the default."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
            if value >= 0:
                return value
        except ValueError:
            pass
        log.warning("neuronscope: ignoring %s=%r (expected seconds >= 0)", TIMEOUT_ENV, raw)
    return DEFAULT_GATHER_TIMEOUT_S


def _default_store() -> Any | None:
    """The default process group's store, or None where torch keeps none."""
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:
        return None


@dataclass
class _NameState:
    """What this process remembers about one capture name across its captures."""

    count: int = 0
    #: rank 0: ranks that have never reported for this name (not waited for, only checked)
    absent: set[int] = field(default_factory=set)
    #: rank 0: record keys given up on, by rank; a record that turns up later clears ``absent``
    stale: dict[int, list[str]] = field(default_factory=dict)
    #: other ranks: False once rank 0's start time failed to arrive for this name
    stamp_ok: bool = True


_names: dict[str, _NameState] = {}
_names_lock = threading.Lock()


@dataclass
class DistCapture:
    """One capture's share of a multi-process run (made by :func:`begin`)."""

    rank: int
    world_size: int
    name: str
    key: str
    store: Any | None = None
    timeout_s: float = DEFAULT_GATHER_TIMEOUT_S
    started: _dt.datetime | None = None
    notes: list[str] = field(default_factory=list)


#: Longest pause between two looks at the store while waiting. Polling with ``check`` (one
#: round trip, ~0.1 ms) rather than ``store.wait(keys, timeout)``: the latter prints two c10d
#: socket warnings on every timeout into the user's log. Ranks mostly arrive within a few
#: milliseconds of each other, which the doubling pauses (1, 2, 4 ... ms) catch early.
_POLL_MAX_S = 0.05


def _wait(store: Any, keys: list[str], timeout_s: float) -> bool:
    """True when every key is in the store within ``timeout_s``."""
    if not keys:
        return True
    deadline = time.monotonic() + max(0.0, timeout_s)
    pause = 0.001
    while True:
        try:
            if store.check(keys):
                return True
        except Exception:  # a store that cannot answer counts as "not there"
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, _POLL_MAX_S)


def _present(store: Any, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except Exception:
        return False


def _delete(store: Any, key: str) -> None:
    try:
        store.delete_key(key)
    except Exception:  # some stores (HashStore in old torch) cannot delete: a few bytes stay
        pass


def begin(name: str, exchange_stamp: bool = True) -> DistCapture | None:
    """Start the multi-process part of a capture; None when torch.distributed is not in use.

    With ``exchange_stamp``, rank 0 publishes its start time and the other ranks wait (up to
    the timeout) for it, so all ranks' run directories share one timestamp. Where it does not
    arrive, the rank uses its own clock and says so in a note.
    """
    info = rank_info()
    if info is None:
        return None
    rank, world = info
    with _names_lock:
        state = _names.setdefault(name, _NameState())
        state.count += 1
        seq = state.count
    dc = DistCapture(rank=rank, world_size=world, name=name, key=f"{_KEY_ROOT}/{name}/{seq}")
    if world < 2:
        return dc
    dc.store = _default_store()
    dc.timeout_s = gather_timeout_s()
    if dc.store is None:
        dc.notes.append("torch.distributed keeps no store for its default group: ranks not gathered")
        return dc
    if not exchange_stamp:
        return dc
    stamp_key = f"{dc.key}/stamp"
    now = _dt.datetime.now()
    if rank == 0:
        try:
            dc.store.set(stamp_key, now.isoformat())
            dc.started = now
        except Exception as err:
            dc.notes.append(f"could not publish the start time to the other ranks ({type(err).__name__}: {err})")
        return dc
    wait_s = dc.timeout_s if state.stamp_ok else 0.0
    if _wait(dc.store, [stamp_key], wait_s):
        try:
            dc.started = _dt.datetime.fromisoformat(dc.store.get(stamp_key).decode())
            state.stamp_ok = True
            return dc
        except Exception:
            pass
    state.stamp_ok = False
    dc.started = now
    dc.notes.append(
        f"rank 0's start time did not arrive within {wait_s:g} s: this run directory is named by "
        f"rank {rank}'s own clock (is {name!r} captured on rank 0 too?)"
    )
    return dc


def rank_entry(rank: int, result: ProfileResult, run_dir: Any = None) -> dict[str, Any]:
    """One row of ``ranks``: what rank 0 shows for a rank."""
    top = result.top_op
    return {
        "rank": rank,
        "wall_time_us": result.wall_time_us,
        "total_op_us": result.total_op_us,
        "top_op": top.name if top is not None else None,
        "run_dir": None if run_dir is None else str(run_dir),
        "status": result.status,
    }


def finish(dc: DistCapture | None, result: ProfileResult, run_dir: Any = None, hints: bool = True) -> None:
    """End the multi-process part of a capture; called on every rank, never raises.

    Sets ``rank`` / ``world_size``. Other ranks write their row for rank 0 and go on; rank 0
    waits (up to the timeout) for the rows, stores them as ``result.ranks`` (only the ranks
    that reported, with a note naming the others) and adds ``straggler`` hints.
    """
    global last_gather_seconds
    if dc is None:
        return
    result.rank, result.world_size = dc.rank, dc.world_size
    result.notes.extend(dc.notes)
    try:
        entry = rank_entry(dc.rank, result, run_dir)
        if dc.store is None or dc.world_size < 2:
            if dc.rank == 0:
                result.ranks = [entry]
            return
        if dc.rank != 0:
            _check_stamp_late(dc)
            dc.store.set(f"{dc.key}/rank{dc.rank}", json.dumps(entry))
            return
        t0 = time.perf_counter()
        entries = _gather(dc, entry, result)
        last_gather_seconds = time.perf_counter() - t0
        result.ranks = entries
        if hints:
            found = straggler_hints(entries)
            if found:
                result.hints.extend(found)
                result.hints.sort(key=lambda h: h.est_saving_us, reverse=True)
    except Exception as err:  # the gather must never cost the user the measurement
        result.notes.append(f"per-rank gather failed: {type(err).__name__}: {err}")


def _check_stamp_late(dc: DistCapture) -> None:
    """On a rank that stopped waiting for rank 0's start time: is rank 0 capturing this name
    after all? Then wait for it again from the next capture on."""
    with _names_lock:
        state = _names.get(dc.name)
    if state is not None and not state.stamp_ok and _present(dc.store, f"{dc.key}/stamp"):
        state.stamp_ok = True


def _gather(dc: DistCapture, own: dict[str, Any], result: ProfileResult) -> list[dict[str, Any]]:
    store = dc.store
    assert store is not None
    with _names_lock:
        state = _names.setdefault(dc.name, _NameState())
    # Records given up on at earlier captures that have turned up since: those ranks are alive
    # and capture this name, so they are waited for again.
    for r, old_keys in list(state.stale.items()):
        if any(_present(store, k) for k in old_keys):
            state.absent.discard(r)
            for k in old_keys:
                _delete(store, k)
            del state.stale[r]
    others = [r for r in range(dc.world_size) if r != 0]
    keys = {r: f"{dc.key}/rank{r}" for r in others}
    waited = [r for r in others if r not in state.absent]
    all_there = _wait(store, [keys[r] for r in waited], dc.timeout_s)
    entries = [own]
    missing: list[int] = []
    for r in others:
        if (all_there and r in waited) or _present(store, keys[r]):
            try:
                row = json.loads(store.get(keys[r]).decode())
                row["rank"] = r
                entries.append(row)
                state.absent.discard(r)
                _delete(store, keys[r])
                continue
            except Exception:
                pass
        missing.append(r)
    for r in missing:
        state.absent.add(r)
        stale = state.stale.setdefault(r, [])
        stale.append(keys[r])
        del stale[:-8]  # a rank that never captures this name: remember a few keys, not all
    if not missing:
        _delete(store, f"{dc.key}/stamp")  # every rank has read it by now
    else:
        waited_missing = [r for r in missing if r in waited]
        text = _ranks_text(missing)
        if waited_missing:
            result.notes.append(
                f"{text} did not report within {dc.timeout_s:g} s ({len(entries)} of {dc.world_size} ranks "
                f"in the table); {'they are' if len(missing) > 1 else 'it is'} not waited for again for "
                f"{dc.name!r} until a record turns up (set {TIMEOUT_ENV} to change the timeout)"
            )
        else:
            result.notes.append(
                f"{text} had not reported for {dc.name!r} ({len(entries)} of {dc.world_size} ranks in the table; "
                f"not waited for: no record at earlier captures)"
            )
    entries.sort(key=lambda e: int(e.get("rank", 0)))
    return entries


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) > 8:
        return f"ranks {', '.join(map(str, ranks[:8]))} and {len(ranks) - 8} more"
    return "ranks " + ", ".join(map(str, ranks))
