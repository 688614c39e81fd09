"""An idiom's spellings, written once in PyTorch, and what the matchers derive from them.

A :class:`Spelling` is a function written the way model code writes the idiom, over example
tensors (``t.x``, ``t.weight``...), with keyword choices the engine runs it under (weight or
none, a mask by ``add`` or by ``masked_fill``). :func:`op_orders` runs every spelling once per
choice and dtype on small tensors under a :class:`torch.overrides.TorchFunctionMode` and keeps
the ops in the order torch's profiler records them at the user's level (``aten::pow``,
``aten::mean``...; views, and casts that copied nothing, are no ops there): the op orders a
trace shows for that idiom. Derived once per process, on first use (a few milliseconds), never
for a capture that has data flow.

A mode rather than the profiler: it sees the user-level calls (a mode is off inside its own
handler, so a call's internals are not recorded, as they are not user-level ops to the
profiler), costs nothing to start, and cannot disturb a profiler the user has running. That it
names the same ops as the profiler is a test (``tests/test_idiom_spellings.py``).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any, NamedTuple

from neuronscope.analysis.opgraph import MAYBE_ALIAS_OPS, VIEW_OPS
from neuronscope.capture.idioms import Builders

__all__ = [
    "EXAMPLE_DIM",
    "ORDERS_FILE",
    "TEMPLATES_FILE",
    "Orders",
    "Spelling",
    "TemplateOp",
    "builder",
    "examples",
    "kept_orders",
    "kept_templates",
    "op_orders",
    "orders_text",
    "recorded_ops",
    "templates",
    "templates_text",
]

#: The last dim of the example tensors: even (rotary halves it), and unlike their other dims,
#: so that a per-row statistic, a weight and the input all have other shapes.
EXAMPLE_DIM = 8


@dataclass(frozen=True, eq=False)  # by identity: the derived orders are cached per spelling
class Spelling:
    """One way code writes an idiom: ``fn(t, **choice)`` over example tensors ``t`` (see
    :func:`examples`), run under every combination of ``choices`` (name -> values).

    ``side`` names example tensors whose own computations run amid the idiom but are not part
    of it (attention's ``mask == 0``, a GLU's up projection): a trace match spans their ops and
    leaves them out, as the live matchers, following data flow, never reach them."""

    fn: Callable[..., Any]
    choices: Mapping[str, tuple[Any, ...]] = field(default_factory=lambda: MappingProxyType({}))
    side: tuple[str, ...] = ()
    #: The Python numbers the spelling writes are the idiom's (GELU's 0.5, 0.044715): where an
    #: observation recorded the user's numbers, they must be these. False: they are parameters
    #: (an eps, a dim).
    exact_numbers: bool = False
    #: Example tensors the code may broadcast against ``x`` (rotary's ``cos`` and ``sin``); any
    #: other is shaped in a capture as in the spelling (a GLU's ``up`` is ``gate``'s shape: a
    #: per-channel statistic times a GELU is no GLU).
    broadcast: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", MappingProxyType(dict(self.choices)))  # read-only, as the record is

    def variants(self) -> Iterable[dict[str, Any]]:
        names = list(self.choices)
        for values in itertools.product(*(self.choices[n] for n in names)):
            yield dict(zip(names, values))


#: The named parameters a spelling reads from ``t`` besides tensors, at the values a derived
#: op order does not depend on: ``verify`` sets the ones a hint recorded (its ``details``).
PARAMETERS = MappingProxyType({"eps": 1e-6, "dim": -1, "correction": 0})


def examples(dtype: Any, x: Any = None, device: Any = None, **params: Any) -> SimpleNamespace:
    """Example tensors by the names spellings use, of ``dtype`` (a float dtype): small ones
    around ``(2, 4, EXAMPLE_DIM)``, or, given ``x``, ``x`` itself and tensors that fit it (a
    weight of its last dim, an up projection and cos / sin like it, a target per row), on
    ``device``; and the :data:`PARAMETERS`, overridden by ``params``."""
    import torch

    g = torch.Generator().manual_seed(0)
    if x is None:
        x = torch.randn(2, 4, EXAMPLE_DIM, generator=g).to(dtype)
    d = x.shape[-1]

    def r(*shape: int) -> Any:
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    q, k, v = r(2, 2, 4, EXAMPLE_DIM), r(2, 2, 4, EXAMPLE_DIM), r(2, 2, 4, EXAMPLE_DIM)
    rows = max(1, x.numel() // max(d, 1))
    return SimpleNamespace(
        x=x, weight=r(d), bias=r(d), up=r(*x.shape), cos=r(*x.shape), sin=r(*x.shape), proj=r(d, d),
        q=q, k=k, v=v, mask=r(2, 2, 4, 4), bool_mask=torch.ones(2, 2, 4, 4, dtype=torch.bool, device=device),
        target=torch.randint(0, d, (rows,), generator=g).to(device),
        **{**PARAMETERS, **params},
    )


#: Python-level callables named otherwise than the op the profiler records for them, or that
#: run two user-level ops (``1 / t`` is ``reciprocal`` then ``mul``); () records nothing.
_OP_NAMES = MappingProxyType({
    "truediv": ("div",), "rtruediv": ("reciprocal", "mul"), "rdiv": ("reciprocal", "mul"), "radd": ("add",), "rmul": ("mul",),
    "rpow": ("pow",), "rmatmul": ("matmul",), "iadd": ("add",), "imul": ("mul",), "isub": ("sub",),
    "itruediv": ("div",), "float": ("to",), "half": ("to",), "bfloat16": ("to",), "double": ("to",),
    "nll_loss": ("nll_loss_nd",), "getitem": (), "setitem": (), "get": (),
})


def _op_names(func: Any) -> tuple[str, ...]:
    name = getattr(func, "__name__", "") or ""
    base = name.strip("_")
    if base in _OP_NAMES:
        return _OP_NAMES[base]
    return (base,) if base else ()  # ``mul_`` in place: ``mul``, as short_name names it


def _storages(value: Any) -> set[int]:
    import torch

    if isinstance(value, torch.Tensor):
        return {value.untyped_storage().data_ptr()} if value.numel() else set()
    if isinstance(value, (list, tuple)):
        return set().union(*map(_storages, value)) if value else set()
    return set()


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return _tensors(list(value.values()))
    return []


class TemplateOp(NamedTuple):
    """One op a spelling ran: its name, whether it is the idiom's own (not made from side
    tensors alone), and its dimensioned tensor arguments in order, each ``("op", j, True)``
    (op ``j``'s output, or a view of it), ``("in", name, direct)`` (example tensor ``name``;
    ``direct`` False: a view of it) or ``("side", name, False)``."""

    op: str
    own: bool
    args: tuple[tuple[str, Any, bool], ...]
    #: each argument's shape as the spelling ran on the example tensors
    shapes: tuple[tuple[int, ...], ...] = ()
    #: the Python numbers of the call, as an observation records them (see ``exact_numbers``)
    consts: tuple[float, ...] = ()


class _Run:
    """What one run of a spelling recorded: its ops, and whether a cast copied nothing (then
    its op order in another dtype may differ: the cast would copy)."""

    def __init__(self, t: Any, side: tuple[str, ...], numbers: bool) -> None:
        import torch

        self.ops: list[TemplateOp] = []
        self.numbers = numbers
        self.cast_skipped = False
        self.refs: dict[int, tuple[str, Any, bool]] = {}
        self.keep: list[Any] = []  # alive, so that no id is reused by a tensor made later
        for name, value in vars(t).items():
            if isinstance(value, torch.Tensor):
                self.refs[id(value)] = ("side" if name in side else "in", name, True)
                self.keep.append(value)

    def call(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        out = func(*args, **kwargs)
        refs, ops = self.refs, self.ops
        inputs = _tensors((args, kwargs))
        in_refs = [refs.get(id(a)) for a in inputs]
        is_side = bool(inputs) and all(r is not None and r[0] == "side" for r in in_refs)
        names = _op_names(func)
        made = _storages(out)
        recorded = bool(names and made) and names[0] not in VIEW_OPS
        if recorded and names[0] in MAYBE_ALIAS_OPS and made <= _storages(inputs):
            recorded = False  # a cast to the dtype it had, a reshape that viewed: no op in op order
            self.cast_skipped = True
        out_ref: tuple[str, Any, bool] | None
        if recorded:
            first = len(ops)
            taken = [(r, tuple(a.shape)) for r, a in zip(in_refs, inputs) if r is not None and a.dim()]
            # The call's numbers as the observation pass records them (capture/observe.py).
            nums = tuple(float(a) for a in (*args, *kwargs.values()) if isinstance(a, Real) and a.__class__ is not bool)
            for i, name in enumerate(names):  # ``1 / t``: reciprocal, then mul
                if i == 0:
                    ops.append(TemplateOp(name, not is_side, tuple(r for r, _ in taken), tuple(s for _, s in taken), nums if self.numbers else ()))
                else:
                    ops.append(TemplateOp(name, not is_side, (("op", first + i - 1, True),), (tuple(out.shape),)))
            out_ref = ("side", "", False) if is_side else ("op", len(ops) - 1, True)
        else:  # a view, or no op: what its first tensor input is, seen through a view
            base = next((r for r in in_refs if r is not None), None)
            out_ref = None if base is None else (base[0], base[1], False)
        if out_ref is not None:
            for o in _tensors(out):
                refs[id(o)] = out_ref
                self.keep.append(o)
        return out


@functools.cache
def _mode() -> Any:
    """The torch function mode a run records under (one class, made on first use)."""
    from torch.overrides import TorchFunctionMode

    class _Record(TorchFunctionMode):
        def __init__(self, run: _Run) -> None:
            super().__init__()
            self.run = run

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return self.run.call(func, args, kwargs or {})

    return _Record


def _record(fn: Callable[..., Any], t: Any, kwargs: dict[str, Any], side: tuple[str, ...] = (), numbers: bool = False) -> _Run:
    """``fn(t, **kwargs)``'s user-level ops with their data flow (see :class:`TemplateOp`)."""
    run = _Run(t, side, numbers)
    with _mode()(run):
        fn(t, **kwargs)
    return run


