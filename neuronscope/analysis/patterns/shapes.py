"""How an op's inputs relate to an idiom's ``x``: what a spelling's ops show on the example
tensors (:func:`shape_relation`), and whether a capture's shapes relate so (:func:`shape_fits`).
"""

from __future__ import annotations

import math

__all__ = ["EXAMPLE_DIM", "VECTOR_SHAPES", "ShapeSig", "is_vector", "shape_fits", "shape_relation"]

#: The last dim of the example tensors: even (rotary halves it), and unlike their other dims,
#: so that a per-row statistic, a weight and the input all have other shapes.
EXAMPLE_DIM = 8
#: The match parameter naming each declared vector the capture holds in another shape than
#: ``[d]`` (Cohere's per-head LayerNorm weight, ``[heads, d]``), with that shape: a fused norm
#: takes only a ``[d]`` weight, so the suggestion applies such a one after it.
VECTOR_SHAPES = "vector_shapes"
#: The example ``x`` every spelling runs on (see :func:`~.spelling.examples`).
_EXAMPLE_X = (2, 4, EXAMPLE_DIM)


#: How one op's dimensioned inputs relate to ``x`` in a spelling: per argument, dim for dim
#: (from the first) "T" the example ``x``'s, "F" 1, "H" half of it (rotary's ``x[..., :d // 2]``);
#: "V" a declared vector (a norm's weight): ``x``'s last dim alone, or a tensor broadcast onto
#: ``x`` (see :func:`is_vector`); "." not of that form (another rank, a
#: matmul's, a tensor declared broadcast): not checked; then, for an example tensor (or a view
#: of it), ``@`` and its name: the ops reading ``x`` read one tensor. None for an op not the
#: idiom's own.
ShapeSig = tuple[tuple[str, ...] | None, ...]


def shape_relation(shape: tuple[int, ...]) -> str:
    """How ``shape`` relates to the example ``x``, as :data:`ShapeSig` writes it."""
    if len(shape) != len(_EXAMPLE_X):
        return "."
    dims = ["T" if t == e else "F" if t == 1 else "H" if 2 * t == e else "." for t, e in zip(shape, _EXAMPLE_X)]
    return "." if "." in dims else "".join(dims)


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
    return all(c in (1, d) for c, d in zip(capture[::-1], x[::-1])) and math.prod(capture) < math.prod(x)


def shape_fits(relation: str, capture: tuple[int, ...], x: tuple[int, ...]) -> bool:
    """Does ``capture`` relate to the capture's ``x`` as ``relation`` (see :data:`ShapeSig`)
    says: dim for dim from the last the same, 1 where it says F, half where it says H; a vector
    of ``x`` (:func:`is_vector`) where it says V?"""
    relation = relation.partition("@")[0]
    if relation == ".":
        return True
    if relation == "V":
        return is_vector(tuple(capture), tuple(x))
    if len(capture) != len(x) or any(c != "T" for c in relation[: max(0, len(relation) - len(x))]):
        return False
    relation = relation[max(0, len(relation) - len(x)) :]
    lead = len(x) - len(relation)
    want = {"T": lambda d: d, "F": lambda d: 1, "H": lambda d: d // 2 if d % 2 == 0 else -1}
    return list(capture) == [*x[:lead], *(want[c](x[lead + i]) for i, c in enumerate(relation))]
