"""Fusion candidates: hand-written idioms that could run as one kernel, with their cost.

The motivating study: on Trainium a hand-written RMSNorm cost about six times the device time
of ``torch.rms_norm`` or of one ``torch.compile``'d region. :func:`fusion_hints` finds such
idioms in a capture and says what they cost and what to call instead.

How matching works:

- Live captures are matched on the op graph of :mod:`.dataflow`: an idiom is a set of ops
  linked producer -> consumer (``Hint.confidence == "dataflow"``). Ops that merely run one
  after another on unrelated tensors never match. Each pattern has one matcher, anchored at
  the op that ends or centres the idiom (the normalising ``mul``/``div`` of a norm, the
  ``tanh``/``erf`` of a GELU, the softmax of an attention) and walking producers and
  consumers from there, so the many spellings of one idiom (``pow(2)`` or ``x*x``,
  ``rsqrt`` or ``1/sqrt``, with or without casts, weight, bias) meet in one place.
- Trace files have no tensor identities, so they are matched on the order of user-level ops
  and their input shapes (``confidence == "sequence"``): a claim about op order, not data
  flow. ``elementwise_chain`` needs data flow and is not reported from a trace.
- Only user-level ops are matched (no op above them), so a call of a fused API that
  decomposes internally (``torch.rms_norm`` -> ``aten::_fused_rms_norm`` -> pow, mean...) and
  anything inside a ``torch.compile``'d region is left alone.

Matches are grouped by pattern, op sequence, code location and input shape: twelve layers of
one RMSNorm are one hint with ``calls=12``. Hints are ranked by estimated saving.
"""

from __future__ import annotations

import bisect
import collections
import functools
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events import KIND_ANNOTATION, EventTable
from ..result import Hint
from .dataflow import (
    VIEW_OPS,
    OpGraph,
    OpNode,
    TensorArg,
    broadcast_shape,
    graph_from_profiler,
    graph_from_table,
    graph_with_observation,
    observed_graph,
    user_location,
)

if TYPE_CHECKING:
    from . import AnalysisContext

__all__ = [
    "PATTERNS",
    "Match",
    "estimate_saving_ns",
    "find_matches",
    "fusion_hints",
    "hints_from_matches",
    "optimizer_hints",
]

#: The contract's pattern vocabulary, in the order matchers claim ops (an attention absorbs
#: the softmax inside it; a norm is matched before the generic chain).
PATTERNS = (
    "attention",
    "layer_norm",
    "rms_norm",
    "softmax",
    "gelu",
    "rotary_embedding",
    "silu_mul",
    "elementwise_chain",
)

#: Fewest dependent elementwise ops that make an ``elementwise_chain`` (the contract's
#: "three or more"): two ops fused save one round trip through memory, rarely worth a hint.
MIN_CHAIN_OPS = 3
#: Most ops walked from a norm's normalising op back to its reduction (``add eps``, ``sqrt``,
#: ``reciprocal``, a scale, a cast): longer chains are some other computation.
MAX_NORM_TAIL = 6
#: Most ops walked between an attention's softmax and its matmuls (scale, mask, cast,
#: dropout each take one).
MAX_ATTENTION_HOPS = 4
#: Most ops in the polynomial inside a GELU's tanh/erf (``x + 0.044715 * x**3`` scaled, or
#: ``x * c * (1 + 0.044715 * x * x)``: five ops at most in the spellings seen in the wild).
MAX_GELU_CONE = 8
#: Most ops absorbed after a norm's normalising op (weight multiply, bias add, casts).
MAX_NORM_TRAILING = 3
#: Passes over its input the fused form of an idiom makes, by pattern; idioms not named make
#: one (see :func:`estimate_saving_ns`).
FUSED_PASSES: dict[str, int] = {"rms_norm": 2, "layer_norm": 2, "softmax": 2}
#: CPU capabilities (``torch.backends.cpu.get_cpu_capability()``) without SIMD: there
#: Inductor's C++ kernels are scalar, and its fused RMSNorm measured 2.6x *slower* than the
#: eager chain (624 vs 240 us at 256x1024 float32, one thread, ``cpp.simdlen=1``), while
#: with AVX-512 it is 2.5x faster (105 us). torch has no eager fused RMSNorm on CPU.
_SCALAR_CPU = frozenset({"DEFAULT", "NO AVX"})
#: Least estimated saving (ns, summed over calls) worth a hint: below a microsecond the
#: suggestion costs the reader more than it saves.
MIN_SAVING_NS = 1_000
#: torch.optim records each step as a range named ``Optimizer.step#<class>.step``.
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
#: Optimizers with a fused implementation (``fused=True``; CPU and CUDA since torch 2.4).
FUSED_OPTIMIZERS = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})
#: Fewest per-parameter update chains in one optimizer's steps that make an ``optimizer`` hint.
MIN_OPTIMIZER_CHAINS = 2

_CASTS = frozenset({"to", "_to_copy", "type_as", "float", "half", "bfloat16", "double"})
_ROOTS = frozenset({"rsqrt", "sqrt", "reciprocal"})
_NORM_TAIL_OPS = frozenset({"add", "rsqrt", "sqrt", "reciprocal", "pow", "mul", "div", "clamp", "clamp_min", "to", "_to_copy"})
_MATMULS = frozenset({"matmul", "bmm", "einsum", "baddbmm", "mm"})
_ATTENTION_PRE = frozenset({"div", "mul", "add", "sub", "masked_fill", "where", "to", "_to_copy", "type_as"})
_ATTENTION_POST = frozenset({"to", "_to_copy", "type_as", "dropout", "masked_fill"})
_SOFTMAXES = frozenset({"softmax", "_softmax"})
_MODEL_OPS = _MATMULS | {"linear", "addmm", "conv1d", "conv2d", "conv3d", "convolution", "embedding"}


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


# ---- small graph helpers ------------------------------------------------------------------


def _only_big(n: OpNode) -> int | None:
    """Position of the single dimensioned tensor input (others are 0-dim scalars), or None."""
    big = n.big_inputs()
    return big[0] if len(big) == 1 else None


def _is_scalar_pow(n: OpNode, *exps: float) -> bool:
    return n.op == "pow" and any(isinstance(s, (int, float)) and not isinstance(s, bool) and s in exps for s in n.scalars)


