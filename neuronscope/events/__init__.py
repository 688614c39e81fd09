"""From raw profiler events to per-op totals, without ``key_averages()``.

``prof.key_averages()`` builds one Python ``FunctionEvent`` per event, about 10 s per 100,000
events on a 2-core machine (more under load), and about 2 KB of memory each. neuronscope reads
the raw ``_KinetoEvent`` list instead (``prof.profiler.kineto_results.events()``, in torch since
1.8): :func:`table_from_profiler` reads the few fields it needs, one C-level ``map`` per field,
into parallel lists (an :class:`EventTable`), and :func:`summarize` computes the same calls, self
and total CPU time and self and total device time as ``key_averages()`` with array operations
(numpy) rather than a Python object per event. Chrome-trace files become the same table in
:mod:`neuronscope.trace`, so everything downstream is shared.

Modules, one concept each: ``table`` (the table, event kinds, the one category table shared
with trace files, device classes, compiled-code names), ``live`` (reading a live capture),
``nesting`` (the nesting sweeps), ``summary`` (per-op and per-region totals), ``frames`` ("is
this frame user code"), ``timeline`` (the step breakdown: device busy and idle), ``arrays``
(``np.unique`` by sorting: numpy 2.3+'s own is 10-30x slower on these arrays).

How ``key_averages()`` counts, and so how this module counts (torch 2.4 to 2.13, checked by
experiment and in ``tests/test_events.py``):

- Nesting is per thread over every CPU-side event it keeps: ops, ``record_function`` ranges
  and device-runtime calls (``cudaLaunchKernel``; their thread becomes that of the op that
  launched them). Events sorted by (start, -end); an event is the child of the innermost open
  event that contains it, and an event that only partly overlaps the open one closes it. Self
  time is the duration less the direct children's. Runtime calls therefore lower the self time
  of the op around them; they live in :attr:`EventTable.others` (with the Python frames) so
  that code walking the ops never meets them.
- An event whose parent has the same name and no other child is folded into that parent
  (``EventList._remove_dup_nodes``): one call fewer, the parent's self time keeps both, and the
  parent's own device time is replaced by the child's.
- Ranges that start and end on different threads (async) nest nothing: self time 0.
- ``ProfilerStep#N`` names count as ``ProfilerStep*``.
- Names in :data:`IGNORED_NAMES` are dropped.

Where neuronscope differs on purpose: Python frames (``with_stack=True``) are neither ops nor
children in the nesting, so an op that calls back into Python (a compiled graph's generated
code, a Python kernel) keeps that time as its self time, where ``key_averages()`` moves it to
the frame's row (see :func:`_without_python_frames`); ``gpu_user_annotation`` spans are not
device work (they would double the kernels they cover); and top-level ``[memory]`` markers of
``profile_memory=True`` are not ops.
"""

from neuronscope.events.live import attach_device_time, table_from_profiler
from neuronscope.events.table import (
    FLAG_ASYNC,
    FLAG_LEGACY_DEVICE,
    IGNORED_NAMES,
    KIND_ANNOTATION,
    KIND_OP,
    KIND_PYTHON,
    KIND_RUNTIME,
    MAX_SHAPES_PER_OP,
    EventTable,
    gc_paused,
)

__all__ = [
    "FLAG_ASYNC",
    "FLAG_LEGACY_DEVICE",
    "IGNORED_NAMES",
    "KIND_ANNOTATION",
    "KIND_OP",
    "KIND_PYTHON",
    "KIND_RUNTIME",
    "MAX_SHAPES_PER_OP",
    "EventTable",
    "attach_device_time",
    "gc_paused",
    "table_from_profiler",
]
