"""How an op's inputs relate to an idiom's ``x``: what a spelling's ops show on the example
tensors (:func:`shape_relation`), and whether a capture's shapes relate so (:func:`shape_fits`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

__all__ = [
    "EXAMPLE_DIM",
    "MATRIX_DIMS",
    "VECTOR_SHAPES",
    "ShapeSig",
    "broadcasts",
    "dim_last",
    "dims_to_try",
    "fits_vector",
    "is_plain_vector",
    "is_vector",
    "last_dim",
    "named_dims",
    "shape_fits",
    "shape_relation",
    "vector_shape",
]

#: The last dim of the example tensors: even (rotary halves it), and unlike their other dims,
#: so that a per-row statistic, a weight and the input all have other shapes.
EXAMPLE_DIM = 8
#: The match parameter naming each declared vector the capture holds in another shape than
#: ``[d]`` (Cohere's per-head LayerNorm weight, ``[heads, d]``), with that shape: a fused norm
#: takes only a ``[d]`` weight, so the suggestion applies such a one after it.
VECTOR_SHAPES = "vector_shapes"
#: The example ``x`` every spelling runs on (see :func:`~.spelling.examples`).
_EXAMPLE_X = (2, 4, EXAMPLE_DIM)
#: The sizes of attention's example ``q [.., L, E]``, ``k [.., S, E]`` and ``v [.., S, D]``,
#: each one no other example's dim has: how a product's operands' last two dims relate (``q @
#: k^T``, the weights ``[L, S]`` as the first operand of ``@ v``) is read from them by name.
MATRIX_DIMS = MappingProxyType({"L": 3, "S": 5, "E": 6, "D": 7})
_DIM_NAMES = MappingProxyType({size: name for name, size in MATRIX_DIMS.items()})


#: How one op's dimensioned inputs relate to ``x`` in a spelling: per argument, dim for dim
#: (from the first) "T" the example ``x``'s, "F" 1, "H" half of it (rotary's ``x[..., :d // 2]``);
#: "V" a declared vector (a norm's weight): ``x``'s last dim alone, or a tensor broadcast onto
#: ``x`` (see :func:`is_vector`); "R" a declared per-row tensor (a loss's target): ``[N]`` of
#: ``[N, C]``; "." not of that form (another rank, a
#: matmul's, a tensor declared broadcast): not checked; then, for an example tensor (or a view
#: of it), ``@`` and its name: the ops reading ``x`` read one tensor. None for an op not the
#: idiom's own. A "." may name the last two dims (:data:`MATRIX_DIMS`): ``.LS`` for attention's
#: weights, which the op-order matcher binds to one size each over a match.
ShapeSig = tuple[tuple[str, ...] | None, ...]


def shape_relation(shape: tuple[int, ...]) -> str:
    """How ``shape`` relates to the example ``x``, as :data:`ShapeSig` writes it."""
    dims = ["T" if t == e else "F" if t == 1 else "H" if 2 * t == e else "." for t, e in zip(shape, _EXAMPLE_X)]
    if len(shape) == len(_EXAMPLE_X) and "." not in dims:
        return "".join(dims)
    return "." + "".join(_DIM_NAMES[t] for t in shape[-2:]) if len(shape) >= 2 and all(t in _DIM_NAMES for t in shape[-2:]) else "."


def named_dims(relation: str) -> str:
    """The last two dims a relation names (``.LS``: ``LS``; see :data:`MATRIX_DIMS`), or none."""
    return relation.partition("@")[0][1:] if relation.startswith(".") else ""


def is_vector(capture: tuple[int, ...], x: tuple[int, ...]) -> bool:
    """Is ``capture`` a norm's weight (or bias) of ``x``: ``[d]``, or any tensor broadcast onto
    ``x`` over at least one of its dims (Cohere's per-head ``[heads, d]`` over ``[B, T, heads,
    d]``, a ``[heads, 1]`` gain), which the code multiplies (adds) as it multiplies a weight?
    Not one of ``x``'s own size: a gate, per element, is another value. Nor one that varies
    over ``x``'s first dim (its batch): a weight is the same for every sample, and a
    ``[B, 1, C]`` tensor is the caller's per-sample modulation (DiT's AdaLN
    ``norm(x) * (1 + scale[:, None]) + shift[:, None]``), often applied in another function.
    Nor one of a per-row statistic's shape, ``x`` with its last dim 1: op order does not tell
    such a tensor from the norm's own ``rsqrt`` (``x * r * r`` is no RMSNorm with a weight)."""
    if tuple(capture) == tuple(x[-1:]):
        return True
    if (
        not capture
        or len(capture) > len(x)
        or (len(capture) == len(x) > 1 and capture[0] != 1)
        or tuple(capture) == (*x[:-1], 1)
    ):
        return False
    return broadcasts(capture, x) and math.prod(capture) < math.prod(x)


