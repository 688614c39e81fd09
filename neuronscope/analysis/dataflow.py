"""The op graph of a capture: which op's output feeds which op's input.

Fusion rules match idioms by data flow, not by op names that merely run one after another, so
they need to know, for each input of each op, which earlier op wrote it. Two graphs are built
here, both over *user-level* ops only: ops with no op above them (``aten::mean`` as the user
called it, not the ``aten::sum`` / ``aten::div_`` it runs inside), and nothing inside a
``torch.compile``'d region.

:func:`graph_from_profiler` reads the live profiler's event tree. Its op nodes list their tensor
inputs (``TensorMetadata``: storage pointer, TensorImpl pointer, sizes, dtype), never their
outputs, so an op's output has to be found as somebody's input:

- With ``profile_memory=True`` every tensor carries a profiler-assigned ``id`` (one per storage
  allocation, shared by its views) and each op holds the ``Allocation`` events of what it
  allocated: an input links to the op that allocated it **exactly** (``linking == "exact"``).
- A capture made with the default options, after an observation pass over an earlier call
  of the same code (:mod:`neuronscope.capture.observe`), takes its links from that pass
  (:func:`graph_with_observation`): exact too.
- Otherwise there are only pointers, and the allocator hands the addresses of dead tensors to
  new ones: links are then guessed (``linking == "inferred"``, :mod:`.inferred_links`), and
  hints built on them say so.

:func:`graph_from_table` turns an :class:`~neuronscope.events.EventTable` (a trace file) into
the same node list with no links at all: op order, thread, input shapes and times only.

Times come from the event table in both cases, so a hint's numbers agree with the op table:
``cpu_ns`` is an op's inclusive time (its internal children are part of its cost) and
``device_ns`` the device time of everything it launched.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from neuronscope.analysis.inferred_links import link_inferred
from neuronscope.analysis.opgraph import (
    COPY_MARKERS,
    MAYBE_ALIAS_OPS,
    VIEW_OPS,
    OpGraph,
    OpNode,
    TensorArg,
    copied,
    event_types,
    numel,
    short_name,
)
from neuronscope.capture import torch_private
from neuronscope.capture.frames import def_line, is_user_file
from neuronscope.capture.observe import CONSTS_SEP, LOCATION_PREFIX
from neuronscope.events import KIND_OP, EventTable, gc_paused
from neuronscope.events.arrays import unique_first_inverse
from neuronscope.events.table import COMPILED_EVENT_PREFIXES as COMPILED_REGION_PREFIXES

__all__ = [
    "UserLine",
    "graph_from_observation",
    "graph_from_profiler",
    "graph_from_table",
    "graph_with_observation",
    "observed_graph",
    "user_line",
]

#: The name torch's profiler gives every allocation event (``profile_memory=True``).
ALLOCATION_NAME = "[memory]"

# ---- the user-level ops of an event table -----------------------------------------------------


class _TableOp(NamedTuple):
    row: int  # in the EventTable
    cpu_ns: int
    device_ns: int
    copied: bool  # a copying op ran inside it (see COPY_MARKERS)


def _user_ops(table: EventTable) -> list[_TableOp]:
    """The table's user-level ops (no op event around them), with inclusive CPU and device
    time, in start order. Ops inside compiled code are left out, and so is the region.

    Vectorised (a Python loop over 100,000 events took 0.1 s): in (thread, start, -end)
    order an op is user-level when it starts at or after the end of the last user-level op
    before it on its thread, and everything between two user-level ops is the first one's
    inside. That rule refers to itself; it is solved by iterating from "every op" (see
    :func:`_top_level`).
    """
    n = len(table)
    if n == 0:
        return []
    names = table.names
    uniq = list(dict.fromkeys(names))  # distinct names, in order of appearance
    code_of = {nm: c for c, nm in enumerate(uniq)}
    codes = np.fromiter(map(code_of.__getitem__, names), dtype=np.int64, count=n)
    is_compiled_name = np.fromiter((nm.startswith(COMPILED_REGION_PREFIXES) for nm in uniq), dtype=bool, count=len(uniq))
    is_copy_name = np.fromiter((nm in COPY_MARKERS for nm in uniq), dtype=bool, count=len(uniq))

    starts = np.asarray(table.starts, dtype=np.int64)
    ends = np.asarray(table.ends, dtype=np.int64)
    _, first_row, thread = unique_first_inverse(np.asarray(table.tids, dtype=np.int64))
    thread = np.argsort(np.argsort(first_row))[thread]  # threads in order of appearance
    order = np.lexsort((-ends, starts, thread))
    s_start, s_end, s_code = starts[order], ends[order], codes[order]
    s_op = np.asarray(table.kinds, dtype=np.int8)[order] == KIND_OP
    thread_starts = np.flatnonzero(np.diff(thread[order])) + 1
    bounds = list(zip([0, *thread_starts.tolist()], [*thread_starts.tolist(), n]))

    def reach_before(mask: np.ndarray) -> np.ndarray:
        """Latest end, on the same thread, of the events under ``mask`` before each event."""
        values = np.where(mask, s_end, _NO_TIME)
        out = np.empty(n, dtype=np.int64)
        for lo, hi in bounds:
            out[lo] = _NO_TIME
            out[lo + 1 : hi] = np.maximum.accumulate(values[lo : hi - 1])
        return out

    top = _top_level(s_op, s_start, reach_before)
    compiled_before = reach_before(~s_op & is_compiled_name[s_code])
    emit = top & (s_start >= compiled_before) & ~is_compiled_name[s_code]

    # Each op belongs to the latest user-level op at or before it (threads are contiguous).
    op_pos = np.flatnonzero(s_op)
    owner = np.cumsum(top[op_pos]) - 1
    n_top = int(top.sum())
    dev = np.asarray(table.device_ns, dtype=np.int64)[order][op_pos]
    top_dev = np.bincount(owner, weights=dev, minlength=n_top).astype(np.int64)
    # A copy ran inside the op: a marker among its ops, the op itself not counted.
    markers = np.bincount(owner, weights=is_copy_name[s_code[op_pos]], minlength=n_top)
    top_copied = markers - is_copy_name[s_code[op_pos[top[op_pos]]]] > 0

    keep = emit[op_pos[top[op_pos]]]
    rows = order[op_pos[top[op_pos]]][keep]
    by_start = np.argsort(starts[rows], kind="stable")
    rows = rows[by_start]
    cpu = (ends[rows] - starts[rows]).tolist()
    return list(map(_TableOp, rows.tolist(), cpu, top_dev[keep][by_start].tolist(), top_copied[keep][by_start].tolist()))


_NO_TIME = np.iinfo(np.int64).min
#: Rounds of :func:`_top_level`; each settles at least one more op whose child outlived it.
MAX_TOP_LEVEL_ROUNDS = 32


def _top_level(is_op: np.ndarray, start: np.ndarray, reach_before: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Which ops start at or after the end of the last user-level op before them.

    Taking the ends of *all* earlier ops gives the answer where every op ends inside its
    parent, as in live captures; a child that outlives its parent (rounded timestamps in a
    trace file) would then swallow the op after the parent. So: iterate, each round taking
    the ends of the previous round's user-level ops, until nothing changes (two rounds when
    no child outlives its parent).
    """
    top = is_op
    for _ in range(MAX_TOP_LEVEL_ROUNDS):
        nxt = is_op & (start >= reach_before(top))
        if np.array_equal(nxt, top):
            break
        top = nxt
    return top


