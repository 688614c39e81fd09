"""The graph matcher derived from an idiom's declared spellings: one for every idiom it serves.

Each spelling's op graph (:func:`~.spelling.templates`: its ops, and which op's output or which
example tensor each takes) is looked for in a capture's op graph, anchored at the template's
last op and walked back through the producers of its inputs:

- an op of the template is an op of the same name whose dimensioned inputs are, in order (either
  order for ``add`` and ``mul``), what the template's are;
- an example tensor of the spelling (``x``, ``cos``) is one value of the capture, the same
  wherever the template takes it (a view of it, such as ``x[..., :d]``, is of its storage),
  and different example tensors are different values (``x * silu(x)`` is no GLU: its ``up``
  would be its ``x``) but those the spellings declare shared (attention's q, k and v);
- a side tensor (attention's mask, a GLU's up projection) is any input, other than the
  example tensors' values;
- a number the spelling writes is the idiom's, among the user's op's where they were recorded
  (``pow(2)``: ``x.pow(3)`` is no RMSNorm), but a named parameter (:func:`~.spelling.named`:
  an eps, a dim), which is the code's;
- shapes relate to ``x`` as the spelling's did, over ``x``'s last dim or, where the spelling's
  dim is the code's (:attr:`~.spelling.Spelling.any_dim`), another moved last (a per-row
  statistic is ``x`` with its reduced dim 1: a sum over another dim, or over two, is another
  template or none, or over that dim for such a spelling: a channels-first norm; an example tensor the
  spelling declares broadcast, such as rotary's ``cos``, is not checked, one it declares a
  vector, such as a norm's weight, is ``[d]`` or broadcast onto ``x``, its shape said where
  it is not ``[d]``: :data:`~.shapes.VECTOR_SHAPES`), and an op's output
  the template takes as it is is not read through a view there (``e.sum(-2).transpose(...)``
  has a per-row statistic's shape on a square ``x``, not its dims);
- a slot (:func:`~.spelling.elementwise_slot`: attention's scale and mask between its scores and
  its softmax) is a chain of up to :data:`MAX_SLOT_OPS` ops, each one the slot takes, from what
  the slot takes to what reads it, each op taking the chain through one dimensioned input.

What a match says (``details``) comes from the spelling choice that ran the template.
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from neuronscope.analysis.opgraph import VIEW_OPS, OpGraph, OpNode, TensorArg
from neuronscope.analysis.patterns.base import Match, root_value
from neuronscope.analysis.patterns.kept import COMMUTATIVE, kept_templates
from neuronscope.analysis.patterns.shapes import VECTOR_SHAPES, dim_last, dims_to_try, is_plain_vector, named_dims, shape_fits
from neuronscope.analysis.patterns.spelling import READ_PARAMETERS, SLOT, Spelling, TemplateOp, relation_of, templates

__all__ = ["MAX_SLOT_OPS", "graph_matcher", "read_elsewhere"]

#: Most ops a slot's chain holds (attention's: a scale, a bias, a mask and a cast).
MAX_SLOT_OPS = 4


class _Template(NamedTuple):
    """A spelling's op graph as the walk reads it, with what it checks derived once."""

    ops: tuple[TemplateOp, ...]
    choice: Mapping[str, Any]
    #: per op, per argument: how it relates to ``x`` (:func:`~.spelling.relation_of`)
    relations: tuple[tuple[str, ...], ...]
    #: per op: the ops a slot takes; None for an op of the idiom
    takes: tuple[frozenset[str] | None, ...]
    #: how many ops a walk assigns (a slot's are chained)
    own: int


def _template(ops: tuple[TemplateOp, ...], choice: Mapping[str, Any], declared: Spelling) -> _Template:
    takes = tuple(frozenset(op.op[len(SLOT) :].split(",")) if op.op.startswith(SLOT) else None for op in ops)
    return _Template(
        ops,
        choice,
        tuple(tuple(relation_of(declared, op.op, ref, shape) for ref, shape in zip(op.args, op.shapes)) for op in ops),
        takes,
        sum(op.own and t is None for op, t in zip(ops, takes)),
    )