@functools.cache
def _runs(spellings: tuple[Spelling, ...]) -> tuple[tuple[tuple[TemplateOp, ...], Mapping[str, Any], Spelling], ...]:
    """Every spelling choice run once on float32 examples, and once more on bfloat16 ones where
    a cast copied nothing: its ops, its choice and its spelling. Derived once per process."""
    import torch

    from neuronscope.events import gc_paused

    found: list[tuple[tuple[TemplateOp, ...], Mapping[str, Any], Spelling]] = []
    threads = torch.get_num_threads()
    # One thread: on a busy machine a parallel op (softmax) waited milliseconds for its workers
    # on these tiny tensors, hundreds of times over.
    torch.set_num_threads(1)
    try:
        with torch.no_grad(), gc_paused():
            t32, t16 = examples(torch.float32), examples(torch.bfloat16)
            for spelling in spellings:
                for choice in spelling.variants():
                    run = _record(spelling.fn, t32, choice, spelling.side, spelling.exact_numbers)
                    found.append((tuple(run.ops), MappingProxyType(choice), spelling))
                    if run.cast_skipped:
                        run = _record(spelling.fn, t16, choice, spelling.side, spelling.exact_numbers)
                        found.append((tuple(run.ops), MappingProxyType(choice), spelling))
    finally:
        torch.set_num_threads(threads)
    return tuple(run for run in found if run[0])