def _shape_tuple(dims: Any) -> tuple[int, ...] | None:
    """A recorded tensor shape as a tuple; None for anything else (a list of tensors' shapes)."""
    if isinstance(dims, (list, tuple)) and set(map(type, dims)) <= {int}:
        return tuple(dims)
    return None


def graph_from_table(table: EventTable, locations: list[str | None] | None = None) -> OpGraph:
    """The user-level ops of a table (a trace file), with times and input shapes but no links.

    ``locations`` (one ``"file:line"`` or None per table row, as the trace reader gathers
    them) gives each op its place in the user's code.
    """
    nodes: list[OpNode] = []
    has_shapes = len(table.shapes) == len(table)
    # The inputs of one recorded shape list: the trace reader shares one list among calls
    # alike, so each list is read once.
    inputs_of: dict[int, list[TensorArg]] = {}
    for t in _user_ops(table):
        i = t.row
        name = table.names[i]
        op = short_name(name)
        if "::" not in name or (op in MAYBE_ALIAS_OPS and not t.copied):
            continue  # not an op, or a ``.to()`` / ``.contiguous()`` that returned its input
        node = OpNode(
            len(nodes), name, op, table.tids[i], table.starts[i], table.ends[i],
            cpu_ns=t.cpu_ns, device_ns=t.device_ns,
        )
        recorded = table.shapes[i] if has_shapes else None
        if recorded:
            inputs = inputs_of.get(id(recorded))
            if inputs is None:
                sized = [s for s in map(_shape_tuple, recorded) if s is not None]
                inputs = inputs_of[id(recorded)] = [TensorArg(-1, s, "", 0, numel(s)) for s in sized]
            node.inputs = list(inputs)
            node.producers = [-1] * len(inputs)
        if locations is not None and i < len(locations):
            node.location = locations[i]
        nodes.append(node)
    return OpGraph(nodes, "none", has_device=table.has_device)


