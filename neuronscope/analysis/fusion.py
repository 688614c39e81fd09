"""Fusion candidates: hand-written idioms that could run as one kernel, with their cost.

The motivating study: on Trainium a hand-written RMSNorm cost about six times the device time
of ``torch.rms_norm`` or of one ``torch.compile``'d region. :func:`fusion_hints` finds such
idioms in a capture and says what they cost and what to call instead. Each idiom is one
record in :mod:`.patterns` (its matcher, its trace spelling, its fused form, its suggestion,
its verify builder); this module runs them.

How matching works:

- Live captures are matched on the op graph of :mod:`.dataflow` (``Hint.confidence ==
  "dataflow"``): links are exact, from the profiler's tensor ids (``profile_memory=True``,
  which a capture with nothing observed before it turns on) or from an observation pass over
  a warm-up call (:mod:`neuronscope.capture.observe`). Ops that merely run one after another
  on unrelated tensors never match.
- Trace files, and a profiler the user ran with default options (no tensor ids, nothing
  observed: pointers alone, which the allocator reuses), have no tensor identities, so they
  are matched on the order of user-level ops and their input shapes (``confidence ==
  "sequence"``): a claim about op order, not data flow. ``elementwise_chain`` needs data
  flow and is not reported from them.
- Only user-level ops are matched (no op above them): a fused API's internals (``torch.rms_norm``
  -> ``aten::_fused_rms_norm`` -> pow...) and a ``torch.compile``'d region's are left alone.

Matches are grouped by pattern, op sequence and source file: twelve layers of one RMSNorm are
one hint with ``calls=12``. A matched idiom is always reported, with its measured time, even
when the estimated saving is small; a generic chain only above :data:`~.cost.MIN_SAVING_NS`.
"""

from __future__ import annotations

import bisect
import functools
import statistics
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from neuronscope.analysis.cost import MIN_SAVING_NS, estimate_saving_ns, full_size, grounded_saving_ns, measured_here, model_text
from neuronscope.analysis.dataflow import graph_from_profiler, graph_from_table
from neuronscope.analysis.intermediates import MAX_LISTED, intermediates
from neuronscope.analysis.observed_links import (
    graph_from_observation,
    graph_with_observation,
    lines_from_observation,
    observed_graph,
)
from neuronscope.analysis.opgraph import VIEW_OPS, OpGraph, OpNode, short_name
from neuronscope.analysis.optimizer import has_optimizer_steps, optimizer_hints, optimizer_steps
from neuronscope.analysis.patterns import REGISTRY, Match, Pattern, pattern_named
from neuronscope.analysis.patterns.base import BUILT_UNSEEN, line_of, match_lines, softmax_on_last_dim
from neuronscope.analysis.patterns.kept import Orders, built_runs, built_side_fits, computed_runs, computed_side_fits, kept_orders
from neuronscope.analysis.patterns.shapes import VECTOR_SHAPES
from neuronscope.analysis.patterns.spelling import SIDE, TAKES_BUILT, op_orders, order_shapes, vector_choices
from neuronscope.result.hint import Hint
from neuronscope.result.placement import OP_SPANS

if TYPE_CHECKING:
    from neuronscope.analysis.context import AnalysisContext

__all__ = [
    "NOT_FROM_OP_ORDER",
    "find_matches",
    "find_sequence_matches",
    "fusion_hints",
    "hints_from_matches",
]


def find_matches(g: OpGraph, reserved: Iterable[int] = ()) -> list[Match]:
    """Every idiom in a data-flow graph, each op claimed by one match at most, patterns in
    registry order. Ops in ``reserved`` (an optimizer's update) are left alone."""
    claimed: set[int] = set(reserved)
    out: list[Match] = []
    for pattern in REGISTRY:
        if pattern.exact_only and g.linking != "exact":
            continue  # a chain is a claim about data flow: never made without exact links
        if pattern.find is not None:
            found: Iterable[Match | None] = list(pattern.find(g, claimed))
        elif pattern.match is not None:
            match = pattern.match
            found = (match(g, n) for n in g.nodes if n.index not in claimed)
        else:
            continue
        for m in found:
            if m is None or any(n.index in claimed for n in m.nodes):
                continue
            claimed.update(n.index for n in m.nodes)
            out.append(m)
    return out


