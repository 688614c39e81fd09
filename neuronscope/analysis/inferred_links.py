"""Inferred links: which op made each tensor input, guessed from storage pointers.

Used only where nothing better exists (a profiler the user ran with default options: no
tensor ids, no observation pass); hints built on these links say ``confidence="inferred"``
and claim no ``elementwise_chain``. How the guess works is in :func:`link_inferred`.

The allocator hands the addresses of dead tensors to new ones, so an op that makes a tensor
stays *pending* until its output turns up as an input, recognised by fitting the op's
predicted output (sizes and dtype from its inputs: broadcasting, reductions, matmul shapes;
:mod:`.predicted_outputs`).
Measured against exact linking on the test models, the inferred links agree edge for edge
except where pointers cannot tell: two equally shaped values made one after the other and
used in the order they were made come out swapped, and a tensor from outside the capture
first used right after an op whose output is never used may be taken for that output.
"""

from __future__ import annotations

import bisect
from typing import Any

from neuronscope.analysis import predicted_outputs as predicted
from neuronscope.analysis.opgraph import (
    MAYBE_ALIAS_OPS,
    VIEW_OPS,
    OpGraph,
    OpNode,
    copied,
    event_types,
)

__all__ = ["link_inferred"]

#: How many pending producers the inferred linking keeps. A tensor is nearly always first used
#: within a few ops of the op that made it; an op whose output is still unused after this many
#: newer producers almost surely returned it out of the capture.
PENDING_LIMIT = 64
#: How many of the newest pending producers an input is matched against, and how many
#: candidates it keeps: its producer is almost always among the last few ops that made a
#: tensor, and matching an op's inputs is a small exhaustive search that must stay cheap.
SCAN_DEPTH = 16
MAX_CANDIDATES = 3
#: A pending producer older than this many ops loses to any more recent one that fits: its
#: output has most likely left the capture unused (a returned value).
STALE_AFTER = 16
#: How many ops ahead an address-reuse claim looks for the claimed producer's output turning
#: up elsewhere: outputs are used within a few ops, and each op looked at costs time.
LOOKAHEAD = 6
#: A storage untouched for this many ops counts as new to that look ahead: in a loop over
#: layers the allocator hands out the same addresses again, a layer or more later.
FRESH_GAP = 32
#: Views assumed made by a ``split`` or ``unbind``, whose count the profiler does not record:
#: enough for a QKV split; each one never used only makes an address reuse on that storage
#: less likely to be recognised.
MAX_VIEWS_PER_SPLIT = 8

# Maybe-alias ops that return their input itself (same TensorImpl) when they do not copy;
# the others return a view.
_RETURN_SELF = MAYBE_ALIAS_OPS - {"reshape", "flatten"}


def _view_count(node: OpNode) -> int:
    """How many views a view op returns: ``chunk(n)`` n, ``split`` / ``unbind`` several."""
    if node.op == "chunk":
        return max(1, next((s for s in node.scalars if s.__class__ is int), 2))
    if node.op in ("split", "split_with_sizes", "unbind"):
        return MAX_VIEWS_PER_SPLIT
    return 1


