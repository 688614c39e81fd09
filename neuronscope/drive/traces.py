"""Bring your own trace: Chrome-trace files written by ``torch.profiler`` become results.

``tensorboard_trace_handler``, ``prof.export_chrome_trace`` and the Neuron profiler's
``export_trace`` all write the same Chrome-trace JSON. :func:`table_from_trace` reads one (or
several files of one run) into the :class:`~neuronscope.events.EventTable` that live captures
produce, and :func:`from_trace` runs it through :func:`~neuronscope.pipeline.build_result`, so
a trace file gets the same op table, regions and hints as a live capture.

What is read, by event category (the one table is :data:`neuronscope.events.table.CATEGORY_KINDS`,
shared with live captures):

- ``cpu_op`` (ops) and ``user_annotation`` (``record_function`` ranges, which become regions);
  their GPU-side copies, ``gpu_user_annotation``, are skipped so nothing is counted twice.
- ``python_function`` frames (``with_stack=True``) and runtime calls (``cudaLaunchKernel`` ...)
  go to :attr:`EventTable.others`: children in the nesting, as in ``key_averages()`` (runtime
  calls are listed as ops there, Python frames are not). The innermost user frame around each
  op is kept as its location (``file:line``), for the hints.
- Device work: ``kernel``, ``gpu_memcpy``, ``gpu_memset`` (CUDA and ROCm), ``privateuse1*``
  events (Neuron), ``mtia_ccp_events`` (MTIA) and ``cuda_profiler_range`` (CUPTI counter mode,
  with a note: replayed kernels). Their intervals, streams and launches also make the step
  breakdown (:mod:`neuronscope.events.timeline`); ``cuda_sync`` records are the host's syncs. Each is linked through its ``correlation`` argument to the runtime call that
  launched it (``cuda_runtime``, ``cuda_driver``, HIP, ``privateuse1_runtime`` ...), and its
  duration goes to the innermost ``cpu_op`` around that launch on the same (pid, tid) thread.
  Where the launch is missing, a kernel whose ``External id`` names a ``cpu_op`` goes to that op.
  Device time launched outside any op is kept as ``unattributed_device_ns``, never dropped. A
  range opened inside the launching op (``nccl:all_reduce`` in ``record_param_comms``) gets it too.
- torch 1.9 wrote ranges (``ProfilerStep#N`` among them) as ``cpu_op``: in a file with no
  ``user_annotation`` and an op named ``ProfilerStep#N``, an op without a ``::`` is a range.

Reading (:mod:`~neuronscope.trace.jsontext`): a file of up to 4 MiB of JSON is parsed at once,
a larger one a megabyte of events at a time, so memory follows the events kept, not the JSON
text (their timestamps and device times in int64 columns, 8 bytes a value, once each chunk is
read: :func:`~neuronscope.events.arrays.int_column`); one event over 16 MiB is refused. msgspec decodes only the fields the reader reads
(:class:`~neuronscope.events.trace_records.TraceEvent`), the rest is skipped unparsed; a document
msgspec refuses (NaN, lone surrogates, an odd layout) is read with the standard library's
``json``, which also names what is wrong. Modules (in :mod:`neuronscope.events`): ``jsontext``
(bytes to events), ``trace_records`` (the records events become), ``trace_reader`` (events to
the table: the hot loop), ``trace_link`` (device events to their ops, once per file),
``trace_meta`` (what a file says besides its events), ``trace_files`` (which files, which rank).
A job's ranks are read in parallel, each reduced to a :class:`RankSummary`, then merged here.
"""


from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any, Literal

from neuronscope.analysis.straggler import rank_entry, straggler_hints
from neuronscope.capture.neuron_explorer import device_profile_for_trace
from neuronscope.drive.pipeline import build_result
from neuronscope.drive.progress import progress_bar
from neuronscope.errors import TraceFormatError
from neuronscope.events import KIND_OP, EventTable, gc_paused
from neuronscope.events.flows import fold_system_profile
from neuronscope.events.trace_files import TracePath, group_by_rank, resolve_paths
from neuronscope.events.trace_reader import read_files
from neuronscope.result.types import ProfileResult

__all__ = ["from_trace", "table_from_trace"]


def table_from_trace(path: TracePath | Sequence[TracePath]) -> tuple[EventTable, dict[str, Any]]:
    """Read a torch.profiler Chrome trace into an :class:`EventTable`, plus what the file says.

    ``path`` is a ``.json`` or ``.json.gz`` file, or a directory or list of files, which are
    then read into one table (use :func:`from_trace` to keep ranks apart). The metadata dict
    holds ``backend`` ("cuda", "neuron" or "cpu"), ``device_name``, ``rank``, ``world_size``,
    ``threads`` (table thread id to its ``(pid, tid)``), ``wall_ns``, ``locations`` (per row,
    the user's ``file:line`` where stacks were recorded, else None) and link counts.

    Raises :class:`TraceFormatError` for a missing, empty, truncated or non-trace file.
    """
    files, _ = resolve_paths(path)
    return read_files(files)