def _root_value(g: OpGraph, n: OpNode, k: int, trail: list[OpNode] | None = None) -> tuple[int, int]:
    """Identity of input ``k`` after stripping casts (``x.to(float32)`` is still ``x``)."""
    key, p = n.value(k)
    seen = 0
    while p >= 0 and seen < 3:
        c = g.nodes[p]
        if c.op not in _CASTS or not c.inputs:
            break
        if trail is not None:
            trail.append(c)
        key, p = c.value(0)
        seen += 1
    return (key, p)


def _same(g: OpGraph, a: OpNode, ak: int, b: OpNode, bk: int) -> bool:
    return _root_value(g, a, ak) == _root_value(g, b, bk)


def _square_of(g: OpGraph, sq: OpNode | None) -> tuple[OpNode, int] | None:
    """For ``pow(t, 2)``, ``square(t)`` or ``t * t``: (node, position of t)."""
    if sq is None:
        return None
    if sq.op == "square" or _is_scalar_pow(sq, 2, 2.0):
        return (sq, 0) if sq.inputs else None
    if sq.op == "mul" and len(sq.inputs) == 2 and sq.value(0) == sq.value(1):
        return (sq, 0)
    return None


def _param_like(g: OpGraph, n: OpNode, k: int, extra: list[OpNode]) -> bool:
    """Is input ``k`` a parameter (made by no op in the capture), or one cheap elementwise op
    on parameters (Gemma's ``1 + weight``), which then joins ``extra``?"""
    p = n.producers[k]
    if p < 0:
        return True
    pn = g.nodes[p]
    if pn.elementwise and all(q < 0 for q in pn.producers) and len(pn.consumers) == 1:
        extra.append(pn)
        return True
    return False


def _single_consumer(g: OpGraph, n: OpNode) -> OpNode | None:
    """The one op that reads ``n``'s output, not counting ops that made nothing from it
    (``.to()`` of the same dtype, views)."""
    cons = {c for c in n.consumers if g.nodes[c].writes}
    return g.nodes[next(iter(cons))] if len(cons) == 1 else None


def _input_from(n: OpNode, producer: OpNode) -> int | None:
    for k, p in enumerate(n.producers):
        if p == producer.index:
            return k
    return None


# ---- norms: rms_norm and layer_norm --------------------------------------------------------


def _match_norm(g: OpGraph, n: OpNode) -> Match | None:
    """A normalising ``mul``/``div``: ``a * rsqrt(stat + eps)`` or ``a / sqrt(stat + eps)``
    where ``stat`` reduces ``a``'s square (RMSNorm) or ``a`` is centred and ``stat`` is its
    variance (LayerNorm)."""
    if n.op not in ("mul", "div") or len(n.inputs) != 2 or len(n.big_inputs()) != 2:
        return None
    orders = ((0, 1),) if n.op == "div" else ((0, 1), (1, 0))
    for ak, bk in orders:
        m = _norm_with(g, n, ak, bk)
        if m is not None:
            return m
    return None


def _unlinked_producer(g: OpGraph, n: OpNode, k: int) -> OpNode | None:
    """The op just before ``n`` on its thread, taken as the maker of ``n``'s input ``k`` where
    the inferred linking left that input unexplained and no earlier op saw its storage (a
    tensor seen before is an older one, not what the op just before made).

    The linking goes wrong on exactly this in a training step: in ``x * rsqrt(var + eps)``
    followed, a few ops later, by a loss whose target (from outside the capture) has the
    statistic's shape, it gives rsqrt's output to the loss and leaves the multiply's input
    unexplained (see dataflow's notes). Used for a norm's statistic only, whose whole
    structure the matcher then checks; exact linking (``profile_memory=True``) never needs it.
    """
    if g.linking != "inferred" or n.index == 0 or g.producer(n, k) is not None:
        return None
    prev = g.nodes[n.index - 1]
    t = n.inputs[k]
    if prev.tid != n.tid or not prev.writes or prev.op not in _NORM_TAIL_OPS:
        return None
    if not prev.inputs or prev.inputs[0].sizes != t.sizes or prev.inputs[0].dtype != t.dtype:
        return None
    if any(a.key == t.key for m in g.nodes[: n.index] for a in m.inputs):
        return None
    return prev