# ---- the live event tree ------------------------------------------------------------------


class _Ranges:
    """Time ranges per thread, to ask whether an instant falls inside one of them."""

    def __init__(self, ranges: Iterable[tuple[int, int, int]]) -> None:
        by_tid: dict[int, list[tuple[int, int]]] = {}
        for tid, start, end in ranges:
            by_tid.setdefault(tid, []).append((start, end))
        self._starts: dict[int, list[int]] = {}
        self._reach: dict[int, list[int]] = {}  # running maximum of the ends
        for tid, lst in by_tid.items():
            lst.sort()
            reach, hi = [], -1
            for _, end in lst:
                hi = max(hi, end)
                reach.append(hi)
            self._starts[tid] = [s for s, _ in lst]
            self._reach[tid] = reach

    def __bool__(self) -> bool:
        return bool(self._starts)

    def covers(self, tid: int, ns: int) -> bool:
        starts = self._starts.get(tid)
        if not starts:
            return False
        i = bisect.bisect_right(starts, ns) - 1
        return i >= 0 and ns < self._reach[tid][i]


class UserLine(NamedTuple):
    """Where the user's code ran an op (see :func:`user_line`)."""

    #: ``"file:line"``
    location: str
    #: the line of the call itself; False: the enclosing function's ``def`` line
    exact: bool
    #: the call of the user's function that holds the line, (thread, start ns); None unknown
    frame: tuple[int, int] | None


def _frame_key(node: Any) -> tuple[int, int] | None:
    return None if node is None else (node.start_tid, node.start_time_ns)


def user_line(event: Any) -> UserLine | None:
    """Where the user's code ran an op, from the event tree's Python nodes.

    Walks up from the op: a builtin call (``torch.rsqrt``, ``x.pow``) made from user code
    gives its exact line; a library function (``F.silu``) called from user code gives the
    line of that call; an op run by an operator (``x * y``) straight from a user function
    gives that function's ``def`` line, the closest the profiler records (``exact`` False).
    Each comes with the call of the user's function it lies in. None when the capture had no
    ``with_stack=True``.
    """
    _op, py_call, py_ccall, _alloc, _scope = event_types()
    node = getattr(event, "parent", None)
    while node is not None:
        tag = node.tag
        if tag == py_ccall:
            caller = node.extra_fields.caller
            if is_user_file(caller.file_name):
                return UserLine(f"{caller.file_name}:{caller.line_number}", True, _frame_key(node.parent))
        elif tag == py_call:
            fields = node.extra_fields
            site = fields.callsite
            if is_user_file(site.file_name):
                return UserLine(f"{site.file_name}:{def_line(site.file_name, site.line_number)}", False, _frame_key(node))
            caller = fields.caller
            if is_user_file(caller.file_name):
                return UserLine(f"{caller.file_name}:{caller.line_number}", True, _frame_key(node.parent))
        node = node.parent
    return None


@functools.lru_cache(maxsize=64)  # a handful of dtypes, asked about once per tensor
def _dtype_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def graph_from_profiler(prof: Any, table: EventTable | None = None, infer: bool = True) -> OpGraph | None:
    """The data-flow graph of a finished live profiler, or None when it has no event tree.

    ``table`` (the capture's event table) supplies times, device time included, and tells
    ops from annotations cheaply; without it the tree's own CPU times are used. With
    ``infer=False`` a capture without tensor ids is left unlinked (``linking == "none"``),
    for links taken from an observation pass instead.
    """
    with gc_paused():
        return _graph_from_profiler(prof, table, infer)