def recorded_ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[str]:
    """The user-level ops a profiler would record for ``fn(t, **kwargs)``, in order, named
    as :func:`~neuronscope.analysis.opgraph.short_name` names them; views and casts that copied
    nothing left out (they are no op in a trace's op order)."""
    (t,) = args
    return [op.op for op in _record(fn, t, kwargs).ops]


@functools.cache
def op_orders(spellings: tuple[Spelling, ...]) -> Mapping[tuple[str, ...], tuple[bool, ...]]:
    """Every op order the spellings show, in float32 and bfloat16 (a cast that copies shows
    only in the second), with which of its ops are the idiom's."""
    found: dict[tuple[str, ...], tuple[bool, ...]] = {}
    for ops, _, _ in _runs(spellings):
        found.setdefault(tuple(op.op for op in ops), tuple(op.own for op in ops))
    return MappingProxyType(found)


@functools.cache
def templates(spellings: tuple[Spelling, ...]) -> tuple[tuple[tuple[TemplateOp, ...], Mapping[str, Any]], ...]:
    """Each distinct op graph the spellings run, with the choice that ran it, the most ops
    first: what the graph matcher looks for. Choices that run the same graph on the same
    shapes (a fused softmax's dim) cannot be told apart by a match: None there, not known."""
    found: dict[tuple[TemplateOp, ...], dict[str, Any]] = {}
    for ops, choice, _ in _runs(spellings):
        known = found.setdefault(ops, dict(choice))
        for k, v in choice.items():
            if known.get(k) != v:
                known[k] = None
    ordered = sorted(found.items(), key=lambda kv: -sum(op.own for op in kv[0]))
    return tuple((ops, MappingProxyType(choice)) for ops, choice in ordered)


