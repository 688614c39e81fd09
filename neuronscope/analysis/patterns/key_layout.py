"""How the key of attention's scores is laid out in the user's code: as sdpa takes it,
``[..., S, E]``, and transposed for the scores (``q @ k.transpose(-2, -1)``, ``k.mT``,
``k.transpose(2, 3).contiguous()``), or already ``[..., E, S]`` (SqueezeBERT's
``transpose_key_for_scores``, the original GPT-2 port's ``key.permute(0, 2, 3, 1)``, then
``q @ k``). Read from the strides the profiler records of the scores' second operand and from
the view that made it; the op graph's links skip views (a view links to its base's writer).
"""

from __future__ import annotations

from collections.abc import Iterable

from neuronscope.analysis.opgraph import MAYBE_ALIAS_OPS, OpNode, TensorArg

__all__ = ["key_laid_out_for_scores"]

#: Views that reorder dims: the one that made the scores' key tells how the code wrote it.
_REORDERING_VIEWS = frozenset({"transpose", "t", "mT", "permute", "swapaxes", "swapdims", "movedim", "moveaxis", "adjoint", "numpy_T"})
#: Ops that copy a tensor into contiguous memory (where they copied at all: the graph keeps
#: a ``contiguous`` / ``reshape`` only where it did).
_COPIES = MAYBE_ALIAS_OPS | {"clone", "_to_copy"}
#: How many ops before the scores the view or copy that made the key is looked for.
_WINDOW = 64


def _transposed(t: TensorArg) -> bool | None:
    """Whether ``t``'s memory runs along its second-to-last dim (a transposed view of
    ``[..., S, E]``): True; along its last: False; not recorded or not telling: None."""
    s = t.strides
    if len(s) < 2 or len(s) != len(t.sizes):
        return None
    if s[-2] == 1 and s[-1] != 1:
        return True
    if s[-1] == 1 and s[-2] != 1:
        return False
    return None


def _same_tensor(a: TensorArg, b: TensorArg) -> bool:
    """Could ``a`` and ``b`` be views of one storage (keys differ only where both are known)?"""
    return a.key == b.key or a.key == -1 or b.key == -1


def _swap_last_two(sizes: tuple[int, ...]) -> tuple[int, ...]:
    return (*sizes[:-2], sizes[-1], sizes[-2])


def _view_swaps_last_two(k: TensorArg, before: list[OpNode]) -> bool:
    """Whether the view that made the transposed view ``k`` (the latest reordering view of a
    tensor of ``k``'s dims, in any order) swapped only its last two dims (the code's
    ``k.transpose(-2, -1)``); not one found: so read, today's reading."""
    for n in before:
        if n.op in _REORDERING_VIEWS and n.inputs:
            src = n.inputs[0]
            if len(src.sizes) == len(k.sizes) >= 2 and sorted(src.sizes) == sorted(k.sizes) and _same_tensor(src, k):
                return _swap_last_two(src.sizes) == tuple(k.sizes)
    return True


def key_laid_out_for_scores(mm: OpNode, before: Iterable[OpNode], producer: OpNode | None = None) -> bool | None:
    """Whether the scores' matmul ``mm`` (``matmul``, ``bmm``, ``baddbmm``; an einsum's
    equation names its dims) takes a key the code laid out ``[..., E, S]`` for it: True; one it
    transposed there from ``[..., S, E]``: False; None where the strides were not recorded
    (older traces) or do not tell. ``before``: the ops before ``mm``, latest first (on its
    thread); ``producer``: the op that wrote the key, where links are known."""
    at = 2 if mm.op == "baddbmm" else 1 if mm.op in ("matmul", "bmm", "mm") else None
    if at is None or at >= len(mm.inputs):
        return None
    k = mm.inputs[at]
    ops = [n for n, _ in zip(before, range(_WINDOW))]
    transposed = _transposed(k)
    if transposed is None:
        return None
    if transposed:
        return not _view_swaps_last_two(k, ops)
    # Contiguous [..., E, S]: a copy of a transposed view is that view's layout made
    # contiguous (``k.transpose(2, 3).contiguous()``); anything else was laid out so.
    if producer is None or producer.op not in _COPIES:
        producer = next((n for n in ops if n.op in _COPIES and n.writes and n.inputs and n.inputs[0].sizes == k.sizes), None)
    src = producer.inputs[0] if producer is not None and producer.op in _COPIES and producer.inputs else None
    if src is not None and _transposed(src):
        return not _view_swaps_last_two(src, ops[ops.index(producer) + 1 :] if producer in ops else ops)
    return True