def _norm_with(g: OpGraph, n: OpNode, ak: int, bk: int) -> Match | None:
    chain: list[OpNode] = []
    has_root = False
    cur = g.producer(n, bk) or _unlinked_producer(g, n, bk)
    red: OpNode | None = None
    while cur is not None and len(chain) <= MAX_NORM_TAIL:
        if cur.op in ("mean", "var", "std", "var_mean", "norm", "linalg_vector_norm"):
            red = cur
            break
        k = _only_big(cur)
        if cur.op not in _NORM_TAIL_OPS or k is None:
            return None
        if cur.op in _ROOTS or _is_scalar_pow(cur, 0.5, -0.5):
            has_root = True
        chain.append(cur)
        cur = g.producer(cur, k)
    if red is None or not red.inputs:
        return None
    if red.op in ("std", "norm", "linalg_vector_norm"):
        has_root = True
    # The reduction must be over the last dim: its output is x's shape with the last dim 1.
    out_user = chain[-1] if chain else n
    out_k = _input_from(out_user, red)
    if out_k is None:
        return None
    out_sizes, x_sizes = out_user.inputs[out_k].sizes, red.inputs[0].sizes
    if not (len(out_sizes) == len(x_sizes) and out_sizes[-1:] == (1,) and out_sizes[:-1] == x_sizes[:-1]):
        return None

    extra: list[OpNode] = []
    # ``a`` may carry a weight already (``w * (x - mean) / (std + eps)``).
    a_node, a_k = n, ak
    pa = g.producer(n, ak)
    if pa is not None and pa.op == "mul" and len(pa.inputs) == 2:
        for wk in (0, 1):
            if pa.inputs[wk].sizes == x_sizes[-1:] and _param_like(g, pa, wk, extra):
                extra.append(pa)
                a_node, a_k = pa, 1 - wk
                break
    a_prod = g.producer(a_node, a_k)

    pattern = ""
    x: TensorArg | None = None
    params: dict[str, Any] = {}
    a_centred = _centred(g, a_node, a_k)
    sq = _square_of(g, g.producer(red, 0)) if red.op == "mean" else None
    if sq is not None:
        sq_node, tk = sq
        extra.append(sq_node)
        t_centred = _centred(g, sq_node, tk)
        if t_centred is not None:  # mean((x - mu)^2): a LayerNorm
            if a_centred is None or not _same(g, a_centred[0], 0, t_centred[0], 0):
                return None
            extra += [*t_centred, *a_centred]
            pattern, x = "layer_norm", t_centred[0].inputs[0]
            casts_src = (t_centred[0], 0)
        else:
            if _root_value(g, sq_node, tk) != _root_value(g, a_node, a_k):
                return None
            pattern, x = "rms_norm", sq_node.inputs[tk]
            casts_src = (sq_node, tk)
    elif red.op in ("norm", "linalg_vector_norm"):  # norm(x) * d**-0.5: the RMS from a norm
        if _root_value(g, red, 0) != _root_value(g, a_node, a_k):
            return None
        pattern, x = "rms_norm", red.inputs[0]
        casts_src = (red, 0)
    else:
        # x - mean(x) over var(x) / std(x) / var_mean(x). Two equally shaped statistics of x
        # may come out of the inferred linking swapped (see dataflow), so the pair is
        # checked as a set: one mean, one spread, of the same x.
        if a_centred is None or not _same(g, a_centred[0], 0, red, 0):
            return None
        stats = {red.op, a_centred[1].op}
        if not (stats == {"var_mean"} or ("mean" in stats and stats & {"var", "std", "var_mean"})):
            return None
        has_root = has_root or "std" in stats
        extra += list(a_centred)
        pattern, x = "layer_norm", red.inputs[0]
        casts_src = (red, 0)
    if not has_root:  # a mean square without a root is a variance, not a norm
        return None
    # Leading casts (``x.to(torch.float32)``) belong to the norm.
    lead: list[OpNode] = []
    _root_value(g, casts_src[0], casts_src[1], lead)
    if lead:
        x = lead[-1].inputs[0]
    if a_prod is not None and a_prod.op in _CASTS:
        lead.append(a_prod)

    nodes = {m.index: m for m in [n, red, *chain, *extra, *lead]}
    # Trailing weight, bias and casts.
    cur = n
    steps = 0
    while steps < MAX_NORM_TRAILING:
        nxt = _single_consumer(g, cur)
        if nxt is None or nxt.index in nodes:
            break
        if nxt.op in _CASTS:
            pass
        elif nxt.op in ("mul", "add") and len(nxt.inputs) == 2 and (pattern == "layer_norm" or nxt.op == "mul"):
            k = _input_from(nxt, cur)
            more: list[OpNode] = []
            if k is None or not nxt.inputs[1 - k].sizes or nxt.inputs[1 - k].sizes != x.sizes[-1:]:
                break
            if not _param_like(g, nxt, 1 - k, more):
                break
            for mnode in more:
                nodes[mnode.index] = mnode
            params["bias" if nxt.op == "add" else "weight"] = True
        else:
            break
        nodes[nxt.index] = nxt
        cur = nxt
        steps += 1
    if a_node is not n:  # ``w * (x - mean)`` before the division
        params["weight"] = True
    params.setdefault("weight", False)
    params.setdefault("bias", False)
    return Match(pattern, sorted(nodes.values(), key=lambda m: m.index), x, params)


def _centred(g: OpGraph, n: OpNode, k: int) -> tuple[OpNode, OpNode] | None:
    """If input ``k`` of ``n`` is ``x - stat(x)`` for a last-dim statistic of the same ``x``
    (a mean, or an output of ``var_mean``): (the ``sub`` node, the statistic's node)."""
    c = g.producer(n, k)
    if c is None or c.op != "sub" or len(c.inputs) != 2:
        return None
    mu = g.producer(c, 1)
    if mu is None or not mu.inputs or mu.op not in ("mean", "var", "std", "var_mean"):
        return None
    return (c, mu) if _same(g, mu, 0, c, 0) else None


# ---- softmax and attention -----------------------------------------------------------------


def _match_softmax(g: OpGraph, n: OpNode) -> Match | None:
    """``exp(x - max(x)) / sum(exp(...))``, the max-subtraction optional, ``* (1/sum)`` too."""
    if n.op not in ("div", "mul") or len(n.inputs) != 2:
        return None
    e = g.producer(n, 0)
    s = g.producer(n, 1)
    extra: list[OpNode] = []
    if n.op == "mul":
        if e is not None and e.op == "reciprocal":
            e, s = s, e
        if s is None or s.op != "reciprocal":
            return None
        extra.append(s)
        s = g.producer(s, 0)
    if e is None or s is None or e.op != "exp" or s.op != "sum" or not s.inputs:
        return None
    e2 = g.producer(s, 0)
    if e2 is None or e2.op != "exp":
        return None
    if e2 is not e:
        if not _same(g, e2, 0, e, 0):
            return None
        extra.append(e2)
    nodes = [n, e, s, *extra]
    x = e.inputs[0] if e.inputs else None
    sub = g.producer(e, 0)
    if sub is not None and sub.op == "sub" and len(sub.inputs) == 2:
        mx = g.producer(sub, 1)
        if mx is not None and mx.op in ("max", "amax") and mx.inputs and _same(g, mx, 0, sub, 0):
            nodes += [sub, mx]
            x = sub.inputs[0]
    return Match("softmax", sorted(set(nodes), key=lambda m: m.index), x, {"dim": -1})


def _scores_matmul(g: OpGraph, n: OpNode, k: int, hops: int, path: list[OpNode]) -> OpNode | None:
    """Walk back from input ``k`` of ``n`` through scale/mask/cast ops to a matmul."""
    p = g.producer(n, k)
    if p is None:
        return None
    if p.op in _MATMULS:
        return p
    if hops <= 0 or p.op not in _ATTENTION_PRE:
        return None
    for pk in p.big_inputs():
        found = _scores_matmul(g, p, pk, hops - 1, path)
        if found is not None:
            path.append(p)
            return found
    return None


def _values_matmul(g: OpGraph, n: OpNode, hops: int, path: list[OpNode]) -> OpNode | None:
    """Walk forward from ``n`` through casts and dropout to the matmul with the values."""
    for c in sorted(set(n.consumers)):
        cn = g.nodes[c]
        if cn.op in _MATMULS and _input_from(cn, n) == 0:  # probs @ v: probs come first
            return cn
        if hops > 0 and cn.op in _ATTENTION_POST:
            found = _values_matmul(g, cn, hops - 1, path)
            if found is not None:
                path.append(cn)
                return found
    return None