def _feeds(ops: tuple[TemplateOp, ...]) -> frozenset[str]:
    """The ops of the idiom (a slot's aside) whose outputs the template's last op takes."""
    return frozenset(ops[r[1]].op for r in ops[-1].args if r[0] == "op" and not ops[r[1]].op.startswith(SLOT))


def _assigned(ops: tuple[TemplateOp, ...]) -> Counter[str]:
    """How many ops of each name a walk of ``ops`` assigns a capture's op to (those it reaches
    from the last through the ops' inputs, a slot's chain aside): each a distinct op of that
    name, so a graph with fewer holds no match of the template."""
    need: Counter[str] = Counter()
    todo, seen = [len(ops) - 1], set()
    while todo:
        j = todo.pop()
        if j in seen:
            continue
        seen.add(j)
        if not ops[j].op.startswith(SLOT):
            need[ops[j].op] += 1
        todo.extend(ref for kind, ref, _ in ops[j].args if kind == "op")
    return need


class _Templates:
    """An idiom's templates by where they can be anchored, each derived (:func:`_template`)
    only once a graph holds every op a walk of it assigns: a first capture derives the
    templates of the idioms its ops can make, not all of them."""

    def __init__(self, pattern: str, spellings: tuple[Spelling, ...], declared: Spelling) -> None:
        self.pattern, self.spellings, self.declared = pattern, spellings, declared
        #: by last op, largest first: (the template's ops, its choice)
        self.by_last: dict[str, list[tuple[tuple[TemplateOp, ...], Mapping[str, Any]]]] | None = None
        self.derived: dict[int, _Template] = {}  # by id of the template's ops, kept in by_last
        # By id of the template's ops, alike: what a graph must hold there (see _fits).
        self.feeds: dict[int, frozenset[str]] = {}
        self.assigned: dict[int, Counter[str]] = {}
        # The graph last matched: its ops by name, and by anchor (its op, its dimensioned
        # inputs, the ops that made them) the templates whose last op takes as many inputs,
        # made by those ops. Anchors repeat these few keys, and an idiom has a hundred
        # templates (a norm's). One value, replaced whole: a thread matching another graph
        # replaces it, never changes what this one reads.
        self.graph: tuple[weakref.ref[OpGraph], Counter[str], dict[tuple[str, int, frozenset[str]], list[_Template]]] | None = None

    def at(self, g: OpGraph, n: OpNode) -> list[_Template]:
        """The templates that may be found anchored at ``n``, largest first."""
        if self.by_last is None:  # read (or derived) on first use
            by_last: dict[str, list[tuple[tuple[TemplateOp, ...], Mapping[str, Any]]]] = {}
            for ops, choice in kept_templates().get(self.pattern) or templates(self.spellings):
                by_last.setdefault(ops[-1].op, []).append((ops, choice))
            self.by_last = by_last
        if n.op not in self.by_last:
            return []
        graph = self.graph
        if graph is None or graph[0]() is not g:
            graph = self.graph = (weakref.ref(g), Counter(m.op for m in g.nodes), {})
        _, present, candidates = graph
        big = n.big_inputs()
        key = (n.op, len(big), frozenset(g.nodes[p].op for k in big if (p := n.producers[k]) >= 0))
        if key not in candidates:
            candidates[key] = [
                self._derive(ops, choice)
                for ops, choice in self.by_last[n.op]
                if len(ops[-1].args) == key[1] and self._fits(ops, key[2], present)
            ]
        return candidates[key]

    def _fits(self, ops: tuple[TemplateOp, ...], made: frozenset[str], present: Counter[str]) -> bool:
        """Whether ``ops`` may be found at an anchor whose inputs the ops ``made`` made, in a
        graph with ``present`` ops of each name: the ops making its last op's inputs are among
        those (:func:`_feeds`), and the graph holds every op a walk assigns (:func:`_assigned`).
        Each is derived on first use, in that order, and a template (:meth:`_derive`) only
        where both hold: the first capture of a small transformer's forward derives what a
        walk assigns for 100 of the 399 kept templates, where it derived all. Only the names
        a template needs are looked up (``need <= present`` walked every name of the graph)."""
        feeds = self.feeds.get(id(ops))
        if feeds is None:
            feeds = self.feeds[id(ops)] = _feeds(ops)
        if not feeds <= made:
            return False
        assigned = self.assigned.get(id(ops))
        if assigned is None:
            assigned = self.assigned[id(ops)] = _assigned(ops)
        return all(present[name] >= count for name, count in assigned.items())

    def _derive(self, ops: tuple[TemplateOp, ...], choice: Mapping[str, Any]) -> _Template:
        if id(ops) not in self.derived:
            self.derived[id(ops)] = _template(ops, choice, self.declared)
        return self.derived[id(ops)]


