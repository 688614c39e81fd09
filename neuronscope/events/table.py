"""The event table: what live captures and trace files both become, and the kinds of events in it.

See :mod:`neuronscope.events` for how the table is read and counted.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterator, Mapping, MutableSequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

KIND_OP = 0  #: an operator (``cpu_op``): aten ops, c10d ops, custom ops
KIND_ANNOTATION = 1  #: a labelled range (``user_annotation``): record_function, regions
#: A Python frame (``python_function``, with ``with_stack=True``). Only in
#: :attr:`EventTable.others`: never an op, and no child in :func:`summarize`'s nesting.
KIND_PYTHON = 2
#: Any other CPU-side activity: device-runtime and driver calls (``cudaLaunchKernel``,
#: ``cudaDeviceSynchronize``, PrivateUse1 runtime), instant events. Only in
#: :attr:`EventTable.others`; reported as ops, as ``key_averages()`` does.
KIND_RUNTIME = 3
#: Device work (kernels, copies, sets; Neuron and MTIA device events): never a row of the table;
#: its duration goes to the op that launched it, and its interval to :class:`DeviceEvents`.
KIND_DEVICE = 4
KIND_SKIP = 5  #: carries no time of its own (flow arrows, the device-side copy of a range ...)
KIND_SPAN = 6  #: the profiler's own span (``Trace``): tells a torch.profiler trace from others

#: The one table of event categories, shared by live captures (Kineto's activity names) and
#: trace files (the ``cat`` field, the same names). A backend that brings new categories adds
#: them here (Neuron: its driver events as KIND_DEVICE, ``privateuse1_runtime`` is a launch).
CATEGORY_KINDS: Mapping[str, int] = MappingProxyType({
    "cpu_op": KIND_OP,
    "operator": KIND_OP,  # torch 1.8's name for cpu_op
    "user_annotation": KIND_ANNOTATION,
    "python_function": KIND_PYTHON,
    "cuda_runtime": KIND_RUNTIME,
    "cuda_driver": KIND_RUNTIME,
    "runtime": KIND_RUNTIME,
    # Allocation markers: their device type is the allocation's device, not where they ran.
    "cpu_instant_event": KIND_RUNTIME,
    "kernel": KIND_DEVICE,
    "gpu_memcpy": KIND_DEVICE,
    "gpu_memset": KIND_DEVICE,
    "memcpy": KIND_DEVICE,
    "memset": KIND_DEVICE,
    "concurrent_kernel": KIND_DEVICE,
    "mtia_ccp_events": KIND_DEVICE,  # MTIA's device work
    # CUPTI counter mode: one range per kernel (replayed to read counters), in place of kernels.
    "cuda_profiler_range": KIND_DEVICE,
    # TorchNeuron (Neuron docs): operator dispatch on the op's thread, as cudaLaunchKernel;
    # device execution (stream id as thread id), linked to the op, as a kernel. torch counts
    # both as CPU-side activities, so they must be named here to stay out of the op table.
    "privateuse1_runtime": KIND_RUNTIME,
    "privateuse1_driver": KIND_DEVICE,
    # The device-side copy of a record_function range: a span over kernels, not work.
    "gpu_user_annotation": KIND_SKIP,
    "trace": KIND_SPAN,
})

#: Categories of host intervals spent blocked in a device synchronisation (CUPTI's sync
#: records); runtime calls that synchronise count too (see :func:`is_sync_call`).
SYNC_CATEGORIES = frozenset({"cuda_sync"})


def blocks_host(sync_record: str) -> bool:
    """Whether a sync record (:data:`SYNC_CATEGORIES`) is the host waiting: "Stream Sync",
    "Event Sync", "Context Sync" are; "Stream Wait Event" is one stream waiting on another."""
    return "Wait Event" not in sync_record


def category_kind(category: str) -> int | None:
    """The kind of events of ``category`` (a Kineto activity name, or a trace's ``cat``), or None
    when the table does not know it (a live capture then asks the event's device type)."""
    c = category.lower()
    kind = CATEGORY_KINDS.get(c)
    if kind is not None:
        return kind
    if c.endswith(("_runtime", "_driver")):  # hip_runtime, privateuse1_runtime, xpu_runtime...
        return KIND_RUNTIME
    if c.startswith("privateuse1"):
        return KIND_DEVICE
    return None


def clean_name(name: Any) -> str:
    """An event name as text that can be printed and written: a non-string is refused
    (TypeError), lone surrogates (a file name decoded with ``surrogateescape``) become '?'."""
    if name.__class__ is not str:
        raise TypeError(f"an event name is a {type(name).__name__}, not a string")
    if not name.isascii():
        name = name.encode("utf-8", "replace").decode("utf-8")
    return name


def is_sync_call(name: str) -> bool:
    """Whether a runtime call blocks the host until the device catches up: CUDA's and HIP's
    ``*Synchronize`` calls, MTIA's ``synchronize`` and ``synchronizeStream``."""
    return "ynchronize" in name  # "Synchronize" in CUDA and HIP, "synchronize" in MTIA


#: Classes of device work, for the step breakdown.
DEVICE_COMPUTE, DEVICE_COMM, DEVICE_MEMCPY, DEVICE_MEMSET, DEVICE_WAIT = range(5)
DEVICE_CLASS_NAMES = ("compute", "communication", "memcpy", "memset", "wait")


def device_class(category: str, name: str) -> int:
    """Compute, communication (NCCL/RCCL kernels), memory copy or set, or a stream waiting on
    another (MTIA's ``event_wait``: no work, so not busy time)."""
    c = category.lower()
    if c in ("gpu_memcpy", "memcpy") or name.startswith("Memcpy"):
        return DEVICE_MEMCPY
    if c in ("gpu_memset", "memset") or name.startswith("Memset"):
        return DEVICE_MEMSET
    low = name.lower()
    if "nccl" in low or "rccl" in low:
        return DEVICE_COMM
    if low == "event_wait":
        return DEVICE_WAIT
    return DEVICE_COMPUTE


#: Names of events of compiled code (``torch.compile``): Dynamo's region around a compiled
#: call, Inductor's graph call, and AOTAutograd's forward/backward functions.
COMPILED_EVENT_PREFIXES = ("Torch-Compiled Region", "## Call CompiledFxGraph", "CompiledFunction")
#: The first two: compiled code as a whole (a compiled region, one compiled graph's call),
#: which torch may record as a range rather than an op.
COMPILED_CODE_PREFIXES = COMPILED_EVENT_PREFIXES[:2]


def is_compiled_event(name: str) -> bool:
    """Whether ``name`` is an event of compiled code (see :data:`COMPILED_EVENT_PREFIXES`)."""
    return name.startswith(COMPILED_EVENT_PREFIXES)


FLAG_ASYNC = 1  #: started and ended on different threads: nests nothing, self time 0
#: Device time came from the op itself (``privateuse1_elapsed_us``), not from device events:
#: ``key_averages`` then leaves its children's device time out of its total.
FLAG_LEGACY_DEVICE = 2

#: Names that ``key_averages()`` drops; dropped here too so that the numbers agree with it.
IGNORED_NAMES = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)

#: Most distinct input-shape signatures kept per op: enough to tell layers apart, bounded so a
#: dynamic-shape workload cannot grow the result without limit.
MAX_SHAPES_PER_OP = 8

#: Raw events read per slice: bounds the short-lived Python objects (activity strings, names)
#: alive at once to a few megabytes however large the capture.
READ_CHUNK = 1 << 16

#: A column of integers: a list for live captures, an ``array("q")`` for tables read from
#: trace files (8 bytes a value; it indexes, slices and converts to numpy as a list does).
IntColumn = MutableSequence[int]


@dataclass
class DeviceEvents:
    """Each device event's interval, stream and class (compute, communication, memcpy ...), and
    the interval of the runtime call that launched it (-1 when unknown); plus the host's
    intervals blocked in a synchronisation. What the step breakdown is computed from."""

    starts: IntColumn = field(default_factory=list)
    ends: IntColumn = field(default_factory=list)
    streams: list[int] = field(default_factory=list)
    classes: list[int] = field(default_factory=list)
    launch_starts: IntColumn = field(default_factory=list)
    launch_ends: IntColumn = field(default_factory=list)
    sync_starts: IntColumn = field(default_factory=list)
    sync_ends: IntColumn = field(default_factory=list)
    #: each event's device (a trace's ``args.device`` or ``pid``; a live event's device index):
    #: one process may drive several devices, each with its own busy time and streams
    devices: list[int] = field(default_factory=list)
    #: where each separate capture's events begin (files of one rank read together): the time
    #: between captures is no idle time of the device
    segments: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.starts)

    def segment(self, lo: int, hi: int) -> DeviceEvents:
        """Events ``lo:hi`` (the syncs are the whole table's: see :func:`step_breakdown`)."""
        return DeviceEvents(
            starts=self.starts[lo:hi],
            ends=self.ends[lo:hi],
            streams=self.streams[lo:hi],
            classes=self.classes[lo:hi],
            launch_starts=self.launch_starts[lo:hi],
            launch_ends=self.launch_ends[lo:hi],
            devices=self.devices[lo:hi],
        )

    def of_device(self, device: int) -> DeviceEvents:
        """The events of one device, with the captures' bounds (``segments``) kept."""
        keep = [k for k, d in enumerate(self.devices) if d == device]
        before = [0] * (len(self.devices) + 1)  # events of the device before each place
        for k, d in enumerate(self.devices):
            before[k + 1] = before[k] + (d == device)
        return DeviceEvents(
            starts=[self.starts[k] for k in keep],
            ends=[self.ends[k] for k in keep],
            streams=[self.streams[k] for k in keep],
            classes=[self.classes[k] for k in keep],
            launch_starts=[self.launch_starts[k] for k in keep],
            launch_ends=[self.launch_ends[k] for k in keep],
            devices=[device] * len(keep),
            segments=sorted({before[b] for b in self.segments}),
        )


