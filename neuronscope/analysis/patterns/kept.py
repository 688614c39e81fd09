"""What the matchers derive from the idioms' spellings, kept with the package: the op orders a
trace shows (with how each op's inputs relate to the idiom's ``x``) and the graph templates,
so that reading a trace needs no torch and a first capture derives nothing; and the questions
the op-order matcher asks of them (:class:`Orders`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from neuronscope.analysis.opgraph import TensorArg
from neuronscope.analysis.patterns.spelling import ShapeSig, TemplateOp, shape_fits

__all__ = [
    "COMMUTATIVE",
    "ORDERS_FILE",
    "TEMPLATES_FILE",
    "Orders",
    "Templates",
    "kept_orders",
    "kept_templates",
    "orders_text",
    "templates_text",
]

#: The op orders of every idiom, derived from the spellings and kept with the package, so that
#: reading a trace file needs no torch (importing it costs seconds): one line per order,
#: ``pattern<TAB>op op ...<TAB>own flags<TAB>shapes`` (flags 1: the idiom's op, 0: a side op;
#: shapes: the order's :func:`~.spelling.order_shapes`, each op's arguments joined by ``,``,
#: ops by ``/`` (``-``: a side op), alternatives by a space). Rebuilt by ``python -m
#: neuronscope.analysis.patterns``; a test checks it is what the spellings run.
ORDERS_FILE = Path(__file__).with_name("op_orders.txt")


def _sig_text(sig: ShapeSig) -> str:
    return "/".join("-" if op is None else ",".join(op) for op in sig)


def _sig_of(text: str) -> ShapeSig:
    return tuple(None if op == "-" else tuple(a for a in op.split(",") if a) for op in text.split("/"))


def orders_text(
    derived: Mapping[str, Mapping[tuple[str, ...], tuple[bool, ...]]],
    shapes: Mapping[str, Mapping[tuple[str, ...], frozenset[ShapeSig]]],
) -> str:
    """The text of :data:`ORDERS_FILE` for ``derived`` (pattern -> its :func:`op_orders`) and
    ``shapes`` (pattern -> its :func:`order_shapes`)."""
    lines = [
        f"{name}\t{' '.join(order)}\t{''.join('1' if own else '0' for own in flags)}"
        f"\t{' '.join(sorted(map(_sig_text, shapes[name][order])))}"
        for name, orders in derived.items()
        for order, flags in sorted(orders.items())
    ]
    return "\n".join(lines) + "\n"


@functools.cache
def kept_orders() -> Mapping[str, tuple[Mapping[tuple[str, ...], tuple[bool, ...]], Mapping[tuple[str, ...], frozenset[ShapeSig]]]]:
    """The op orders and their shapes :data:`ORDERS_FILE` keeps, by pattern (empty where it
    is missing)."""
    found: dict[str, tuple[dict[tuple[str, ...], tuple[bool, ...]], dict[tuple[str, ...], frozenset[ShapeSig]]]] = {}
    try:
        text = ORDERS_FILE.read_text()
    except OSError:
        return MappingProxyType({})
    for line in text.splitlines():
        name, ops, flags, sigs = line.split("\t")
        orders, shapes = found.setdefault(name, ({}, {}))
        order = tuple(ops.split())
        orders[order] = tuple(c == "1" for c in flags)
        shapes[order] = frozenset(map(_sig_of, sigs.split(" ")))
    return MappingProxyType({name: (MappingProxyType(o), MappingProxyType(sh)) for name, (o, sh) in found.items()})


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


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


@functools.cache
def kept_templates() -> Mapping[str, Templates]:
    """The graph templates :data:`TEMPLATES_FILE` keeps, by pattern (empty where it is missing)."""
    import json

    try:
        kept = json.loads(TEMPLATES_FILE.read_text())
    except (OSError, ValueError):
        return MappingProxyType({})
    return MappingProxyType({
        name: tuple((tuple(TemplateOp(*_tuples(op)) for op in ops), MappingProxyType(choice)) for ops, choice in found)
        for name, found in kept.items()
    })


#: Ops whose two dimensioned inputs code writes in either order (``w * h``, ``h * w``).
COMMUTATIVE = frozenset({"add", "mul"})


def _readings(op: str, relations: tuple[str, ...], got: list[TensorArg], x: tuple[int, ...]) -> list[list[tuple[str, int]]]:
    """The ways ``got`` (an op's recorded dimensioned inputs) can be the spelling's arguments
    ``relations``, shapes fitting (either order for ``add`` and ``mul``): each as (the tensor
    the spelling reads, the storage recorded; -1 where none was)."""
    if not got:
        return [[]]  # no input recorded (a trace's tensor list): nothing to check
    if len(got) != len(relations):
        return []
    orders = (got, got[::-1]) if op in COMMUTATIVE and len(got) == 2 else (got,)
    return [
        [(r.partition("@")[2], t.key) for r, t in zip(relations, args) if "@" in r and t.key != -1]
        for args in orders
        if all(shape_fits(r, t.sizes, x) for r, t in zip(relations, args))
    ]


def _one_storage_each(options: list[list[list[tuple[str, int]]]], bound: dict[str, int]) -> bool:
    """Can each op take one of its readings with every tensor the spelling reads twice read
    from one storage? (Two tensors alive at once never share one, so this is exact.)"""
    if not options:
        return True
    for reading in options[0]:
        b = dict(bound)
        if all(b.setdefault(name, key) == key for name, key in reading) and _one_storage_each(options[1:], b):
            return True
    return False


class Orders:
    """The op orders of one idiom, as the op-order matcher asks about them."""

    def __init__(self, orders: Mapping[tuple[str, ...], tuple[bool, ...]], shapes: Mapping[tuple[str, ...], frozenset[ShapeSig]]) -> None:
        self.orders = orders
        self.shapes = shapes
        self.lengths = sorted({len(o) for o in self.orders}, reverse=True)
        self.words = frozenset(w for o in self.orders for w in o)
        self.firsts = frozenset(o[0] for o in self.orders)

    def fullmatch(self, tokens: list[str], i: int, j: int) -> bool:
        """Are ``tokens[i:j]`` one of the orders?"""
        return tuple(tokens[i:j]) in self.orders

    def own(self, tokens: list[str], i: int, j: int) -> tuple[bool, ...]:
        """Which of ``tokens[i:j]`` (one of the orders) are the idiom's own ops."""
        return self.orders.get(tuple(tokens[i:j]), (True,) * (j - i))

    def longest_at(self, tokens: list[str], i: int) -> int | None:
        """The end of the longest order starting at ``tokens[i]``, or None."""
        if i >= len(tokens) or tokens[i] not in self.firsts:
            return None
        for n in self.lengths:
            if i + n <= len(tokens) and tuple(tokens[i : i + n]) in self.orders:
                return i + n
        return None

    def shaped(self, order: tuple[str, ...], inputs: list[list[TensorArg]], x: tuple[int, ...]) -> bool:
        """Do the ops of ``order``, with these recorded dimensioned inputs each, relate to ``x``
        as in one of the spellings that run it? As the graph matcher asks it, without links:
        each of the idiom's ops takes as many dimensioned tensors as the spelling's, each
        shaped as the spelling's relates to its ``x`` (either order for ``add`` and ``mul``),
        and where storages were recorded (a live capture), what the spelling reads twice (its
        ``x``, an op's output) is one storage: ``y * rsqrt(mean(x ** 2))`` is no RMSNorm."""
        for sig in self.shapes.get(order, ()):
            options = [_readings(op, rel, got, x) for op, rel, got in zip(order, sig, inputs) if rel is not None]
            if all(options) and _one_storage_each(options, {}):
                return True
        return False

    def search(self, tokens: list[str], i: int) -> tuple[int, int] | None:
        """The first order at ``tokens[i]`` or after, as (start, end of the longest there)."""
        firsts = self.firsts
        for p in range(i, len(tokens)):
            if tokens[p] in firsts and (end := self.longest_at(tokens, p)) is not None:
                return p, end
        return None