def _result(
    table: EventTable,
    meta: dict[str, Any],
    name: str,
    hints: bool = True,
    ranks: dict[str, Any] | None = None,
    notes: list[str] | None = None,
) -> ProfileResult:
    """The result of one rank's trace files; ``ranks`` (rank, world size, the files of every
    rank) and ``notes`` are the caller's facts about the set of files."""
    notes = [*meta["notes"], *(notes or [])]
    if table.has_device and table.unattributed_device_ns:
        total = sum(d for d, kind in zip(table.device_ns, table.kinds) if kind == KIND_OP) + table.unattributed_device_ns
        share = 100.0 * table.unattributed_device_ns / total if total else 0.0
        notes.append(
            f"{share:.1f}% of device time ({meta['device_unattributed_events']} device events) "
            f"was launched outside any op (the shares' total includes it)"
        )
    artifacts: dict[str, Any] = {"trace_files": list(meta["files"])}
    if meta["backend"] == "neuron" and len(meta["files"]) == 1:  # a Neuron session's trace.json
        found = device_profile_for_trace(Path(meta["files"][0]))
        if found is not None:
            artifacts["device_profile"] = found
            notes.extend(found.get("notes", ()))
            notes.extend(fold_system_profile(table, found))
    facts: dict[str, Any] = {
        "device_name": meta.get("device_name"),
        "platform": meta["platform"] if meta["platform"] in ("rocm", "mtia") else None,
        "artifacts": artifacts,
        "rank": meta["rank"],
        "world_size": meta["world_size"],
        **(ranks or {}),
    }
    if meta.get("host_name"):
        facts["host"] = str(meta["host_name"])
    if len(meta["pids"]) == 1 and isinstance(meta["pids"][0], int):
        facts["pid"] = meta["pids"][0]
    return build_result(
        table,
        name=name,
        backend=meta["backend"],
        wall_time_us=meta["wall_ns"] / 1e3,
        source="trace",
        hints=hints,
        extra={
            "locations": meta.get("locations"),
            "trace": {k: v for k, v in meta.items() if k != "locations"},
            "device_profile": artifacts.get("device_profile"),
        },
        facts=facts,
        notes=notes,
        # Counter mode replays each kernel: its timeline is the replays', not the run's.
        breakdown=not meta["counter_mode"],
    )


def from_trace(
    path: TracePath | Sequence[TracePath],
    name: str | None = None,
    *,
    executor: Executor | Literal[False] | None = None,
    progress: bool | None = None,
) -> ProfileResult:
    """Build a :class:`ProfileResult` from Chrome traces written by ``torch.profiler``.

    ``path`` is one trace file (``.json`` or ``.json.gz``, from ``export_chrome_trace``,
    ``tensorboard_trace_handler`` or the Neuron profiler's ``export_trace``), a directory of
    them, or a list of files. Several files are read as the ranks of one run (by
    ``distributedInfo.rank``, else ``rank<N>`` in the name, else one rank per worker); the
    result is rank 0's, with ``ranks`` holding one entry per rank (its wall time, op time and
    top op) and ``world_size`` set, as a live multi-process capture has them. Files of one
    rank (a schedule's successive captures) are read together.

    The ranks other than the main one are read in parallel, each reduced to its row of
    ``ranks``: ``executor`` is any :class:`concurrent.futures.Executor` whose workers can open
    the files (a Dask ``distributed.Client``'s ``get_executor()`` where the traces live on a
    cluster); None (the default) uses local processes (forked, on Linux), one per core, where
    the files are big enough to gain from it; False reads them one after another in this
    process. A rank whose file is damaged or truncated is named in a note and left out; the
    others are still read.
    ``progress``: a bar on standard error for reads longer than a couple of seconds; None
    (the default) draws it where standard error is a terminal.

    Device time comes from the kernels, copies and sets (or Neuron device events) linked to
    the op that launched them; time launched outside any op is kept as
    ``device_unattributed_us``. Raises :class:`TraceFormatError` naming the file and the
    problem for a missing, empty, truncated, malformed or non-trace file (of a set of ranks:
    where none can be read), or a directory with no traces.
    """
    files, default_name = resolve_paths(path)
    with gc_paused():
        return _from_files(files, name or default_name, executor, progress)


#: Other ranks' files (bytes on disk) below which they are read in this process: under this,
#: starting worker processes costs more than reading them one after another.
PARALLEL_MIN_BYTES = 2 << 20


@dataclasses.dataclass(frozen=True)
class RankSummary:
    """What one rank's reading sends back to the process that merges the ranks: small and
    picklable (its row of ``ranks``, not its table)."""

    rank: int
    entry: dict[str, Any] | None  #: the rank's row of ``ranks`` (:func:`rank_entry`); None if unread
    world_size: int | None  #: what the rank's trace says the job's size is
    error: str | None = None  #: why the rank could not be read (a damaged or truncated file)


def rank_summary(rank: int, files: list[Path], label: str) -> RankSummary:
    """Read one rank's trace files and reduce them to its :class:`RankSummary` (run in a worker
    process, or on a cluster: it takes and returns plain values)."""
    try:
        with gc_paused():
            table, meta = read_files(files)
            res = _result(table, meta, label, hints=False)
    except TraceFormatError as exc:
        return RankSummary(rank, None, None, str(exc))
    # "run_dir" names the rank's trace: `neuronscope show` opens it as it opens a run.
    return RankSummary(rank, rank_entry(rank, res, run_dir=files[0]), meta["world_size"])


