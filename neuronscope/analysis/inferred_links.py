"""Inferred links: which op made each tensor input, guessed from storage pointers.

Used only where nothing better exists (a profiler the user ran with default options: no
tensor ids, no observation pass); hints built on these links say ``confidence="inferred"``
and claim no ``elementwise_chain``. How the guess works is in :func:`link_inferred`.

The allocator hands the addresses of dead tensors to new ones, so an op that makes a tensor
stays *pending* until its output turns up as an input, recognised by fitting the op's
predicted output (sizes and dtype from its inputs: broadcasting, reductions, matmul shapes).
Measured against exact linking on the test models, the inferred links agree edge for edge
except where pointers cannot tell: two equally shaped values made one after the other and
used in the order they were made come out swapped, and a tensor from outside the capture
first used right after an op whose output is never used may be taken for that output.
"""

from __future__ import annotations

import bisect
from types import MappingProxyType
from typing import Any, NamedTuple

from neuronscope.analysis.opgraph import (
    ELEMENTWISE_OPS,
    MAYBE_ALIAS_OPS,
    VIEW_OPS,
    OpGraph,
    OpNode,
    TensorArg,
    copied,
    event_types,
    numel,
)

__all__ = ["broadcast_shape", "link_inferred"]

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

# Maybe-alias ops that return their input itself (same TensorImpl) when they do not copy;
# the others return a view.
_RETURN_SELF = MAYBE_ALIAS_OPS - {"reshape", "flatten"}
_TWO_OUTPUTS = frozenset({"var_mean", "std_mean", "sort", "topk", "aminmax", "kthvalue", "mode"})

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
_CAST_DTYPES = MappingProxyType({"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
                "int": "int32", "long": "int64", "bool": "bool"})
# c10::ScalarType by number, as the profiler records a ``dtype`` argument.
_SCALAR_TYPES = (
        "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex32",
        "complex64", "complex128", "bool", "qint8", "quint8", "qint32", "bfloat16",
)
# Type promotion order, enough for predicting an op's output dtype.
_KIND_RANK = MappingProxyType({"bool": 0, "uint8": 1, "int8": 1, "int16": 1, "int32": 1, "int64": 1,
              "float16": 2, "bfloat16": 2, "float32": 3, "float64": 4})





class _Pred(NamedTuple):
    """What an op's output should look like. ``sizes`` None: unknown; then ``bound`` holds a
    keepdim reduction's input sizes, or ``numel`` the element count, where known."""

    sizes: tuple[int, ...] | None
    dtype: str | None
    numel: int | None = None
    bound: tuple[int, ...] | None = None


def _exact(sizes: tuple[int, ...] | None, dtype: str | None) -> _Pred:
    return _Pred(sizes, dtype, None if sizes is None else numel(sizes))


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


def _view_count(node: OpNode) -> int:
    """How many views a view op returns: ``chunk(n)`` n, ``split`` / ``unbind`` several."""
    if node.op == "chunk":
        return max(1, next((s for s in node.scalars if s.__class__ is int), 2))
    if node.op in ("split", "split_with_sizes", "unbind"):
        return MAX_VIEWS_PER_SPLIT
    return 1


def link_inferred(graph: OpGraph, events: list[Any]) -> None:
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
    torch_op = event_types()[0]
    nodes = graph.nodes
    outputs: list[list[_Pred]] = []
    inplace = [n.inplace for n in nodes]
    for node, ev in zip(nodes, events):
        if inplace[node.index]:
            outs: list[_Pred] = []
        elif node.op in VIEW_OPS or (node.op in MAYBE_ALIAS_OPS and not copied(ev, torch_op)):
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