@dataclass
class EventTable:
    """The CPU-side events of a capture as parallel lists (one index per event).

    ``names``/``kinds`` hold ops (:data:`KIND_OP`) and ranges (:data:`KIND_ANNOTATION`).
    Device activity is folded in already: ``device_ns[i]`` is the device time of the kernels
    (or Neuron executions) launched directly by event ``i``; device work launched outside any
    op is in ``unattributed_device_ns``. ``has_device`` tells a capture with no device
    activity at all (device fields become None) from one whose ops launched nothing.

    ``flags`` is per event (:data:`FLAG_ASYNC`, :data:`FLAG_LEGACY_DEVICE`), or empty when no
    event has one. ``others`` holds the CPU-side events that are neither ops nor ranges (Python
    frames, device-runtime calls) with the same fields, or None: :func:`summarize` nests the
    runtime calls as ``key_averages()`` does, and leaves the Python frames out.
    """

    names: list[str] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)
    starts: IntColumn = field(default_factory=list)
    ends: IntColumn = field(default_factory=list)
    device_ns: IntColumn = field(default_factory=list)
    shapes: list[Any] = field(default_factory=list)  # per event, or empty when not recorded
    #: per event, its inputs' strides laid out as its shapes (a trace's ``Input Strides``),
    #: or empty where none was recorded: read by the op graph (the layout of attention's key)
    strides: list[Any] = field(default_factory=list)
    #: per event, its scalar arguments as a live capture's event tree holds them (a tuple:
    #: see :mod:`~neuronscope.events.op_scalars`; None where not recorded), or empty when no
    #: event recorded any. Trace files fill it; a live capture's graph reads its event tree.
    scalars: list[Any] = field(default_factory=list)
    has_device: bool = False
    unattributed_device_ns: int = 0
    device_event_count: int = 0
    raw_event_count: int = 0
    flags: list[int] = field(default_factory=list)  # per event, or empty when all are 0
    others: EventTable | None = None
    #: thread -> its process, where a table holds several (a trace file); else empty
    processes: dict[int, Any] = field(default_factory=dict)
    #: device intervals for the step breakdown, where the reader kept them
    device: DeviceEvents | None = None
    #: row -> device time launched while that range was open by an op around the range
    #: (``nccl:all_reduce`` inside ``record_param_comms``): the range's, not passed up
    range_device_ns: dict[int, int] = field(default_factory=dict)
    #: (thread, start) of each operator dispatch to the device (TorchNeuron's
    #: ``privateuse1_runtime``): no rows of their own (events.flows), counted by the hints
    dispatches: list[tuple[int, int]] = field(default_factory=list)
    #: flow id -> (thread, start, end) of the dispatch that started that flow: where a
    #: device's executions are only in another file (Neuron Explorer's system profile, by
    #: ``flow_id``), they are joined to the ops here (events.flows.add_flow_device_time)
    dispatch_flows: dict[Any, tuple[int, int, int]] = field(default_factory=dict)
    #: device records left out as on another clock (events.clocks): how many, their duration
    off_clock_device: int = 0
    off_clock_device_ns: int = 0

    def __len__(self) -> int:
        return len(self.names)

    def append(
        self,
        name: str,
        kind: int,
        tid: int,
        start: int,
        end: int,
        device: int = 0,
        shapes: Any = None,
        flags: int = 0,
    ) -> None:
        self.names.append(name)
        self.kinds.append(kind)
        self.tids.append(tid)
        self.starts.append(start)
        self.ends.append(end)
        self.device_ns.append(device)
        if shapes is not None or self.shapes:
            if len(self.shapes) < len(self.names) - 1:
                self.shapes.extend([None] * (len(self.names) - 1 - len(self.shapes)))
            self.shapes.append(shapes)
        if flags or self.flags:
            if len(self.flags) < len(self.names) - 1:
                self.flags.extend([0] * (len(self.names) - 1 - len(self.flags)))
            self.flags.append(flags)

    def add_other(self, name: str, kind: int, tid: int, start: int, end: int) -> None:
        """Add a Python frame (:data:`KIND_PYTHON`) or runtime call (:data:`KIND_RUNTIME`)."""
        if self.others is None:
            self.others = EventTable()
        self.others.append(name, kind, tid, start, end)

    def without_rows(self, gone: AbstractSet[int]) -> EventTable:
        """A copy without rows ``gone``, the rows that :attr:`range_device_ns` is keyed by
        renumbered; the rest shared. Each per-row column here, so that a new one is not left
        out by one of the places that drop rows (hidden annotations, module ranges)."""
        keep = [i for i in range(len(self.names)) if i not in gone]
        new_row = {old: new for new, old in enumerate(keep)}

        def column(values: list[Any], missing: Any) -> list[Any]:
            return [values[i] if i < len(values) else missing for i in keep] if values else []

        return replace(
            self,
            names=[self.names[i] for i in keep],
            kinds=[self.kinds[i] for i in keep],
            tids=[self.tids[i] for i in keep],
            starts=[self.starts[i] for i in keep],
            ends=[self.ends[i] for i in keep],
            device_ns=[self.device_ns[i] for i in keep],
            shapes=column(self.shapes, None),
            strides=column(self.strides, None),
            scalars=column(self.scalars, None),
            flags=column(self.flags, 0),
            range_device_ns={new_row[r]: ns for r, ns in self.range_device_ns.items() if r in new_row},
        )

    @property
    def span_ns(self) -> int:
        """From the first event's start to the last event's end (ops and ranges)."""
        if not self.starts:
            return 0
        return max(self.ends) - min(self.starts)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while tens of thousands of objects are built (raw
    events read, a trace parsed, an op graph made): each collection would walk them all
    again, a third to a half of the time on big captures. Nothing built here makes reference
    cycles, so reference counting frees it all."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def promote_compiled_events(table: EventTable, base: int = 0) -> None:
    """Make compiled code an op wherever torch recorded it as a range (rows from ``base`` on:
    a trace reader's latest file).

    torch 2.13 records ``## Call CompiledFxGraph <hash> ##`` as a ``cpu_op`` without
    ``record_shapes`` but as a ``user_annotation`` with it, which would make the fused work a
    region with no op of its own. Called before the nesting, so that self times, region
    contents and device time come out as for any other op; the names are kept.
    """
    kinds, names = table.kinds, table.names
    ranges = list(itertools.compress(range(base, len(kinds)), map(KIND_ANNOTATION.__eq__, kinds[base:])))  # at C speed
    for i in ranges:
        if names[i].startswith(COMPILED_CODE_PREFIXES):
            kinds[i] = KIND_OP