def _local_pool(groups: list[tuple[int, list[Path]]]) -> Executor | None:
    """Worker processes for reading ``groups``, one per core, or None where this process
    should read them itself (one core, a single rank, files too small to gain, no Linux, a
    daemonic process)."""
    # fork, on Linux only: workers start at once and do not import the user's __main__ again
    # (spawn and forkserver would run a script without a `__main__` guard a second time), and
    # fork is unsafe on macOS. Elsewhere the caller's own executor= is the way to parallel reads.
    if not sys.platform.startswith("linux") or "fork" not in multiprocessing.get_all_start_methods():
        return None
    if multiprocessing.current_process().daemon:  # a Pool's worker may start no processes
        return None
    cores = len(os.sched_getaffinity(0))
    if cores < 2 or len(groups) < 2:
        return None
    if sum(p.stat().st_size for _, g in groups for p in g) < PARALLEL_MIN_BYTES:
        return None
    try:
        return ProcessPoolExecutor(max_workers=min(cores, len(groups)), mp_context=multiprocessing.get_context("fork"))
    except OSError:  # no semaphores here (a sandbox without /dev/shm): read them in this process
        return None


def _from_files(files: list[Path], label: str, executor: Executor | Literal[False] | None, progress: bool | None) -> ProfileResult:
    groups = group_by_rank(files)
    if len(groups) == 1:
        group = groups[0][1]
        with progress_bar(sum(p.stat().st_size for p in group), "B", label, progress) as step:
            table, meta = read_files(group, on_read=step)
        several = len(group) > 1
        return _result(table, meta, label, notes=[f"{len(group)} trace files of one rank read together"] if several else None)

    others = groups[1:]
    pool: Executor | None
    if isinstance(executor, Executor):
        pool, own_pool = executor, False
    else:  # None: local processes where they gain; False: none
        pool, own_pool = (None if executor is False else _local_pool(others)), True
    summaries: dict[int, RankSummary] = {}
    with progress_bar(len(groups), "rank", f"{label}: {len(groups)} ranks", progress) as step:
        try:
            if pool is None:  # one rank in memory at a time; they need their totals only
                for rank, group in others:
                    summaries[rank] = rank_summary(rank, group, label)
                    step(1)
                futures: list[Future[RankSummary]] = []
            else:
                futures = [pool.submit(rank_summary, rank, group, label) for rank, group in others]
                for f in futures:
                    f.add_done_callback(lambda _f: step(1))
            # The main rank is read here, while the workers read the others.
            main_rank, main_files = groups[0]
            failed: RankSummary | None = None
            try:
                table, meta = read_files(main_files)
            except TraceFormatError as exc:
                failed = RankSummary(main_rank, None, None, str(exc))
            step(1)
            for f in futures:
                s = f.result()
                summaries[s.rank] = s
        finally:
            if own_pool and pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
    if failed is not None:  # the lowest rank that could be read becomes the main one
        summaries[failed.rank] = failed
        readable = [(r, g) for r, g in others if summaries[r].entry is not None]
        if not readable:
            raise TraceFormatError(failed.error or f"rank {failed.rank}: unreadable")
        main_rank, main_files = readable[0]
        table, meta = read_files(main_files)
    return _merge(groups, main_rank, main_files, table, meta, summaries, label)


def _merge(
    groups: list[tuple[int, list[Path]]],
    main_rank: int,
    main_files: list[Path],
    table: EventTable,
    meta: dict[str, Any],
    summaries: dict[int, RankSummary],
    label: str,
) -> ProfileResult:
    """The main rank's result with every rank's row and the straggler hints over them."""
    worlds = {s.world_size for s in summaries.values() if s.world_size is not None}
    if meta["world_size"] is not None:
        worlds.add(meta["world_size"])
    world = worlds.pop() if len(worlds) == 1 else len(groups)
    notes = [f"traces of {len(groups)} of {world} ranks found"] if world > len(groups) else []
    unread = [s for r, s in sorted(summaries.items()) if s.entry is None]
    notes += [f"rank {s.rank} left out: {s.error}" for s in unread]
    main = _result(
        table,
        meta,
        label,
        ranks={
            "rank": main_rank,
            "world_size": world,
            "artifacts": {"trace_files": [str(p) for _, g in groups for p in g]},
        },
        notes=notes or None,
    )
    # The ranks' rows need the main rank's totals: they and the straggler hints come with a
    # new result, as rank 0 of a live run gets them (distributed.gather).
    entries = [s.entry for r, s in sorted(summaries.items()) if s.entry is not None and r != main_rank]
    rows = sorted([rank_entry(main_rank, main, run_dir=main_files[0]), *entries], key=lambda e: e["rank"])
    hints = sorted([*main.hints, *straggler_hints(rows)], key=lambda h: h.est_saving_us, reverse=True)
    return dataclasses.replace(main, ranks=rows, hints=hints)
