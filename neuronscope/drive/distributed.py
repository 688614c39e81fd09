"""Multi-process runs: rank info, one start time per capture across ranks, and the per-rank table.

When ``torch.distributed`` is initialised (``torchrun``, ``init_process_group``), every rank's
capture of a name is one capture of the job. Rank 0 leads, through the key-value store of the
default process group (the ``torchrun`` rendezvous store), never through a collective:

- :func:`begin` (at the start of a capture): rank 0 *opens* capture ``seq`` of the name, with
  its start time (which names every rank's run directory, so they sort together). Another rank
  joins the capture that rank 0 has open and still measuring: captures are matched by what is
  running at the same time, not by counting, so a rank that skips a capture (a window, an
  ``if``) is matched again at its next one. A rank that finds that rank 0 measured a capture
  it never joined says so (a *skip* record), and rank 0 stops waiting for it at once.
- :func:`mark_stopped` (as soon as the capture stops) tells the other ranks that rank 0's
  measurement of ``seq`` is over, so that none joins it late.
- :func:`gather` (at the end, on every rank): each rank first has its result saved (exported)
  through the caller's ``save``, then the other ranks write one small record and go on, while
  rank 0 waits (up to :data:`DEFAULT_GATHER_TIMEOUT_S`) for the records of the ranks that
  joined, builds ``ranks`` and ``straggler`` hints into a new result, and saves it again. A
  rank killed meanwhile (and torchrun then killing rank 0) costs the table, never rank 0's
  measurement.

A store ``wait`` takes a timeout of its own, so a dead or late rank costs rank 0 at most the
timeout and never hangs the job; a collective that times out would leave the user's process
group unusable. A rank that did not report is not waited for again for that name until it
joins a capture again. It works the same under gloo, NCCL and the Neuron backend.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from neuronscope.analysis.straggler import rank_entry, straggler_hints
from neuronscope.capture import torch_private
from neuronscope.config import rank_info
from neuronscope.result.types import ProfileResult

__all__ = [
    "DEFAULT_GATHER_TIMEOUT_S",
    "JOIN_WINDOW_S",
    "TIMEOUT_ENV",
    "DistCapture",
    "begin",
    "gather",
    "gather_timeout_s",
    "mark_stopped",
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
#: How far apart (seconds) the ranks' starts of one capture may be for a rank to join rank 0's
#: capture after it stopped: ranks leave a barrier or a collective milliseconds apart, and a
#: capture with no collective in it can be over on rank 0 before another rank starts it. A rank
#: starting later than this after rank 0 stopped was not in that capture (it skipped it).
JOIN_WINDOW_S = 0.25



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
        return torch_private.default_store()
    except Exception:
        return None


@dataclass
class _NameState:
    """What this process remembers about one capture name across its captures."""

    #: rank 0: how many captures of the name it opened; other ranks: the last seq joined
    seq: int = 0
    #: rank 0: ranks that did not report last time and have not joined since (checked, not waited for)
    absent: set[int] = field(default_factory=set)
    #: rank 0: keys of earlier captures to delete once they can no longer be read
    old_keys: list[str] = field(default_factory=list)
    #: other ranks: False once rank 0's open capture failed to turn up for this name
    stamp_ok: bool = True


# Why global: captures of one name match across ranks by what each process remembers of that
# name's earlier captures, for the life of the process (guarded by the lock).
_names: dict[str, _NameState] = {}
_names_lock = threading.Lock()


@dataclass
class DistCapture:
    """One capture's share of a multi-process run (made by :func:`begin`).

    ``seq`` is rank 0's number of the capture this rank joined (None: none found)."""

    rank: int
    world_size: int
    name: str
    seq: int | None = None
    store: Any | None = None
    timeout_s: float = DEFAULT_GATHER_TIMEOUT_S
    started: _dt.datetime | None = None
    notes: list[str] = field(default_factory=list)
    stopped: bool = False

    @property
    def base(self) -> str:
        return f"{_KEY_ROOT}/{self.name}"

    @property
    def key(self) -> str:
        """The keys of this capture start with this."""
        return f"{self.base}/{self.seq}"


#: Longest pause between two looks at the store while waiting. Polling with ``check`` (one
#: round trip, ~0.1 ms) rather than ``store.wait(keys, timeout)``: the latter prints two c10d
#: socket warnings on every timeout into the user's log. Ranks mostly arrive within a few
#: milliseconds of each other, which the doubling pauses (1, 2, 4 ... ms) catch early.
_POLL_MAX_S = 0.05


def _poll(ready: Any, timeout_s: float) -> bool:
    """Call ``ready()`` until it is true or ``timeout_s`` has passed; True when it was."""
    deadline = time.monotonic() + max(0.0, timeout_s)
    pause = 0.001
    while True:
        try:
            if ready():
                return True
        except Exception:  # a store that cannot answer counts as "not yet"
            pass
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


def _get(store: Any, key: str) -> str | None:
    if not _present(store, key):
        return None
    try:
        return bytes(store.get(key)).decode()
    except Exception:
        return None


