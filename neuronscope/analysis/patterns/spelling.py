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
from types import MappingProxyType, SimpleNamespace
from typing import Any, NamedTuple, TypeVar, cast

from neuronscope.analysis.opgraph import MAYBE_ALIAS_OPS, VIEW_OPS
from neuronscope.analysis.patterns.shapes import EXAMPLE_DIM, MATRIX_DIMS, ShapeSig, shape_relation, vector_shape

__all__ = [
    "OWN", "READ_PARAMETERS", "SIDE", "SLOT", "TAKES_BUILT",
    "OrderShapes", "Spelling", "SpellingRun", "TemplateOp",
    "elementwise_slot",
    "examples",
    "merged_choice",
    "named",
    "op_orders",
    "order_shapes",
    "recorded_ops",
    "relation_of",
    "spelling_runs",
    "templates",
    "vector_choices",
]


@dataclass(frozen=True, eq=False)  # by identity: the derived orders are cached per spelling
class Spelling:
    """One way code writes an idiom: ``fn(t, **choice)`` over example tensors ``t`` (see
    :func:`examples`), run under every combination of ``choices`` (name -> values).

    ``side`` names example tensors whose own computations run amid the idiom but are not part
    of it (attention's ``mask == 0``, a GLU's up projection): a trace match spans their ops and
    leaves them out, as the live matchers, following data flow, never reach them.

    The numbers it writes are the idiom's (GELU's 0.044715, RMSNorm's ``pow(2)``), but those
    it takes as named parameters (``t.eps``, ``t.dim``, :func:`named`): the code's to choose."""

    fn: Callable[..., Any]
    choices: Mapping[str, tuple[Any, ...]] = field(default_factory=lambda: MappingProxyType({}))
    side: tuple[str, ...] = ()
    #: Example tensors the code may broadcast against ``x`` (rotary's ``cos`` and ``sin``); any
    #: other is shaped in a capture as in the spelling (a GLU's ``up`` is ``gate``'s shape: a
    #: per-channel statistic times a GELU is no GLU).
    broadcast: tuple[str, ...] = ()
    #: Example tensors of ``x``'s last dim (a norm's weight and bias): in a capture, ``[d]`` or
    #: any tensor broadcast onto its ``x`` (a per-head ``[heads, d]``: :func:`~.shapes.is_vector`),
    #: not one of ``x``'s own size.
    vectors: tuple[str, ...] = ()
    #: Example tensors of one element per row of ``x`` (a loss's target): ``[N]`` of ``[N, C]``.
    per_row: tuple[str, ...] = ()
    #: Example tensors code may pass as one value, which the graph matcher then does not tell
    #: apart (attention's q, k and v: views of one packed projection, or one input).
    shared: tuple[str, ...] = ()
    #: Example tensors code may build or compute in place, from nothing of the idiom (a causal mask,
    #: ``torch.tril(torch.ones(T, T)) == 0``) or from other inputs (a position bias gathered from its
    #: table, attention's ``v = self.value(x)`` after the softmax): in op order, where shapes were
    #: recorded, the ops making one (a factory op, then ``tril``, ``eq``...; a few ops none of which
    #: reads the idiom's tensor) may stand right before the idiom's op that takes it in, left out.
    built: tuple[str, ...] = ()
    #: Whether ``t.dim`` (reduced; its ``vectors``' dim) is the code's: the idiom over another dim where the capture's
    #: shapes, it moved last (:func:`~.shapes.dim_last`: [C, 1, 1] of [N, C, H, W] is [C]), relate as the spelling's.
    any_dim: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", MappingProxyType(dict(self.choices)))  # read-only, as the record is

    def variants(self) -> Iterable[dict[str, Any]]:
        names = list(self.choices)
        for values in itertools.product(*(self.choices[n] for n in names)):
            yield dict(zip(names, values))


#: The named parameters a spelling reads from ``t`` besides tensors, at the values a derived
#: op order does not depend on: ``verify`` sets the ones a hint recorded (its ``details``).
PARAMETERS = MappingProxyType({"eps": 1e-6, "dim": -1, "correction": 0})
#: The named parameters a match reads from the user's numbers into what it says (an eps, a correction:
#: the replacement takes them as the code wrote them). A dim is what the shapes say; a scale follows a head dim.
READ_PARAMETERS = ("eps", "correction")


_Number = TypeVar("_Number", int, float)


class _NamedFloat(float):
    name = ""


class _NamedInt(int):
    name = ""


