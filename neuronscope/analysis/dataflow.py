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
- With the default options there are only pointers, and the allocator hands the addresses of
  dead tensors to new ones. Outputs are then **inferred** (``linking == "inferred"``): an op
  that makes a tensor stays *pending* until its output turns up as an input, recognised by
  fitting the op's predicted output (sizes and dtype from its inputs: broadcasting,
  reductions, matmul shapes). A storage no op has shown before is new and goes to the best
  fitting pending op; a known storage with a TensorImpl that no view of it explains may be a
  new tensor at a reused address. In-place ops (``mul_``) write their first input; views
  (``transpose``, ``chunk``, slicing) share their input's storage and are transparent;
  ``.to()`` / ``.contiguous()`` / ``reshape`` make a tensor only when they copied. Measured
  against exact linking on the test models, the inferred links agree edge for edge, except
  where pointers cannot tell: two equally shaped values made one after the other and used in
  the order they were made (``mean, var`` then ``x - mean``) come out swapped, and a tensor
  from outside the capture first used right after an op whose output is never used may be
  taken for that output. Matchers tolerate the first; ``profile_memory=True`` removes both.

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
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..capture.frames import is_user_file
from ..capture.observe import CONSTS_SEP, LOCATION_PREFIX
from ..events import KIND_OP, EventTable, gc_paused

__all__ = [
    "COMPILED_REGION_PREFIXES",
    "ELEMENTWISE_OPS",
    "VIEW_OPS",
    "OpGraph",
    "OpNode",
    "TensorArg",
    "broadcast_shape",
    "graph_from_profiler",
    "graph_from_table",
    "graph_with_observation",
    "observed_graph",
    "short_name",
    "user_location",
]

#: Names of the events torch.compile'd code runs under. Ops inside them are already fused (or
#: are the extern kernels the compiled graph calls), so no rule looks at them.
COMPILED_REGION_PREFIXES = ("Torch-Compiled Region", "## Call CompiledFxGraph", "CompiledFunction")

#: How many pending producers the inferred linking keeps. A tensor is nearly always first used
#: within a few ops of the op that made it; an op whose output is still unused after this many
#: newer producers almost surely returned it out of the capture.
PENDING_LIMIT = 64
#: How many of the newest pending producers an input is matched against, and how many
#: candidates it keeps: its producer is almost always among the last few ops that made a
#: tensor, and matching an op's inputs is a small exhaustive search that must stay cheap.
SCAN_DEPTH = 16
MAX_CANDIDATES = 3
#: A pending producer older than this many ops loses to any more recent one that fits: its
#: output has most likely left the capture unused (a returned value).
STALE_AFTER = 16
#: How many ops ahead an address-reuse claim looks for the claimed producer's output turning
#: up elsewhere: outputs are used within a few ops, and each op looked at costs time.
LOOKAHEAD = 6
#: A storage untouched for this many ops counts as new to that look ahead: in a loop over
#: layers the allocator hands out the same addresses again, a layer or more later.
FRESH_GAP = 32
#: Views assumed made by a ``split`` or ``unbind``, whose count the profiler does not record:
#: enough for a QKV split; each one never used only makes an address reuse on that storage
#: less likely to be recognised.
MAX_VIEWS_PER_SPLIT = 8

# Ops whose output shares its input's storage: consumers of the view link straight to whoever
# wrote the storage, as they would to the base tensor.
VIEW_OPS = frozenset(
    [
        "view", "_reshape_alias", "view_as", "transpose", "t", "T", "mT", "permute", "unsqueeze",
        "squeeze", "expand", "expand_as", "slice", "select", "narrow", "as_strided", "detach",
        "alias", "chunk", "split", "split_with_sizes", "unbind", "unflatten", "movedim", "moveaxis",
        "swapaxes", "swapdims", "diagonal", "unfold", "view_as_real", "view_as_complex", "real",
        "imag", "numpy_T", "adjoint", "lift_fresh",
    ]
)
# Ops that return their input unchanged in some calls and a new tensor in others; they made
# one only when one of COPY_MARKERS ran below them.
MAYBE_ALIAS_OPS = frozenset(
    [
        "to", "type_as", "contiguous", "reshape", "flatten", "dropout", "feature_dropout",
        "alpha_dropout", "float", "half", "bfloat16", "double", "int", "long", "bool",
    ]
)
COPY_MARKERS = frozenset(
    {"aten::_to_copy", "aten::clone", "aten::copy_", "aten::native_dropout", "aten::bernoulli_", "aten::empty_like"}
)
# Maybe-alias ops that return their input itself (same TensorImpl) when they do not copy;
# the others return a view.
_RETURN_SELF = MAYBE_ALIAS_OPS - {"reshape", "flatten"}
_TWO_OUTPUTS = frozenset({"var_mean", "std_mean", "sort", "topk", "aminmax", "kthvalue", "mode"})