def link_inferred(graph: OpGraph, events: list[Any]) -> None:
    """Link inputs by storage pointer, inferring each op's output (see the module docstring).

    At each op every input is *new* (a storage no op has shown, or shown with another dtype
    or fewer elements: a different tensor) or *seen*. A new input comes from a pending
    producer or from outside the capture. A seen one is the old tensor, unless its TensorImpl
    is one no view of the storage explains and a pending producer that ran after the old
    tensor's last use fits it: then the allocator gave the dead tensor's address to that
    producer's output. Either way a producer is not taken if its output is needed for new
    tensors turning up in the next few ops (``a.exp(); b.sin(); c.cos()``, all three used
    later: ``b`` is no output of ``exp``).

    An op's inputs and the pending producers are matched as a whole, preferring, in order:
    more new inputs explained; more reuses explained; producers in argument order (Python
    evaluates ``f(a(), b())`` left to right); reuses in later arguments (``x + linear(h)``:
    the newest output is the last argument); producers from the last :data:`STALE_AFTER`
    ops (an output unused for longer has most likely left the capture); closer fits; newer
    producers (expressions nest: in ``a * (1 + erf(b))`` the value made last is used first).
    """
    torch_op = event_types()[0]
    nodes = graph.nodes
    outputs: list[list[predicted.Pred]] = []
    inplace = [n.inplace for n in nodes]
    for node, ev in zip(nodes, events):
        if inplace[node.index]:
            outs: list[predicted.Pred] = []
        elif node.op in VIEW_OPS or (node.op in MAYBE_ALIAS_OPS and not copied(ev, torch_op)):
            outs = []
        else:
            outs = [p for p in predicted.predict(node) if p.sizes is None or p.numel]
        outputs.append(outs)
        node.writes = bool(outs) or inplace[node.index]

    # New tensors as far as the look ahead knows (inputs whose storage no recent op touched),
    # counted per op by (sizes, dtype); and the same key of each op's predicted outputs.
    new_at: list[dict[tuple[Any, ...], int]] = [{} for _ in nodes]
    touched: dict[int, int] = {}
    for node in nodes:
        j = node.index
        for t in node.inputs:
            if touched.get(t.key, -FRESH_GAP) <= j - FRESH_GAP:
                sig = (t.sizes, t.dtype)
                new_at[j][sig] = new_at[j].get(sig, 0) + 1
            touched[t.key] = j
    out_keys = [[predicted.key(p) for p in outs] for outs in outputs]
    gathers = [j for j, news in enumerate(new_at) if sum(news.values()) > 1]
    pending: list[tuple[int, predicted.Pred]] = []  # (node index, predicted output), oldest first

    def needed_later(pos: int, j: int, gathered: bool) -> bool:
        """Is the output of pending entry ``pos`` needed by a new tensor soon after op ``j``?

        Each new tensor in the next ops that has its (sizes, dtype) must come from some
        producer: another pending one, or one that ran since. If more such tensors turn up
        than those producers can explain, this one made one of them. With ``gathered``, only
        ops that take two or more such tensors at once count (``torch.stack((a, b, c))``):
        a single one may as well be a tensor from outside the capture, first used there.
        """
        if gathered:
            g = bisect.bisect_right(gathers, j)
            if g == len(gathers) or gathers[g] > j + LOOKAHEAD:
                return False  # no op ahead takes two new tensors at once
        key = predicted.key(pending[pos][1])
        if key is None:
            return False
        supply = demand = 0
        counted = False  # the other pending producers, counted once needed
        for j2 in range(j + 1, min(j + 1 + LOOKAHEAD, len(nodes))):
            supply += out_keys[j2 - 1].count(key)
            wanted = new_at[j2].get(key, 0)
            if wanted and (not gathered or wanted > 1):
                if not counted:
                    low = max(0, len(pending) - SCAN_DEPTH)
                    supply += sum(1 for i in range(low, len(pending)) if i != pos and predicted.key(pending[i][1]) == key)
                    counted = True
                demand += wanted
                if demand > supply:
                    return True
        return False

    writer: dict[int, int] = {}  # storage -> node that last wrote it (-1: no op)
    last_use: dict[int, int] = {}  # storage -> last node that read it
    seen_as: dict[int, tuple[str, int]] = {}  # storage -> (dtype, numel) last read as
    # TensorImpls seen on each storage, and views made of it whose TensorImpl is not seen
    # yet: a new TensorImpl on a known storage is one of those views if any is owed.
    impls: dict[int, set[int]] = {}
    views_owed: dict[int, int] = {}

    for node in nodes:
        j = node.index
        inputs = node.inputs
        slots: list[int] = []  # one input position per distinct storage
        fresh: list[bool] = []
        reusable: list[bool] = []
        needy = 0
        keys: list[int] = []
        for k, t in enumerate(inputs):
            key = t.key
            if key in keys:
                continue
            keys.append(key)
            slots.append(k)
            old = seen_as.get(key)
            is_new = old is None or old[0] != t.dtype or t.numel > old[1]
            reuse = False
            if not is_new:
                known = impls[key]
                if t.impl not in known:
                    owed = views_owed.get(key, 0)
                    if owed:
                        views_owed[key] = owed - 1
                        known.add(t.impl)
                    else:
                        reuse = True
            fresh.append(is_new)
            reusable.append(reuse)
            needy += is_new or reuse

        choice: dict[int, int] = {}  # input position -> index into ``pending``
        if pending and needy:
            newest_idx, newest_pred = pending[-1]
            if (
                needy == 1
                and newest_idx >= j - STALE_AFTER
                and any(f and predicted.fit(newest_pred, inputs[k]) == 3 for k, f in zip(slots, fresh))
                and not needed_later(len(pending) - 1, j, gathered=True)
            ):
                # One new input, and the newest producer fits it exactly: the common case,
                # and the search below would pick the same.
                k = next(k for k, f in zip(slots, fresh) if f)
                choice = {k: len(pending) - 1}
            else:
                cands: list[list[tuple[int, int]]] = []  # per slot: (pending position, fit)
                low = max(0, len(pending) - SCAN_DEPTH)
                for k, is_new, reuse in zip(slots, fresh, reusable):
                    found: list[tuple[int, int]] = []
                    if is_new or reuse:
                        t = inputs[k]
                        after = -1 if is_new else max(last_use.get(t.key, -1), writer.get(t.key, -1))
                        for pos in range(len(pending) - 1, low - 1, -1):
                            idx, pred = pending[pos]
                            if idx <= after:
                                break
                            fit = predicted.fit(pred, t)
                            if (fit if is_new else fit >= 2) and not needed_later(pos, j, gathered=is_new):
                                found.append((pos, fit))
                                if len(found) == MAX_CANDIDATES:
                                    break
                    cands.append(found)
                if any(cands):
                    choice = _best_assignment(slots, fresh, cands, pending, j - STALE_AFTER)

        for i, k in enumerate(slots):
            t = inputs[k]
            key = t.key
            chosen = choice.get(k) if choice else None
            if chosen is not None or fresh[i]:
                w = writer[key] = pending[chosen][0] if chosen is not None else -1
                impls[key] = {t.impl}
                views_owed[key] = 0
            else:
                w = writer[key]
                impls[key].add(t.impl)
            seen_as[key] = (t.dtype, t.numel)
            last_use[key] = j
            if w >= 0:
                nodes[w].consumers.append(j)
        node.producers = [writer[t.key] for t in inputs]
        if choice:
            for pos in sorted(choice.values(), reverse=True):
                del pending[pos]

        # What this op writes: in place, its first input; otherwise new tensors (pending),
        # or views of its first input.
        outs = outputs[j]
        if outs:
            pending.extend((j, p) for p in outs)
            if len(pending) > PENDING_LIMIT:
                del pending[: len(pending) - PENDING_LIMIT]
        elif inputs:
            if inplace[j]:
                writer[inputs[0].key] = j
            elif node.op not in _RETURN_SELF:
                key = inputs[0].key
                views_owed[key] = views_owed.get(key, 0) + _view_count(node)