def named(name: str, value: _Number) -> _Number:
    """``value`` as the spelling's named parameter ``name`` (a dim a choice picks, a scale of
    ``d ** -0.5``): a number the code chooses, where every other number a spelling writes is
    the idiom's own (GELU's 0.044715, RMSNorm's ``pow(2)``). The op it reaches records which
    of its numbers is that parameter (:attr:`TemplateOp.consts`)."""
    made = (_NamedInt if isinstance(value, int) else _NamedFloat)(value)
    made.name = name
    return cast(_Number, made)


#: The :data:`PARAMETERS` as the spellings run on them (``t.eps``, ``t.dim``).
_NAMED = MappingProxyType({name: named(name, value) for name, value in PARAMETERS.items()})


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
    vector = vector_shape(tuple(x.shape), params.get("dim", PARAMETERS["dim"]))  # [d], or [C, 1, 1] of dim 1

    def r(*shape: int) -> Any:
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    q, k, v = (r(2, 2, MATRIX_DIMS[a], MATRIX_DIMS[b]) for a, b in ("LE", "SE", "SD"))  # no two dims alike
    rows, scores = max(1, x.numel() // max(d, 1)), (MATRIX_DIMS["L"], MATRIX_DIMS["S"])
    return SimpleNamespace(
        x=x, weight=r(*vector), bias=r(*vector), up=r(*x.shape), cos=r(*x.shape), sin=r(*x.shape), proj=r(d, d),
        q=q, k=k, v=v, mask=r(2, 2, *scores), bool_mask=torch.ones(2, 2, *scores, dtype=torch.bool, device=device),
        target=torch.randint(0, d, (rows,), generator=g).to(device),
        **{**PARAMETERS, **params},
    )


#: Python-level callables named otherwise than the op the profiler records for them, or that
#: run two user-level ops (``1 / t`` is ``reciprocal`` then ``mul``); () records nothing.
_OP_NAMES = MappingProxyType({
    "truediv": ("div",), "rtruediv": ("reciprocal", "mul"), "rdiv": ("reciprocal", "mul"), "radd": ("add",), "rmul": ("mul",),
    "rpow": ("pow",), "rmatmul": ("matmul",), "iadd": ("add",), "imul": ("mul",), "isub": ("sub",),
    "itruediv": ("div",), "float": ("to",), "half": ("to",), "bfloat16": ("to",), "double": ("to",),
    "nll_loss": ("nll_loss_nd",), "norm": ("linalg_vector_norm",), "getitem": (), "setitem": (), "get": (),
})


def _op_names(func: Any, args: Any = ()) -> tuple[str, ...]:
    name = getattr(func, "__name__", "") or ""
    base = name.strip("_")
    if base == "getitem" and len(args) > 1 and _tensors(args[1]):
        return ("index",)  # ``p[rows, target]``: indexing by tensors copies, as aten::index
    return _OP_NAMES.get(base, (base,) if base else ())  # ``mul_`` in place: ``mul``, as short_name names it


def _storages(value: Any) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in _tensors(value) if t.numel()}


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
    #: the Python numbers of the call, as an observation records them: the idiom's own, but
    #: a named parameter (:func:`named`), written as its name, which the user's op may take at
    #: any value and where an observation recorded the user's numbers is read
    consts: tuple[float | str, ...] = ()