def _match_attention(g: OpGraph, head: OpNode, tail: OpNode, inner: list[OpNode]) -> Match | None:
    """``q @ k^T`` -> scale / mask -> softmax (fused or written out) -> ``@ v``."""
    pre: list[OpNode] = []
    k = head.big_inputs()[0] if head.big_inputs() else 0
    mm1 = _scores_matmul(g, head, k, MAX_ATTENTION_HOPS, pre)
    if mm1 is None:
        return None
    post: list[OpNode] = []
    mm2 = _values_matmul(g, tail, MAX_ATTENTION_HOPS, post)
    if mm2 is None or mm2 is mm1:
        return None
    nodes = {m.index: m for m in [mm1, *pre, *inner, *post, mm2]}
    q = mm1.inputs[0] if mm1.inputs else None
    params: dict[str, Any] = {
        "q": list(q.sizes) if q else None,
        "k": list(mm1.inputs[1].sizes) if len(mm1.inputs) > 1 else None,
        "v": list(mm2.inputs[1].sizes) if len(mm2.inputs) > 1 else None,
        "masked": any(p.op in ("masked_fill", "where", "add") for p in pre),
    }
    return Match("attention", sorted(nodes.values(), key=lambda m: m.index), q, params)


# ---- activations -----------------------------------------------------------------------------


def _match_gelu(g: OpGraph, t: OpNode) -> Match | None:
    """``0.5 * x * (1 + tanh(c * (x + 0.044715 * x**3)))`` or ``x * 0.5 * (1 + erf(x / sqrt 2))``."""
    if t.op not in ("tanh", "erf") or not t.inputs:
        return None
    a = _single_consumer(g, t)
    if a is None or a.op != "add" or len(a.big_inputs()) != 1:
        return None
    f = _single_consumer(g, a)
    if f is None or f.op != "mul" or len(f.inputs) != 2:
        return None
    hk = 1 - (_input_from(f, a) or 0)
    h = g.producer(f, hk)
    nodes: dict[int, OpNode] = {t.index: t, a.index: a, f.index: f}
    x_val: tuple[int, int]
    xk = _only_big(h) if h is not None and h.op in ("mul", "div") else None
    if h is not None and xk is not None:  # ``0.5 * x`` or ``x / 2`` on the outside
        x_val = _root_value(g, h, xk)
        x = h.inputs[xk]
        nodes[h.index] = h
    else:
        x_val = _root_value(g, f, hk)
        x = f.inputs[hk]
    # The polynomial under tanh/erf may only read x and constants.
    cone: list[OpNode] = []
    todo = [(t, 0)]
    while todo:
        node, k = todo.pop()
        if _root_value(g, node, k) == x_val:
            continue
        p = g.producer(node, k)
        if p is None or p.op not in ("mul", "add", "div", "pow", "sub") or p.index in nodes:
            return None
        nodes[p.index] = p
        cone.append(p)
        if len(cone) > MAX_GELU_CONE:
            return None
        todo.extend((p, pk) for pk in p.big_inputs())
    if not cone:
        return None
    # ``x * (1 + erf(...)) / 2``: a trailing halving.
    last = _single_consumer(g, f)
    if (
        last is not None
        and last.op in ("mul", "div")
        and _only_big(last) is not None
        and last.index not in nodes
        and (len(last.inputs) == 1 or any(not i.sizes for i in last.inputs) or last.scalars)
    ):
        nodes[last.index] = last
    return Match(
        "gelu", sorted(nodes.values(), key=lambda m: m.index), x, {"approximate": "tanh" if t.op == "tanh" else "none"}
    )


def _match_silu_mul(g: OpGraph, n: OpNode) -> Match | None:
    """``silu(gate) * up``, or ``gate * sigmoid(gate) * up`` (SwiGLU)."""
    if n.op != "mul" or len(n.inputs) != 2 or len(n.big_inputs()) != 2:
        return None
    for sk in (0, 1):
        s = g.producer(n, sk)
        if s is None:
            continue
        found: list[OpNode] = []
        gate: tuple[int, int] | None = None
        if s.op == "silu" and s.inputs:
            found, gate = [s], s.value(0)
        elif s.op == "mul" and len(s.inputs) == 2:
            for gk in (0, 1):
                sig = g.producer(s, gk)
                if sig is not None and sig.op == "sigmoid" and sig.inputs and sig.value(0) == s.value(1 - gk):
                    found, gate = [sig, s], s.value(1 - gk)
                    break
        if gate is None:
            continue
        bk = 1 - sk
        if n.inputs[bk].sizes != n.inputs[sk].sizes:
            continue
        gate_in = found[0].inputs[0]
        if n.value(bk) == gate and n.inputs[bk].impl == gate_in.impl:
            continue  # x * silu(x): no second projection
        return Match("silu_mul", sorted([*found, n], key=lambda m: m.index), n.inputs[sk], {})
    return None


def _match_rotary(g: OpGraph, n: OpNode) -> Match | None:
    """``x * cos + rotate_half(x) * sin``, rotate_half by ``cat((-x2, x1))`` or an
    interleaved ``stack((-x2, x1), -1).flatten(-2)``."""
    if n.op != "add" or len(n.inputs) != 2:
        return None
    m1, m2 = g.producer(n, 0), g.producer(n, 1)
    if m1 is None or m2 is None or m1.op != "mul" or m2.op != "mul":
        return None
    for mx, mr in ((m1, m2), (m2, m1)):
        for rk in (0, 1):
            r = g.producer(mr, rk)
            if r is None or r.op not in ("cat", "stack", "flatten", "reshape") or len(r.inputs) < 1:
                continue
            r_nodes = [r]
            if r.op in ("flatten", "reshape"):
                r2 = g.producer(r, 0)
                if r2 is None or r2.op not in ("cat", "stack"):
                    continue
                r_nodes.append(r2)
                r = r2
            if len(r.inputs) != 2:
                continue
            neg_k = next((k for k in (0, 1) if (p := g.producer(r, k)) is not None and p.op == "neg"), None)
            if neg_k is None:
                continue
            neg = g.producer(r, neg_k)
            assert neg is not None
            x_val = r.value(1 - neg_k)
            if not neg.inputs or neg.value(0) != x_val:
                continue
            xk = next((k for k in (0, 1) if mx.value(k) == x_val), None)
            if xk is None:
                continue
            nodes = [mx, neg, *r_nodes, mr, n]
            return Match("rotary_embedding", sorted(set(nodes), key=lambda m: m.index), mx.inputs[xk], {})
    return None