def broadcasts(shape: tuple[int, ...], onto: tuple[int, ...]) -> bool:
    """Does ``shape`` broadcast onto ``onto`` without growing it (each dim from the last 1 or
    ``onto``'s, no more dims)?"""
    return len(shape) <= len(onto) and all(a in (1, b) for a, b in zip(shape[::-1], onto[::-1]))


def shape_fits(relation: str, capture: tuple[int, ...], x: tuple[int, ...]) -> bool:
    """Does ``capture`` relate to the capture's ``x`` as ``relation`` (see :data:`ShapeSig`)
    says: dim for dim from the last the same, 1 where it says F, half where it says H; a vector
    of ``x`` (:func:`is_vector`) where it says V?"""
    relation = relation.partition("@")[0]
    if relation.startswith("."):  # named matrix dims relate within a match, not to x
        return True
    if relation in ("V", "R"):
        return is_vector(tuple(capture), tuple(x)) if relation == "V" else tuple(capture) == (math.prod(x[:-1]),)
    if len(capture) != len(x) or any(c != "T" for c in relation[: max(0, len(relation) - len(x))]):
        return False
    relation = relation[max(0, len(relation) - len(x)) :]
    lead = len(x) - len(relation)
    want = {"T": lambda d: d, "F": lambda d: 1, "H": lambda d: d // 2 if d % 2 == 0 else -1}
    return list(capture) == [*x[:lead], *(want[c](x[lead + i]) for i, c in enumerate(relation))]


def dims_to_try(x: tuple[int, ...], any_dim: bool) -> list[int]:
    """The dims of ``x`` an idiom over ``x``'s last dim is looked for over, the last first
    (what every spelling runs over); for one whose dim is the code's (``Spelling.any_dim``),
    then each other but the first, of more than one element. Not the first: statistics over a
    batch's samples are a batch norm's, whose weight is per feature, no vector of that dim."""
    last = [len(x) - 1]  # -1 for a 0-d x: no dim to move
    return last + [k for k in range(1, len(x) - 1) if x[k] > 1] if any_dim else last


def dim_last(shape: tuple[int, ...], rank: int, dim: int) -> tuple[int, ...]:
    """``shape`` as a tensor of it broadcast onto an ``x`` of ``rank`` dims looks with ``x``'s
    dim ``dim`` moved last (``movedim(dim, -1)``): what relations written for an idiom over
    ``x``'s last dim are checked against where the code chose another (a norm over the channels
    of ``[N, C, H, W]``: its statistic ``[N, 1, H, W]`` is ``[N, H, W, 1]``, its weight
    ``weight[:, None, None]``, ``[C, 1, 1]``, is ``[C]``). One of ``rank`` dims moves as it
    is; one of fewer broadcasts from the right, its leading ones dropped after the move; one of
    more, and any where ``dim`` is the last, is returned as it is."""
    dim = dim % rank if rank else dim
    if not rank or dim == rank - 1 or len(shape) > rank:
        return tuple(shape)
    full = (1,) * (rank - len(shape)) + tuple(shape)
    out = full[:dim] + full[dim + 1 :] + (full[dim],)
    while len(shape) < rank and len(out) > 1 and out[0] == 1:
        out = out[1:]
    return out


def is_plain_vector(capture: tuple[int, ...], x: tuple[int, ...], dim: int) -> bool:
    """Is ``capture`` a vector of ``x``'s dim ``dim`` alone, ``[d]`` or, for another dim than
    the last, its channels-first form ``[C, 1, 1]``: what a fused norm over that dim takes as
    its weight (a weight of any other shape is applied after it)."""
    if dim % len(x) == len(x) - 1:
        return tuple(capture) == tuple(x[-1:])
    return dim_last(capture, len(x), dim) == (x[dim],) and len(capture) < len(x)


def vector_shape(x: tuple[int, ...], dim: int) -> tuple[int, ...]:
    """The shape of a vector of ``x``'s dim ``dim`` broadcast onto ``x``: ``[d]`` for its last,
    ``[C, 1, 1]`` for dim 1 of ``[N, C, H, W]``."""
    dim = dim % max(len(x), 1)
    return (x[dim], *(1,) * (len(x) - 1 - dim)) if x else ()


def fits_vector(shape: tuple[int, ...], x: tuple[int, ...], dim: int) -> bool:
    """Is ``shape`` a vector of ``x`` (:func:`~.shapes.is_vector`) with ``x``'s dim ``dim``, the
    one the idiom reduces, moved last?"""
    return bool(x) and is_vector(dim_last(shape, len(x), dim), dim_last(x, len(x), dim))


def last_dim(t: Any) -> tuple[Any, Callable[[Any], Any]]:
    """``t.x`` with ``t.dim``, the dim the idiom reduces, moved last, as a fused call over the
    last dim takes it, and what moves that call's result back (``movedim``: views, as the
    suggestion writes them); ``t.x`` itself where that dim is the last."""
    x = t.x
    dim = t.dim % max(x.dim(), 1)
    if dim >= x.dim() - 1:
        return x, lambda y: y
    return x.movedim(dim, -1), lambda y: y.movedim(-1, dim)