class _Walk:
    """One attempt to find a template anchored at a node."""

    def __init__(self, g: OpGraph, template: _Template, shared: tuple[str, ...]) -> None:
        self.g, self.ops, self.template, self.shared = g, template.ops, template, shared
        self.assign: dict[int, OpNode] = {}
        self.bound: dict[str, list[Any]] = {}  # name -> [value, impl or None, TensorArg]
        self.sides: list[tuple[Any, int]] = []
        self.shapes: list[tuple[str, tuple[int, ...]]] = []  # (the template's relation to x, the capture's shape)
        self.chained: list[OpNode] = []  # the ops that fill the slots
        self.filled: dict[int, OpNode | None] = {}  # slot -> the op that makes its value

    def _state(self) -> tuple[Any, ...]:
        return dict(self.assign), {k: list(v) for k, v in self.bound.items()}, list(self.sides), list(self.shapes), list(self.chained), dict(self.filled)

    def _restore(self, state: tuple[Any, ...]) -> None:
        self.assign, self.bound, self.sides, self.shapes, self.chained, self.filled = state

    def taken(self, node: OpNode) -> bool:
        return any(n is node for n in (*self.assign.values(), *self.chained))

    def op(self, j: int, node: OpNode) -> bool:
        if j in self.assign:
            return self.assign[j] is node
        t = self.ops[j]
        if node.op != t.op or not node.writes or self.taken(node):
            return False
        big = node.big_inputs()
        if len(big) != len(t.args) or not _same_numbers(t.consts, node):
            return False
        for order in (big, big[::-1]) if node.op in COMMUTATIVE and len(big) == 2 else (big,):
            state = self._state()
            self.assign[j] = node
            if all(self.arg(ref, node, k, rel) for ref, k, rel in zip(t.args, order, self.template.relations[j])):
                return True
            self._restore(state)
        return False

    def arg(self, ref: tuple[str, Any, bool], node: OpNode, k: int, relation: str) -> bool:
        kind, name, direct = ref
        self.shapes.append((relation, node.inputs[k].sizes))
        if kind == "op" and self.template.takes[name] is not None:
            return self.slot(name, node, k)
        if kind == "op":
            p = self.g.producer(node, k)
            if p is None or (direct and any(c < node.index and self.g.nodes[c].op in VIEW_OPS for c in p.consumers)):
                return False
            return self.op(name, p)
        value, impl = root_value(self.g, node, k), node.inputs[k].impl
        if kind == "side":
            self.sides.append((value, impl))
            return True
        b = self.bound.get(name)
        if b is None:
            self.bound[name] = [value, impl if direct else None, node.inputs[k]]
            return True
        if b[0] != value:
            return False
        if direct:
            if b[1] is None:
                b[1] = impl
            elif b[1] != impl:
                return False
        return True

    def slot(self, j: int, node: OpNode, k: int) -> bool:
        """Slot ``j`` makes input ``k`` of ``node``: filled once, read as often as the template
        reads it (a written-out softmax reads its scores twice)."""
        made_by = self.g.producer(node, k)
        if j in self.filled:
            return made_by is self.filled[j]
        if not self.chain(j, node, k, MAX_SLOT_OPS):
            return False
        self.filled[j] = made_by
        return True

    def chain(self, j: int, node: OpNode, k: int, hops: int) -> bool:
        """Slot ``j`` makes input ``k`` of ``node``: that input is what the slot takes, or is
        made by an op the slot takes from what the slot takes, and so on, ``hops`` ops at most;
        read through views or not (code reshapes around them as it likes)."""
        slot, takes, state = self.ops[j], self.template.takes[j] or frozenset(), self._state()
        if all(self.arg((kind, name, False), node, k, rel) for (kind, name, _), rel in zip(slot.args, self.template.relations[j])):
            return True
        self._restore(state)
        p = self.g.producer(node, k)
        if hops == 0 or p is None or p.op not in takes or not p.writes or self.taken(p):
            return False
        for pk in p.big_inputs():
            state = self._state()
            self.chained.append(p)
            if self.chain(j, p, pk, hops - 1):
                return True
            self._restore(state)
        return False

    def distinct(self) -> bool:
        """Different example tensors are different values (but those the spelling declares
        shared), and a side tensor none of them."""
        seen = [(b[0], b[1]) for name, b in self.bound.items() if name not in self.shared]
        return len(set(seen)) == len(seen) and not any(s in seen for s in self.sides)

    def shaped(self, any_dim: bool) -> int | None:
        """The dim of the capture's ``x`` over which every shape the template relates to its
        ``x`` relates so to the capture's, that dim moved last (:func:`~.shapes.dim_last`):
        the last, or, ``any_dim``, another the code chose; -1 where ``x`` is not bound (no
        shape to check); None: over none."""
        named: dict[str, int] = {}  # q @ k^T's S is the weights' and v's: one size each
        for rel, cs in self.shapes:
            if any(named.setdefault(name, size) != size for name, size in zip(named_dims(rel), cs[-2:])):
                return None
        x = self.bound.get("x")
        if x is None:
            return -1
        sizes = x[2].sizes
        for dim in dims_to_try(sizes, any_dim):
            moved = dim_last(sizes, len(sizes), dim)
            if all(shape_fits(rel, dim_last(cs, len(sizes), dim), moved) for rel, cs in self.shapes):
                return dim
        return None

    def vectors_outside(self, declared: Spelling) -> bool:
        """Each declared vector is the user's: one tensor the call did not compute from others
        (a parameter, at most cast, viewed or offset there: Gemma's ``1 + weight``), kept when
        the fused call replaces the match's ops. Not one the match's own ops make: a norm's
        statistic broadcasts onto ``x`` as a weight does (``x * r * r``, ``(x - m) / s * s + m``:
        no norm at all); nor one the call computes from several tensors, its activations:
        AdaLN's per-sample scale, a Linear of the conditioning, has a weight's shape at batch 1."""
        own = {n.index for n in (*self.assign.values(), *self.chained)}
        for todo in ([b[0]] for name, b in self.bound.items() if name in declared.vectors):
            leaves: set[int] = set()
            seen: set[int] = set()
            while todo and len(leaves) < 2:
                key, p = todo.pop()
                if p in own:
                    return False
                if p < 0:
                    leaves.add(key)
                elif p not in seen:
                    seen.add(p)
                    todo.extend(map(self.g.nodes[p].value, self.g.nodes[p].big_inputs()))
            if len(leaves) > 1:
                return False
        return True

    def over(self, declared: Spelling, dim: int) -> dict[str, Any]:
        """The dim the idiom reduces where it is not ``x``'s last, and the declared vectors
        bound to a tensor of another shape than a vector of that dim alone (one broadcast over
        some of ``x``'s dims), as :data:`~.shapes.VECTOR_SHAPES` says them; {}: neither."""
        x = self.bound.get("x")
        sizes = x[2].sizes if x is not None else ()
        moved = {"dim": dim} if sizes and dim != len(sizes) - 1 and dim != -1 else {}
        shapes = {
            n: list(b[2].sizes)
            for n, b in self.bound.items()
            if n in declared.vectors and not (sizes and is_plain_vector(b[2].sizes, sizes, dim))
        }
        return {**moved, VECTOR_SHAPES: shapes} if shapes else moved

    def named(self) -> dict[str, float]:
        """The named parameters' values (an eps), read from the ops that take them where an
        observation recorded as many of the user's numbers as the spelling's op takes."""
        found: dict[str, float] = {}
        for j, node in self.assign.items():
            consts = self.ops[j].consts
            if len(node.consts) == len(consts):
                for name, value in zip(consts, node.consts):
                    if name in READ_PARAMETERS:
                        found.setdefault(str(name), value)
        return found