# ---- trace files: op order and shapes only ----------------------------------------------------

#: What a trace (op order, no tensor identities) cannot give: a generic elementwise chain is
#: a claim about data flow. Sequence hints name these in ``details["not_from_op_order"]``.
NOT_FROM_OP_ORDER = tuple(p.name for p in REGISTRY if p.exact_only)
#: The idioms whose dim is the code's (:attr:`~.patterns.spelling.Spelling.any_dim`).
_ANY_DIM = frozenset(p.name for p in REGISTRY if any(s.any_dim for s in p.spellings))


@functools.cache
def _orders() -> MappingProxyType[str, Orders]:
    """Each idiom's op orders: those derived from its spellings and kept with the package (no
    torch needed to read a trace), else derived now (an idiom added since they were kept)."""
    kept = kept_orders()
    return MappingProxyType({
        p.name: Orders(
            *(kept.get(p.name) or (op_orders(p.spellings), order_shapes(p.spellings), vector_choices(p.spellings))),
            any_dim=p.name in _ANY_DIM,
        )
        for p in REGISTRY
        if p.spellings
    })


@functools.cache
def _words() -> frozenset[str]:
    """Every op any idiom's op order names: a trace holding none of them has no idiom."""
    return frozenset().union(*(o.words for o in _orders().values()))


def find_sequence_matches(g: OpGraph) -> list[Match]:
    """Idioms in a trace's op order, per thread, each op claimed once; shapes checked where
    the trace recorded them. These are claims about order, not about data flow."""
    out: list[Match] = []
    by_tid: dict[int, list[OpNode]] = {}
    for n in g.nodes:
        if n.op not in VIEW_OPS and n.writes:  # a trace shows no cast that copied nothing
            by_tid.setdefault(n.tid, []).append(n)
    for thread in by_tid.values():
        every, runs = _OpText(thread), built_runs(thread)
        computed = _computed_runs(thread, runs)
        # An idiom whose side tensor code may build in place (a causal mask) or compute there
        # (v, a position bias) is looked for where such runs are left out of op order; a match
        # spans those it takes in.
        built = _OpText(thread, sorted([*runs, *computed]), {a for a, _ in computed}) if runs or computed else every
        claimed: set[int] = set()
        looking_back: list[tuple[int, Pattern, int, list[OpNode]]] = []  # (match, its record, its first op, its ops)
        for record in REGISTRY:
            rx = _orders().get(record.name)
            if rx is None:
                continue
            ops = built if rx.takes_built else every
            seq = ops.seq
            i = 0
            while (found := rx.search(ops.tokens, i)) is not None:
                i0, i1 = found
                end = ops.fitting_end(record.name, rx, i0, i1, claimed)
                if end is None:
                    i = i0 + 1  # not here: an idiom may still start at the next op
                    continue
                i0 = ops.yielding_head(record.name, rx, i0, end, claimed)
                end = ops.yielding_tail(record.name, rx, i0, end, claimed)
                members = [m for m, own in zip(seq[i0:end], rx.own(ops.tokens, i0, end)) if own]
                # The ends may have moved apart (yielding_head, yielding_tail): the choice of the
                # spellings that run the order where its shapes no longer say which.
                choice = _sequence_choice(record.name, seq[i0:end]) or rx.unshaped(tuple(ops.tokens[i0:end]))
                params = record.params(choice, members) if record.params else {}
                if params is None or ("dim" not in choice and not softmax_on_last_dim(members)):
                    # a softmax over another dim, where the idiom's spellings normalise over the
                    # last (attention's, over the keys), or numbers that say another: not the idiom
                    i = i0 + 1
                    continue
                i = end
                claimed.update(m.index for m in members)
                x = members[0].inputs[0] if members[0].inputs else None
                if choice.get(VECTOR_SHAPES):  # a weight broadcast over x's dims: applied after the fused call
                    params[VECTOR_SHAPES] = choice[VECTOR_SHAPES]
                if rx.any_dim and "dim" in choice:  # over another dim than x's last, as the shapes said
                    params["dim"] = choice["dim"]
                if not any(m.inputs for m in members) and (made := [n.op for k in ops.run_at if i0 < k < end for n in ops.runs[k]]):
                    params[BUILT_UNSEEN] = made  # no shapes: op order alone reads them as building a side tensor
                out.append(Match(record.name, members, x, params))
                if record.params_before is not None:
                    looking_back.append((len(out) - 1, record, i0, seq))
        # Once every idiom of the thread has its ops: an op one took is not another's.
        for k, record, i0, seq in looking_back:  # read from the match back, not by skipping the ops after it
            m, before = out[k], map(seq.__getitem__, range(i0 - 1, -1, -1))
            assert record.params_before is not None  # only such records look back
            out[k] = replace(m, params={**m.params, **record.params_before(m.nodes, before, claimed, g)})
    return out


