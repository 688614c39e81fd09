"""What every fusion pattern shares: the :class:`Pattern` record, a :class:`Match`, and the
small graph helpers the matchers are written with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from neuronscope.analysis.dataflow import user_line
from neuronscope.analysis.opgraph import OpGraph, OpNode, TensorArg
from neuronscope.analysis.patterns.replacement import Replacement
from neuronscope.analysis.patterns.shapes import VECTOR_SHAPES
from neuronscope.analysis.patterns.spelling import Spelling
from neuronscope.capture.frames import function_of
from neuronscope.capture.idioms import Builders, Evidence

__all__ = [
    "BUILT_UNSEEN",
    "CASTS",
    "MATMULS",
    "ROOTS",
    "SOFTMAXES",
    "Match",
    "Pattern",
    "dim_note",
    "dims",
    "fused_call",
    "is_float",
    "line_of",
    "match_lines",
    "root_value",
    "softmax_dim",
    "softmax_on_last_dim",
    "vectors_note",
]

#: What an equivalent call needs that the evidence did not show: the user carries it over.
UNKNOWN_EPS = "<the eps your code uses>"
UNKNOWN_WEIGHT = "<weight, if your code multiplies by one>"
UNKNOWN_BIAS = "<bias, if your code adds one>"
#: The match parameter (a hint's detail) listing the ops op order alone, no shapes recorded, read
#: as building a side tensor amid the idiom (``ones tril eq``: a causal mask): they may as well
#: have built its main input (``zeros(T, T).masked_fill(...)`` is no attention), said so.
BUILT_UNSEEN = "built_unseen"


def param_text(present: bool | None, name: str, unknown: str) -> str:
    """An affine parameter as a suggested call passes it: ``name``, ``None``, or ``unknown``
    (a trace without shapes cannot tell)."""
    return unknown if present is None else (name if present else "None")


def vectors_note(m: Match, fused: str) -> str:
    """What the names of a norm's suggestion applied after the ``fused`` call stand for: the
    tensors of :data:`~.shapes.VECTOR_SHAPES`, which that call cannot take. Their shapes are
    the match's details, not its text: q and k norms of other head counts (``[4, d]``,
    ``[2, d]``) are one line of code and one hint."""
    names = " and ".join(sorted(m.params.get(VECTOR_SHAPES) or {}))
    return f" ({names}: your code's, broadcast over x; {fused} takes a ({dims(m)},) one only)"


CASTS = frozenset({"to", "_to_copy", "type_as", "float", "half", "bfloat16", "double"})
ROOTS = frozenset({"rsqrt", "sqrt", "reciprocal"})
MATMULS = frozenset({"matmul", "bmm", "einsum", "baddbmm", "mm"})
SOFTMAXES = frozenset({"softmax", "_softmax"})


@dataclass
class Match:
    """One occurrence of an idiom: the nodes it covers (time order) and what verify needs.

    ``x`` is the tensor the idiom works on (the normalised input, the activation's input, the
    scores' query side); ``params`` the facts of the spelling (weight, bias, approximate...).
    """

    pattern: str
    nodes: list[OpNode]
    x: TensorArg | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)


@dataclass(frozen=True)
class Pattern:
    """One fusion idiom: everything neuronscope knows about it, in one record.

    - ``match(graph, node)``: the idiom anchored at ``node`` in a data-flow graph, or None;
      ``find(graph, claimed)`` instead for an idiom found over the whole graph at once.
    - ``spellings``: how code writes it, in PyTorch; the op orders a trace file (op order, no
      data flow) shows for it are derived from them, with how its ops' inputs relate to its
      ``x`` and the choice of the spelling that ran them; none: not from a trace.
    - ``params(choice, nodes)``: what a match by op order says (a norm's weight, a
      softmax's dim), from the choice of the spelling it fits (a value not known: None) and
      its ops; the graph matcher of a declared idiom says it from the same function. None:
      no match after all, the ops' recorded numbers say another computation (a loss's
      softmax over a dim its index does not pick classes from).
    - ``fused_passes``: passes over its input the fused form makes (the cost model's input).
    - ``suggest(match, backend)``: the replacement, as a call equivalent to the code in hand.
    - ``verify(hint, x, device)``: the chain and its replacement rebuilt for ``hint.verify()``;
      None where the idiom has too many spellings to rebuild from a hint.
    - ``exact_only``: found only on exact links (a claim about data flow that op order cannot
      carry).

    An idiom declared by its spellings is written once: its record in :data:`~.REGISTRY` has
    for ``match``, where it names neither that nor ``find``, the graph matcher derived from
    them, and for ``verify``, given a ``replacement``, the builder derived from them and it.
    """

    name: str
    suggest: Callable[[Match, str], str]
    match: Callable[[OpGraph, OpNode], Match | None] | None = None
    find: Callable[[OpGraph, set[int]], Iterable[Match]] | None = None
    params: Callable[[Mapping[str, Any], list[OpNode]], dict[str, Any] | None] | None = None
    fused_passes: int = 1
    verify: Callable[[Evidence, Any, Any], Builders] | None = None
    exact_only: bool = False
    spellings: tuple[Spelling, ...] = ()
    #: What a trace's op order before a match adds to what it says: ``(members, before,
    #: claimed, graph)``, the match's ops, the ops of its thread before them, latest first, as
    #: an iterator read as far as needed, the indices of the ops every idiom of the thread took,
    #: and the whole graph, views included (attention: whether q or k may have been scaled a
    #: few ops before its scores, which no op order of the idiom holds: Whisper projects k and
    #: v in between; the view that made its key).
    params_before: Callable[[list[OpNode], Iterable[OpNode], AbstractSet[int], OpGraph], dict[str, Any]] | None = None
    #: Ops of a match left out of its cost (attention's matmuls: fusion keeps their work).
    cost_excludes: frozenset[str] = frozenset()
    #: Reported whatever its estimated saving (a named idiom's time is worth knowing); False:
    #: only above :data:`~neuronscope.analysis.cost.MIN_SAVING_NS` (a generic chain).
    always_report: bool = True
    #: Whether torch has an eager fused replacement; False: the fused form is torch.compile's,
    #: and the cost model charges compiled code's entry cost.
    eager_replacement: bool = True
    #: Occurrences on other input shapes are other hints (each is costed, and verified, at its
    #: own shape); False: one idiom whatever its shapes (rotary's q and k, of other head counts
    #: under grouped-query attention, are one line of code and one fused call).
    one_hint_per_shape: bool = True
    #: What to use instead, over the spellings' example tensors (see :data:`~.replacement.Replacement`).
    replacement: Replacement | None = None


# ---- small graph helpers ------------------------------------------------------------------


def softmax_dim(nodes: Iterable[OpNode]) -> int | None:
    """The dim the first fused softmax among ``nodes`` normalises over, as its recorded
    ``dim`` (an observation's or ``record_shapes``' scalars) says it, counted from the end
    where its input's rank was recorded; None where none was."""
    for n in nodes:
        if n.op not in SOFTMAXES:
            continue
        dims = [s for s in n.scalars if isinstance(s, int) and not isinstance(s, bool)]
        if not dims:
            return None
        rank = len(n.inputs[0].sizes) if n.inputs and n.inputs[0].sizes else 0
        return dims[0] - rank if 0 <= dims[0] < rank else dims[0]
    return None


def softmax_on_last_dim(nodes: Iterable[OpNode]) -> bool:
    """Whether each fused softmax among ``nodes`` normalises over its input's last dim, where
    its ``dim`` was recorded; True where none was. A softmax over another dim
    (``softmax(q @ k.T, dim=1)``: over the queries) is no idiom whose replacement normalises
    over the last (sdpa's over the keys)."""
    return all(softmax_dim([n]) in (None, -1) for n in nodes if n.op in SOFTMAXES and n.inputs and n.inputs[0].sizes)


def root_value(g: OpGraph, n: OpNode, k: int) -> tuple[int, int]:
    """Identity of input ``k`` after stripping casts (``x.to(float32)`` is still ``x``)."""
    key, p = n.value(k)
    seen = 0
    while p >= 0 and seen < 3:
        c = g.nodes[p]
        if c.op not in CASTS or not c.inputs:
            break
        key, p = c.value(0)
        seen += 1
    return (key, p)


def is_float(dtype: str) -> bool:
    """A floating-point dtype name (``float32``, ``bfloat16``...); an unknown one counts as float."""
    return not dtype or "float" in dtype or "complex" in dtype


def dims(m: Match) -> str:
    """The size of the dim the idiom reduces (its input's last, or the ``dim`` its shapes
    said: a norm over channels), for a suggestion's normalized_shape."""
    x, dim = m.x, _moved_dim(m)
    return str(x.sizes[-1 if dim is None else dim]) if x is not None and x.sizes else "d"


def _moved_dim(m: Match) -> int | None:
    """The dim of an idiom over a dim of ``x`` the code chose (see
    :attr:`~.spelling.Spelling.any_dim`) other than its last; None: over the last."""
    dim, sizes = m.params.get("dim"), m.x.sizes if m.x is not None else ()
    if type(dim) is int and 0 <= dim < len(sizes) - 1:
        return dim
    return None


def fused_call(m: Match, fn: str, args: str) -> str:
    """The call ``torch.nn.functional.fn(x, (d,), args)`` of a fused norm over ``x``'s last
    dim, for the dim the idiom reduces: for another, over ``x`` with that dim moved last and
    its result moved back (``movedim``, any rank: ``permute(0, 2, 3, 1)`` for [N, C, H, W])."""
    dim = _moved_dim(m)
    x, back = ("x", "") if dim is None else (f"x.movedim({dim}, -1)", f".movedim(-1, {dim})")
    return f"torch.nn.functional.{fn}({x}, ({dims(m)},), {args}){back}"


def dim_note(m: Match) -> str:
    """Which dim of ``x`` the idiom reduces, where it is not the last: said, as the call moves it."""
    dim = _moved_dim(m)
    return "" if dim is None else f" (your code normalizes x over its dim {dim}, of {dims(m)})"


def line_of(loc: str) -> int:
    tail = loc.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def match_lines(m: Match) -> tuple[str | None, str | None]:
    """The user's lines where the idiom starts and ends, ``"file:line"`` each (None unknown):
    those of its first and last ops within the function that computes its result, so the
    start is the line to begin editing at (Gemma2's softcap ``attn_weights = attn_weights /
    softcap``, not the ``+ attention_mask`` four lines below it), and a line in a helper the
    idiom calls (transformers' ``rotate_half``), wherever that helper is defined, is neither.

    Lines recorded on the ops (an observation's exact lines, a trace's frames) are placed in a
    function by reading its source (:func:`~neuronscope.capture.frames.function_of`). From the
    profiler's event tree, an operator (``x * w``) leaves only its function's ``def`` line, a
    builtin call (``torch.rsqrt``) its exact line and the call of the function it ran in: the
    exact lines of the result's call win; its ``def`` line where it has none."""
    recorded = [n.location for n in m.nodes if n.location is not None]
    if recorded:
        function = _function_key(recorded[-1])
        inside = [loc for loc in recorded if _function_key(loc) == function]
        return inside[0], inside[-1]
    lines = [line for n in m.nodes if n.event is not None and (line := user_line(n.event)) is not None]
    if not lines:
        return None, None
    frame = lines[-1].frame
    same = [line for line in lines if line.frame == frame]
    exact = [line for line in same if line.exact] or same
    return exact[0].location, exact[-1].location


def _function_key(location: str) -> tuple[str, int | None]:
    file, _, line = location.rpartition(":")
    return file, function_of(file, int(line)) if line.isdigit() else None