# ---- matching a whole graph ------------------------------------------------------------------


def find_matches(g: OpGraph, reserved: Iterable[int] = ()) -> list[Match]:
    """Every idiom in a data-flow graph, each op claimed by one match at most. Ops in
    ``reserved`` (an optimizer's update, see :func:`optimizer_hints`) are left alone."""
    claimed: set[int] = set(reserved)
    out: list[Match] = []

    def take(m: Match | None) -> bool:
        if m is None or any(n.index in claimed for n in m.nodes):
            return False
        claimed.update(n.index for n in m.nodes)
        out.append(m)
        return True

    nodes = g.nodes
    softmaxes = [m for n in nodes if (m := _match_softmax(g, n)) is not None]
    # Attention first: it absorbs the softmax inside it, fused or written out.
    for sm in softmaxes:
        head = next((n for n in sm.nodes if n.op in ("max", "amax")), None) or next(n for n in sm.nodes if n.op == "exp")
        take(_match_attention(g, head, sm.nodes[-1], sm.nodes))
    for n in nodes:
        if n.op in _SOFTMAXES and n.index not in claimed:
            take(_match_attention(g, n, n, [n]))
    for n in nodes:
        if n.index not in claimed:
            take(_match_norm(g, n))
    for sm in softmaxes:
        take(sm)
    for n in nodes:
        if n.index in claimed:
            continue
        take(_match_gelu(g, n))
    for n in nodes:
        if n.index not in claimed:
            take(_match_rotary(g, n))
    for n in nodes:
        if n.index not in claimed:
            take(_match_silu_mul(g, n))
    if g.linking == "exact":  # a chain is a claim about data flow: never made on guessed links
        for chain in _elementwise_chains(g, claimed):
            take(chain)
    return out


