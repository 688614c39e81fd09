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
  (:mod:`.observed_links`): exact too.
- Otherwise there are only pointers, and the allocator hands the addresses of dead tensors to
  new ones: no links are made (``linking == "none"``), and idioms are found by op order and
  shapes, as in a trace file.

:func:`graph_from_table` turns an :class:`~neuronscope.events.EventTable` (a trace file) into
the same node list with no links at all: op order, thread, input shapes and times only.

Times come from the event table in both cases, so a hint's numbers agree with the op table:
``cpu_ns`` is an op's inclusive time (its internal children are part of its cost) and
``device_ns`` the device time of everything it launched.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np

from neuronscope.analysis.opgraph import (
    COPY_MARKERS,
    MAYBE_ALIAS_OPS,
    VIEW_OPS,
    OpGraph,
    OpNode,
    TensorArg,
    copied,
    event_types,
    link_consumers,
    short_name,
    takes_tensor_list,
)
from neuronscope.capture import torch_private
from neuronscope.capture.frames import def_line, is_user_file
from neuronscope.capture.observe import CONSTS_SEP, LOCATION_PREFIX
from neuronscope.events import KIND_OP, EventTable, gc_paused
from neuronscope.events.arrays import unique_first_inverse
from neuronscope.events.modules import MODULE_RANGE_PREFIX
from neuronscope.events.table import COMPILED_EVENT_PREFIXES as COMPILED_REGION_PREFIXES

__all__ = [
    "UserLine",
    "graph_from_profiler",
    "graph_from_table",
    "user_line",
    "user_ops",
]

#: The name torch's profiler gives every allocation event (``profile_memory=True``).
ALLOCATION_NAME = "[memory]"

# ---- the user-level ops of an event table -----------------------------------------------------


class _TableOp(NamedTuple):
    row: int  # in the EventTable
    cpu_ns: int
    device_ns: int
    copied: bool  # a copying op ran inside it (see COPY_MARKERS)


def user_ops(table: EventTable) -> list[_TableOp]:
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


def _shapes_in(dims: Any) -> list[tuple[int, ...]]:
    """The tensor shapes one recorded argument holds: one, or each of a tensor list's
    (einsum's operands), as the live event tree gives them; none for anything else."""
    one = _shape_tuple(dims)
    if one is not None:
        return [one]
    if isinstance(dims, (list, tuple)):
        return [s for s in map(_shape_tuple, dims) if s]
    return []


def graph_from_table(table: EventTable, locations: list[str | None] | None = None) -> OpGraph:
    """The user-level ops of a table (a trace file), with times, input shapes and scalar
    arguments (``record_shapes=True``: the live event tree's, see
    :mod:`~neuronscope.events.op_scalars`) but no links.

    ``locations`` (one ``"file:line"`` or None per table row, as the trace reader gathers
    them) gives each op its place in the user's code.
    """
    nodes: list[OpNode] = []
    has_shapes = len(table.shapes) == len(table)
    strides = table.strides if len(table.strides) == len(table) else None
    scalars = table.scalars if len(table.scalars) == len(table) else None
    # The inputs of one recorded shape list: the trace reader shares one list among calls
    # alike, so each list is read once.
    inputs_of: dict[tuple[int, int], list[TensorArg]] = {}
    for t in user_ops(table):
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
            laid = strides[i] if strides is not None else None
            inputs = inputs_of.get((id(recorded), id(laid)))
            if inputs is None:
                sized = [s for dims in recorded for s in _shapes_in(dims)]
                strided = [s for dims in laid or () for s in _shapes_in(dims)]
                strided = strided if len(strided) == len(sized) else [()] * len(sized)  # not recorded, or not alike
                inputs = inputs_of[(id(recorded), id(laid))] = [
                    TensorArg(-1, s, "", 0, math.prod(s), st) for s, st in zip(sized, strided)
                ]
            node.inputs = list(inputs)
            node.producers = [-1] * len(inputs)
        if scalars is not None and scalars[i] is not None:
            node.scalars = list(scalars[i])  # the row's tuple is shared among calls alike
        if locations is not None and i < len(locations):
            node.location = locations[i]
        nodes.append(node)
    return OpGraph(nodes, "none", has_device=table.has_device)


