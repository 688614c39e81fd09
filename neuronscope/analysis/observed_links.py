"""Links from an observation pass: a capture's op graph taken from the exact graph of an
earlier call of the same code (:mod:`neuronscope.capture.observe`), where the capture has no
tensor ids of its own.

:func:`observed_graph` builds the observation's graph once; :func:`graph_from_observation`
takes a capture's graph whole from it where the capture ran the very ops observed, and
:func:`graph_with_observation` relinks a capture's own graph from it where they differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neuronscope.analysis.dataflow import graph_from_profiler, user_ops
from neuronscope.analysis.opgraph import OpGraph, OpNode, link_consumers, takes_tensor_list
from neuronscope.events import EventTable

if TYPE_CHECKING:
    from neuronscope.capture.observe import Observation

__all__ = [
    "graph_from_observation",
    "graph_with_observation",
    "lines_from_observation",
    "observed_graph",
]


def graph_with_observation(graph: OpGraph, observed: OpGraph) -> OpGraph:
    """``graph`` (a capture's, unlinked: it has no tensor ids) linked from ``observed`` (the exact
    graph of an observation pass over an earlier call of the same code, see
    :mod:`neuronscope.capture.observe`).

    The two ops lists are aligned by op name (``difflib``: the same code runs the same ops; a
    branch taken differently leaves a stretch unaligned). The observation is of one call and a
    capture may hold several (``compare()``'s profiled calls, a decorator's ``active``): the
    observed ops are repeated as often as the capture holds them, so that every repetition is
    aligned, not only the first. An aligned op takes the observed
    op's tensor identities, producers and code line; a link is kept only when both ends are
    aligned, and an op that is not aligned has no links at all: nothing is guessed. The
    result's ``linking`` is ``"exact"``.
    """
    to_capture = _aligned(graph, observed)
    period = len(observed.nodes)
    aligned = {ci: oi for oi, ci in to_capture.items()}
    for n in graph.nodes:
        n.consumers = []
        oi = aligned.get(n.index)
        if oi is None or len(observed.nodes[oi % period].inputs) != len(n.inputs):
            n.producers = [-1] * len(n.inputs)
            # unique keys: no value shared
            n.inputs = [t._replace(key=-2 - n.index * 64 - k) for k, t in enumerate(n.inputs)]
            continue
        o = observed.nodes[oi % period]
        n.inputs = [t._replace(key=ot.key) for t, ot in zip(n.inputs, o.inputs)]
        base = oi - oi % period  # producers within the same repetition
        n.producers = [to_capture.get(base + p, -1) if p >= 0 else -1 for p in o.producers]
        n.writes = o.writes
        n.consts, n.within = o.consts, o.within
        if o.location is not None:
            n.location = o.location
    link_consumers(graph.nodes)
    graph.linking = "exact"
    return graph


def lines_from_observation(graph: OpGraph, observed: OpGraph) -> OpGraph:
    """``graph`` (a capture's own, exactly linked: it recorded ``profile_memory``) with the
    code lines of ``observed`` on its aligned ops that have none: the capture's own event
    tree names only the function around an operator (``def`` line), the observation the
    user's line of each call. Its links are kept as they are."""
    period = len(observed.nodes)
    for oi, ci in _aligned(graph, observed).items():
        n, o = graph.nodes[ci], observed.nodes[oi % period]
        if o.location is not None and n.name == o.name:
            n.location = o.location
    return graph


def _aligned(graph: OpGraph, observed: OpGraph) -> dict[int, int]:
    """Index in the observed ops repeated (op ``i`` of repetition ``r`` is ``r * period + i``)
    -> index in ``graph``, aligned by op name (``difflib``: the same code runs the same ops)."""
    import difflib

    a = [n.name for n in graph.nodes]
    one = [n.name for n in observed.nodes]
    b = one * max(1, -(-len(a) // max(len(one), 1)))
    if a == b:
        return {i: i for i in range(len(a))}
    to_capture: dict[int, int] = {}
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for block in sm.get_matching_blocks():
        for d in range(block.size):
            to_capture[block.b + d] = block.a + d
    return to_capture


def graph_from_observation(observed: OpGraph, table: EventTable) -> OpGraph | None:
    """A capture's graph taken whole from the observation of an earlier call, where the capture
    ran the very ops observed, in order and on inputs of the same shapes, once or repeated (a
    decorated function or a region called alike, ``compare()``'s profiled calls): the observed
    ops with their links, lines, numbers and tensor facts, each with the capture's own times
    from ``table``. This spares reading the capture's event tree a second time, which relinking
    it would (:func:`graph_with_observation`, for captures that differ: another branch taken,
    other shapes). None where they differ. The Python numbers of the ops are the observed call's
    (an optimizer's step-dependent factors may differ; the hint rules read none of those).
    """
    one = observed.nodes
    period = len(one)
    if not period or len(table.shapes) != len(table):
        return None
    rows = [t for t in user_ops(table) if "::" in table.names[t.row]]
    if not rows or len(rows) % period:
        return None
    names, shapes = table.names, table.shapes
    sizes_of = [[t.sizes for t in o.inputs if t.sizes] for o in one]
    recorded: dict[int, list[tuple[int, ...]]] = {}  # the table shares one list among calls alike
    nodes: list[OpNode] = []
    for j, t in enumerate(rows):
        o = one[j % period]
        i = t.row
        if names[i] != o.name:
            return None
        dims = shapes[i]
        got = recorded.get(id(dims))
        if got is None:
            got = recorded[id(dims)] = _table_sizes(dims)
        if got != sizes_of[j % period] and not (takes_tensor_list(o.op) and _in_order(got, sizes_of[j % period])):
            return None
        base = j - j % period  # producers within the same repetition
        nodes.append(
            OpNode(
                j, o.name, o.op, table.tids[i], table.starts[i], table.ends[i],
                inputs=list(o.inputs), producers=[base + p if p >= 0 else -1 for p in o.producers],
                scalars=list(o.scalars), cpu_ns=t.cpu_ns, device_ns=t.device_ns, location=o.location,
                event=o.event, consts=o.consts, within=o.within, writes=o.writes,
            )
        )
    link_consumers(nodes)
    return OpGraph(nodes, "exact", has_device=table.has_device)


def _table_sizes(dims: Any) -> list[tuple[int, ...]]:
    """A table row's input shapes as :func:`graph_from_observation` compares them: those of
    tensors of at least one dimension and one element (an empty tensor has no storage for
    data to flow through; the profiler records a tensor list's shape as empty)."""
    # A shape is a list of ints; a tensor list's entry, when recorded, a list of lists.
    return [tuple(d) for d in dims or () if d and d.__class__ in (list, tuple) and d[0].__class__ is int and 0 not in d]


def _in_order(recorded: list[tuple[int, ...]], observed: list[tuple[int, ...]]) -> bool:
    """Are the shapes a capture recorded those the observation saw, in order? The observation
    also sees the members of tensor lists, which the capture's table does not hold."""
    it = iter(observed)
    return all(any(r == o for o in it) for r in recorded)


def observed_graph(observation: Observation | None) -> OpGraph | None:
    """The exact graph of an observation pass (:class:`~neuronscope.capture.observe.Observation`),
    or None when there is none or it recorded no linkable ops."""
    if observation is None or observation.profiler is None:
        return None
    if observation.graph is None:  # every capture of a name shares its observation: built once
        observation.graph = graph_from_profiler(observation.profiler, None)
    graph = observation.graph
    return graph if graph is not None and graph.linking == "exact" else None
