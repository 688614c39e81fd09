"""Elementwise ops that one kernel could replace and that match no named idiom.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from neuronscope.analysis.inferred_links import broadcast_shape
from neuronscope.analysis.opgraph import VIEW_OPS, OpGraph, OpNode, TensorArg
from neuronscope.analysis.patterns.base import Match, Pattern, is_float

__all__ = ["ELEMENTWISE_CHAIN", "MIN_CHAIN_OPS", "elementwise_chains"]


#: Fewest dependent elementwise ops that make an ``elementwise_chain`` (the contract's
#: "three or more"): two ops fused save one round trip through memory, rarely worth a hint.
MIN_CHAIN_OPS = 3


def elementwise_chains(g: OpGraph, claimed: set[int], within: Sequence[int] | None = None) -> Iterable[Match]:
    """Groups of unclaimed elementwise ops that one kernel could replace, of at least
    :data:`MIN_CHAIN_OPS`; among the ops ``within`` only, where given.

    An edge ``p -> n`` (``n`` reads what ``p`` wrote) joins them when ``p``'s output is an
    intermediate of the group: every op that reads it is elementwise and joins too, so fusing
    never has to write it out. An output read by anything else (a matmul, a norm, a
    reduction, the next residual add's layer) ends a group: so a transformer's residual
    stream, whose every add feeds a whole block, is never a chain, and no group crosses a
    matmul, convolution or reduction. Each other input of ``n`` must be a constant or exist
    before the group starts (an input computed from the group through some other op would
    need that op inside the kernel). Groups on integer or boolean tensors only (mask and
    position-id arithmetic) are left out: small index helpers, rarely worth a kernel.
    """
    parent: dict[int, int] = {}
    low: dict[int, int] = {}  # root -> earliest member

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    nodes = g.nodes
    pool = nodes if within is None else [nodes[i] for i in within]
    exact = g.linking == "exact"
    for n in pool:
        # Ops on integer or boolean tensors only are index arithmetic (mask and position-id
        # helpers): they join no chain.
        if n.elementwise and n.writes and n.index not in claimed and any(is_float(t.dtype) for t in n.inputs if t.sizes):
            parent[n.index] = n.index
            low[n.index] = n.index

    def intermediate(p: OpNode) -> bool:
        readers = {c for c in p.consumers if nodes[c].writes or nodes[c].op not in VIEW_OPS}
        return bool(readers) and all(c in parent for c in readers)

    for n in pool:
        if n.index not in parent:
            continue
        for k, p in enumerate(n.producers):
            if p not in parent or find(p) == find(n.index):
                continue
            t = n.inputs[k]
            if not exact and g.first_takers.get(t.key) == n.index and not _shape_carried(nodes[p], t):
                continue  # a new tensor of another shape: only the element count matched
            if not intermediate(nodes[p]):
                continue
            start = low[find(p)]
            others = (q for kk, q in enumerate(n.producers) if kk != k and q >= 0 and n.inputs[kk].sizes)
            if all(q < start or (q in parent and find(q) == find(p)) for q in others):
                a, b = find(p), find(n.index)
                parent[a] = b
                low[b] = min(low[a], low[b])
    groups: dict[int, list[OpNode]] = {}
    for i in parent:
        groups.setdefault(find(i), []).append(nodes[i])
    for members in groups.values():
        if len(members) < MIN_CHAIN_OPS or _makes_indices(g, members):
            continue
        members.sort(key=lambda m: m.index)
        first = members[0]
        x = max(first.inputs, key=lambda t: t.numel) if first.inputs else None
        yield Match("elementwise_chain", members, x, {})


def _makes_indices(g: OpGraph, members: list[OpNode]) -> bool:
    """Does the group hand an integer or boolean tensor on (``(... ).to(torch.long)``, a
    comparison)? Then it is index arithmetic (T5's relative position buckets), left out."""
    for n in members:
        for c in n.consumers:
            cn = g.nodes[c]
            if any(p == n.index and not is_float(t.dtype) for t, p in zip(cn.inputs, cn.producers)):
                return True
    return False


def _shape_carried(producer: OpNode, t: TensorArg) -> bool:
    """Does ``t`` have the shape the elementwise ``producer`` makes (its first input's when in
    place, else its inputs' broadcast shape)? True where that shape is not known."""
    if not producer.inputs:
        return True
    made = producer.inputs[0].sizes if producer.inplace else broadcast_shape([a.sizes for a in producer.inputs])
    return made is None or made == t.sizes



def _suggest(m: Match, backend: str) -> str:
    return "torch.compile this region: its elementwise ops fuse into one kernel"


ELEMENTWISE_CHAIN = Pattern(
    name="elementwise_chain",
    find=elementwise_chains,
    suggest=_suggest,
    exact_only=True,
    always_report=False,
)