# ---- the live event tree ------------------------------------------------------------------


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


def graph_from_profiler(prof: Any, table: EventTable | None = None) -> OpGraph | None:
    """The data-flow graph of a finished live profiler, or None when it has no event tree.

    ``table`` (the capture's event table) supplies times, device time included, and tells
    ops from annotations cheaply; without it the tree's own CPU times are used. A capture
    without tensor ids (no ``profile_memory=True``) is left unlinked (``linking == "none"``):
    its links come from an observation pass, or it is matched by op order.
    """
    with gc_paused():
        return _graph_from_profiler(prof, table)


def _graph_from_profiler(prof: Any, table: EventTable | None) -> OpGraph | None:
    kineto = torch_private.kineto_results(prof)
    if kineto is None or not hasattr(kineto, "experimental_event_tree"):
        return None
    roots = kineto.experimental_event_tree()
    torch_op, _py_call, _py_ccall, _allocation, user_scope = event_types()
    function_scope = torch_private.record_scope_and_event_type()[0].FUNCTION

    times: dict[tuple[int, int], _TableOp] = {}
    annotations: set[tuple[int, int]] = set()
    has_device = False
    if table is not None and len(table):
        has_device = table.has_device
        tids, starts = table.tids, table.starts
        times = {(tids[t.row], starts[t.row]): t for t in user_ops(table)}
        # The ranges, found at C speed: a table is mostly ops. Compiled code recorded as a
        # range is not walked into: what runs inside it is no code of the user's to fuse.
        for i in itertools.compress(range(len(table)), map(KIND_OP.__ne__, table.kinds)):
            if not table.names[i].startswith(COMPILED_REGION_PREFIXES):
                annotations.add((tids[i], starts[i]))

    # The user-level ops: the first op on each path down from a root. Annotations are passed
    # through; compiled regions are ops to the tree, which so hides what ran inside them. The
    # table (when there is one) says which is which faster than the node's record scope.
    # Each of an event's fields is a call into torch that builds a new Python object: each is
    # read once here and kept (with the observation's line range above the op, where there
    # is one) for the nodes below; 100,000 events: 290 -> 200 ms.
    found: list[tuple[int, int, str, Any, _TableOp | None, Any]] = []  # start, tid, name, event, times, line range
    stack: list[tuple[Any, Any]] = [(ev, None) for ev in reversed(roots)]
    in_function: set[int] = set()  # the ops a torch.autograd.Function's forward ran
    while stack:
        ev, line_range = stack.pop()
        name = ev.name  # cheaper to read than the tag: tells allocations and line ranges apart first
        if name == ALLOCATION_NAME:
            continue
        if name.startswith(LOCATION_PREFIX):
            children = ev.children
            if in_function and id(ev) in in_function:
                in_function.update(id(c) for c in children)
            stack.extend((c, ev) for c in reversed(children))
            continue
        if ev.tag == torch_op:
            if in_function and id(ev) in in_function:
                found.append((ev.start_time_ns, ev.start_tid, name, ev, None, line_range))
                continue
            if "::" not in name and not name.startswith(MODULE_RANGE_PREFIX) and ev.extra_fields.scope == function_scope:
                # A torch.autograd.Function's forward (Bloom's GeLUFunction): an op to the table,
                # named after the class; the user's idioms are the ops it ran. The capture's own
                # module-call ranges share its record scope and pass through as annotations.
                children = ev.children
                in_function.update(id(c) for c in children)
                stack.extend((c, None) for c in reversed(children))
                continue
            if times or annotations:
                start, tid = ev.start_time_ns, ev.start_tid
                hit = times.get((tid, start))
                if hit is not None:
                    found.append((start, tid, name, ev, hit, line_range))
                    continue
                if (tid, start) not in annotations:
                    continue  # an op the table does not count: compiled code, or inside one
            elif ev.extra_fields.scope != user_scope:
                found.append((ev.start_time_ns, ev.start_tid, name, ev, None, line_range))
                continue
        children = ev.children
        if children:
            stack.extend((c, None) for c in reversed(children))
    found.sort(key=itemgetter(0))  # by start alone: ties keep the walk's order

    nodes: list[OpNode] = []
    events: list[Any] = []
    ids: list[list[Any]] = []
    for start, tid, name, ev, hit, parent in found:
        if "::" not in name:
            continue
        end = ev.end_time_ns
        node = OpNode(len(nodes), name, short_name(name), tid, start, end, event=ev)
        if parent is not None:  # the observation pass's line: the range the op ran in
            loc, _, rest = parent.name[len(LOCATION_PREFIX) :].partition(CONSTS_SEP)
            nums, _, called = rest.partition(CONSTS_SEP)
            node.location = loc
            # The call's numbers are this op's only where the call ran this op alone: those of
            # a composite (nn.MultiheadAttention's embed_dim) are no scale of its mul.
            if sum(1 for c in parent.children if "::" in c.name) == 1:
                node.consts = tuple(float(v) for v in nums.split(",") if v) if nums else ()
            else:
                node.within = called or None
        if hit is not None:
            node.cpu_ns, node.device_ns = hit.cpu_ns, hit.device_ns
        else:
            node.cpu_ns = end - start
        node_ids: list[Any] = []
        tensors, producers, scalars = node.inputs, node.producers, node.scalars
        args = ev.extra_fields.inputs
        for arg in args:
            if arg is None and takes_tensor_list(node.op) and not any(a.__class__ is list for a in args):
                arg = _list_from_children(ev, args)
            items = arg if arg.__class__ is list else None
            for item in items if items is not None else (arg,):
                ptr = getattr(item, "storage_data_ptr", None)
                if ptr is None:
                    # A number, a bool or None; not a tensor with no storage (arange's empty
                    # out=), which a trace's "Input type" names a tensor, as it is.
                    if items is None and not hasattr(item, "sizes"):
                        scalars.append(item)
                    continue
                if not ptr:
                    continue  # an undefined or empty tensor: nothing flows through it
                tensor_id = item.id  # profile_memory's id: the key exact links use
                key = ptr if tensor_id is None else tensor_id
                sizes = tuple(item.sizes)
                strides = tuple(item.strides)
                tensors.append(TensorArg(key, sizes, _dtype_name(item.dtype), item.impl_ptr, math.prod(sizes), strides))
                producers.append(-1)
                node_ids.append(tensor_id)
        nodes.append(node)
        events.append(ev)
        ids.append(node_ids)
    exact = any(i and i[0] is not None for i in ids)
    graph = OpGraph(nodes, "exact" if exact else "none", has_device=has_device)
    if exact:
        _link_exact(graph, events, ids)
    else:
        for node, ev in zip(nodes, events):  # a view, or a cast or reshape that copied nothing, made no tensor
            if not node.inplace and (node.op in VIEW_OPS or (node.op in MAYBE_ALIAS_OPS and not copied(ev, torch_op))):
                node.writes = False
    return graph


def _list_from_children(ev: Any, recorded: list[Any]) -> list[Any]:
    """The tensors of a list the profiler recorded as None (``aten::index``'s optional indices,
    which decide which rows it picks): those its children take first (it reshapes each
    index), each storage once, but the ones it recorded itself (its ``self``, restrided)."""
    seen = {getattr(a, "storage_data_ptr", None) for a in recorded}
    found = []
    for child in ev.children:
        first = next(iter(getattr(child.extra_fields, "inputs", None) or ()), None)
        ptr = getattr(first, "storage_data_ptr", None)
        if ptr and ptr not in seen:
            seen.add(ptr)
            found.append(first)
    return found


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
            node.producers[k] = writer.get(tensor_id, -1)
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
    link_consumers(nodes)