def _computed_runs(thread: list[OpNode], built: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The runs that may compute a side tensor in place (:func:`~.kept.computed_runs`) for the
    idioms that take one, outside the runs that build one from nothing (``built``)."""
    taking = [rx for rx in _orders().values() if rx.takes_built]
    if not taking or not any(n.inputs for n in thread):
        return []  # without recorded shapes, op order alone says nothing of what a run computes
    found = computed_runs(thread, frozenset().union(*(rx.takers for rx in taking)), frozenset().union(*(rx.firsts for rx in taking)))
    return [(a, b) for a, b in found if not any(a <= e and s <= b for s, e in built)]  # touching: one run each


class _OpText:
    """One thread's user-level ops as the idioms' op orders see them (each op's short name),
    and the questions the matching asks of them, in op indices; given ``runs`` (see
    :func:`~.kept.built_runs`), without the ops of those runs."""

    def __init__(self, seq: list[OpNode], runs: Sequence[tuple[int, int]] = (), computing: AbstractSet[int] = frozenset()) -> None:
        self.seq: list[OpNode] = []
        self.runs: dict[int, list[OpNode]] = {}  # each run by the op after it, as an index here
        self.computing: set[int] = set()  # those that compute from the idiom's inputs, not from nothing
        ends, k = dict(runs), 0
        while k < len(seq):
            if k in ends:
                if k in computing:
                    self.computing.add(len(self.seq))
                self.runs[len(self.seq)], k = seq[k : ends[k]], ends[k]
            else:
                self.seq.append(seq[k])
                k += 1
        self.run_at = list(self.runs)  # in order
        self.tokens = [n.op for n in self.seq]

    def fits(self, name: str, rx: Orders, i: int, j: int, claimed: AbstractSet[int] = frozenset()) -> bool:
        """Are ops ``i`` to ``j`` a whole match of pattern ``name``, unclaimed, their shapes
        fitting, each run left out between them building a side tensor it takes in?"""
        return (
            rx.fullmatch(self.tokens, i, j)
            and not any(m.index in claimed for m in self.seq[i:j])
            and all(self._takes_built(rx, i, j, k) for k in self.run_at[bisect.bisect_right(self.run_at, i) : bisect.bisect_left(self.run_at, j)])
            and _sequence_choice(name, self.seq[i:j]) is not None
        )

    def _takes_built(self, rx: Orders, i: int, j: int, k: int) -> bool:
        """Does the match of ops ``i`` to ``j`` take in, at its first own op from ``k`` on, a
        side tensor code may build in place, which the run left out before op ``k`` can be
        (:func:`~.kept.built_side_fits`)?"""
        flags = rx.flags(self.tokens, i, j)
        own = [p for p in range(k, j) if flags[p - i] != SIDE][:2]  # the taker, and the op after it
        if not own or flags[own[0] - i] != TAKES_BUILT:
            return False
        fits = computed_side_fits if k in self.computing else built_side_fits
        return fits(self.runs[k], self.seq[own[0]], self.seq[own[1]] if len(own) > 1 else None)

    def fitting_end(self, name: str, rx: Orders, i0: int, i1: int, claimed: AbstractSet[int] = frozenset()) -> int | None:
        """The end of the longest whole match of pattern ``name`` from op ``i0``, ``i1`` at most,
        whose ops are unclaimed and whose shapes fit; None: none. An optional trailing op that
        does not fit (the next op on another shape) leaves the rest a match: taking the longest
        match or nothing lost the GELU before such an op."""
        return next((j for j in range(i1, i0, -1) if self.fits(name, rx, i0, j, claimed)), None)

    def idiom_length_at(self, i: int, claimed: AbstractSet[int]) -> int:
        """Ops in the longest idiom of unclaimed ops that starts at op ``i`` with its shapes
        fitting; 0: none."""
        first, left = (self.tokens[i] if i < len(self.tokens) else None), len(self.tokens) - i
        return max(
            (n for name, rx in _orders().items() if first in rx.firsts for n in rx.lengths if n <= left and self.fits(name, rx, i, i + n, claimed)),
            default=0,
        )

    def idiom_length_ending_at(self, i: int, claimed: AbstractSet[int]) -> int:
        """Ops in the longest idiom of unclaimed ops that ends right before op ``i`` with its
        shapes fitting."""
        return max((n for name, rx in _orders().items() for n in rx.lengths if n <= i and self.fits(name, rx, i - n, i, claimed)), default=0)

    def yielding_head(self, name: str, rx: Orders, i0: int, i1: int, claimed: AbstractSet[int]) -> int:
        """Where a match of ops ``i0`` to ``i1`` should start. A pattern with optional leading
        ops (GELU's two to seven muls and adds before its tanh or erf) can take the last op of
        an idiom right before it (a rotary embedding's add, which was then lost): the start
        moves past the fewest ops that such an idiom, ending there, wholly takes."""
        for b in range(i0 + 1, i1):
            if self.fits(name, rx, b, i1) and self.idiom_length_ending_at(b, claimed) >= b - i0:
                return b
        return i0

    def yielding_tail(self, name: str, rx: Orders, i0: int, i1: int, claimed: AbstractSet[int]) -> int:
        """Where a match of ops ``i0`` to ``i1`` should end. An optional trailing op (GELU's last
        mul, a norm's weight) can as well be the next idiom's first op, which op order alone
        does not tell apart: the end is the one, among ``i1`` and the shorter whole matches that
        fit, after which the next idiom reaches furthest, the shorter on a tie (the next idiom
        whole). The longest match alone lost the idiom after it, or merged two GELUs in a row
        into one of ten ops. An idiom matched already (an attention, claimed first) is no next
        idiom: one that took its ops left the op out, which then belongs to neither."""
        if i1 == len(self.seq):
            return i1
        end, reach = i1, i1 + self.idiom_length_at(i1, claimed)
        for b in range(i1 - 1, i0, -1):
            if self.fits(name, rx, i0, b):
                after = b + self.idiom_length_at(b, claimed)
                if after > b and after >= reach:
                    end, reach = b, after
        return end


def _sequence_choice(pattern: str, members: list[OpNode]) -> dict[str, Any] | None:
    """The choice of the spellings of ``pattern`` whose op order ``members`` run, with each op's
    inputs relating to one tensor shape ``x`` as in those spellings (and, where storages were
    recorded, the ops reading ``x`` reading one: see :meth:`~.kept.Orders.choice`); scalars
    anywhere. None: no spelling's shapes fit. Where shapes were not recorded, the choice of
    every spelling that runs the order."""
    order = tuple(m.op for m in members)
    if not any(m.inputs for m in members):  # an op of none (arange) records none anyway
        return _orders()[pattern].unshaped(order)
    x = max(members[0].inputs, key=lambda t: t.numel).sizes
    if not x:
        return None
    return _orders()[pattern].choice(order, [[t for t in m.inputs if t.sizes] for m in members], x)


# ---- from matches to hints --------------------------------------------------------------------


@dataclass
class _Costed:
    """The occurrences of one idiom at one input shape, and what fusing them saves."""

    occurrences: list[Match]
    time_ns: float
    saving_ns: float
    grounded_ns: float | None  # the measured bound per occurrence, None where none applies


def _ops_after(m: Match) -> int:
    """The ops the suggestion runs after the fused call: one per weight of another shape than
    the call takes (:data:`~.patterns.shapes.VECTOR_SHAPES`), applied after it; and one for x
    moved to make a dim other than its last the call's (a norm over channels:
    ``layer_norm(x.movedim(1, -1), ...)`` copies the view it is given, a pass of its own)."""
    moved = "dim" in m.params and m.pattern in _ANY_DIM
    return len(m.params.get(VECTOR_SHAPES) or ()) + moved



def _cost_occurrences(record: Pattern, ms: list[Match], g: OpGraph, backend: str) -> _Costed:
    """The model on the occurrences' op times (per op position, the median over them: one
    occurrence slowed by the machine does not inflate it), bounded by what the better fused form
    saves at their shape on this machine's kept costs (:func:`~.cost.grounded_saving_ns`)."""
    first = ms[0]
    after = _ops_after(first)
    kept = [i for i, n in enumerate(first.nodes) if n.op not in record.cost_excludes]
    per_op = [statistics.median(g.time_ns(m.nodes[i]) for m in ms) for i in kept]
    saving_ns = estimate_saving_ns(record.name, per_op, full_size([first.nodes[i] for i in kept]), backend, after) * len(ms)
    time_ns = float(sum(g.time_ns(n) for m in ms for n in m.nodes))
    dtype = (first.x.dtype if first.x is not None else None) or "float32"
    grounded = grounded_saving_ns(record.name, first.nodes, g, backend, dtype, after)
    if grounded is not None:
        saving_ns = min(saving_ns, grounded * len(ms))
    # Medians can add up to more than the total.
    return _Costed(ms, time_ns, min(saving_ns, time_ns), grounded)


def hints_from_matches(
    matches: list[Match], g: OpGraph, backend: str, confidence: str, from_trace: bool = False
) -> list[Hint]:
    """Group matches (pattern, ops, location, input shape) into hints, largest saving first.

    Each estimate is the model on the capture's own op times, bounded where this process can
    measure the device's costs (its CPU) and the ops' shapes were recorded
    (:func:`~.cost.grounded_saving_ns`): a CPU trace file is bounded on this machine's CPU too,
    whose costs are nearer its machine's than the profiled op times, which carry the
    profiler's own per-op overhead (the model alone promised 5-10x what ``hint.verify()``
    measured on real models' traces). ``from_trace`` changes only the wording of
    ``estimate_model`` (the costs were measured here, not on the trace's machine)."""
    # One hint per idiom, op sequence, source file, advice and feature size (the input's last
    # dim): the layers of a model share one RMSNorm line (the hint points at the first line),
    # and batches of other lengths one hint; one norm class applied over two sizes (Qwen3's
    # hidden norm and its per-head q/k norms) is two calls to write, two hints. Rotary's q and
    # k lines, of other shapes under grouped-query attention, stay one idiom.
    groups: dict[tuple[Any, ...], list[Match]] = {}
    located: dict[int, tuple[str | None, str | None]] = {}
    for m in matches:
        record = pattern_named(m.pattern)
        assert record is not None  # every match comes from a record
        loc, _end = located[id(m)] = match_lines(m)
        file = loc.rsplit(":", 1)[0] if loc else None
        features = m.x.sizes[-1:] if record.one_hint_per_shape and m.x is not None else None
        groups.setdefault((m.pattern, m.names, file, record.suggest(m, backend), features), []).append(m)
    hints: list[Hint] = []
    for (pattern, names, _file, suggestion, _features), ms in groups.items():
        record = pattern_named(pattern)
        assert record is not None  # every match comes from a record
        spans = [located[id(m)] for m in ms if located[id(m)][0] is not None]
        loc, end = min(spans, key=lambda span: line_of(span[0] or "")) if spans else (None, None)
        # Each input shape costed at its own (a [1024, 1024] call costed at an [8, 16] one's
        # saving went 60x under), the savings added; the hint shows the most-called shape,
        # which hint.verify() rebuilds.
        by_shape: dict[Any, list[Match]] = {}
        for m in ms:
            by_shape.setdefault(m.x.sizes if m.x is not None else None, []).append(m)
        costed = [_cost_occurrences(record, same, g, backend) for same in by_shape.values()]
        saving_ns = sum(c.saving_ns for c in costed)
        time_ns = sum(c.time_ns for c in costed)
        main = max(costed, key=lambda c: len(c.occurrences))
        first = main.occurrences[0]
        x = first.x
        sizes, dtype = (x.sizes, x.dtype) if x is not None else (None, None)
        grounded = [c.grounded_ns for c in costed]
        bound = "measured" if None not in grounded else _unbounded_why(first, backend)
        flags: dict[str, bool] = {}
        if bound == "measured" and all(gr is not None and gr <= 0 for gr in grounded):
            flags["fused_no_faster"] = True  # on this device's costs: the message recommends nothing
        elif bound in ("no_shapes", "uncalibrated"):
            flags["saving_upper_bound"] = True
        if not record.always_report and saving_ns < MIN_SAVING_NS:
            continue  # a named idiom is always reported; a generic chain only when worth it
        details: dict[str, Any] = {
            "shape": list(sizes) if sizes is not None else None,
            "dtype": dtype or None,
            "input_shapes": [[list(t.sizes) for t in n.inputs] for n in first.nodes],
            "dtypes": sorted({t.dtype for n in first.nodes for t in n.inputs if t.dtype}),
            "device": backend,
            "backend": backend,
            "time_source": "device" if g.has_device else "cpu",
            "estimate_model": model_text(pattern, backend, bound=bound, from_trace=from_trace, after=_ops_after(first)),
            **flags,
            **first.params,
        }
        if loc is not None and end is not None and end.rpartition(":")[0] == loc.rpartition(":")[0] and line_of(end) > line_of(loc):
            # The location is where the idiom starts; a multi-line one also says where it ends.
            details["end_line"] = line_of(end)
        # What the fused form would not allocate: the first occurrence's inner tensors.
        inner = intermediates(first.nodes)
        if inner:
            details["intermediates"] = inner[:MAX_LISTED]  # a 3,000-op chain: the first few
            details["intermediate_bytes"] = sum(t["bytes"] for t in inner)
            if len(inner) > MAX_LISTED:
                details["intermediates_left_out"] = len(inner) - MAX_LISTED
        # Where each occurrence ran, to place the hint on the module that ran it (then dropped).
        details[OP_SPANS] = [[m.nodes[0].tid, min(n.start_ns for n in m.nodes), max(n.end_ns for n in m.nodes)] for m in ms]
        if len(costed) > 1:
            details["shapes"] = [
                {"shape": list(c.occurrences[0].x.sizes) if c.occurrences[0].x is not None else None, "calls": len(c.occurrences)}
                for c in sorted(costed, key=lambda c: len(c.occurrences), reverse=True)
            ]
        hints.append(
            Hint(
                kind="fusion",
                pattern=pattern,
                ops=list(names),
                calls=len(ms),
                time_us=time_ns / 1e3,
                est_saving_us=saving_ns / 1e3,
                suggestion=suggestion,
                location=loc,
                confidence=confidence,
                details=details,
            )
        )
    hints.sort(key=lambda h: h.est_saving_us, reverse=True)
    return hints


def _unbounded_why(m: Match, backend: str) -> str:
    """Why an estimate has no bound from this machine's kept costs (see :func:`~.cost.model_text`)."""
    if not measured_here(backend):
        return "none"
    if not any(n.inputs for n in m.nodes):
        return "no_shapes"
    return "uncalibrated"


def fusion_hints(ctx: AnalysisContext) -> list[Hint]:
    """Fusion candidates in a capture, largest estimated saving first.

    Live captures (``ctx.profiler`` set) are matched by data flow; trace files, and live
    captures made without ``record_shapes=True``, by op order (``confidence="sequence"``).
    """
    graph: OpGraph | None = None
    observed: OpGraph | None = None
    # Without record_shapes=True the event tree has no tensor inputs to follow: skip it.
    if ctx.profiler is not None and getattr(ctx.profiler, "record_shapes", True):
        observed = observed_graph(ctx.extra.get("observed"))
        # A capture with its own tensor ids, or its own Python stacks (lines where the
        # observation found none), is read itself; otherwise, where it ran the ops observed,
        # the observation's graph is its graph.
        own = getattr(ctx.profiler, "profile_memory", False) or getattr(ctx.profiler, "with_stack", False)
        if observed is not None and not own:
            graph = graph_from_observation(observed, ctx.table)
        if graph is None:
            graph = graph_from_profiler(ctx.profiler, ctx.table)
    if graph is not None and graph.linking != "exact" and observed is not None:
        graph = graph_with_observation(graph, observed)
    # A capture without record_shapes=True has no tensor inputs to follow, and one with neither
    # tensor ids nor an observation no links: op order it is, on its own ops (their lines).
    if graph is not None and graph.linking == "exact" and any(n.inputs for n in graph.nodes):
        if observed is not None:
            # Its own exact links (profile_memory): the user's lines are still the observation's.
            graph = lines_from_observation(graph, observed)
        # An optimizer's update is torch.optim's code, not the user's idioms: one hint for it.
        steps = optimizer_steps(graph, ctx.table)
        reserved = {i for updates in steps.values() for update in updates for i in update}
        hints = hints_from_matches(find_matches(graph, reserved), graph, ctx.backend, "dataflow")
        hints += optimizer_hints(graph, steps, ctx.backend, "dataflow")
        return hints
    # No op any sequence pattern names, and no optimizer step: nothing to match. The names first:
    # on most traces the first few settle it, and optimizer_steps looks for steps itself.
    words = _words()
    if not any(short_name(nm) in words for nm in dict.fromkeys(ctx.table.names)) and not has_optimizer_steps(ctx.table):
        return []
    if graph is None or not any(n.inputs for n in graph.nodes):
        locations = ctx.extra.get("locations") if isinstance(ctx.extra, dict) else None
        graph = graph_from_table(ctx.table, locations if isinstance(locations, list) else None)
    steps = optimizer_steps(graph, ctx.table)
    reserved = {i for updates in steps.values() for update in updates for i in update}
    matches = [m for m in find_sequence_matches(graph) if not any(n.index in reserved for n in m.nodes)]
    hints = hints_from_matches(matches, graph, ctx.backend, "sequence", from_trace=ctx.source == "trace")
    hints = [replace(h, details={**h.details, "not_from_op_order": list(NOT_FROM_OP_ORDER)}) for h in hints]
    return hints + optimizer_hints(graph, steps, ctx.backend, "sequence")