#: An idiom's replacement: ``(t, **choice) -> (name, thunk)`` over the same example tensors
#: and choice as the spelling it replaces; None where torch has no eager one.
Replacement = Callable[..., tuple[str, Callable[[], Any]] | None]


def builder(spellings: tuple[Spelling, ...], replacement: Replacement) -> Callable[[Any, Any, Any], Builders]:
    """The verify builder of an idiom, from its declaration: the spelling choice whose op order
    is closest to the hint's ops (the spelling family captured: ``pow`` / ``rsqrt`` or
    ``sqrt`` / ``div``, the weight and bias the code applies...), run on the hint's input ``x``
    with the parameters the hint recorded, against the declared replacement."""
    import difflib

    def build(hint: Any, x: Any, device: Any) -> Builders:
        ops = [o.rsplit("::", 1)[-1] for o in hint.ops]
        ops = [o[:-1] if o.endswith("_") and not o.startswith("_") else o for o in ops]
        _, choice, spelling = max(
            _runs(spellings), key=lambda v: difflib.SequenceMatcher(None, [op.op for op in v[0]], ops, autojunk=False).ratio()
        )
        details = hint.details
        # A choice the hint recorded (a softmax's dim, a cross-entropy's loss) is the code's.
        choice = {k: (details[k] if k in details and details[k] in spelling.choices[k] else v) for k, v in choice.items()}
        params: dict[str, Any] = {}
        dim = details.get("dim")
        if isinstance(dim, int) and not isinstance(dim, bool) and -x.dim() <= dim < x.dim():
            params["dim"] = dim
        if details.get("correction"):
            params["correction"] = float(details["correction"])
        t = examples(x.dtype, x, device, **params)
        fused = replacement(t, **choice)
        return (lambda: spelling.fn(t, **choice)), (fused[1] if fused else None), (fused[0] if fused else None)

    return build


#: The op orders of every idiom, derived from the spellings and kept with the package, so that
#: reading a trace file needs no torch (importing it costs seconds): one line per order,
#: ``pattern<TAB>op op ...<TAB>own flags`` (1: the idiom's op, 0: a side op). Rebuilt by
#: ``python -m neuronscope.analysis.patterns``; a test checks it is what the spellings run.
ORDERS_FILE = Path(__file__).with_name("op_orders.txt")


def orders_text(derived: Mapping[str, Mapping[tuple[str, ...], tuple[bool, ...]]]) -> str:
    """The text of :data:`ORDERS_FILE` for ``derived`` (pattern -> its :func:`op_orders`)."""
    lines = [
        f"{name}\t{' '.join(order)}\t{''.join('1' if own else '0' for own in flags)}"
        for name, orders in derived.items()
        for order, flags in sorted(orders.items())
    ]
    return "\n".join(lines) + "\n"


@functools.cache
def kept_orders() -> Mapping[str, Mapping[tuple[str, ...], tuple[bool, ...]]]:
    """The op orders :data:`ORDERS_FILE` keeps, by pattern (empty where it is missing)."""
    found: dict[str, dict[tuple[str, ...], tuple[bool, ...]]] = {}
    try:
        text = ORDERS_FILE.read_text()
    except OSError:
        return MappingProxyType({})
    for line in text.splitlines():
        name, ops, flags = line.split("\t")
        found.setdefault(name, {})[tuple(ops.split())] = tuple(c == "1" for c in flags)
    return MappingProxyType({name: MappingProxyType(orders) for name, orders in found.items()})


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


class Orders:
    """The op orders of one idiom, as the op-order matcher asks about them."""

    def __init__(self, orders: Mapping[tuple[str, ...], tuple[bool, ...]]) -> None:
        self.orders = orders
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

    def search(self, tokens: list[str], i: int) -> tuple[int, int] | None:
        """The first order at ``tokens[i]`` or after, as (start, end of the longest there)."""
        firsts = self.firsts
        for p in range(i, len(tokens)):
            if tokens[p] in firsts and (end := self.longest_at(tokens, p)) is not None:
                return p, end
        return None
