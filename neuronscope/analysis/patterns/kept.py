"""What the matchers derive from the idioms' spellings, kept with the package: the op orders a
trace shows (with how each op's inputs relate to the idiom's ``x``) and the graph templates,
so that reading a trace needs no torch and a first capture derives nothing; and the questions
the op-order matcher asks of them (:class:`Orders`).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from neuronscope.analysis.opgraph import OpNode, TensorArg, takes_tensor_list
from neuronscope.analysis.patterns.shapes import (
    VECTOR_SHAPES,
    ShapeSig,
    broadcasts,
    dim_last,
    dims_to_try,
    is_plain_vector,
    named_dims,
    shape_fits,
)
from neuronscope.analysis.patterns.spelling import OWN, SIDE, TAKES_BUILT, OrderShapes, TemplateOp, merged_choice

__all__ = [
    "COMMUTATIVE",
    "FACTORIES",
    "MASK_STEPS",
    "ORDERS_FILE",
    "TEMPLATES_FILE",
    "KeptOrders",
    "Orders",
    "Templates",
    "built_runs",
    "built_side_fits",
    "computed_runs",
    "computed_side_fits",
    "kept_orders",
    "kept_templates",
    "orders_text",
    "templates_text",
]

#: The op orders of every idiom, derived from the spellings and kept with the package, so that
#: reading a trace file needs no torch (importing it costs seconds): one line per order,
#: ``pattern<TAB>op op ...<TAB>own flags<TAB>shapes<TAB>choices<TAB>vector choices`` (flags 1:
#: the idiom's op, 0: a side op, 2: the idiom's op taking in a side tensor that code may build
#: in place, see :data:`~.spelling.TAKES_BUILT`; shapes: the order's :func:`~.spelling.order_shapes`, each op's
#: arguments joined by ``,``, ops by ``/`` (``-``: a side op), alternatives by a space; choices:
#: a JSON list, the choice of each alternative; vector choices: the idiom's
#: :func:`~.spelling.vector_choices`). Rebuilt by ``python -m neuronscope.analysis.patterns``;
#: a test checks it is what the spellings run.
ORDERS_FILE = Path(__file__).with_name("op_orders.txt")


def _sig_text(sig: ShapeSig) -> str:
    return "/".join("-" if op is None else ",".join(op) for op in sig)


def _sig_of(text: str) -> ShapeSig:
    return tuple(None if op == "-" else tuple(a for a in op.split(",") if a) for op in text.split("/"))


#: What an idiom's op orders are kept as: its op orders with their own flags, their shapes
#: and choices, and its vector choices.
KeptOrders = tuple[Mapping[tuple[str, ...], tuple[int, ...]], OrderShapes, frozenset[str]]


def orders_text(
    derived: Mapping[str, Mapping[tuple[str, ...], tuple[int, ...]]], shapes: Mapping[str, OrderShapes], vectors: Mapping[str, frozenset[str]]
) -> str:
    """The text of :data:`ORDERS_FILE` for ``derived`` (pattern -> its :func:`op_orders`),
    ``shapes`` (pattern -> its :func:`order_shapes`) and ``vectors`` (pattern -> its
    :func:`vector_choices`)."""
    import json

    lines = []
    for name, orders in derived.items():
        for order, flags in sorted(orders.items()):
            sigs = sorted(shapes[name][order].items(), key=lambda kv: _sig_text(kv[0]))
            choices = json.dumps([dict(c) for _, c in sigs], separators=(",", ":"), sort_keys=True)
            lines.append(
                f"{name}\t{' '.join(order)}\t{''.join(str(int(flag)) for flag in flags)}"
                f"\t{' '.join(_sig_text(sig) for sig, _ in sigs)}\t{choices}\t{' '.join(sorted(vectors[name]))}"
            )
    return "\n".join(lines) + "\n"


@functools.cache
def kept_orders() -> Mapping[str, KeptOrders]:
    """The op orders, their shapes and choices :data:`ORDERS_FILE` keeps, by pattern (empty
    where it is missing)."""
    import json

    found: dict[str, tuple[dict[tuple[str, ...], tuple[int, ...]], dict[tuple[str, ...], Mapping[ShapeSig, Mapping[str, Any]]], str]] = {}
    try:
        text = ORDERS_FILE.read_text()
    except OSError:
        return MappingProxyType({})
    try:
        for line in text.splitlines():
            name, ops, flags, sigs, choices, vectors = line.split("\t")
            orders, shapes, _ = found.setdefault(name, ({}, {}, vectors))
            order = tuple(ops.split())
            orders[order] = tuple("012".index(c) for c in flags)
            shapes[order] = MappingProxyType(dict(zip(map(_sig_of, sigs.split(" ")), map(MappingProxyType, json.loads(choices)))))
    except (ValueError, TypeError):  # damaged: derived instead, as where it is missing (see kept_templates)
        return MappingProxyType({})
    return MappingProxyType({
        name: (MappingProxyType(o), MappingProxyType(sh), frozenset(v.split())) for name, (o, sh, v) in found.items()
    })


#: The graph templates of the idioms matched on them (see :func:`templates`), kept with the
#: package like :data:`ORDERS_FILE`, so that a first capture derives nothing.
TEMPLATES_FILE = Path(__file__).with_name("graph_templates.json")
Templates = tuple[tuple[tuple[TemplateOp, ...], Mapping[str, Any]], ...]


def templates_text(derived: Mapping[str, Templates]) -> str:
    """The text of :data:`TEMPLATES_FILE` for ``derived`` (pattern -> its :func:`templates`)."""
    import json

    parts = []
    for name, found in derived.items():  # one template a line: a spelling's change is its lines
        rows = ",\n".join(json.dumps([[list(op) for op in ops], dict(choice)], separators=(",", ":")) for ops, choice in found)
        parts.append(f"{json.dumps(name)}: [\n{rows}\n]")
    return "{\n" + ",\n".join(parts) + "\n}\n"


@functools.cache
def kept_templates() -> Mapping[str, Templates]:
    """The graph templates :data:`TEMPLATES_FILE` keeps, by pattern (empty where it is missing).
    Decoded by msgspec straight into the tuples the matcher walks: a first capture reads them
    all (370 templates, 160 KB), 8 ms where ``json.loads`` and a conversion took 26."""
    import msgspec

    try:
        kept = msgspec.json.decode(TEMPLATES_FILE.read_bytes(), type=dict[str, Templates])
    except (OSError, msgspec.DecodeError):
        return MappingProxyType({})
    if not all(_whole(ops) for found in kept.values() for ops, _ in found):
        return MappingProxyType({})  # damaged: derived instead, as where it is missing
    return MappingProxyType({name: tuple((ops, MappingProxyType(choice)) for ops, choice in found) for name, found in kept.items()})


def _whole(ops: tuple[TemplateOp, ...]) -> bool:
    """Whether a kept template can be walked: some ops, each reading only ops before it. A
    damaged file that decodes (an empty template, an ``("op", 99, True)``) otherwise raised
    IndexError in the matcher, and every fusion hint of the capture was lost."""
    return bool(ops) and all(
        kind != "op" or (type(ref) is int and 0 <= ref < i) for i, op in enumerate(ops) for kind, ref, _ in op.args
    )


#: Ops whose two dimensioned inputs code writes in either order (``w * h``, ``h * w``).
COMMUTATIVE = frozenset({"add", "mul"})

#: Ops that make a tensor from no tensor (``torch.ones(T, T)``, ``torch.arange(T)``), and those
#: that code builds a mask of such with (``tril``, ``== 0``, ``.bool()``, ``ones_like``; views
#: are no ops in op order): what a side tensor built in place is made of, in op order.
FACTORIES = frozenset({"ones", "zeros", "full", "arange", "empty", "eye"})
MASK_STEPS = frozenset({
    "tril", "triu", "eq", "ne", "lt", "gt", "le", "ge", "logical_not", "logical_and", "logical_or", "bitwise_not",
    "to", "_to_copy", "reshape", "contiguous", "clone", "repeat", "ones_like", "zeros_like", "full_like", "empty_like",
})


def built_runs(seq: list[OpNode]) -> list[tuple[int, int]]:
    """The runs ``[start, end)`` of ``seq`` (one thread's ops in order) that build a tensor from
    nothing: a factory op taking no dimensioned tensor, then mask steps and factory ops
    (``ones tril eq``, ``arange arange lt``). Whether one is a side tensor of an idiom it stands
    in is for the match to say (:func:`built_side_fits`)."""
    runs: list[tuple[int, int]] = []
    k = 0
    while k < len(seq):
        end = k
        if seq[k].op in FACTORIES and not any(t.sizes for t in seq[k].inputs):
            end = k + 1
            while end < len(seq) and (seq[end].op in MASK_STEPS or (seq[end].op in FACTORIES and not any(t.sizes for t in seq[end].inputs))):
                end += 1
            runs.append((k, end))
        k = max(end, k + 1)
    return runs


def built_side_fits(run: list[OpNode], taker: OpNode, after: OpNode | None) -> bool:
    """Whether the ops ``run`` can build what ``taker``, the idiom's op after them that takes in
    a side tensor built in place (:data:`~.spelling.TAKES_BUILT`), takes besides its main input,
    where shapes were recorded: every tensor they read broadcasts to another input of
    ``taker`` that broadcasts to its main (largest) one (a causal mask: ``[T, T]``,
    ``[1, 1, T, T]``, to the scores), and ``after``, the idiom's next op, reads a tensor of
    that main one's size (the scores go on; ``other.masked_fill(mask)`` is no mask of them).
    Where none were, op order and the declaration say it (and the match says which ops it read
    so: they may have built the main input instead, ``zeros(T, T).masked_fill(...)``)."""
    shapes = [tuple(t.sizes) for t in taker.inputs if t.sizes]
    if not shapes:
        return True
    main = max(shapes, key=math.prod)
    shapes.remove(main)
    read = [tuple(t.sizes) for n in run for t in n.inputs if t.sizes]
    if main in read:  # the run may have built the main input itself (zeros(T, T).masked_fill): no scores
        return False
    if not _goes_on(main, after):
        return False
    return any(broadcasts(side, main) and all(broadcasts(r, side) for r in read) for side in shapes)


#: The most ops a run computing a side tensor amid an idiom may hold (a relative position bias
#: gathered from its table and reshaped: 4); more, and op order is no claim about the idiom.
MAX_COMPUTED = 8

#: Matmuls whose second input is the side tensor (``p @ v``): it is their partner, ``[..., S, E]``
#: for ``[..., T, S]``, where another op's broadcasts onto its main input.
_PARTNERED = frozenset({"matmul", "bmm"})
#: Products whose inputs' places do not say which is the idiom's: an einsum's equation names
#: them (its v may be the larger), a baddbmm's first is the added bias. None is a taker here:
#: a run before an einsum reading v's shape once took the scores' own ops out of op order.
_UNPLACED = frozenset({"einsum", "baddbmm", "mm"})


def _chain_shape(taker: OpNode) -> tuple[int, ...] | None:
    """The shape of the input ``taker`` takes from the idiom (a matmul's first, another op's
    largest), None where shapes were not recorded or the op does not say which it is."""
    shapes = [tuple(t.sizes) for t in taker.inputs if t.sizes]
    if not shapes or taker.op in _UNPLACED:
        return None
    return shapes[0] if taker.op in _PARTNERED else max(shapes, key=math.prod)


def computed_runs(seq: list[OpNode], takers: frozenset[str], firsts: frozenset[str]) -> list[tuple[int, int]]:
    """The runs ``[start, end)`` of ``seq`` (one thread's ops in order) that may compute, in
    place, what the op after them takes besides the idiom's tensor (``v = self.value(x)`` before
    ``p @ v``, a position bias gathered before it is added to the scores), where shapes were
    recorded: at most :data:`MAX_COMPUTED` ops, right before an op of ``takers`` (ops that take a
    side tensor code may compute in place), none reading a tensor of the shape that op takes
    from the idiom, nor one that may start the idiom (``firsts``: the scores' matmul, a scale of
    q) unless it reads only tensors shaped as the side tensor (Canine's mask, ``(1 - m) *
    finfo.min``, made between the scores' scale and their add), after an op that reads that
    shape (the idiom's op before them). Or, where the op before them is the product that made
    that shape (``q @ k^T``, q scaled long before), ops reading it too after a first that does
    not: ProphetNet's position bias, reshaped from the scores' shape amid its gather. Whether
    one is a side tensor of an idiom it stands in is for the match to say
    (:func:`computed_side_fits`)."""
    runs: list[tuple[int, int]] = []
    for k, taker in enumerate(seq):
        chain = _chain_shape(taker) if taker.op in takers else None
        if chain is None:
            continue
        side = {tuple(t.sizes) for t in taker.inputs if t.sizes} - {chain}
        a = k
        while a > 0 and k - a < MAX_COMPUTED and not _reads(seq[a - 1], chain) and _computing(seq[a - 1], firsts, side):
            a -= 1
        b = k  # back to the product that made the scores, past ops reading a tensor of their shape
        while b > 0 and k - b < MAX_COMPUTED and _computing(seq[b - 1], firsts, side):
            b -= 1
        if b < k and b > 0 and _makes(seq[b - 1], chain) and not _reads(seq[b], chain):
            a = b
        elif not (a > 0 and _reads(seq[a - 1], chain)):
            continue
        if a < k and (not runs or runs[-1][1] <= a):
            runs.append((a, k))
    return runs


def _computing(n: OpNode, firsts: frozenset[str], side: set[tuple[int, ...]]) -> bool:
    """May ``n`` be an op of a run computing a side tensor: no op that may start the idiom,
    unless it reads only tensors shaped as the side tensor?"""
    return n.op not in firsts or {tuple(t.sizes) for t in n.inputs if t.sizes} <= side


#: Products whose output op order does not record, only their operands.
_PRODUCTS = frozenset({"matmul", "bmm", "einsum"})


def _makes(n: OpNode, shape: tuple[int, ...]) -> bool:
    """Can ``n`` be a product of two tensors whose output is of ``shape``: a matmul's
    ``[.., T, E] @ [.., E, S]``; an einsum's (its equation is not recorded) with each of
    ``shape``'s sizes among its operands'?"""
    operands = [tuple(t.sizes) for t in n.inputs if t.sizes]
    if n.op not in _PRODUCTS or len(operands) != 2 or len(shape) < 2 or min(map(len, operands)) < 2:
        return False
    a, b = operands
    if n.op == "einsum":
        return not Counter(shape) - (Counter(a) + Counter(b))
    return (a[-2], b[-1]) == shape[-2:] and a[-1] == b[-2] and broadcasts(a[:-2], shape[:-2]) and broadcasts(b[:-2], shape[:-2])


def _goes_on(scores: tuple[int, ...], after: OpNode | None) -> bool:
    """Does ``after``, the idiom's op after the one taking a side tensor in, read a tensor of
    the ``scores``' size (the idiom goes on through them), where its shapes were recorded?"""
    return after is None or not after.inputs or math.prod(scores) in {t.numel for t in after.inputs}


def _reads(n: OpNode, shape: tuple[int, ...]) -> bool:
    return any(tuple(t.sizes) == shape for t in n.inputs)


def computed_side_fits(run: list[OpNode], taker: OpNode, after: OpNode | None) -> bool:
    """Whether the ops ``run`` (see :func:`computed_runs`) can compute what ``taker``, the
    idiom's op after them, takes besides the idiom's tensor: that input is shaped as the spelling
    says, v's ``[..., S, Ev]`` for scores ``[..., T, S]`` (a matmul), or broadcast onto them (a
    bias, a mask); the run's first op reads no tensor of the scores' shape (the scores went on
    through it; a later one may read the side tensor computed so); and ``after``, the idiom's
    next op, reads a tensor of the scores' size.
    Shapes must have been recorded."""
    chain = _chain_shape(taker)
    if chain is None or _reads(run[0], chain):
        return False
    sides = [tuple(t.sizes) for t in taker.inputs if t.sizes]
    sides.remove(chain)
    if not _goes_on(chain, after):
        return False
    if taker.op in _PARTNERED:
        return len(sides) == 1 and len(sides[0]) >= 2 and sides[0][-2] == chain[-1] and broadcasts(sides[0][:-2], chain[:-2])
    return bool(sides) and all(broadcasts(side, chain) for side in sides)


def _readings(op: str, relations: tuple[str, ...], got: list[TensorArg], x: tuple[int, ...]) -> list[list[tuple[str, int]]]:
    """The ways ``got`` (an op's recorded dimensioned inputs) can be the spelling's arguments
    ``relations``, shapes fitting (either order for ``add`` and ``mul``): each as (the tensor
    the spelling reads, the storage recorded; -1 where none was), and (``#`` and a named dim,
    the size recorded there) for each of the last two dims a relation names (``.LS``)."""
    if not got:
        return [[]]  # no input recorded (a trace's tensor list): nothing to check
    if takes_tensor_list(op):  # a trace records no tensor list's members (aten::index's indices)
        relations = relations[: len(got)]
    if len(got) != len(relations):
        return []
    orders = (got, got[::-1]) if op in COMMUTATIVE and len(got) == 2 else (got,)
    return [
        [
            *((r.partition("@")[2], t.key) for r, t in zip(relations, args) if "@" in r and t.key != -1),
            *((f"#{name}", size) for r, t in zip(relations, args) for name, size in zip(named_dims(r), t.sizes[-2:])),
        ]
        for args in orders
        if all(shape_fits(r, t.sizes, x) and len(t.sizes) >= len(named_dims(r)) for r, t in zip(relations, args))
    ]


def _vector_shapes(sig: ShapeSig, inputs: list[list[TensorArg]], x: tuple[int, ...], dim: int) -> dict[str, list[int]]:
    """The declared vectors (``V@name``) that ``inputs`` hold in another shape than a vector
    of ``x``'s dim ``dim`` alone, by name (see :data:`~.shapes.VECTOR_SHAPES`). Only a vector
    fits a ``V``: ``x``'s own shape does not, so either order of a ``mul`` reads the same one."""
    found: dict[str, list[int]] = {}
    moved = dim_last(x, len(x), dim)
    for rel, got in zip(sig, inputs):
        for r in rel or ():
            if r.startswith("V@"):
                found.update(
                    (r[2:], list(t.sizes))
                    for t in got
                    if shape_fits("V", dim_last(t.sizes, len(x), dim), moved) and not is_plain_vector(t.sizes, x, dim)
                )
    return found


def _one_storage_each(options: list[list[list[tuple[str, int]]]], bound: dict[str, int]) -> bool:
    """Can each op take one of its readings with every tensor the spelling reads twice read
    from one storage (two tensors alive at once never share one, so this is exact), and each
    named dim one size (q @ k^T's S is the weights' and v's)?"""
    if not options:
        return True
    for reading in options[0]:
        b = dict(bound)
        if all(b.setdefault(name, key) == key for name, key in reading) and _one_storage_each(options[1:], b):
            return True
    return False


class Orders:
    """The op orders of one idiom, as the op-order matcher asks about them."""

    def __init__(
        self, orders: Mapping[tuple[str, ...], tuple[int, ...]], shapes: OrderShapes, vectors: frozenset[str], any_dim: bool = False
    ) -> None:
        self.orders = orders
        self.shapes = shapes
        self.vectors = vectors
        #: whether the idiom's dim is the code's (see :attr:`~.spelling.Spelling.any_dim`)
        self.any_dim = any_dim
        self.lengths = sorted({len(o) for o in self.orders}, reverse=True)
        self.words = frozenset(w for o in self.orders for w in o)
        self.firsts = frozenset(o[0] for o in self.orders)
        #: whether code may build a side tensor of the idiom in place (see :func:`built_runs`)
        self.takes_built = any(TAKES_BUILT in flags for flags in orders.values())
        #: the ops that take in such a side tensor
        self.takers = frozenset(op for o, flags in orders.items() for op, flag in zip(o, flags) if flag == TAKES_BUILT)

    def fullmatch(self, tokens: list[str], i: int, j: int) -> bool:
        """Are ``tokens[i:j]`` one of the orders?"""
        return tuple(tokens[i:j]) in self.orders

    def flags(self, tokens: list[str], i: int, j: int) -> tuple[int, ...]:
        """What each of ``tokens[i:j]`` (one of the orders) is (:data:`~.spelling.TAKES_BUILT`...)."""
        return self.orders.get(tuple(tokens[i:j]), (OWN,) * (j - i))

    def own(self, tokens: list[str], i: int, j: int) -> tuple[bool, ...]:
        """Which of ``tokens[i:j]`` (one of the orders) are the idiom's own ops."""
        return tuple(flag != SIDE for flag in self.flags(tokens, i, j))

    def longest_at(self, tokens: list[str], i: int) -> int | None:
        """The end of the longest order starting at ``tokens[i]``, or None."""
        if i >= len(tokens) or tokens[i] not in self.firsts:
            return None
        for n in self.lengths:
            if i + n <= len(tokens) and tuple(tokens[i : i + n]) in self.orders:
                return i + n
        return None

    def unshaped(self, order: tuple[str, ...]) -> dict[str, Any]:
        """The choice of every spelling that runs ``order``, its vector choices not known: what
        ops whose shapes were not recorded show."""
        return {**merged_choice(self.shapes.get(order, {}).values()), **dict.fromkeys(self.vectors)}

    def choice(self, order: tuple[str, ...], inputs: list[list[TensorArg]], x: tuple[int, ...]) -> dict[str, Any] | None:
        """The spelling choice the ops of ``order`` show, with these recorded dimensioned inputs
        each, relating to ``x`` as in the spellings that run it; None: they relate as in none. As the graph matcher asks it, without links: each of the
        idiom's ops takes as many dimensioned tensors as the spelling's, each shaped as the
        spelling's relates to its ``x`` (either order for ``add`` and ``mul``), and where
        storages were recorded (a live capture), what the spelling reads twice (its ``x``, an
        op's output) is one storage: ``y * rsqrt(mean(x ** 2))`` is no RMSNorm. Over ``x``'s
        last dim, or, for an idiom whose dim is the code's, another moved last (said as
        ``dim``: see :func:`~.shapes.dim_last`). Where ``x`` fits none, the largest tensor the
        ops take: a spelling may read a part of its ``x`` first (RoFormer's rotated half)."""
        whole = max((t.sizes for got in inputs for t in got), key=math.prod, default=x)
        tries = [(shape, dim) for shape in dict.fromkeys((x, whole)) for dim in dims_to_try(shape, self.any_dim)]
        for shape, dim in tries:
            moved = dim_last(shape, len(shape), dim)
            shaped = [[t._replace(sizes=dim_last(t.sizes, len(shape), dim)) for t in got] for got in inputs]
            fitting = []
            for sig, choice in self.shapes.get(order, {}).items():
                options = [_readings(op, rel, got, moved) for op, rel, got in zip(order, sig, shaped) if rel is not None]
                if all(options) and _one_storage_each(options, {}):
                    shapes = _vector_shapes(sig, inputs, shape, dim)
                    fitting.append({**choice, VECTOR_SHAPES: shapes} if shapes else choice)
            if fitting:
                return {**merged_choice(fitting), **({"dim": dim} if dim != len(shape) - 1 else {})}
        return None

    def search(self, tokens: list[str], i: int) -> tuple[int, int] | None:
        """The first order at ``tokens[i]`` or after, as (start, end of the longest there)."""
        firsts = self.firsts
        for p in range(i, len(tokens)):
            if tokens[p] in firsts and (end := self.longest_at(tokens, p)) is not None:
                return p, end
        return None