def _delete(store: Any, key: str) -> None:
    try:
        store.delete_key(key)
    except Exception:  # some stores (HashStore in old torch) cannot delete: a few bytes stay
        pass


def begin(name: str, exchange_stamp: bool = True) -> DistCapture | None:
    """Start the multi-process part of a capture; None when torch.distributed is not in use.

    Rank 0 opens the capture; another rank waits (up to the timeout) for the capture rank 0 has
    open and joins it, taking its start time (``exchange_stamp``: for the run directory's
    name). Where none turns up, the rank uses its own clock and says so in a note; its result
    is then not gathered.
    """
    info = rank_info()
    if info is None:
        return None
    rank, world = info
    dc = DistCapture(rank=rank, world_size=world, name=name)
    if world < 2:
        return dc
    dc.store = _default_store()
    dc.timeout_s = gather_timeout_s()
    if dc.store is None:
        dc.notes.append("torch.distributed keeps no store for its default group: ranks not gathered")
        return dc
    with _names_lock:
        state = _names.setdefault(name, _NameState())
    now = _dt.datetime.now()
    if rank == 0:
        state.seq += 1
        dc.seq, dc.started = state.seq, now
        try:
            dc.store.set(f"{dc.base}/open", f"{dc.seq} {now.isoformat()} {time.time()!r}")
        except Exception as err:
            dc.notes.append(f"could not tell the other ranks about this capture ({type(err).__name__}: {err})")
        return dc
    return _join(dc, state, now, exchange_stamp)


def _join(dc: DistCapture, state: _NameState, now: _dt.datetime, exchange_stamp: bool) -> DistCapture:
    """Another rank: join the capture of rank 0 that runs at the same time as this one.

    Rank 0's newest capture not joined yet is taken when rank 0 opened it less than
    :data:`JOIN_WINDOW_S` before (or after) this rank began, even if it is over already (a
    short capture with no collective in it). One opened longer before was either measured
    without this rank, if rank 0 has stopped it (this rank says so, in a skip record, and
    waits for the next), or is still waiting for this rank, if it is still open after another
    :data:`JOIN_WINDOW_S` (this rank is the straggler, and joins it).
    """
    store = dc.store
    assert store is not None
    found: list[tuple[int, str]] = []
    began = time.time()

    def open_capture() -> bool:
        seq, stamp, opened_at = _open_of(_get(store, f"{dc.base}/open"))
        if seq <= state.seq:
            return False
        if began - opened_at > JOIN_WINDOW_S:  # opened well before this rank began
            if _stopped_of(_get(store, f"{dc.base}/stopped"))[0] >= seq:
                _mark_skipped(store, dc, seq, state)  # measured without this rank: wait for the next
                return False
            if time.time() - began < JOIN_WINDOW_S:
                return False  # still open: a straggler's capture, unless rank 0 stops it now
        found.append((seq, stamp))
        return True

    wait_s = dc.timeout_s if state.stamp_ok else 0.0
    if _poll(open_capture, wait_s):
        seq, stamp = found[0]
        dc.seq = state.seq = seq
        state.stamp_ok = True
        try:
            dc.started = _dt.datetime.fromisoformat(stamp) if exchange_stamp else now
        except ValueError:
            dc.started = now
        try:
            store.set(f"{dc.key}/join{dc.rank}", "1")
        except Exception:
            pass
        return dc
    state.stamp_ok = False
    dc.started = now
    dc.notes.append(
        f"rank 0 had no capture of {dc.name!r} open within {wait_s:g} s: this run directory is named by rank "
        f"{dc.rank}'s own clock and its row is not in rank 0's table (is {dc.name!r} captured on rank 0 too?)"
    )
    return dc


def _open_of(text: str | None) -> tuple[int, str, float]:
    """rank 0's ``open`` record: (seq, start time ISO, start time in epoch seconds)."""
    try:
        seq, stamp, epoch = (text or "").split(" ")
        return int(seq), stamp, float(epoch)
    except ValueError:
        return 0, "", 0.0


def _stopped_of(text: str | None) -> tuple[int, float]:
    try:
        seq, epoch = (text or "").split(" ")
        return int(seq), float(epoch)
    except ValueError:
        return 0, 0.0


def _mark_skipped(store: Any, dc: DistCapture, seq: int, state: _NameState) -> None:
    """Tell rank 0 that this rank will never report for capture ``seq`` (it skipped it)."""
    if seq > state.seq:
        try:
            store.set(f"{dc.base}/{seq}/skip{dc.rank}", "1")
        except Exception:
            pass
        state.seq = seq


def mark_stopped(dc: DistCapture | None) -> None:
    """Rank 0, as soon as its capture stops: no other rank joins this capture from now on.
    Idempotent; :func:`gather` calls it too, but the earlier the better."""
    if dc is None or dc.rank != 0 or dc.store is None or dc.seq is None or dc.stopped:
        return
    dc.stopped = True
    try:
        dc.store.set(f"{dc.base}/stopped", f"{dc.seq} {time.time()!r}")
    except Exception:
        pass