class _Run:
    """What one run of a spelling recorded: its ops, and whether a cast copied nothing (then
    its op order in another dtype may differ: the cast would copy)."""

    def __init__(self, t: Any, side: tuple[str, ...], built: tuple[str, ...] = ()) -> None:
        import torch

        self.ops: list[TemplateOp] = []
        self.cast_skipped = False
        self.refs: dict[int, tuple[str, Any, bool]] = {}
        #: ops taking in a ``built`` side tensor (maybe through views, side ops); those tensors and what side ops made of them
        self.entries: set[int] = set()
        self.made = {id(value) for name, value in vars(t).items() if name in built}
        #: per :func:`elementwise_slot` call: its first op, the op after its last, what it took
        self.slots: list[tuple[int, int, tuple[str, Any, bool] | None, tuple[int, ...]]] = []
        #: the ops that return more than one tensor (``var_mean``): their outputs share one ref
        self.several: set[int] = set()
        self.keep: list[Any] = []  # alive, so that no id is reused by a tensor made later
        for name, value in vars(t).items():
            if isinstance(value, torch.Tensor):
                self.refs[id(value)] = ("side" if name in side else "in", name, True)
                self.keep.append(value)

    def call(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        out = func(*args, **kwargs)
        refs, ops = self.refs, self.ops
        names = _op_names(func, args)
        inputs = _tensors((args, kwargs))
        in_refs = [refs.get(id(a)) for a in inputs]
        # made from side tensors alone, or from none (``torch.arange(n)``, a ``torch.full`` floor:
        # the idiom's own where an op of it takes it, as rows to pick: see below)
        is_side = all(r is not None and (r[0] == "side" or (r[0] == "op" and not ops[r[1]].own)) for r in in_refs)
        takes_made = any(id(a) in self.made for a in inputs)
        made = _storages(out)
        recorded = bool(names and made) and names[0] not in VIEW_OPS
        if recorded and names[0] in MAYBE_ALIAS_OPS and made <= _storages(inputs):
            recorded = False  # a cast to the dtype it had, a reshape that viewed: no op in op order
            self.cast_skipped = True
        out_ref: tuple[str, Any, bool] | None
        if recorded:
            first = len(ops)
            taken = [(r, tuple(a.shape)) for r, a in zip(in_refs, inputs) if r is not None and a.dim()]
            for j in () if is_side else {r[1] for r, _ in taken if r[0] == "op"}:
                ops[j] = ops[j]._replace(own=True)
            # The call's numbers as the observation pass records them (capture/observe.py), but
            # torch's own keywords (F.softmax's ``_stacklevel``): no number the spelling writes.
            given = (*args, *(v for k, v in kwargs.items() if not k.startswith("_")))
            numbers = [a for a in given if isinstance(a, Real) and a.__class__ is not bool]
            nums = tuple(a.name if isinstance(a, (_NamedFloat, _NamedInt)) else float(a) for a in numbers)
            for i, name in enumerate(names):  # ``1 / t``: reciprocal, then mul
                if i == 0:
                    args_ = tuple(r for r, _ in taken)
                    ops.append(TemplateOp(name, not is_side, args_, tuple(s for _, s in taken), nums))
                else:
                    ops.append(TemplateOp(name, not is_side, (("op", first + i - 1, True),), (tuple(out.shape),)))
            out_ref = ("side", "", False) if is_side and inputs else ("op", len(ops) - 1, True)
            if len(_tensors(out)) > 1:
                self.several.add(len(ops) - 1)
            if takes_made and not is_side:
                self.entries.add(first)
        else:  # a view, or no op: what its first tensor input is, seen through a view
            base = next((r for r in in_refs if r is not None), None)
            out_ref = None if base is None else (base[0], base[1], False)
        if out_ref is not None:
            for o in _tensors(out):
                refs[id(o)] = out_ref
                self.keep.append(o)
        if takes_made and (is_side or not recorded):
            self.made.update(id(o) for o in _tensors(out))
        return out

    def slot(self, x: Any, fn: Callable[[Any], Any]) -> Any:
        start, ref = len(self.ops), self.refs.get(id(x))
        out = fn(x)
        self.slots.append((start, len(self.ops), ref, tuple(x.shape)))
        self.refs[id(out)] = ("slot", len(self.slots) - 1, True)  # read after it: through the slot
        self.keep.append(out)
        return out


#: A graph template's slot op is named ``*`` and the ops it takes, joined by ``,``.
SLOT = "*"


def elementwise_slot(t: Any, x: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn(x)``, where a spelling writes ops that code writes in any number and order between
    two of the idiom's own (attention's scale, mask and casts between its scores and softmax).
    Op orders keep the ops ``fn`` runs, as written; a graph template holds one slot op there
    instead (:data:`SLOT`), which the graph matcher fills with a chain of a few ops, each one
    that ``fn`` runs under some choice of the spelling, taking the chain through one of its
    dimensioned inputs (any others are side tensors: a mask, a bias). ``t``: the spelling's
    example tensors, which say whether a run records it."""
    run = getattr(t, "recording", None)
    return fn(x) if run is None else run.slot(x, fn)


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


def _record(fn: Callable[..., Any], t: Any, kwargs: dict[str, Any], side: tuple[str, ...] = (), built: tuple[str, ...] = ()) -> _Run:
    """``fn(t, **kwargs)``'s user-level ops with their data flow (see :class:`TemplateOp`)."""
    run = _Run(t, side, built)
    with _mode()(run):
        fn(SimpleNamespace(**vars(t), recording=run), **kwargs)
    return run


class SpellingRun(NamedTuple):
    """One run of a spelling choice: the choice, the spelling, and what :class:`_Run` recorded
    (its ops, its slots, the ops taking in a side tensor it may build in place, the ops that
    return more than one tensor)."""

    ops: tuple[TemplateOp, ...]
    choice: Mapping[str, Any]
    spelling: Spelling
    slots: tuple[Any, ...]
    entries: frozenset[int]
    several: frozenset[int]


@functools.cache
def spelling_runs(spellings: tuple[Spelling, ...]) -> tuple[SpellingRun, ...]:
    """Every spelling choice run once on float32 examples, and once more on bfloat16 ones where
    a cast copied nothing (see :data:`SpellingRun`). Derived once per process."""
    import torch

    from neuronscope.events import gc_paused

    found: list[SpellingRun] = []
    threads = torch.get_num_threads()
    # One thread: a parallel op (softmax) waited milliseconds for its workers on these tiny tensors.
    torch.set_num_threads(1)
    try:
        with torch.no_grad(), gc_paused():
            t32, t16 = examples(torch.float32, **_NAMED), examples(torch.bfloat16, **_NAMED)
            for spelling in spellings:
                for choice in spelling.variants():
                    for t in (t32, t16):
                        run = _record(spelling.fn, t, choice, spelling.side, spelling.built)
                        ops, slots, entries, several = tuple(run.ops), tuple(run.slots), frozenset(run.entries), frozenset(run.several)
                        found.append(SpellingRun(ops, MappingProxyType(choice), spelling, slots, entries, several))
                        if not run.cast_skipped:
                            break
    finally:
        torch.set_num_threads(threads)
    return tuple(run for run in found if run.ops)


def recorded_ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[str]:
    """The user-level ops a profiler would record for ``fn(t, **kwargs)``, in order, named
    as :func:`~neuronscope.analysis.opgraph.short_name` names them; views and casts that copied
    nothing left out (they are no op in a trace's op order)."""
    (t,) = args
    return [op.op for op in _record(fn, t, kwargs).ops]


#: What an op of an op order is (:func:`op_orders`): a side op, the idiom's own, or the idiom's
#: own taking in a side tensor code may build in place (:attr:`Spelling.built`).
SIDE, OWN, TAKES_BUILT = 0, 1, 2


@functools.cache
def op_orders(spellings: tuple[Spelling, ...]) -> Mapping[tuple[str, ...], tuple[int, ...]]:
    """Every op order the spellings show, in float32 and bfloat16 (a cast that copies shows
    only in the second), with what each of its ops is (:data:`SIDE`, :data:`OWN` or
    :data:`TAKES_BUILT`)."""
    found: dict[tuple[str, ...], tuple[int, ...]] = {}
    for run in spelling_runs(spellings):
        flags = tuple(TAKES_BUILT if i in run.entries else int(op.own) for i, op in enumerate(run.ops))
        found.setdefault(tuple(op.op for op in run.ops), flags)
    return MappingProxyType(found)


@functools.cache
def templates(spellings: tuple[Spelling, ...]) -> tuple[tuple[tuple[TemplateOp, ...], Mapping[str, Any]], ...]:
    """Each distinct op graph the spellings run, with the choice that ran it, the most ops
    first: what the graph matcher looks for. Choices that run the same graph on the same
    shapes (a fused softmax's dim) cannot be told apart by a match: None there, not known.
    A slot's ops are one slot op, taking every op the spellings run in that slot under any
    choice (their side ops aside)."""
    takes: dict[int, set[str]] = {}  # slot -> its ops
    for run in spelling_runs(spellings):
        for i, (a, b, _, _) in enumerate(run.slots):
            takes.setdefault(i, set()).update(op.op for op in run.ops[a:b] if op.own)
    found: dict[tuple[TemplateOp, ...], list[Mapping[str, Any]]] = {}
    for run in spelling_runs(spellings):
        names = [SLOT + ",".join(sorted(takes[i])) for i in range(len(run.slots))]
        found.setdefault(_slotted(run.ops, run.slots, names), []).append(run.choice)
    ordered = sorted(found.items(), key=lambda kv: -sum(op.own for op in kv[0]))
    return tuple((ops, MappingProxyType(merged_choice(choices))) for ops, choices in ordered)


def _slotted(ops: tuple[TemplateOp, ...], slots: tuple[Any, ...], names: list[str]) -> tuple[TemplateOp, ...]:
    """``ops`` with the ops of each slot replaced by one slot op named ``names[k]``, taking
    what the slot took; what read the slot's value reads the slot op."""
    out: list[TemplateOp] = []
    at: dict[tuple[str, int], int] = {}  # ("op", i) or ("slot", k) -> its index in out

    def ref(r: tuple[str, Any, bool]) -> tuple[str, Any, bool]:
        return ("op", at[r[0], r[1]], r[2]) if r[0] in ("op", "slot") else r

    for i in range(len(ops) + 1):
        for k, (a, _, r, shape) in enumerate(slots):
            if a == i:
                at["slot", k] = len(out)
                out.append(TemplateOp(names[k], True, (ref(r),) if r else (), (shape,) if r else ()))
        inside = next((k for k, (a, b, _, _) in enumerate(slots) if a <= i < b), None)
        if inside is not None:
            at["op", i] = at["slot", inside]
        elif i < len(ops):
            at["op", i] = len(out)
            out.append(ops[i]._replace(args=tuple(map(ref, ops[i].args))))
    return tuple(out)


def relation_of(spelling: Spelling, op: str, ref: tuple[str, Any, bool], shape: tuple[int, ...]) -> str:
    """How an argument of a spelling's op ``op`` relates to ``x``, for the tensor ``ref`` names
    (:class:`TemplateOp`): ``V`` a declared vector; ``.`` a declared broadcast tensor, a side one
    of no x-relative form (code broadcasts a mask as it likes), an einsum's (its equation names dims)."""
    if op == "einsum":
        return "."
    if ref[0] == "in" and ref[1] in spelling.vectors:
        return "V"
    if ref[0] == "in" and ref[1] in spelling.per_row and len(shape) == 1:
        return "R"
    relation = "." if ref[0] == "in" and ref[1] in spelling.broadcast else shape_relation(shape)
    return "." if ref[0] == "side" and relation.startswith(".") else relation


#: What a spelling's choice is for each way (:data:`ShapeSig`) an op order's ops can relate to
#: ``x``, by order: a value two choices that run it so disagree on is None, not known.
OrderShapes = Mapping[tuple[str, ...], Mapping[ShapeSig, Mapping[str, Any]]]


def merged_choice(choices: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One choice for several: their values where they agree, None where they do not."""
    merged: dict[str, Any] = {}
    for choice in choices:
        for k, v in choice.items():
            merged[k] = v if merged.get(k, v) == v else None
    return merged


@functools.cache
def order_shapes(spellings: tuple[Spelling, ...]) -> OrderShapes:
    """For every op order of :func:`op_orders`, how its ops' inputs relate to ``x`` in the
    spellings that run it, and which of them read one tensor: what the recorded shapes (and,
    in a live capture, storages) of an op-order match are checked against; each with the
    choice that ran it (what the match then says: a norm's weight, a softmax's dim)."""

    def arg(op: str, ref: tuple[str, Any, bool], shape: tuple[int, ...], spelling: Spelling, several: frozenset[int]) -> str:
        # An input by its name, an op's output by ``%`` and its place (not one of several: var_mean's
        # var and mean are two storages): two ops reading one tensor read one storage (kept.Orders.choice).
        relation = relation_of(spelling, op, ref, shape)
        if ref[0] == "in":
            return f"{relation}@{ref[1]}"
        return f"{relation}@%{ref[1]}" if ref[0] == "op" and ref[1] not in several else relation

    found: dict[tuple[str, ...], dict[ShapeSig, list[Mapping[str, Any]]]] = {}
    for run in spelling_runs(spellings):
        sig = tuple(
            tuple(arg(op.op, ref, shape, run.spelling, run.several) for ref, shape in zip(op.args, op.shapes)) if op.own else None
            for op in run.ops
        )
        found.setdefault(tuple(op.op for op in run.ops), {}).setdefault(sig, []).append(run.choice)
    return MappingProxyType({
        order: MappingProxyType({sig: MappingProxyType(merged_choice(choices)) for sig, choices in sigs.items()})
        for order, sigs in found.items()
    })


@functools.cache
def vector_choices(spellings: tuple[Spelling, ...]) -> frozenset[str]:
    """The choices that say whether the spelling reads a declared vector (a norm's weight or
    bias): op order alone cannot tell them (a multiply by a weight is a multiply), so a match
    whose shapes were not recorded does not know them."""
    reads: dict[tuple[int, str, tuple[tuple[str, Any], ...]], set[frozenset[str]]] = {}
    for run in spelling_runs(spellings):
        vectors = frozenset(r[1] for op in run.ops for r in op.args if r[0] == "in" and r[1] in run.spelling.vectors)
        for k in run.choice:  # the runs alike but for ``k``: do they read other vectors?
            rest = tuple(sorted((n, v) for n, v in run.choice.items() if n != k))
            reads.setdefault((id(run.spelling), k, rest), set()).add(vectors)
    return frozenset(k for (_, k, _), seen in reads.items() if len(seen) > 1)