def _graph_from_profiler(prof: Any, table: EventTable | None, infer: bool = True) -> OpGraph | None:
    kineto = torch_private.kineto_results(prof)
    if kineto is None or not hasattr(kineto, "experimental_event_tree"):
        return None
    roots = kineto.experimental_event_tree()
    torch_op, _py_call, _py_ccall, _allocation, user_scope = event_types()

    times: dict[tuple[int, int], _TableOp] = {}
    annotations: set[tuple[int, int]] = set()
    compiled: list[tuple[int, int, int]] = []
    has_device = False
    if table is not None and len(table):
        has_device = table.has_device
        for t in _user_ops(table):
            times[(table.tids[t.row], table.starts[t.row])] = t
        for i, kind in enumerate(table.kinds):
            if kind != KIND_OP:
                annotations.add((table.tids[i], table.starts[i]))
                if table.names[i].startswith(COMPILED_REGION_PREFIXES):
                    compiled.append((table.tids[i], table.starts[i], table.ends[i]))
    in_compiled = _Ranges(compiled)
    any_compiled = bool(in_compiled)

    # The user-level ops: the first op on each path down from a root. Annotations are passed
    # through; compiled regions are ops to the tree, which so hides what ran inside them. The
    # table (when there is one) says which is which faster than the node's record scope.
    found: list[tuple[Any, _TableOp | None]] = []
    stack = list(reversed(roots))
    while stack:
        ev = stack.pop()
        name = ev.name  # cheaper to read than the tag: tells allocations and line ranges apart first
        if name == ALLOCATION_NAME:
            continue
        if name.startswith(LOCATION_PREFIX):
            stack.extend(reversed(ev.children))
            continue
        if ev.tag == torch_op:
            if times or annotations:
                key = (ev.start_tid, ev.start_time_ns)
                hit = times.get(key)
                if hit is not None:
                    found.append((ev, hit))
                    continue
                if key not in annotations:
                    continue  # an op the table does not count: compiled code, or inside one
            elif ev.extra_fields.scope != user_scope:
                found.append((ev, None))
                continue
        children = ev.children
        if children:
            stack.extend(reversed(children))
    found.sort(key=lambda f: f[0].start_time_ns)

    nodes: list[OpNode] = []
    events: list[Any] = []
    ids: list[list[Any]] = []
    for ev, hit in found:
        name = ev.name
        if "::" not in name:
            continue
        start = ev.start_time_ns
        tid = ev.start_tid
        if any_compiled and in_compiled.covers(tid, start):
            continue
        end = ev.end_time_ns
        node = OpNode(len(nodes), name, short_name(name), tid, start, end, event=ev)
        parent = ev.parent
        if parent is not None and parent.name.startswith(LOCATION_PREFIX):  # the observation pass's line
            loc, _, nums = parent.name[len(LOCATION_PREFIX) :].partition(CONSTS_SEP)
            node.location = loc
            node.consts = tuple(float(v) for v in nums.split(",") if v) if nums else ()
        if hit is not None:
            node.cpu_ns, node.device_ns = hit.cpu_ns, hit.device_ns
        else:
            node.cpu_ns = end - start
        node_ids: list[Any] = []
        tensors, producers, scalars = node.inputs, node.producers, node.scalars
        for arg in ev.extra_fields.inputs:
            items = arg if arg.__class__ is list else None
            for item in items if items is not None else (arg,):
                ptr = getattr(item, "storage_data_ptr", None)
                if ptr is None:
                    if items is None:
                        scalars.append(item)
                    continue
                if not ptr:
                    continue  # an undefined or empty tensor: nothing flows through it
                tensor_id = item.id  # profile_memory's id: the key exact links use
                key = ptr if tensor_id is None else tensor_id
                sizes = tuple(item.sizes)
                tensors.append(TensorArg(key, sizes, _dtype_name(item.dtype), item.impl_ptr, numel(sizes)))
                producers.append(-1)
                node_ids.append(tensor_id)
        nodes.append(node)
        events.append(ev)
        ids.append(node_ids)
    exact = any(i and i[0] is not None for i in ids)
    graph = OpGraph(nodes, "exact" if exact else "inferred", has_device=has_device)
    if exact:
        _link_exact(graph, events, ids)
    elif infer:
        link_inferred(graph, events)
    else:
        graph.linking = "none"
        torch_op = event_types()[0]
        for node, ev in zip(nodes, events):  # what made a tensor: as the inferred linking decides it
            if not node.inplace and (node.op in VIEW_OPS or (node.op in MAYBE_ALIAS_OPS and not copied(ev, torch_op))):
                node.writes = False
    return graph