ELEMENTWISE_OPS = frozenset(
    [
        "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "neg", "exp", "exp2",
        "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "pow", "square", "abs", "sign",
        "sin", "cos", "tan", "tanh", "sinh", "cosh", "asin", "acos", "atan", "atan2", "sigmoid",
        "logit", "erf", "erfc", "erfinv", "relu", "relu6", "gelu", "silu", "mish", "hardswish",
        "hardsigmoid", "hardtanh", "leaky_relu", "elu", "selu", "celu", "softplus", "softsign",
        "threshold", "clamp", "clamp_min", "clamp_max", "clip", "maximum", "minimum", "fmax",
        "fmin", "reciprocal", "where", "masked_fill", "lerp", "addcmul", "addcdiv", "floor", "ceil",
        "round", "trunc", "frac", "remainder", "fmod", "eq", "ne", "lt", "le", "gt", "ge",
        "logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_and", "bitwise_or",
        "bitwise_not", "isnan", "isinf", "nan_to_num", "to", "_to_copy", "type_as", "float", "half",
        "bfloat16", "dropout",
    ]
)
_COMPARISONS = frozenset(
    ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "logical_xor", "isnan", "isinf"]
)
_REDUCTIONS = frozenset(
    [
        "mean", "sum", "amax", "amin", "max", "min", "var", "std", "norm", "linalg_vector_norm",
        "logsumexp", "prod", "argmax", "argmin", "all", "any",
    ]
)
_SAME_SHAPE = frozenset(
    [
        "softmax", "_softmax", "log_softmax", "_log_softmax", "layer_norm", "rms_norm",
        "group_norm", "dropout", "clone", "contiguous", "cumsum", "cumprod", "native_dropout",
    ]
)
_CAST_DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
                "int": "int32", "long": "int64", "bool": "bool"}
# c10::ScalarType by number, as the profiler records a ``dtype`` argument.
_SCALAR_TYPES = (
        "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex32",
        "complex64", "complex128", "bool", "qint8", "quint8", "qint32", "bfloat16",
)
# Type promotion order, enough for predicting an op's output dtype.
_KIND_RANK = {"bool": 0, "uint8": 1, "int8": 1, "int16": 1, "int32": 1, "int64": 1,
              "float16": 2, "bfloat16": 2, "float32": 3, "float64": 4}


@functools.lru_cache(maxsize=4096)
def short_name(name: str) -> str:
    """``aten::mul_`` -> ``mul``: the op without namespace or in-place underscore (cached:
    a capture has a few hundred distinct names over up to millions of events)."""
    base = name.rsplit("::", 1)[-1]
    if base.endswith("_") and not base.startswith("_"):
        base = base[:-1]
    return base