def gather(
    dc: DistCapture | None,
    result: ProfileResult,
    *,
    hints: bool = True,
    save: Callable[[ProfileResult], ProfileResult] | None = None,
) -> ProfileResult:
    """End the multi-process part of a capture, on every rank; never raises for the gather.

    Returns a new result with ``rank`` / ``world_size`` (and the notes of :func:`begin`); on rank
    0 also ``ranks`` (the ranks that reported) and ``straggler`` hints. ``save(result)`` writes
    a result and returns it as written (exported, ``run_dir`` set). It is called first with the
    measurement alone, *before* any waiting, so that a rank killed meanwhile (and torchrun
    killing rank 0 in turn) costs only the table; on rank 0 it is called once more with the
    gathered result, which then carries the ``run_dir`` of the first call (rewrite that run).
    ``save`` raising is the caller's business: it propagates.
    """
    if dc is None:
        return save(result) if save is not None else result
    mark_stopped(dc)
    own = dataclasses.replace(result, rank=dc.rank, world_size=dc.world_size, notes=[*result.notes, *dc.notes])
    saved = save(own) if save is not None else own
    try:
        entry = rank_entry(dc.rank, saved, saved.run_dir)
        if dc.store is None or dc.world_size < 2 or dc.seq is None:
            if dc.rank == 0 and dc.world_size < 2:
                gathered = dataclasses.replace(saved, ranks=[entry])
                return save(gathered) if save is not None else gathered
            return saved
        if dc.rank != 0:
            dc.store.set(f"{dc.key}/rank{dc.rank}", json.dumps(entry))
            return saved
        notes: list[str] = []
        entries = _gather(dc, entry, notes)
        found = straggler_hints(entries) if hints else []
        new_hints = sorted([*saved.hints, *found], key=lambda h: h.est_saving_us, reverse=True) if found else saved.hints
        gathered = dataclasses.replace(saved, ranks=entries, hints=new_hints, notes=[*saved.notes, *notes])
    except Exception as err:  # the gather must never cost the user the measurement
        gathered = dataclasses.replace(saved, notes=[*saved.notes, f"per-rank gather failed: {type(err).__name__}: {err}"])
    return save(gathered) if save is not None else gathered


def _gather(dc: DistCapture, own: dict[str, Any], notes: list[str]) -> list[dict[str, Any]]:
    """Rank 0: the rows of the ranks that report for this capture (its own first)."""
    store = dc.store
    assert store is not None
    with _names_lock:
        state = _names.setdefault(dc.name, _NameState())
    others = [r for r in range(dc.world_size) if r != 0]
    record = {r: f"{dc.key}/rank{r}" for r in others}
    skip = {r: f"{dc.key}/skip{r}" for r in others}
    joined = {r: f"{dc.key}/join{r}" for r in others}
    done: dict[int, str] = {}

    def settled(r: int) -> bool:
        if r in done:
            return True
        if _present(store, record[r]):
            done[r] = "record"
        elif _present(store, skip[r]):
            done[r] = "skipped"
        return r in done

    def waited_for(r: int) -> bool:
        return r not in state.absent or _present(store, joined[r])

    _poll(lambda: all(settled(r) for r in others if waited_for(r)), dc.timeout_s)
    entries = [own]
    missing: list[int] = []
    skipped: list[int] = []
    for r in others:
        settled(r)
        kind = done.get(r)
        if kind == "record":
            try:
                row = json.loads(bytes(store.get(record[r])).decode())
                row["rank"] = r
                entries.append(row)
                state.absent.discard(r)
                continue
            except Exception:
                pass
        if kind == "skipped":
            skipped.append(r)
            continue
        missing.append(r)
    waited_missing = [r for r in missing if r not in state.absent]
    for r in missing:
        state.absent.add(r)
    for key in state.old_keys:  # the previous capture's keys: nobody reads them any more
        _delete(store, key)
    state.old_keys = [*record.values(), *skip.values(), *joined.values()]
    if skipped:
        notes.append(f"{_ranks_text(skipped)} did not capture this one of {dc.name!r} (skipped it); the table holds the others")
    if waited_missing:
        notes.append(
            f"{_ranks_text(waited_missing)} did not report within {dc.timeout_s:g} s ({len(entries)} of {dc.world_size} "
            f"ranks in the table); {'they are' if len(waited_missing) > 1 else 'it is'} not waited for again for "
            f"{dc.name!r} until {'they join' if len(waited_missing) > 1 else 'it joins'} a capture again (set "
            f"{TIMEOUT_ENV} to change the timeout)"
        )
    others_missing = [r for r in missing if r not in waited_missing]
    if others_missing:
        notes.append(
            f"{_ranks_text(others_missing)} had not reported for {dc.name!r} ({len(entries)} of {dc.world_size} ranks in "
            f"the table; not waited for: no record at earlier captures)"
        )
    entries.sort(key=lambda e: int(e.get("rank", 0)))
    return entries


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) > 8:
        return f"ranks {', '.join(map(str, ranks[:8]))} and {len(ranks) - 8} more"
    return "ranks " + ", ".join(map(str, ranks))