# ---- exact linking (profile_memory=True) -----------------------------------------------------


def _link_exact(graph: OpGraph, events: list[Any], ids: list[list[Any]]) -> None:
    """Link inputs through the profiler's tensor ids: the op whose subtree allocated an id
    made it; an in-place op writes its first input; views share their base's id."""
    writer: dict[int, int] = {}
    nodes = graph.nodes
    for node, ev, node_ids in zip(nodes, events, ids):
        for k, tensor_id in enumerate(node_ids):
            if tensor_id is None:
                continue  # the input's key is its id already (see _graph_from_profiler)
            w = writer.get(tensor_id, -1)
            node.producers[k] = w
            if w >= 0:
                nodes[w].consumers.append(node.index)
        node.writes = node.inplace
        if node.inplace and node_ids and node_ids[0] is not None:
            writer[node_ids[0]] = node.index
        # What this op allocated (anywhere below it) is its output or its scratch. Told by
        # name: an event's name costs a third of its tag to read, and this walk reads every
        # event below every op.
        stack = list(ev.children)
        while stack:
            child = stack.pop()
            if child.name == ALLOCATION_NAME:
                f = child.extra_fields
                if f.alloc_size > 0:
                    node.writes = True
                    if f.id is not None:  # None: a tensor no op ever took as input
                        writer[f.id] = node.index
            else:
                stack.extend(child.children)


# ---- links from an observation pass ------------------------------------------------------------