def _numel(sizes: tuple[int, ...]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


class TensorArg(NamedTuple):
    """One tensor input as the profiler saw it. ``key`` is its storage identity (the
    profiler's tensor id, or the storage pointer); ``impl`` the TensorImpl pointer."""

    key: int
    sizes: tuple[int, ...]
    dtype: str
    impl: int = 0
    numel: int = 1


@dataclass(eq=False, slots=True)
class OpNode:
    """A user-level op and, in a live graph, where its tensor inputs came from.

    ``producers[k]`` is the index of the node that wrote ``inputs[k]`` (-1: made outside the
    capture or by no op, such as a parameter). ``scalars`` holds the non-tensor arguments.
    """

    index: int
    name: str
    op: str
    tid: int
    start_ns: int
    end_ns: int
    inputs: list[TensorArg] = field(default_factory=list)
    producers: list[int] = field(default_factory=list)
    scalars: list[Any] = field(default_factory=list)
    consumers: list[int] = field(default_factory=list)
    cpu_ns: int = 0
    device_ns: int = 0
    location: str | None = None
    event: Any = None  # live graphs: the event-tree node, for code locations
    #: The Python numbers the user passed (``x * 0.125``), where an observation pass saw them.
    consts: tuple[float, ...] = ()
    #: False for ops that made no tensor: views, and ``.to()`` / ``.contiguous()`` calls that
    #: returned their input. They read data but never sit inside a fusable chain.
    writes: bool = True

    @property
    def inplace(self) -> bool:
        base = self.name.rsplit("::", 1)[-1]
        return base.endswith("_") and not base.startswith("_")

    @property
    def elementwise(self) -> bool:
        return self.op in ELEMENTWISE_OPS

    def value(self, k: int) -> tuple[int, int]:
        """Identity of input ``k``: its storage and who wrote it (addresses are reused)."""
        return (self.inputs[k].key, self.producers[k])

    def big_inputs(self) -> list[int]:
        """Positions of inputs that are not 0-dim (a Python scalar arrives as a 0-dim tensor)."""
        return [k for k, t in enumerate(self.inputs) if t.sizes]


@dataclass
class OpGraph:
    """User-level ops in time order. ``linking``: ``"exact"``, ``"inferred"`` or ``"none"``."""

    nodes: list[OpNode]
    linking: str
    has_device: bool = False

    def producer(self, node: OpNode, k: int) -> OpNode | None:
        p = node.producers[k] if k < len(node.producers) else -1
        return self.nodes[p] if p >= 0 else None

    def time_ns(self, node: OpNode) -> int:
        """The time that ranks an op: device time where the capture has it, else CPU time."""
        return node.device_ns if self.has_device else node.cpu_ns

    @functools.cached_property
    def first_takers(self) -> dict[int, int]:
        """Storage -> the first op that took it as an input."""
        first: dict[int, int] = {}
        for n in self.nodes:
            for t in n.inputs:
                first.setdefault(t.key, n.index)
        return first


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
    code_of: dict[str, int] = {}
    codes = np.fromiter((code_of.setdefault(nm, len(code_of)) for nm in names), dtype=np.int64, count=n)
    uniq = list(code_of)
    is_compiled_name = np.fromiter((nm.startswith(COMPILED_REGION_PREFIXES) for nm in uniq), dtype=bool, count=len(uniq))
    is_copy_name = np.fromiter((nm in COPY_MARKERS for nm in uniq), dtype=bool, count=len(uniq))

    starts = np.asarray(table.starts, dtype=np.int64)
    ends = np.asarray(table.ends, dtype=np.int64)
    _, first_row, thread = np.unique(np.asarray(table.tids, dtype=np.int64), return_index=True, return_inverse=True)
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
    if isinstance(dims, (list, tuple)) and all(isinstance(d, int) for d in dims):
        return tuple(dims)
    return None


def graph_from_table(table: EventTable, locations: list[str | None] | None = None) -> OpGraph:
    """The user-level ops of a table (a trace file), with times and input shapes but no links.

    ``locations`` (one ``"file:line"`` or None per table row, as the trace reader gathers
    them) gives each op its place in the user's code.
    """
    nodes: list[OpNode] = []
    has_shapes = len(table.shapes) == len(table)
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
        if has_shapes:
            for dims in table.shapes[i] or ():
                sizes = _shape_tuple(dims)
                if sizes is not None:
                    node.inputs.append(TensorArg(-1, sizes, "", 0, _numel(sizes)))
                    node.producers.append(-1)
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


def _event_types() -> tuple[Any, Any, Any, Any, Any]:
    from torch._C._profiler import RecordScope, _EventType

    return _EventType.TorchOp, _EventType.PyCall, _EventType.PyCCall, _EventType.Allocation, RecordScope.USER_SCOPE


def user_location(event: Any) -> str | None:
    """``"file:line"`` of the user's code that ran an op, from the event tree's Python nodes.

    Walks up from the op: a builtin call (``torch.rsqrt``, ``x.pow``) made from user code
    gives its exact line; a library function (``F.silu``) called from user code gives the
    line of that call; an op run by an operator (``x * y``) straight from a user function
    gives that function's ``def`` line, the closest the profiler records. None when the
    capture had no ``with_stack=True``.
    """
    _op, py_call, py_ccall, _alloc, _scope = _event_types()
    node = getattr(event, "parent", None)
    while node is not None:
        tag = node.tag
        if tag == py_ccall:
            caller = node.extra_fields.caller
            if is_user_file(caller.file_name):
                return f"{caller.file_name}:{caller.line_number}"
        elif tag == py_call:
            fields = node.extra_fields
            site = fields.callsite
            if is_user_file(site.file_name):
                return f"{site.file_name}:{site.line_number}"
            caller = fields.caller
            if is_user_file(caller.file_name):
                return f"{caller.file_name}:{caller.line_number}"
        node = node.parent
    return None


_dtype_names: dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = str(dtype).rsplit(".", 1)[-1]
    return name


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
    kineto = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if kineto is None or not hasattr(kineto, "experimental_event_tree"):
        return None
    roots = kineto.experimental_event_tree()
    torch_op, _py_call, _py_ccall, allocation, user_scope = _event_types()

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

    # The user-level ops: the first op on each path down from a root. Annotations are passed
    # through; compiled regions are ops to the tree, which so hides what ran inside them. The
    # table (when there is one) says which is which faster than the node's record scope.
    found: list[tuple[Any, _TableOp | None]] = []
    stack = list(reversed(roots))
    while stack:
        ev = stack.pop()
        if ev.tag == torch_op and not ev.name.startswith(LOCATION_PREFIX):
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
        if in_compiled and in_compiled.covers(tid, start):
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
                sizes = tuple(item.sizes)
                tensors.append(TensorArg(ptr, sizes, _dtype_name(item.dtype), item.impl_ptr, _numel(sizes)))
                producers.append(-1)
                node_ids.append(item.id)
        nodes.append(node)
        events.append(ev)
        ids.append(node_ids)
    exact = any(i and i[0] is not None for i in ids)
    graph = OpGraph(nodes, "exact" if exact else "inferred", has_device=has_device)
    if exact:
        _link_exact(graph, events, ids, allocation)
    elif infer:
        _link_inferred(graph, events)
    else:
        graph.linking = "none"
        torch_op = _event_types()[0]
        for node, ev in zip(nodes, events):  # what made a tensor: as the inferred linking decides it
            if not node.inplace and (node.op in VIEW_OPS or (node.op in MAYBE_ALIAS_OPS and not _copied(ev, torch_op))):
                node.writes = False
    return graph


# ---- exact linking (profile_memory=True) -----------------------------------------------------


def _link_exact(graph: OpGraph, events: list[Any], ids: list[list[Any]], allocation: Any) -> None:
    """Link inputs through the profiler's tensor ids: the op whose subtree allocated an id
    made it; an in-place op writes its first input; views share their base's id."""
    writer: dict[int, int] = {}
    nodes = graph.nodes
    for node, ev, node_ids in zip(nodes, events, ids):
        for k, tensor_id in enumerate(node_ids):
            if tensor_id is None:
                continue
            node.inputs[k] = node.inputs[k]._replace(key=tensor_id)
            w = writer.get(tensor_id, -1)
            node.producers[k] = w
            if w >= 0:
                nodes[w].consumers.append(node.index)
        node.writes = node.inplace
        if node.inplace and node_ids and node_ids[0] is not None:
            writer[node_ids[0]] = node.index
        # What this op allocated (anywhere below it) is its output or its scratch.
        stack = list(ev.children)
        while stack:
            child = stack.pop()
            if child.tag == allocation:
                f = child.extra_fields
                if f.alloc_size > 0:
                    node.writes = True
                    if f.id is not None:  # None: a tensor no op ever took as input
                        writer[f.id] = node.index
            elif child.children:
                stack.extend(child.children)


# ---- inferred linking (default options) ------------------------------------------------------


class _Pred(NamedTuple):
    """What an op's output should look like. ``sizes`` None: unknown; then ``bound`` holds a
    keepdim reduction's input sizes, or ``numel`` the element count, where known."""

    sizes: tuple[int, ...] | None
    dtype: str | None
    numel: int | None = None
    bound: tuple[int, ...] | None = None


def _exact(sizes: tuple[int, ...] | None, dtype: str | None) -> _Pred:
    return _Pred(sizes, dtype, None if sizes is None else _numel(sizes))


_UNKNOWN = _Pred(None, None)


def _key(pred: _Pred) -> tuple[Any, ...] | None:
    """The (sizes, dtype) a prediction most likely has: its sizes, or for a keepdim
    reduction the common last-dim one; None when unknown."""
    if pred.sizes is not None:
        return (pred.sizes, pred.dtype)
    if pred.bound:
        return (pred.bound[:-1] + (1,), pred.dtype)
    return None


def broadcast_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    first = shapes[0]
    if all(s == first for s in shapes):
        return first
    out: list[int] = []
    for s in shapes:
        if len(s) > len(out):
            out = [1] * (len(s) - len(out)) + out
        for i in range(1, len(s) + 1):
            a, b = out[-i], s[-i]
            if a == 1:
                out[-i] = b
            elif b != 1 and a != b:
                return None
    return tuple(out)


def _promote(args: list[TensorArg]) -> str | None:
    """torch's type promotion, enough for prediction: dimensioned tensors decide; 0-dim ones
    (wrapped Python scalars) only when of a higher kind (int tensor * 0.5 -> float32)."""
    best: str | None = None
    zero_kind = -1
    for a in args:
        if a.sizes:
            if best is None or _KIND_RANK.get(a.dtype, 3) > _KIND_RANK.get(best, 3):
                best = a.dtype
        else:
            zero_kind = max(zero_kind, min(_KIND_RANK.get(a.dtype, 3), 2))
    if best is None:
        return max((a.dtype for a in args), key=lambda d: _KIND_RANK.get(d, 3), default=None)
    if zero_kind > min(_KIND_RANK.get(best, 3), 2):
        return "float32"
    return best


def _dtype_arg(node: OpNode) -> str | None:
    for s in node.scalars:
        if s.__class__ is int and 0 <= s < len(_SCALAR_TYPES):
            return _SCALAR_TYPES[s]
    return None


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    if not a or not b:
        return None
    if len(a) == 1 and len(b) == 1:
        return ()
    if len(b) == 1:
        return a[:-1]
    if len(a) == 1:
        return b[:-2] + b[-1:]
    batch = broadcast_shape([a[:-2], b[:-2]])
    return None if batch is None else batch + (a[-2], b[-1])


def _predict(node: OpNode) -> list[_Pred]:
    """The predicted outputs of an op that makes new tensors (one entry per output)."""
    op, ins = node.op, node.inputs
    if not ins:
        return [_UNKNOWN]
    if op in _COMPARISONS:
        return [_exact(broadcast_shape([a.sizes for a in ins]), "bool")]
    if op in _CAST_DTYPES or op in ("to", "_to_copy"):
        return [_exact(ins[0].sizes, _CAST_DTYPES.get(op) or _dtype_arg(node))]
    if op == "type_as":
        return [_exact(ins[0].sizes, ins[1].dtype if len(ins) > 1 else None)]
    if op in ("masked_fill", "index_fill", "index_add", "index_copy", "scatter", "scatter_add"):
        return [_exact(ins[0].sizes, ins[0].dtype)]
    if op in ELEMENTWISE_OPS:
        return [_exact(broadcast_shape([a.sizes for a in ins]), _promote(ins))]
    if op in _SAME_SHAPE:
        dtype = _dtype_arg(node) if op in ("softmax", "log_softmax") else None
        return [_exact(ins[0].sizes, dtype or ins[0].dtype)]
    if op in _REDUCTIONS:
        x = ins[0]
        dtype = "int64" if op in ("argmax", "argmin") else "bool" if op in ("all", "any") else x.dtype
        scalars = node.scalars
        bools = [s for s in scalars if s.__class__ is bool]
        if not bools and not any(s is None or s.__class__ is int for s in scalars):
            return [_exact((), dtype)]  # a full reduction
        pred = _Pred(None, dtype, None, x.sizes if bools and bools[-1] else None)
        if op in ("max", "min") and any(s.__class__ is int for s in scalars):
            return [pred, pred._replace(dtype="int64")]  # values and indices
        return [pred]
    if op in _TWO_OUTPUTS:
        bools = [s for s in node.scalars if s.__class__ is bool]
        pred = _Pred(None, ins[0].dtype, None, ins[0].sizes if bools and bools[-1] else None)
        return [pred, pred]
    if op in ("mm", "matmul", "bmm") and len(ins) >= 2:
        return [_exact(_matmul_shape(ins[0].sizes, ins[1].sizes), _promote(ins[:2]))]
    if op in ("addmm", "baddbmm") and len(ins) >= 3:
        return [_exact(_matmul_shape(ins[1].sizes, ins[2].sizes), _promote(ins[1:3]))]
    if op == "linear" and len(ins) >= 2 and ins[1].sizes:
        return [_exact(ins[0].sizes[:-1] + ins[1].sizes[:1], ins[0].dtype)]
    if op == "embedding" and len(ins) >= 2:
        return [_exact(ins[1].sizes + ins[0].sizes[1:], ins[0].dtype)]
    if op in ("cat", "concat", "stack"):
        dim = next((s for s in node.scalars if s.__class__ is int), 0)
        first = ins[0].sizes
        if op == "stack":
            d = dim % (len(first) + 1)
            return [_exact(first[:d] + (len(ins),) + first[d:], _promote(ins))]
        if first and all(len(a.sizes) == len(first) for a in ins):
            d = dim % len(first)
            return [_exact(first[:d] + (sum(a.sizes[d] for a in ins),) + first[d + 1:], _promote(ins))]
    if op in ("reshape", "flatten", "repeat_interleave"):
        return [_Pred(None, ins[0].dtype, ins[0].numel if op != "repeat_interleave" else None)]
    return [_UNKNOWN]


def _fit(pred: _Pred, t: TensorArg) -> int:
    """How well tensor ``t`` fits a predicted output: 3 exactly, 2 as a reshape of it or a
    reduction of the right shape, 1 when there is no size prediction, 0 not at all.

    A part of an output (a chunk, a slice) never fits: the first op to see a new tensor sees
    all of it, because slicing and chunking are ops (views) that take the whole.
    """
    dtype = pred.dtype
    if dtype is not None and dtype != t.dtype:
        return 0
    sizes = pred.sizes
    if sizes is not None:
        if sizes == t.sizes:
            return 3
        return 2 if pred.numel == t.numel else 0
    bound = pred.bound
    if bound is not None:
        ts = t.sizes
        if len(ts) == len(bound) and all(s == 1 or s == b for s, b in zip(ts, bound)):
            return 3 if ts != bound else 2
        return 0
    if pred.numel is not None:
        return 2 if pred.numel == t.numel else 0
    # No size prediction: anything of the right dtype, except a 0-dim tensor, which is nearly
    # always a Python scalar that torch wrapped on the way in.
    return 1 if t.sizes else 0


def _copied(event: Any, torch_op: Any) -> bool:
    """Did a maybe-alias op (``to``, ``reshape``, ``contiguous``) copy? Only if a copying op
    ran below it; otherwise it returned its input or a view of it."""
    stack = list(event.children)
    while stack:
        child = stack.pop()
        if child.tag == torch_op:
            if child.name in COPY_MARKERS:
                return True
            stack.extend(child.children)
    return False


def _view_count(node: OpNode) -> int:
    """How many views a view op returns: ``chunk(n)`` n, ``split`` / ``unbind`` several."""
    if node.op == "chunk":
        return max(1, next((s for s in node.scalars if s.__class__ is int), 2))
    if node.op in ("split", "split_with_sizes", "unbind"):
        return MAX_VIEWS_PER_SPLIT
    return 1


def _link_inferred(graph: OpGraph, events: list[Any]) -> None:
    """Link inputs by storage pointer, inferring each op's output (see the module docstring).

    At each op every input is *new* (a storage no op has shown, or shown with another dtype
    or fewer elements: a different tensor) or *seen*. A new input comes from a pending
    producer or from outside the capture. A seen one is the old tensor, unless its TensorImpl
    is one no view of the storage explains and a pending producer that ran after the old
    tensor's last use fits it: then the allocator gave the dead tensor's address to that
    producer's output. Either way a producer is not taken if its output is needed for new
    tensors turning up in the next few ops (``a.exp(); b.sin(); c.cos()``, all three used
    later: ``b`` is no output of ``exp``).

    An op's inputs and the pending producers are matched as a whole, preferring, in order:
    more new inputs explained; more reuses explained; producers in argument order (Python
    evaluates ``f(a(), b())`` left to right); reuses in later arguments (``x + linear(h)``:
    the newest output is the last argument); producers from the last :data:`STALE_AFTER`
    ops (an output unused for longer has most likely left the capture); closer fits; newer
    producers (expressions nest: in ``a * (1 + erf(b))`` the value made last is used first).
    """
    torch_op = _event_types()[0]
    nodes = graph.nodes
    outputs: list[list[_Pred]] = []
    inplace = [n.inplace for n in nodes]
    for node, ev in zip(nodes, events):
        if inplace[node.index]:
            outs: list[_Pred] = []
        elif node.op in VIEW_OPS or (node.op in MAYBE_ALIAS_OPS and not _copied(ev, torch_op)):
            outs = []
        else:
            outs = [p for p in _predict(node) if p.sizes is None or p.numel]
        outputs.append(outs)
        node.writes = bool(outs) or inplace[node.index]

    # New tensors as far as the look ahead knows (inputs whose storage no recent op touched),
    # counted per op by (sizes, dtype); and the same key of each op's predicted outputs.
    new_at: list[dict[tuple[Any, ...], int]] = [{} for _ in nodes]
    touched: dict[int, int] = {}
    for node in nodes:
        j = node.index
        for t in node.inputs:
            if touched.get(t.key, -FRESH_GAP) <= j - FRESH_GAP:
                sig = (t.sizes, t.dtype)
                new_at[j][sig] = new_at[j].get(sig, 0) + 1
            touched[t.key] = j
    out_keys = [[_key(p) for p in outs] for outs in outputs]
    gathers = [j for j, news in enumerate(new_at) if sum(news.values()) > 1]
    pending: list[tuple[int, _Pred]] = []  # (node index, predicted output), oldest first

    def needed_later(pos: int, j: int, gathered: bool) -> bool:
        """Is the output of pending entry ``pos`` needed by a new tensor soon after op ``j``?

        Each new tensor in the next ops that has its (sizes, dtype) must come from some
        producer: another pending one, or one that ran since. If more such tensors turn up
        than those producers can explain, this one made one of them. With ``gathered``, only
        ops that take two or more such tensors at once count (``torch.stack((a, b, c))``):
        a single one may as well be a tensor from outside the capture, first used there.
        """
        if gathered:
            g = bisect.bisect_right(gathers, j)
            if g == len(gathers) or gathers[g] > j + LOOKAHEAD:
                return False  # no op ahead takes two new tensors at once
        key = _key(pending[pos][1])
        if key is None:
            return False
        supply = demand = 0
        counted = False  # the other pending producers, counted once needed
        for j2 in range(j + 1, min(j + 1 + LOOKAHEAD, len(nodes))):
            supply += out_keys[j2 - 1].count(key)
            wanted = new_at[j2].get(key, 0)
            if wanted and (not gathered or wanted > 1):
                if not counted:
                    low = max(0, len(pending) - SCAN_DEPTH)
                    supply += sum(1 for i in range(low, len(pending)) if i != pos and _key(pending[i][1]) == key)
                    counted = True
                demand += wanted
                if demand > supply:
                    return True
        return False

    writer: dict[int, int] = {}  # storage -> node that last wrote it (-1: no op)
    last_use: dict[int, int] = {}  # storage -> last node that read it
    seen_as: dict[int, tuple[str, int]] = {}  # storage -> (dtype, numel) last read as
    # TensorImpls seen on each storage, and views made of it whose TensorImpl is not seen
    # yet: a new TensorImpl on a known storage is one of those views if any is owed.
    impls: dict[int, set[int]] = {}
    views_owed: dict[int, int] = {}

    for node in nodes:
        j = node.index
        inputs = node.inputs
        slots: list[int] = []  # one input position per distinct storage
        fresh: list[bool] = []
        reusable: list[bool] = []
        needy = 0
        keys: list[int] = []
        for k, t in enumerate(inputs):
            key = t.key
            if key in keys:
                continue
            keys.append(key)
            slots.append(k)
            old = seen_as.get(key)
            is_new = old is None or old[0] != t.dtype or t.numel > old[1]
            reuse = False
            if not is_new:
                known = impls[key]
                if t.impl not in known:
                    owed = views_owed.get(key, 0)
                    if owed:
                        views_owed[key] = owed - 1
                        known.add(t.impl)
                    else:
                        reuse = True
            fresh.append(is_new)
            reusable.append(reuse)
            needy += is_new or reuse

        choice: dict[int, int] = {}  # input position -> index into ``pending``
        if pending and needy:
            newest_idx, newest_pred = pending[-1]
            if (
                needy == 1
                and newest_idx >= j - STALE_AFTER
                and any(f and _fit(newest_pred, inputs[k]) == 3 for k, f in zip(slots, fresh))
                and not needed_later(len(pending) - 1, j, gathered=True)
            ):
                # One new input, and the newest producer fits it exactly: the common case,
                # and the search below would pick the same.
                k = next(k for k, f in zip(slots, fresh) if f)
                choice = {k: len(pending) - 1}
            else:
                cands: list[list[tuple[int, int]]] = []  # per slot: (pending position, fit)
                low = max(0, len(pending) - SCAN_DEPTH)
                for k, is_new, reuse in zip(slots, fresh, reusable):
                    found: list[tuple[int, int]] = []
                    if is_new or reuse:
                        t = inputs[k]
                        after = -1 if is_new else max(last_use.get(t.key, -1), writer.get(t.key, -1))
                        for pos in range(len(pending) - 1, low - 1, -1):
                            idx, pred = pending[pos]
                            if idx <= after:
                                break
                            fit = _fit(pred, t)
                            if (fit if is_new else fit >= 2) and not needed_later(pos, j, gathered=is_new):
                                found.append((pos, fit))
                                if len(found) == MAX_CANDIDATES:
                                    break
                    cands.append(found)
                if any(cands):
                    choice = _best_assignment(slots, fresh, cands, pending, j - STALE_AFTER)

        for i, k in enumerate(slots):
            t = inputs[k]
            key = t.key
            chosen = choice.get(k) if choice else None
            if chosen is not None or fresh[i]:
                w = writer[key] = pending[chosen][0] if chosen is not None else -1
                impls[key] = {t.impl}
                views_owed[key] = 0
            else:
                w = writer[key]
                impls[key].add(t.impl)
            seen_as[key] = (t.dtype, t.numel)
            last_use[key] = j
            if w >= 0:
                nodes[w].consumers.append(j)
        node.producers = [writer[t.key] for t in inputs]
        if choice:
            for pos in sorted(choice.values(), reverse=True):
                del pending[pos]

        # What this op writes: in place, its first input; otherwise new tensors (pending),
        # or views of its first input.
        outs = outputs[j]
        if outs:
            pending.extend((j, p) for p in outs)
            if len(pending) > PENDING_LIMIT:
                del pending[: len(pending) - PENDING_LIMIT]
        elif inputs:
            if inplace[j]:
                writer[inputs[0].key] = j
            elif node.op not in _RETURN_SELF:
                key = inputs[0].key
                views_owed[key] = views_owed.get(key, 0) + _view_count(node)


def _best_assignment(
    slots: list[int],
    fresh: list[bool],
    cands: list[list[tuple[int, int]]],
    pending: list[tuple[int, _Pred]],
    stale_before: int,
) -> dict[int, int]:
    """The best matching of an op's inputs to pending producers (see :func:`_link_inferred`):
    an exhaustive search over a handful of candidates."""
    n = len(slots)
    current = [-1] * n
    fit_of = [dict(c) for c in cands]
    best: tuple[int, ...] | None = None
    best_choice: dict[int, int] = {}

    def score() -> tuple[int, ...]:
        n_new = reuse = order = later = recent = fits = age = 0
        prev = -1
        for i in range(n):
            pos = current[i]
            if pos < 0:
                continue
            if fresh[i]:
                n_new += 1
            else:
                reuse += 1
                later += i
            idx = pending[pos][0]
            order += idx > prev
            prev = idx
            recent += idx >= stale_before
            fits += fit_of[i][pos]
            age += pos
        return (n_new, reuse, order, later, recent, fits, age)

    def search(i: int, used: set[int]) -> None:
        nonlocal best, best_choice
        if i == n:
            s = score()
            if best is None or s > best:
                best = s
                best_choice = {slots[x]: current[x] for x in range(n) if current[x] >= 0}
            return
        search(i + 1, used)
        for pos, _ in cands[i]:
            if pos not in used:
                current[i] = pos
                used.add(pos)
                search(i + 1, used)
                used.discard(pos)
                current[i] = -1

    search(0, set())
    return best_choice


# ---- links from an observation pass ------------------------------------------------------------


def graph_with_observation(graph: OpGraph, observed: OpGraph) -> OpGraph:
    """``graph`` (a capture's, linked by pointer guesses) relinked from ``observed`` (the exact
    graph of an observation pass over an earlier call of the same code, see
    :mod:`neuronscope.capture.observe`).

    The two ops lists are aligned by op name (``difflib``: the same code runs the same ops; a
    branch taken differently leaves a stretch unaligned). An aligned op takes the observed
    op's tensor identities, producers and code line; a link is kept only when both ends are
    aligned, and an op that is not aligned has no links at all: nothing is guessed. The
    result's ``linking`` is ``"exact"``.
    """
    import difflib

    a = [n.name for n in graph.nodes]
    b = [n.name for n in observed.nodes]
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
        o = observed.nodes[oi] if oi is not None else None
        if o is None or len(o.inputs) != len(n.inputs):
            n.producers = [-1] * len(n.inputs)
            n.inputs = [t._replace(key=-2 - n.index * 64 - k) for k, t in enumerate(n.inputs)]  # unique: no value shared
            continue
        n.inputs = [t._replace(key=ot.key) for t, ot in zip(n.inputs, o.inputs)]
        n.producers = [to_capture.get(p, -1) if p >= 0 else -1 for p in o.producers]
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