def _elementwise_chains(g: OpGraph, claimed: set[int], within: Sequence[int] | None = None) -> Iterable[Match]:
    """Groups of unclaimed elementwise ops that one kernel could replace, of at least
    :data:`MIN_CHAIN_OPS`; among the ops ``within`` only, where given.

    An edge ``p -> n`` (``n`` reads what ``p`` wrote) joins them when ``p``'s output is an
    intermediate of the group: every op that reads it is elementwise and joins too, so fusing
    never has to write it out. An output read by anything else (a matmul, a norm, a
    reduction, the next residual add's layer) ends a group: so a transformer's residual
    stream, whose every add feeds a whole block, is never a chain, and no group crosses a
    matmul, convolution or reduction. Each other input of ``n`` must be a constant or exist
    before the group starts (an input computed from the group through some other op would
    need that op inside the kernel). Groups on integer or boolean tensors only (mask and
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
    exact = g.linking == "exact"
    for n in pool:
        if n.elementwise and n.writes and n.index not in claimed:
            parent[n.index] = n.index
            low[n.index] = n.index

    def intermediate(p: OpNode) -> bool:
        readers = {c for c in p.consumers if nodes[c].writes or nodes[c].op not in VIEW_OPS}
        return bool(readers) and all(c in parent for c in readers)

    for n in pool:
        if n.index not in parent:
            continue
        for k, p in enumerate(n.producers):
            if p not in parent or find(p) == find(n.index):
                continue
            t = n.inputs[k]
            if not exact and g.first_takers.get(t.key) == n.index and not _shape_carried(nodes[p], t):
                continue  # a new tensor of another shape: only the element count matched
            if not intermediate(nodes[p]):
                continue
            start = low[find(p)]
            others = (q for kk, q in enumerate(n.producers) if kk != k and q >= 0 and n.inputs[kk].sizes)
            if all(q < start or (q in parent and find(q) == find(p)) for q in others):
                a, b = find(p), find(n.index)
                parent[a] = b
                low[b] = min(low[a], low[b])
    groups: dict[int, list[OpNode]] = {}
    for i in parent:
        groups.setdefault(find(i), []).append(nodes[i])
    for members in groups.values():
        if len(members) < MIN_CHAIN_OPS or not any(_is_float(t.dtype) for m in members for t in m.inputs if t.sizes):
            continue
        members.sort(key=lambda m: m.index)
        first = members[0]
        x = max(first.inputs, key=lambda t: t.numel) if first.inputs else None
        yield Match("elementwise_chain", members, x, {})


def _is_float(dtype: str) -> bool:
    """A floating-point dtype name (``float32``, ``bfloat16``...); an unknown one counts as float."""
    return not dtype or "float" in dtype or "complex" in dtype


def _shape_carried(producer: OpNode, t: TensorArg) -> bool:
    """Does ``t`` have the shape the elementwise ``producer`` makes (its first input's when in
    place, else its inputs' broadcast shape)? True where that shape is not known."""
    if not producer.inputs:
        return True
    made = producer.inputs[0].sizes if producer.inplace else broadcast_shape([a.sizes for a in producer.inputs])
    return made is None or made == t.sizes


# ---- optimizers -------------------------------------------------------------------------------


def optimizer_steps(g: OpGraph, table: EventTable) -> dict[str, list[list[int]]]:
    """The update ops of each optimizer step (in the ``Optimizer.step#AdamW.step`` ranges
    torch.optim records), a list per step, by optimizer class name."""
    ranges: dict[str, list[tuple[int, int, int]]] = {}
    if not any(name.startswith(OPTIMIZER_STEP_PREFIX) for name in dict.fromkeys(table.names)):
        return {}  # the common case, settled by one C-level pass and a look at each distinct name
    for i, name in enumerate(table.names):
        if name.startswith(OPTIMIZER_STEP_PREFIX) and table.kinds[i] == KIND_ANNOTATION:
            cls = name[len(OPTIMIZER_STEP_PREFIX) :].split(".", 1)[0]
            ranges.setdefault(cls, []).append((table.tids[i], table.starts[i], table.ends[i]))
    starts = [n.start_ns for n in g.nodes]  # the graph is in start order
    steps: dict[str, list[list[int]]] = {}
    for cls, spans in ranges.items():
        for tid, start, end in spans:
            lo, hi = bisect.bisect_left(starts, start), bisect.bisect_left(starts, end)
            inside = [n for n in g.nodes[lo:hi] if n.tid == tid]
            # A step that runs the model first (``opt.step(closure)``) holds the user's forward
            # and backward too: its update is what runs after the last of their ops.
            model_end = max((n.end_ns for n in inside if _runs_the_model(n)), default=None)
            update = [n.index for n in inside if model_end is None or n.start_ns >= model_end]
            if update:
                steps.setdefault(cls, []).append(update)
    return steps


def _runs_the_model(n: OpNode) -> bool:
    """An op no optimizer update runs: a matmul, a convolution, an embedding, a backward op."""
    return n.op in _MODEL_OPS or n.name.startswith("autograd::")


def optimizer_hints(g: OpGraph, steps: dict[str, list[list[int]]], backend: str, confidence: str) -> list[Hint]:
    """One hint per optimizer whose step updates the parameters one at a time, each with a
    chain of elementwise ops (torch.optim's default on CPU, ``foreach=False``): its fused
    form updates them all in one kernel per step. What fusing each parameter's chain would
    save is estimated as for an ``elementwise_chain``. A ``foreach`` or ``fused`` optimizer
    makes no such chains and gets no hint."""
    hints: list[Hint] = []
    for cls, updates in steps.items():
        # Step by step: the in-place state links one step's update to the next one's. Chains
        # of 0-dim tensors only (the step counters) are bookkeeping, not the update.
        chains = [
            m
            for update in updates
            for m in _elementwise_chains(g, set(), update)
            if any(t.sizes for n in m.nodes for t in n.inputs)
        ]
        if len(chains) < MIN_OPTIMIZER_CHAINS:
            continue
        time_ns = saving_ns = 0.0
        for m in chains:
            times = [float(g.time_ns(n)) for n in m.nodes]
            time_ns += sum(times)
            saving_ns += min(sum(times), estimate_saving_ns("elementwise_chain", times, _full_size(m.nodes), backend))
        if saving_ns < MIN_SAVING_NS:
            continue
        # The most common op sequence stands for them all, the shorter on a tie: inferred
        # links may join two parameters' updates into one chain (the count is the chains found).
        spellings = collections.Counter(m.names for m in chains)
        most = max(spellings, key=lambda names: (spellings[names], -len(names)))
        typical = next(m for m in chains if m.names == most)
        # foreach=True batches the launches: it helps on a GPU, not on CPU.
        foreach = " (or foreach=True)" if backend == "cuda" else ""
        if cls in FUSED_OPTIMIZERS:
            suggestion = (
                f"torch.optim.{cls}(..., fused=True){foreach}: one fused update per parameter "
                f"instead of {len(chains)} chains of elementwise ops"
            )
        elif backend == "cuda":
            suggestion = f"torch.optim.{cls}(..., foreach=True), or torch.compile of the optimizer step"
        else:
            suggestion = f"torch.compile of the optimizer step ({cls} has no fused=True)"
        hints.append(
            Hint(
                kind="optimizer",
                pattern="per_parameter_update",
                ops=list(typical.names),
                calls=len(chains),
                time_us=time_ns / 1e3,
                est_saving_us=saving_ns / 1e3,
                suggestion=suggestion,
                location=_location(typical),
                confidence=confidence,
                details={
                    "optimizer": cls,
                    "update_chains": len(chains),
                    "ops": sum(len(m.nodes) for m in chains),
                    "device": _device_of(backend),
                    "backend": backend,
                    "time_source": "device" if g.has_device else "cpu",
                    "estimate_model": _model_text("elementwise_chain", backend),
                },
            )
        )
    return hints


# ---- trace files: op order and shapes only ----------------------------------------------------

# One regular expression per pattern over the user-level op names (views left out), written
# for the common spellings; each op name is followed by one space.
_SEQUENCE_PATTERNS: dict[str, str] = {
    "attention": r"(?:matmul|bmm|einsum|baddbmm) (?:div |mul )?(?:eq )?(?:masked_fill |add |where )?"
    r"(?:_?softmax |(?:(?:max|amax) sub )?exp (?:exp )?sum div )(?:to )?(?:dropout )?(?:matmul|bmm|einsum) ",
    "layer_norm": r"(?:mean (?:sub (?:pow|square|mul) mean (?:sub )?|var (?:sub )?|std (?:sub )?(?:mul )?)|var_mean (?:sub )?)"
    r"add (?:(?:sqrt|rsqrt) (?:sub )?(?:div |mul ))?(?:div )?(?:mul )?(?:add )?",
    "rms_norm": r"(?:to )?(?:pow|square|mul) mean add (?:rsqrt |sqrt (?:reciprocal )?(?:mul )?)(?:mul |div )(?:to )?(?:mul )?",
    "softmax": r"(?:(?:max|amax) sub )?exp (?:exp )?sum (?:div |reciprocal mul )",
    "gelu": r"(?:(?:mul|div|pow|add) ){2,7}(?:tanh|erf) add mul (?:mul |div )?",
    "rotary_embedding": r"mul neg (?:cat|stack) (?:flatten |reshape )?mul add ",
    "silu_mul": r"(?:silu |sigmoid mul )(?:linear |matmul |mm |addmm )?mul ",
}
_SEQUENCE_RE = {k: re.compile(v) for k, v in _SEQUENCE_PATTERNS.items()}


def find_sequence_matches(g: OpGraph) -> list[Match]:
    """Idioms in a trace's op order, per thread, each op claimed once; shapes checked where
    the trace recorded them. These are claims about order, not about data flow."""
    out: list[Match] = []
    by_tid: dict[int, list[OpNode]] = {}
    for n in g.nodes:
        if n.op not in VIEW_OPS:
            by_tid.setdefault(n.tid, []).append(n)
    for seq in by_tid.values():
        text = "".join(n.op + " " for n in seq)
        offsets: list[int] = []
        pos = 0
        for n in seq:
            offsets.append(pos)
            pos += len(n.op) + 1
        index_at = {o: i for i, o in enumerate(offsets)}
        claimed: set[int] = set()
        for pattern in PATTERNS:
            rx = _SEQUENCE_RE.get(pattern)
            if rx is None:
                continue
            for mo in _all_matches(rx, text, offsets):
                i0 = index_at.get(mo[0])
                i1 = index_at.get(mo[1])
                if i0 is None:
                    continue
                end = len(seq) if i1 is None else i1
                members = seq[i0:end]
                if any(m.index in claimed for m in members) or not _sequence_shapes_ok(pattern, members):
                    continue
                if pattern == "silu_mul":
                    members = [m for m in members if m.op not in ("linear", "matmul", "mm", "addmm")]
                claimed.update(m.index for m in members)
                x = members[0].inputs[0] if members[0].inputs else None
                params: dict[str, Any] = {}
                if pattern == "gelu":
                    params["approximate"] = "tanh" if any(m.op == "tanh" for m in members) else "none"
                out.append(Match(pattern, members, x, params))
    return out


def _all_matches(rx: re.Pattern[str], text: str, offsets: list[int]) -> Iterable[tuple[int, int]]:
    """Non-overlapping matches that start at an op boundary."""
    starts = set(offsets)
    pos = 0
    while pos < len(text):
        mo = rx.search(text, pos)
        if mo is None:
            return
        if mo.start() in starts:
            yield (mo.start(), mo.end())
            pos = mo.end()
        else:
            pos = text.find(" ", mo.start()) + 1


def _sequence_shapes_ok(pattern: str, members: list[OpNode]) -> bool:
    """Where shapes were recorded, the ops must all work on one tensor shape ``x``: its
    per-row statistic (``x[:-1] + (1,)``) and a weight over its last dim for norms and
    softmax, its half last dim for rotary's ``rotate_half``; scalars anywhere."""
    if pattern == "attention" or not all(m.inputs for m in members):
        return True
    elementwise = [m for m in members if m.op not in ("linear", "matmul", "mm", "addmm")]
    x = max(elementwise[0].inputs, key=lambda t: t.numel).sizes
    if not x:
        return False
    if pattern in ("rms_norm", "layer_norm", "softmax"):
        fits = {x, x[:-1] + (1,), x[-1:], ()}
        return all({t.sizes for t in m.inputs} <= fits for m in elementwise)
    if pattern == "rotary_embedding":
        lasts = {x[-1], x[-1] // 2}
        return all(not t.sizes or (len(t.sizes) <= len(x) and t.sizes[-1] in lasts) for m in elementwise for t in m.inputs)
    return all(t.sizes in (x, ()) for m in elementwise for t in m.inputs)


# ---- from matches to hints --------------------------------------------------------------------


def estimate_saving_ns(pattern: str, times: list[float], full: list[bool], backend: str = "cpu") -> float:
    """Estimated saving of fusing one occurrence, in ns, from its measured op times.

    ``full[i]`` says whether op ``i`` works on the whole tensor (not a per-row statistic or
    a scalar). The model: the ops of these idioms are memory-bound passes over one tensor, so
    one pass costs about what one full-size op of the chain costs (the median of them, so
    that an op slowed by the machine does not count), and the fused form makes as few passes
    as the idiom needs::

        saving = sum(op times) - passes * (median full-size op time)

    with ``passes`` from :data:`FUSED_PASSES`: one for an elementwise idiom (read, write),
    two for a norm or a softmax (read for the statistic, read again to normalise and write).

    RMSNorm on CPU has no eager fused form (``torch.rms_norm`` runs pow / mean / add_ /
    rsqrt / mul itself): its fused form is ``torch.compile``'s, which makes two passes where
    the CPU has SIMD and is slower than eager where it has none (see :data:`_SCALAR_CPU`).
    There every full-size pass stays and what goes is the per-row work between them (the
    ``+ eps``, the ``rsqrt``, done in place on the statistic)::

        saving = sum(per-row op times)

    Calibrated with ``hint.verify()`` on CPU (AVX-512) at 256x1024 float32, one thread:
    RMSNorm estimated 134 us a call against 113 measured (compiled), LayerNorm within a
    factor of two (tests/test_fusion.py checks both).
    """
    if len(times) < 2:
        return 0.0
    passes = _fused_passes(pattern, backend)
    if passes is None:
        return sum(t for t, f in zip(times, full) if not f)
    pass_ns = statistics.median([t for t, f in zip(times, full) if f] or times)
    return max(0.0, sum(times) - passes * pass_ns)


def _suggestion(pattern: str, backend: str, m: Match) -> str:
    x = m.x
    d = x.sizes[-1] if x is not None and x.sizes else "d"
    fused = backend in ("cuda", "neuron")
    if pattern == "rms_norm":
        call = f"torch.nn.functional.rms_norm(x, ({d},), weight, eps)"
        if fused:
            return f"use {call} (or torch.compile the module)"
        return f"torch.compile the module ({call} is no faster on CPU: it runs these same ops)"
    if pattern == "layer_norm":
        return f"use torch.nn.functional.layer_norm(x, ({d},), weight, bias, eps)"
    if pattern == "softmax":
        return "use torch.softmax(x, dim=-1)"
    if pattern == "gelu":
        if m.params.get("approximate") == "tanh":
            return 'use torch.nn.functional.gelu(x, approximate="tanh")'
        return "use torch.nn.functional.gelu(x)"
    if pattern == "attention":
        return "use torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=...)"
    if pattern == "silu_mul":
        kernel = "NKI's fused SwiGLU kernel" if backend == "neuron" else "a fused SwiGLU kernel"
        return f"torch.compile the MLP block (silu(gate) * up), or {kernel}"
    if pattern == "rotary_embedding":
        kernel = "the Neuron fused rotary kernel" if backend == "neuron" else "a fused rotary kernel"
        return f"torch.compile the rotary embedding, or {kernel}"
    return "torch.compile this region: its elementwise ops fuse into one kernel"


def _line_of(loc: str) -> int:
    tail = loc.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _location(m: Match) -> str | None:
    """The user's line of the op that ends the idiom (its result's line), else the first op
    with a known line."""
    for n in [m.nodes[-1], *m.nodes]:
        if n.location is not None:
            return n.location
        if n.event is not None:
            loc = user_location(n.event)
            if loc is not None:
                n.location = loc
                return loc
    return None


def hints_from_matches(matches: list[Match], g: OpGraph, backend: str, confidence: str) -> list[Hint]:
    """Group matches (pattern, ops, location, input shape) into hints, largest saving first."""
    # One hint per idiom, op sequence and source file: the layers of a model share one
    # RMSNorm line, and rotary's q and k lines (of other shapes under grouped-query
    # attention) are one idiom; the hint points at the first line.
    groups: dict[tuple[Any, ...], list[Match]] = {}
    for m in matches:
        loc = _location(m)
        file = loc.rsplit(":", 1)[0] if loc else None
        groups.setdefault((m.pattern, m.names, file), []).append(m)
    hints: list[Hint] = []
    for (pattern, names, _file), ms in groups.items():
        locs = [loc for m in ms if (loc := _location(m)) is not None]
        loc = min(locs, key=_line_of) if locs else None
        x = ms[0].x
        sizes, dtype = (x.sizes, x.dtype) if x is not None else (None, None)
        # Per op position, the median over occurrences: one occurrence slowed by the machine
        # (a page fault, another process) does not inflate the estimate.
        first = ms[0]
        kept = [i for i, n in enumerate(first.nodes) if not (pattern == "attention" and n.op in _MATMULS)]
        per_op = [statistics.median(g.time_ns(m.nodes[i]) for m in ms) for i in kept]
        saving_ns = estimate_saving_ns(pattern, per_op, _full_size([first.nodes[i] for i in kept]), backend) * len(ms)
        time_ns = sum(g.time_ns(n) for m in ms for n in m.nodes)
        saving_ns = min(saving_ns, time_ns)  # medians can add up to more than the total
        if saving_ns < MIN_SAVING_NS:
            continue
        details: dict[str, Any] = {
            "shape": list(sizes) if sizes is not None else None,
            "dtype": dtype or None,
            "input_shapes": [[list(t.sizes) for t in n.inputs] for n in first.nodes],
            "dtypes": sorted({t.dtype for n in first.nodes for t in n.inputs if t.dtype}),
            "device": _device_of(backend),
            "backend": backend,
            "time_source": "device" if g.has_device else "cpu",
            "estimate_model": _model_text(pattern, backend),
            **first.params,
        }
        hints.append(
            Hint(
                kind="fusion",
                pattern=pattern,
                ops=list(names),
                calls=len(ms),
                time_us=time_ns / 1e3,
                est_saving_us=saving_ns / 1e3,
                suggestion=_suggestion(pattern, backend, first),
                location=loc,
                confidence=confidence,
                details=details,
            )
        )
    hints.sort(key=lambda h: h.est_saving_us, reverse=True)
    return hints


def _fused_passes(pattern: str, backend: str) -> int | None:
    """Passes the fused form makes, or None where the backend has no faster fused form."""
    if pattern == "rms_norm" and backend == "cpu" and _cpu_capability() in _SCALAR_CPU:
        return None
    return FUSED_PASSES.get(pattern, 1)


@functools.cache
def _cpu_capability() -> str:
    """torch's CPU capability where it tells SIMD from none (x86: "AVX2", "AVX512",
    "DEFAULT"), else "SIMD": on ARM torch says "DEFAULT" for NEON and SVE-128 CPUs, where
    Inductor still vectorises (``torch._inductor.cpu_vec_isa``)."""
    import platform

    import torch

    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        return "SIMD"
    return str(torch.backends.cpu.get_cpu_capability())


def _model_text(pattern: str, backend: str) -> str:
    """The estimate's model in words, for the hint's details (see estimate_saving_ns)."""
    passes = _fused_passes(pattern, backend)
    per_op = "per call, from each op's median over the calls"
    if passes is None:
        return f"no faster fused kernel on this {backend} (no SIMD): the per-row ops' time, {per_op}"
    return f"sum(op times) - {passes} pass(es) x median full-size op time, {per_op}"


def _full_size(nodes: list[OpNode]) -> list[bool]:
    """Which ops work on the whole tensor: those with an input at least half the size of the
    largest input of the chain (a per-row statistic or a weight is much smaller). Without
    shapes (a capture without record_shapes), by name: a root and the ``+ eps`` before it
    work on the per-row statistic."""
    if not any(n.inputs for n in nodes):
        ops = [n.op for n in nodes]
        nxt = ops[1:] + [""]
        return [not (op in _ROOTS or (op == "add" and after in _ROOTS)) for op, after in zip(ops, nxt)]
    sizes = [max((t.numel for t in n.inputs), default=0) for n in nodes]
    top = max(sizes, default=0)
    return [s * 2 >= top for s in sizes]


def _device_of(backend: str) -> str:
    return {"cuda": "cuda", "neuron": "neuron"}.get(backend, "cpu")


def fusion_hints(ctx: AnalysisContext) -> list[Hint]:
    """Fusion candidates in a capture, largest estimated saving first.

    Live captures (``ctx.profiler`` set) are matched by data flow; trace files, and live
    captures made without ``record_shapes=True``, by op order (``confidence="sequence"``).
    """
    graph: OpGraph | None = None
    # Without record_shapes=True the event tree has no tensor inputs to follow: skip it.
    if ctx.profiler is not None and getattr(ctx.profiler, "record_shapes", True):
        graph = graph_from_profiler(ctx.profiler, ctx.table)
    # A capture without record_shapes=True has no tensor inputs to follow: op order it is.
    if graph is not None and any(n.inputs for n in graph.nodes):
        confidence = "dataflow"
        if graph.linking != "exact":
            observed = observed_graph(ctx.extra.get("observed"))
            if observed is not None:
                graph = graph_with_observation(graph, observed)
            else:
                confidence = "inferred"  # pointer guesses: no elementwise_chain is claimed on them
        # An optimizer's update is torch.optim's code, not the user's idioms: one hint for it.
        steps = optimizer_steps(graph, ctx.table)
        reserved = {i for updates in steps.values() for update in updates for i in update}
        hints = hints_from_matches(find_matches(graph, reserved), graph, ctx.backend, confidence)
        hints += optimizer_hints(graph, steps, ctx.backend, confidence)
        return hints
    locations = ctx.extra.get("locations") if isinstance(ctx.extra, dict) else None
    graph = graph_from_table(ctx.table, locations if isinstance(locations, list) else None)
    return hints_from_matches(find_sequence_matches(graph), graph, ctx.backend, "sequence")