def graph_with_observation(graph: OpGraph, observed: OpGraph) -> OpGraph:
    """``graph`` (a capture's, linked by pointer guesses) relinked from ``observed`` (the exact
    graph of an observation pass over an earlier call of the same code, see
    :mod:`neuronscope.capture.observe`).

    The two ops lists are aligned by op name (``difflib``: the same code runs the same ops; a
    branch taken differently leaves a stretch unaligned). The observation is of one call and a
    capture may hold several (``compare()``'s profiled calls, a decorator's ``active``): the
    observed ops are repeated as often as the capture holds them, so that every repetition is
    aligned, not only the first. An aligned op takes the observed
    op's tensor identities, producers and code line; a link is kept only when both ends are
    aligned, and an op that is not aligned has no links at all: nothing is guessed. The
    result's ``linking`` is ``"exact"``.
    """
    import difflib

    a = [n.name for n in graph.nodes]
    one = [n.name for n in observed.nodes]
    period = len(one)
    # Observed op i of repetition r is index r * period + i of the repeated list.
    b = one * max(1, -(-len(a) // max(period, 1)))
    to_capture: dict[int, int] = {}
    if a == b:
        to_capture = {i: i for i in range(len(a))}
    else:
        sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
        for block in sm.get_matching_blocks():
            for d in range(block.size):
                to_capture[block.b + d] = block.a + d
    aligned = {ci: oi for oi, ci in to_capture.items()}
    for n in graph.nodes:
        n.consumers = []
        oi = aligned.get(n.index)
        o = observed.nodes[oi % period] if oi is not None else None
        if o is None or len(o.inputs) != len(n.inputs):
            n.producers = [-1] * len(n.inputs)
            # unique keys: no value shared
            n.inputs = [TensorArg(-2 - n.index * 64 - k, t.sizes, t.dtype, t.impl, t.numel) for k, t in enumerate(n.inputs)]
            continue
        n.inputs = [TensorArg(ot.key, t.sizes, t.dtype, t.impl, t.numel) for t, ot in zip(n.inputs, o.inputs)]
        assert oi is not None  # o is set
        base = oi - oi % period  # producers within the same repetition
        n.producers = [to_capture.get(base + p, -1) if p >= 0 else -1 for p in o.producers]
        n.writes = o.writes
        n.consts = o.consts
        if o.location is not None:
            n.location = o.location
    for n in graph.nodes:
        for p in n.producers:
            if p >= 0:
                graph.nodes[p].consumers.append(n.index)
    graph.linking = "exact"
    graph.__dict__.pop("first_takers", None)
    return graph


def graph_from_observation(observed: OpGraph, table: EventTable) -> OpGraph | None:
    """A capture's graph taken whole from the observation of an earlier call, where the capture
    ran the very ops observed, in order and on inputs of the same shapes, once or repeated (a
    decorated function or a region called alike, ``compare()``'s profiled calls): the observed
    ops with their links, lines, numbers and tensor facts, each with the capture's own times
    from ``table``. This spares reading the capture's event tree a second time, which relinking
    it would (:func:`graph_with_observation`, for captures that differ: another branch taken,
    other shapes). None where they differ. The Python numbers of the ops are the observed call's
    (an optimizer's step-dependent factors may differ; the hint rules read none of those).
    """
    one = observed.nodes
    period = len(one)
    if not period or len(table.shapes) != len(table):
        return None
    rows = [t for t in _user_ops(table) if "::" in table.names[t.row]]
    if not rows or len(rows) % period:
        return None
    names, shapes = table.names, table.shapes
    sizes_of = [[t.sizes for t in o.inputs if t.sizes] for o in one]
    recorded: dict[int, list[tuple[int, ...]]] = {}  # the table shares one list among calls alike
    nodes: list[OpNode] = []
    for j, t in enumerate(rows):
        o = one[j % period]
        i = t.row
        if names[i] != o.name:
            return None
        dims = shapes[i]
        got = recorded.get(id(dims))
        if got is None:
            got = recorded[id(dims)] = _table_sizes(dims)
        if got != sizes_of[j % period] and not (takes_tensor_list(o.op) and _in_order(got, sizes_of[j % period])):
            return None
        base = j - j % period  # producers within the same repetition
        nodes.append(
            OpNode(
                j, o.name, o.op, table.tids[i], table.starts[i], table.ends[i],
                inputs=list(o.inputs), producers=[base + p if p >= 0 else -1 for p in o.producers],
                scalars=list(o.scalars), cpu_ns=t.cpu_ns, device_ns=t.device_ns, location=o.location,
                event=o.event, consts=o.consts, writes=o.writes,
            )
        )
    for n in nodes:
        for p in n.producers:
            if p >= 0:
                nodes[p].consumers.append(n.index)
    return OpGraph(nodes, "exact", has_device=table.has_device)


def _table_sizes(dims: Any) -> list[tuple[int, ...]]:
    """A table row's input shapes as :func:`graph_from_observation` compares them: those of
    tensors of at least one dimension and one element (an empty tensor has no storage for
    data to flow through; the profiler records a tensor list's shape as empty)."""
    # A shape is a list of ints; a tensor list's entry, when recorded, a list of lists.
    return [tuple(d) for d in dims or () if d and d.__class__ in (list, tuple) and d[0].__class__ is int and 0 not in d]


#: aten ops that take a list of tensors (besides the ``_foreach_*`` family): the profiler
#: records such a list's shape as empty, while the observation sees its members.
TENSOR_LIST_OPS = frozenset({
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack", "row_stack",
    "index", "index_put", "index_put_", "_index_put_impl_", "einsum", "meshgrid", "broadcast_tensors",
    "block_diag", "cartesian_prod", "chunk_cat", "_chunk_cat", "_fused_adam_", "_fused_adamw_", "_fused_sgd_",
})


def takes_tensor_list(op: str) -> bool:
    """Does aten op ``op`` (its name without the namespace) take a list of tensors? Only for
    such an op may the observation see more input tensors than the capture recorded: for any
    other, an input the capture lacks is a different call (a scalar where a tensor was), and
    copying the observation's links would claim data flow that did not happen."""
    return op.startswith("_foreach_") or op in TENSOR_LIST_OPS


def _in_order(recorded: list[tuple[int, ...]], observed: list[tuple[int, ...]]) -> bool:
    """Are the shapes a capture recorded those the observation saw, in order? The observation
    also sees the members of tensor lists, which the capture's table does not hold."""
    it = iter(observed)
    return all(any(r == o for o in it) for r in recorded)


def observed_graph(observation: Any) -> OpGraph | None:
    """The exact graph of an observation pass (:class:`~neuronscope.capture.observe.Observation`),
    or None when there is none or it recorded no linkable ops."""
    prof = getattr(observation, "profiler", None)
    if prof is None:
        return None
    cached = getattr(observation, "graph", None)
    if isinstance(cached, OpGraph):
        return cached  # every capture of a name shares its observation: built once
    graph = graph_from_profiler(prof, None)
    if graph is None or graph.linking != "exact":
        return None
    try:
        observation.graph = graph
    except AttributeError:
        pass
    return graph
