"""Elementwise ops that one kernel could replace and that match no named idiom.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from neuronscope.analysis.opgraph import VIEW_OPS, OpGraph, OpNode
from neuronscope.analysis.patterns.base import Match, Pattern, is_float

__all__ = ["ELEMENTWISE_CHAIN", "MIN_CHAIN_OPS", "elementwise_chains"]


#: The autograd engine's ops in a training step: they read what the forward saved for them,
#: which a fused forward (torch.compile's) saves or recomputes too, so such a read leaves an
#: output an intermediate of the forward's chain (DropPath's ``x.div(keep) * mask``).
BACKWARD_PREFIX = "autograd::engine::"
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
    matmul, convolution or reduction. Each other input of ``n`` must be a constant or made
    apart from the group (an input computed from the group through some other op would need
    that op inside the kernel). In a training step the autograd engine's reads of what the
    forward saved leave an output an intermediate. Groups on integer or boolean tensors only (mask and
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
    for n in pool:
        # Ops on integer or boolean tensors only are index arithmetic (mask and position-id
        # helpers): they join no chain.
        if n.elementwise and n.writes and n.index not in claimed and any(is_float(t.dtype) for t in n.inputs if t.sizes):
            parent[n.index] = n.index
            low[n.index] = n.index

    def intermediate(p: OpNode) -> bool:
        readers = {
            c for c in p.consumers if (nodes[c].writes or nodes[c].op not in VIEW_OPS) and not nodes[c].name.startswith(BACKWARD_PREFIX)
        }
        return bool(readers) and all(c in parent for c in readers)

    def made_from(q: int, root: int) -> bool:
        """Was op ``q``'s output computed from the group of ``root`` (then the kernel would need
        ``q`` inside it)? An input made apart from it (DropPath's random mask, made after the
        chain started) is one more input of the fused kernel."""
        start, seen, todo = low[root], set(), [q]
        while todo:
            i = todo.pop()
            if i < start or i in seen:
                continue  # an op before the group began cannot read it
            seen.add(i)
            if i in parent and find(i) == root:
                return True
            todo.extend(j for j in nodes[i].producers if j >= 0)
        return False

    for n in pool:
        if n.index not in parent:
            continue
        for k, p in enumerate(n.producers):
            if p not in parent or find(p) == find(n.index):
                continue
            if not intermediate(nodes[p]):
                continue
            root = find(p)
            others = (q for kk, q in enumerate(n.producers) if kk != k and q >= 0 and n.inputs[kk].sizes)
            if all(q in parent and find(q) == root or not made_from(q, root) for q in others):
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
        # The tensor the chain works on: its largest input anywhere (the first op may work on
        # a per-row statistic: GRN's ``mean + eps``), whose shape tells one chain's line run
        # on two channel counts apart.
        x = max((t for m in members for t in m.inputs), key=lambda t: t.numel, default=None)
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


def _suggest(m: Match, backend: str) -> str:
    return "torch.compile this region: its elementwise ops fuse into one kernel"


ELEMENTWISE_CHAIN = Pattern(
    name="elementwise_chain",
    find=elementwise_chains,
    suggest=_suggest,
    exact_only=True,
    always_report=False,
)
