"""How the key of attention's scores is laid out in the user's code: as sdpa takes it,
``[..., S, E]``, and transposed for the scores (``q @ k.transpose(-2, -1)``, ``k.mT``,
``k.transpose(2, 3).contiguous()``), or already ``[..., E, S]`` (SqueezeBERT's
``transpose_key_for_scores``, the original GPT-2 port's ``key.permute(0, 2, 3, 1)``, then
``q @ k``). Read from the strides the profiler records of the scores' second operand and from
the view that made it; the op graph's links skip views (a view links to its base's writer).
"""

from __future__ import annotations

from neuronscope.analysis.opgraph import MAYBE_ALIAS_OPS, OpGraph, OpNode, TensorArg

__all__ = ["key_laid_out_for_scores"]

#: Views that reorder dims: the one that made the scores' key tells how the code wrote it.
_REORDERING_VIEWS = frozenset({"transpose", "t", "mT", "permute", "swapaxes", "swapdims", "movedim", "moveaxis", "adjoint", "numpy_T"})
#: Ops that copy a tensor into contiguous memory (where they copied at all: the graph keeps
#: a ``contiguous`` / ``reshape`` only where it did).
_COPIES = MAYBE_ALIAS_OPS | {"clone", "_to_copy"}
#: How many ops of its thread before the scores the view or copy that made the key is looked for.
KEY_LOOK_BACK = 64
#: How many ops of the whole graph those are looked for among: other threads' ops interleave
#: with the scores' thread's, and the look-back stays bounded however many there are.
_GRAPH_LOOK_BACK = 16 * KEY_LOOK_BACK


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


def _dims(t: TensorArg) -> tuple[tuple[int, int], ...]:
    """``t``'s dims as (size, stride) pairs: what a view reorders."""
    return tuple(zip(t.sizes, t.strides))


def _made_by_reordering(k: TensorArg, before: list[OpNode]) -> bool:
    """Whether the transposed view ``k`` was made from another order of its dims than by a
    swap of its last two (the code's ``k.transpose(-2, -1)``, ``k.mT``): by a reordering view
    of a tensor with ``k``'s dims (sizes and strides: one made by ``permute(0, 2, 3, 1)``),
    none of them ``k`` with its last two dims swapped. None such: today's reading, a swap."""
    dims = _dims(k)
    swapped = (*dims[:-2], dims[-1], dims[-2])
    reordered = False
    for n in before:
        if n.op in _REORDERING_VIEWS and n.inputs and _same_tensor(n.inputs[0], k):
            src = _dims(n.inputs[0])
            if src == swapped:
                return False
            reordered = reordered or sorted(src) == sorted(dims)
    return reordered


def _copied_as(src: TensorArg, k: TensorArg) -> bool:
    """Could a copy of ``src`` be ``k``: its elements, its last two dims?"""
    return src.numel == k.numel and src.sizes[-2:] == k.sizes[-2:]


def key_laid_out_for_scores(g: OpGraph, mm: OpNode) -> bool | None:
    """Whether the scores' matmul ``mm`` (``matmul``, ``bmm``, ``baddbmm``; an einsum's
    equation names its dims) takes a key the code laid out ``[..., E, S]`` for it: True; one it
    transposed there from ``[..., S, E]``: False; None where the strides were not recorded
    (older traces) or do not tell. Read from the ops of ``mm``'s thread before it, views
    included, and the op that wrote the key where links name it: alike from a live graph and
    a trace's."""
    at = 2 if mm.op == "baddbmm" else 1 if mm.op in ("matmul", "bmm", "mm") else None
    if at is None or at >= len(mm.inputs):
        return None
    k = mm.inputs[at]
    transposed = _transposed(k)
    if transposed is None:
        return None
    lo = max(mm.index - _GRAPH_LOOK_BACK, 0)
    before = (g.nodes[i] for i in range(mm.index - 1, lo - 1, -1) if g.nodes[i].tid == mm.tid)
    ops = [n for n, _ in zip(before, range(KEY_LOOK_BACK))]
    producer = g.producer(mm, at)
    if transposed:
        return _made_by_reordering(k, ops)
    # Contiguous [..., E, S]: a copy of a transposed view is that view's layout made
    # contiguous (``k.transpose(2, 3).contiguous()``); anything else was laid out so.
    # Op order finds the copy where links do not (a trace's graph), and is asked alike where
    # they name another writer, so that a trace and a live capture read the same: a copy of
    # k's elements and last two dims (one that folds heads into the batch changes the rest).
    if producer is None or producer.op not in _COPIES:
        producer = next((n for n in ops if n.op in _COPIES and n.writes and n.inputs and _copied_as(n.inputs[0], k)), None)
    src = producer.inputs[0] if producer is not None and producer.op in _COPIES and producer.inputs else None
    if src is not None and _transposed(src):
        return _made_by_reordering(src, ops[ops.index(producer) + 1 :] if producer in ops else ops)
    return True