def _best_assignment(
    slots: list[int],
    fresh: list[bool],
    cands: list[list[tuple[int, int]]],
    pending: list[tuple[int, predicted.Pred]],
    stale_before: int,
) -> dict[int, int]:
    """The best matching of an op's inputs to pending producers (see :func:`_link_inferred`):
    an exhaustive search over a handful of candidates."""
    n = len(slots)
    current = [-1] * n
    fit_of = [dict(c) for c in cands]
    best: tuple[int, ...] | None = None
    best_choice: dict[int, int] = {}

    def score() -> tuple[int, ...]:
        n_new = reuse = order = later = recent = fits = age = 0
        prev = -1
        for i in range(n):
            pos = current[i]
            if pos < 0:
                continue
            if fresh[i]:
                n_new += 1
            else:
                reuse += 1
                later += i
            idx = pending[pos][0]
            order += idx > prev
            prev = idx
            recent += idx >= stale_before
            fits += fit_of[i][pos]
            age += pos
        return (n_new, reuse, order, later, recent, fits, age)

    def search(i: int, used: set[int]) -> None:
        nonlocal best, best_choice
        if i == n:
            s = score()
            if best is None or s > best:
                best = s
                best_choice = {slots[x]: current[x] for x in range(n) if current[x] >= 0}
            return
        search(i + 1, used)
        for pos, _ in cands[i]:
            if pos not in used:
                current[i] = pos
                used.add(pos)
                search(i + 1, used)
                used.discard(pos)
                current[i] = -1

    search(0, set())
    return best_choice

