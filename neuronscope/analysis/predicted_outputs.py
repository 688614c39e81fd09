"""What an op's output should look like, for :mod:`.inferred_links` to recognise it when it
turns up as an input: :func:`predict` guesses an op's outputs (sizes and dtype from its inputs:
broadcasting, reductions, matmul shapes, casts, type promotion) and :func:`fit` scores how
well a tensor matches a guess.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, NamedTuple

from neuronscope.analysis.opgraph import ELEMENTWISE_OPS, OpNode, TensorArg, numel

__all__ = ["Pred", "broadcast_shape", "fit", "key", "predict"]

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


class Pred(NamedTuple):
    """What an op's output should look like. ``sizes`` None: unknown; then ``bound`` holds a
    keepdim reduction's input sizes, or ``numel`` the element count, where known."""

    sizes: tuple[int, ...] | None
    dtype: str | None
    numel: int | None = None
    bound: tuple[int, ...] | None = None


def _exact(sizes: tuple[int, ...] | None, dtype: str | None) -> Pred:
    return Pred(sizes, dtype, None if sizes is None else numel(sizes))


_UNKNOWN = Pred(None, None)


def key(pred: Pred) -> tuple[Any, ...] | None:
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


def predict(node: OpNode) -> list[Pred]:
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
        pred = Pred(None, dtype, None, x.sizes if bools and bools[-1] else None)
        if op in ("max", "min") and any(s.__class__ is int for s in scalars):
            return [pred, pred._replace(dtype="int64")]  # values and indices
        return [pred]
    if op in _TWO_OUTPUTS:
        bools = [s for s in node.scalars if s.__class__ is bool]
        pred = Pred(None, ins[0].dtype, None, ins[0].sizes if bools and bools[-1] else None)
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
        return [Pred(None, ins[0].dtype, ins[0].numel if op != "repeat_interleave" else None)]
    return [_UNKNOWN]


def fit(pred: Pred, t: TensorArg) -> int:
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