def _same_numbers(template: tuple[float | str, ...], node: OpNode) -> bool:
    """Each of the spelling's own numbers (not a named parameter) is among the user's op's:
    the Python numbers an observation recorded, else the scalars the profiler recorded with
    the shapes (``pow``'s 2: ``x.pow(3)`` is no RMSNorm); 0.1% apart at most. Where neither
    recorded a number (a number the profiler wrapped as a tensor), not checked."""
    own = [a for a in template if not isinstance(a, str)]
    recorded = node.consts or [v for v in node.scalars if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return not own or not recorded or all(any(math.isclose(a, b, rel_tol=1e-3) for b in recorded) for a in own)


#: The backward pass's ops, which read what autograd saved whatever the forward does.
_BACKWARD = "autograd::engine::"


def read_elsewhere(g: OpGraph, nodes: list[OpNode], out: OpNode) -> bool:
    """Does an op outside the match read a value the match makes before its output ``out``
    (attention weights summed again, Nystromformer's kernel read six times more)? The fused
    call makes no such value, and the code would still need it. Read through what copies
    nothing (a view, a cast to the dtype it has, dropout in eval). Not a reader inside the
    library composite the match runs in (``nn.MultiheadAttention``'s weights averaged for
    ``need_weights=True``): its switch, not the user's code, decides that one."""
    own = {m.index for m in nodes}
    todo = [c for m in nodes if m is not out for c in m.consumers]
    seen: set[int] = set()
    while todo:
        c = todo.pop()
        if c in own or c in seen or g.nodes[c].name.startswith(_BACKWARD) or (out.within and g.nodes[c].within == out.within):
            continue
        seen.add(c)
        if g.nodes[c].writes:
            return True
        todo.extend(g.nodes[c].consumers)
    return False


def graph_matcher(
    pattern: str, spellings: tuple[Spelling, ...], params: Callable[[Mapping[str, Any], list[OpNode]], dict[str, Any] | None]
) -> Callable[[OpGraph, OpNode], Match | None]:
    """The ``match(graph, node)`` of an idiom: its largest spelling template anchored at
    ``node``, as a :class:`~.base.Match` of ``pattern`` whose ``x`` is the capture's tensor for
    the spelling's ``x`` and whose params are the named parameters the matched ops took (:meth:`_Walk.named`) and
    ``params(choice, nodes)``. The templates are those
    kept with the package (:data:`~.kept.TEMPLATES_FILE`), else derived on first use."""

    def match(g: OpGraph, n: OpNode) -> Match | None:
        """The largest template at ``n``, or at an op reading its output whose template holds
        it (a spelling's optional last ops: a loss after a log-softmax), and so on."""
        found = at(g, n)
        while found is not None:
            last = found.nodes[-1]
            longer = (at(g, g.nodes[c]) for c in sorted(set(last.consumers)))
            better = next((m for m in longer if m is not None and last in m.nodes and len(m.nodes) > len(found.nodes)), None)
            if better is None:
                return found
            found = better
        return None

    # What the idiom's spellings declare of their example tensors, together: one walk serves them all.
    declared = Spelling(
        lambda t: None,
        broadcast=tuple(n for s in spellings for n in s.broadcast),
        vectors=tuple(n for s in spellings for n in s.vectors),
        per_row=tuple(n for s in spellings for n in s.per_row),
        shared=tuple(n for s in spellings for n in s.shared),
        any_dim=any(s.any_dim for s in spellings),
    )
    known = _Templates(pattern, spellings, declared)

    def at(g: OpGraph, n: OpNode) -> Match | None:
        for template in known.at(g, n):
            walk = _Walk(g, template, declared.shared)
            if not (walk.op(len(template.ops) - 1, n) and len(walk.assign) == template.own and walk.distinct()):
                continue
            dim = walk.shaped(declared.any_dim)
            if dim is not None and walk.vectors_outside(declared):
                nodes = sorted([*walk.assign.values(), *walk.chained], key=lambda m: m.index)
                said = params(template.choice, nodes)
                if said is None:  # its recorded numbers say another computation
                    continue
                x: TensorArg | None = walk.bound["x"][2] if "x" in walk.bound else None
                return Match(pattern, nodes, x, {**walk.named(), **said, **walk.over(declared, dim)})
        return None

    match.derived_from = spellings  # type: ignore[attr-defined]  # what keeping its templates runs
    return match
