"""Attention written out: ``q @ k^T``, a scale (on the scores, on q or k, or none), an optional
mask, softmax (fused or written out), ``@ v``: its spellings, matched by the graph matcher with
what lies between the matmuls and the softmax as a slot of the ops the spellings write there.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Any

from neuronscope.analysis.opgraph import OpGraph, OpNode
from neuronscope.analysis.patterns.base import BUILT_UNSEEN, MATMULS, SOFTMAXES, Match, Pattern, softmax_on_last_dim
from neuronscope.analysis.patterns.key_layout import key_laid_out_for_scores
from neuronscope.analysis.patterns.matcher import graph_matcher, read_elsewhere
from neuronscope.analysis.patterns.spelling import Spelling, elementwise_slot, named
from neuronscope.capture.frames import modules_of

__all__ = ["ATTENTION"]


def _spelling(t: Any, matmul: str, scale: str | None, mask: str | None, softmax: str, dropout: bool) -> Any:
    """Attention written out: ``q @ k^T`` (``matmul``, ``bmm``, ``einsum``, or Bloom's
    ``baddbmm`` with the scale as its alpha), scaled on the scores (``*`` or ``/``) or on q
    first (timm's ``q * scale``, XLM's ``q / sqrt(d)``), masked by an add (XGLM's kept above a floor), ``masked_fill`` (of a boolean mask, or of ``mask == 0``) or
    ``where``, softmax (fused, fused in float32 and cast back, on a float32 copy cast back as
    T5 does, or written out), dropout, ``@ v``. What code writes between the scores and the
    softmax, and between the softmax and ``@ v``, are slots: any chain of the ops written there."""
    import torch

    F = torch.nn.functional
    q, k, v = t.q, t.k, t.v
    d = q.shape[-1]
    if scale == "q":
        q = q * named("scale", d**-0.5)
    elif scale == "q_div":  # XLM, Flaubert, LayoutLMv2: ``q / math.sqrt(d)``
        q = q / named("scale", math.sqrt(d))
    if matmul == "baddbmm":
        q3, k3 = q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:])
        s = torch.baddbmm(t.mask.reshape(-1, *t.mask.shape[-2:]), q3, k3.transpose(1, 2), beta=1.0, alpha=named("scale", d**-0.5)).view(t.mask.shape)
    elif matmul == "einsum":
        s = torch.einsum("bhqd,bhkd->bhqk", q, k)
    elif matmul == "bmm":
        s = torch.bmm(q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:]).transpose(1, 2)).view(t.mask.shape)
    else:
        s = torch.matmul(q, k.transpose(-2, -1))

    masked = []  # T5 casts its softmax back to its scores' dtype

    def scaled_and_masked(s: Any) -> Any:
        if scale == "mul":
            s = s * d**-0.5
        elif scale == "div":
            s = s / math.sqrt(d)
        if mask in ("add", "bias, add", "bias, masked_fill", "add, clamp"):  # T5, MPT: a position bias, then the mask
            s = s + t.mask
        if mask == "bias, add":
            s = s + t.mask
        elif mask == "add, clamp":  # XGLM: the masked scores kept above the dtype's lowest
            s = torch.max(s, torch.full((), -1e9))
        elif mask in ("masked_fill", "bias, masked_fill"):
            s = s.masked_fill(t.bool_mask, -1e9)
        elif mask == "eq, masked_fill":
            s = s.masked_fill(t.mask == 0, -1e9)
        elif mask in ("where", "where, add"):
            s = torch.where(t.bool_mask, s, -1e9)
        if mask == "where, add":  # GPT-Neo: the causal where, then the padding mask added
            s = s + t.mask
        masked.append(s)
        return s.float() if softmax == "t5" else s

    def cast_and_dropped(p: Any) -> Any:
        p = p.to(q.dtype) if softmax == "float32" else p.type_as(masked[0]) if softmax == "t5" else p
        return F.dropout(p, p=0.1, training=True) if dropout else p

    s = elementwise_slot(t, s, scaled_and_masked)
    if softmax in ("fused", "t5"):
        p = s.softmax(dim=t.dim)
    elif softmax == "float32":
        p = F.softmax(s, dim=t.dim, dtype=torch.float32)
    else:
        e = torch.exp(s - s.amax(t.dim, keepdim=True)) if softmax == "amax" else torch.exp(s)
        p = e / e.sum(t.dim, keepdim=True)
    p = elementwise_slot(t, p, cast_and_dropped)
    if matmul == "einsum":
        return torch.einsum("bhqk,bhkd->bhqd", p, v)
    if matmul in ("bmm", "baddbmm"):
        return torch.bmm(p.reshape(-1, *p.shape[-2:]), v.reshape(-1, *v.shape[-2:]))
    return torch.matmul(p, v)


_ATTENTION_CHOICES = MappingProxyType({
    "mask": (None, "add", "bias, add", "add, clamp", "masked_fill", "bias, masked_fill", "eq, masked_fill", "where", "where, add"),
    "softmax": ("fused", "float32", "t5", "amax", "plain"),
    "dropout": (False, True),
})
_MASKS = ("mask", "bool_mask")  # side tensors, which code may build in place (a causal mask)
#: What code may compute right before the op that takes it (op order: amid the idiom): the
#: masks and biases (a relative position bias gathered from its table), and ``v`` (a per-head
#: module projecting v after its softmax).
_COMPUTED = (*_MASKS, "v")
_QKV = ("q", "k", "v")  # self-attention, or views of one packed projection
SPELLINGS = (
    Spelling(_spelling, {"matmul": ("matmul", "bmm", "einsum"), "scale": (None, "mul", "div", "q", "q_div"), **_ATTENTION_CHOICES}, side=_MASKS, built=_COMPUTED, shared=_QKV),
    Spelling(_spelling, {"matmul": ("baddbmm",), "scale": (None, "q"), **_ATTENTION_CHOICES}, side=_MASKS, built=_COMPUTED, shared=_QKV),
)


_matched = graph_matcher("attention", SPELLINGS, lambda choice, nodes: {})


def match_attention(g: OpGraph, n: OpNode) -> Match | None:
    """A spelling anchored at ``n``, ``@ v``, its softmax over the keys (sdpa's; not over the
    queries, dim=1 of [B, T, T]), with what the equivalent sdpa call takes: the shapes of q, k
    and v, how the scores are masked, their scale (on the scores, or on q or k before the
    first matmul: timm, Whisper)."""
    m = _matched(g, n)
    # Weights the code reads again (summed, reused): sdpa returns none, so it would save nothing.
    if m is None or not softmax_on_last_dim(m.nodes) or read_elsewhere(g, m.nodes, m.nodes[-1]):
        return None
    mm1, mm2 = next(x for x in m.nodes if x.op in MATMULS), m.nodes[-1]
    head = next(x for x in m.nodes if x.op in SOFTMAXES or x.op in ("exp", "max", "amax"))
    pre = [x for x in m.nodes if mm1.index < x.index < head.index]
    # A scale of q or k may be read through a view (Whisper, OPT): not the spelling's ``q * s``.
    only_mm1 = [p for k_in in (0, 1) if (p := g.producer(mm1, k_in)) and {c for c in p.consumers if g.nodes[c].writes} == {mm1.index}]
    scales = {x.index: x for x in [*m.nodes, *only_mm1] if x.index < head.index and _is_scaling(x)}
    # The scores scaled by a tensor: sdpa's scale= is one number, so a tensor of more (Swin
    # v2's learned per-head logit scale) is no sdpa call, and one of one element a number the
    # capture did not record.
    by_tensor = [x for x in pre if x.op in ("mul", "div") and not _is_scaling(x)]
    if any(min(t.numel for t in x.inputs if t.sizes) > 1 for x in by_tensor):
        return None
    scales.update((x.index, x) for x in by_tensor)
    q, k_sizes = _query_and_key(mm1)
    mask = _mask_kind(mm1, pre)
    params: dict[str, Any] = {
        "q": list(q.sizes) if q else None,
        "k": k_sizes,
        "v": list(mm2.inputs[-1].sizes) if len(mm2.inputs) > 1 else None,
        "masked": mask is not None,
        "mask": mask,
    }
    scale = _scale_value(list(scales.values()), q.sizes[-1] if q is not None and q.sizes else None, _alpha(mm1))
    if scale is not None:
        params["scale"] = scale
    # The scores' ops are matched in any order: a scale after an added mask scales the mask
    # too, where sdpa adds its attn_mask to the scaled scores.
    added = [x.index for x in pre if x.op == "add" and len(x.big_inputs()) == 2]
    if mm1.op == "baddbmm" and len(mm1.big_inputs()) == 3:
        added.insert(0, mm1.index)
    if added and any(x.index > added[0] for x in pre if _is_scaling(x)):
        params["mask_scaled"] = True
    if any(x.index < mm1.index for x in scales.values()):
        # The hint takes in the scale of q or k, so its sdpa call reads them unscaled: the
        # code's scaled q with sdpa's default scale would apply it twice.
        params["scale_on_inputs"] = True
    params.update(_layout(mm1, head))
    params.update(_key_layout(g, mm1))
    if any(_is_floor(x) for x in m.nodes if mm1.index < x.index < mm2.index):
        params["floor"] = True
    nodes = {x.index: x for x in [*m.nodes, *scales.values()]}
    return dataclasses.replace(m, nodes=sorted(nodes.values(), key=lambda x: x.index), x=q, params=params)


match_attention.derived_from = SPELLINGS  # type: ignore[attr-defined]  # its templates are kept


#: The param of a key the code lays out ``[..., E, S]`` for its scores (no transpose there).
KEY_LAID_OUT = "key_laid_out"


def _key_layout(g: OpGraph, mm1: OpNode) -> dict[str, Any]:
    """``{KEY_LAID_OUT: True}`` where the scores' matmul ``mm1`` takes a key laid out for it
    (:func:`~.key_layout.key_laid_out_for_scores`), else nothing."""
    return {KEY_LAID_OUT: True} if key_laid_out_for_scores(g, mm1) else {}


def _is_floor(n: OpNode) -> bool:
    """``torch.max(scores, floor)`` (XGLM's masked scores kept above the dtype's lowest): a
    ``max`` of two tensors, no dim among its recorded numbers (a written softmax's
    ``max(dim)``; a trace records that dim, and the live capture the one tensor it takes)."""
    dims = [s for s in n.scalars if isinstance(s, int) and not isinstance(s, bool)]
    return n.op in ("max", "maximum") and len(n.inputs) >= 2 and not dims


def _layout(mm1: OpNode, head: OpNode) -> dict[str, Any]:
    """Where an einsum takes q, k and v in another layout than sdpa's ``[..., L, E]``: the
    scores' rows (their second-to-last dim) are not q's second-to-last. ``[..., L, heads, E]``
    (``bqhd,bkhd->bhqk``: LongT5's local attention, XLNet) is said ``heads_after_queries``:
    sdpa takes its q, k and v transposed, and its output is transposed back. An einsum's
    equation is no recorded argument, so its layout is read from shapes alone: where two of q's
    dims but the last are equal (heads == L, batch == L), shapes cannot tell which is which,
    and the layout is said ``unknown``."""
    # q: the einsum's first tensor (a trace records the equation as a dimensionless input)
    q = next((a.sizes for a in mm1.inputs if a.sizes), ()) if mm1.op == "einsum" else ()
    scores = head.inputs[0].sizes if head.inputs else ()
    if len(q) < 3 or len(scores) < 3:
        return {}
    if len(set(q[:-1])) < len(q) - 1:
        return {"layout": "unknown"}
    if q[-2] == scores[-2]:
        return {}
    return {"layout": "heads_after_queries" if (q[-3], q[-2]) == (scores[-2], scores[-3]) else "other"}


def _query_and_key(mm: OpNode) -> tuple[Any, list[int] | None]:
    """The query of the scores' matmul, and the key's shape as scaled_dot_product_attention
    takes it (``[..., S, E]``): a matmul, ``bmm`` or ``baddbmm`` (whose first input is the
    added mask) multiplies by ``k^T``, an einsum by ``k`` as the equation names it."""
    operands = mm.inputs[1:3] if mm.op == "baddbmm" else mm.inputs[:2]
    if len(operands) < 2:
        return (operands[0] if operands else None), None
    q, k = operands
    sizes = list(k.sizes)
    # sdpa's k ends in q's last dim (E); an einsum's may already (``bhqd,bhkd->bhqk``).
    if len(sizes) >= 2 and (mm.op != "einsum" or (q.sizes and sizes[-1] != q.sizes[-1])):
        sizes[-2], sizes[-1] = sizes[-1], sizes[-2]
    return q, sizes


#: How code masks the scores, and the ``attn_mask=`` of the equivalent scaled_dot_product_attention
#: call with what its names stand for. sdpa's boolean mask is True where attention is ALLOWED,
#: ``masked_fill``'s where it is blocked: passed as it is, it would attend to what was masked.
MASK_ARGS = MappingProxyType({
    "add": ("attn_mask=mask", "mask: the float tensor your code adds to the scores"),
    "bias, add": ("attn_mask=bias + mask", "bias + mask: the tensors your code adds to the scores, summed"),
    "masked_fill": (
        "attn_mask=~cond",
        (
            "cond: what your masked_fill fills, True where attention is blocked; sdpa's boolean "
            "attn_mask is True where it is allowed; if cond is the causal mask (above the "
            "diagonal), is_causal=True instead"
        ),
    ),
    "where": ("attn_mask=cond", "cond: your torch.where's condition, True where the scores are kept"),
    "where, inverted": ("attn_mask=~cond", "cond: your torch.where's condition, True where the fill value is taken"),
    # A Python number as the fill value is no tensor input: which side it is on is not seen.
    "where, number": (
        "attn_mask=keep",
        "keep: True where your torch.where takes the scores: its condition, inverted where the fill value comes first",
    ),
    "mixed": ("attn_mask=mask", "mask: one float tensor, what your code adds to the scores with -inf where it masks them"),
})


def _mask_kind(mm1: OpNode, pre: list[OpNode]) -> str | None:
    """How the scores are masked on their way from ``mm1`` to the softmax (``pre``, in that
    order): a key of :data:`MASK_ARGS`, or None. A ``where`` keeps the scores where its
    condition is True when they are its second input, where it is False when its third."""
    kinds: list[str] = []
    if mm1.op == "baddbmm" and len(mm1.big_inputs()) == 3:  # Bloom's alibi: added by the matmul
        kinds.append("add")
    prev = mm1
    for p in pre:
        if p.op == "add" and len(p.big_inputs()) == 2:
            kinds.append("add")
        elif p.op == "masked_fill":
            kinds.append("masked_fill")
        elif p.op == "where" and len(p.inputs) < 3:
            kinds.append("where, number")
        elif p.op == "where":
            scores_at = next((k for k, made_by in enumerate(p.producers) if made_by == prev.index), None)
            kinds.append("where" if scores_at == 1 else "where, inverted")
        prev = p
    return _mask_of(kinds)


def _mask_of(kinds: list[str]) -> str | None:
    """One :data:`MASK_ARGS` key for the masks applied in turn (``kinds``)."""
    if not kinds:
        return None
    if all(kind == "add" for kind in kinds):
        return "add" if len(kinds) == 1 else "bias, add"
    return kinds[0] if len(kinds) == 1 else "mixed"


def _is_scaling(n: OpNode) -> bool:
    """A multiply or divide by a number (a 0-dim tensor to the profiler)."""
    return n.op in ("mul", "div") and len(n.inputs) == 2 and len(n.big_inputs()) == 1


#: The ``scale=`` text where the code scales by a number the observation did not see (under
#: torch.compile it names lines without recording numbers): sdpa's default may not be it.
UNKNOWN_SCALE = "<the scale your code applies>"


def _alpha(mm: OpNode) -> float:
    """The factor a ``baddbmm`` scales its product by (``alpha``, its last number; Bloom's
    ``1/sqrt(head_dim)``): 1.0 for another matmul."""
    if mm.op != "baddbmm":
        return 1.0
    nums = [v for v in (*mm.scalars, *mm.consts) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return float(nums[-1]) if nums else 1.0


def _scale_value(scales: list[OpNode], head_dim: int | None, alpha: float = 1.0) -> float | str | None:
    """The ``scale=`` an equivalent ``scaled_dot_product_attention`` call needs: None where
    its default (``1/sqrt(head_dim)``) is right or the value was not observed, 1.0 where the
    code applies no scale at all (T5)."""
    if not scales and alpha == 1.0:
        return 1.0
    value = alpha
    for n in scales:
        if not n.consts or n.consts[0] == 0:
            return UNKNOWN_SCALE  # scaled by a number the observation could not record
        value *= n.consts[0] if n.op == "mul" else 1.0 / n.consts[0]
    if head_dim and abs(value * head_dim**0.5 - 1.0) < 1e-6:
        return None
    return value


#: Library calls that write attention out inside them, and the switch that makes them call
#: scaled_dot_product_attention instead (what the user can change: not the library's code).
COMPOSITE_SWITCHES = MappingProxyType({
    "multi_head_attention_forward": "call the nn.MultiheadAttention with need_weights=False "
    "(with the default need_weights=True it writes attention out to return the weights; without, it runs {call})",
})


@functools.lru_cache(maxsize=64)
def supports_sdpa_switch(source: str) -> bool | None:
    """Whether the model classes defined in the imported module of file ``source`` declare that
    they take ``attn_implementation="sdpa"`` (Hugging Face's ``_supports_sdpa`` convention):
    True if one does, False if they declare it and none does, None where nothing says."""
    declared = None
    for mod in modules_of(source):
        for cls in vars(mod).values():
            # Declared on the class or a base (what dir() lists, without building that list).
            if isinstance(cls, type) and cls.__module__ == mod.__name__ and any("_supports_sdpa" in vars(c) for c in cls.__mro__):
                declared = declared or bool(getattr(cls, "_supports_sdpa", False))
    return declared


def _suggest(m: Match, backend: str) -> str:
    args = ["q", "k", "v"]
    # Older results say only that there is a mask: an additive one, the common case.
    mask = m.params.get("mask") or ("add" if m.params.get("masked") else None)
    mask_arg, mask_note = MASK_ARGS.get(mask, MASK_ARGS["mixed"]) if mask else ("", "")
    if mask_arg:
        args.append(mask_arg)
    scale = m.params.get("scale")
    if scale == UNKNOWN_SCALE:
        args.append(f"scale={scale}")
    elif scale is not None:
        args.append(f"scale={scale!r}")
    layout = m.params.get("layout")
    if layout == "heads_after_queries":
        args[:3] = [f"{a}.transpose(-3, -2)" for a in args[:3]]
    notes = [mask_note] if mask_note else []
    if m.params.get(KEY_LAID_OUT):
        args[1] += ".transpose(-2, -1)"
        notes.append("your code's k is laid out [..., E, S] for the scores; sdpa takes [..., S, E]")
    call = f"torch.nn.functional.scaled_dot_product_attention({', '.join(args)})"
    if layout == "heads_after_queries":
        call += ".transpose(-3, -2)"
        notes.append(
            "your einsum takes q, k, v as [..., L, heads, E], sdpa as [..., heads, L, E]: transposed in, and its output "
            "back (drop that last transpose where your einsum returns [..., heads, L, E])"
        )
    elif layout == "other":
        notes.append("q, k, v: transposed to sdpa's [..., heads, L, E] first; your einsum takes them in another layout")
    elif layout == "unknown":
        notes.append(
            "q, k, v: sdpa takes them as [..., heads, L, E]; your einsum's shapes do not tell its layout (two of q's "
            "dims are equal): transpose them to that layout first, and the output back, where your einsum takes another"
        )
    if m.params.get("floor"):
        notes.append(
            "your code keeps the scores above a floor (torch.max), sdpa keeps none: the same only where that floor is "
            "at most every score a mask leaves (XGLM's dtype minimum); else keep it and your softmax"
        )
    if built := m.params.get(BUILT_UNSEEN):
        notes.append(
            f"no shapes were recorded: op order alone reads the ops {', '.join(map(str, built))} amid these as building the "
            "mask; if they build what the mask is applied to instead, this is no attention (record_shapes=True tells)"
        )
    if m.params.get("mask_scaled"):
        notes.append("mask: multiplied by the scale your code applies after adding it (sdpa adds attn_mask to the scores it has scaled)")
    if m.params.get("inputs_maybe_scaled"):
        notes.append(
            "q, k: before any scale your code multiplies them by, and scale= every scale it applies to q, k and "
            "the scores, multiplied (1.0 for none): op order does not show whether it scales them some ops before the scores"
        )
    elif m.params.get("scaled_before_scores"):
        notes.append(
            "q, k: before the scale your code multiplies them by; sdpa applies the scale itself. Op order does not "
            "show which of q, k and v the multiply before the scores scales: one of v stays in your code, with scale=1.0"
        )
    elif m.params.get("scale_on_inputs"):
        notes.append("q, k: before the scale your code multiplies them by; sdpa applies the scale itself")
    within = {n.within for n in m.nodes}
    if len(within) == 1 and (switch := COMPOSITE_SWITCHES.get(next(iter(within)) or "")) is not None:
        return switch.format(call="torch.nn.functional.scaled_dot_product_attention")
    sources = {n.location.rsplit(":", 1)[0] for n in m.nodes if n.location is not None}
    if sources and all(supports_sdpa_switch(src) for src in sources):
        return f'load the model with attn_implementation="sdpa" (its own switch to {call})'
    return f"use {call} ({'; '.join(notes)})" if notes else f"use {call}"


def _sequence_params(members: list[OpNode]) -> dict[str, Any]:
    """What a trace's op order shows: a mask is an add / masked_fill / where before the
    softmax; a scale is a mul / div there, by a number the trace does not record (the
    profiler writes it as a 0-dim tensor), so its value stays unknown, and one right before
    the scores (timm's ``q * scale``) is read before it; no scale op: 1.0, unless the ops
    before the match may hold one (:func:`_scaled_before`)."""
    soft = next((i for i, n in enumerate(members) if n.op in SOFTMAXES or n.op in ("exp", "max", "amax")), len(members))
    pre = [n for n in members[:soft] if n.op not in MATMULS]  # a scale of q (timm) comes before the scores
    # Op order does not show which input of a where the scores are: its mask is then named
    # by what it means ("keep"), as where a Python number is the fill value.
    kinds = [n.op if n.op != "where" else "where, number" for n in pre if n.op in ("add", "masked_fill", "where")]
    first = next((i for i, n in enumerate(members) if n.op in MATMULS), 0)
    mm = members[first] if members else None
    if mm is not None and mm.op == "baddbmm" and (not mm.inputs or len(mm.big_inputs()) == 3):
        kinds.insert(0, "add")  # Bloom's alibi, added by the matmul (as its spelling declares)
    mask = _mask_of(kinds)
    params: dict[str, Any] = {"masked": mask is not None, "mask": mask}
    # A baddbmm scales its product by its alpha (Bloom), a number only recorded shapes hold.
    alpha = _alpha(mm) if mm is not None and (mm.op != "baddbmm" or mm.scalars) else None
    params["scale"] = UNKNOWN_SCALE if alpha is None or any(n.op in ("mul", "div") for n in pre) else alpha
    if mm is not None and soft < len(members):
        params.update(_layout(mm, members[soft]))
    if any(n.op in ("mul", "div") for n in members[:first]):
        # The spelling's ``q * s`` right before the scores, or a ``v * s`` there: op order
        # does not say which (a scale of v given to sdpa as its scale= is another attention).
        params["scaled_before_scores"] = True
    return params


#: Projections that make q, k and v: a scale of q or k comes after the one that made it.
_QKV_PROJECTIONS = MATMULS | {"linear", "addmm"}


def _scaled_before(mm: OpNode | None, before: Iterable[OpNode], claimed: AbstractSet[int]) -> dict[str, Any]:
    """Whether q or k may have been scaled before a trace's attention match: a multiply or
    divide by a number after the three projections before the scores (q, k and v: Whisper
    scales q, then projects k and v), whatever the match scales itself by (Whisper's
    ``* 1.0`` on its scores). Not one that another idiom took (a GELU's ``0.5 * x``), nor,
    where shapes were recorded, one of another size than the scores' q and k (T5's position
    buckets, a rotary table). Op order does not show which tensor it scaled: the scale is not
    known and q and k are read before it. ``mm``: the match's scores' product."""
    sizes = {t.numel for t in mm.inputs if t.sizes} if mm is not None else set()
    projections = 0
    for n in before:
        if n.op in ("mul", "div") and n.index not in claimed and (not n.inputs or (_is_scaling(n) and n.inputs[n.big_inputs()[0]].numel in sizes)):
            return {"scale": UNKNOWN_SCALE, "inputs_maybe_scaled": True}
        projections += n.op in _QKV_PROJECTIONS
        if projections == 3:
            break
    return {}


def _read_before(members: list[OpNode], before: Iterable[OpNode], claimed: AbstractSet[int], g: OpGraph) -> dict[str, Any]:
    """What a trace says of an attention match from the ops before it: whether q or k may have
    been scaled there (:func:`_scaled_before`), and how the code laid out its key
    (:func:`_key_layout`, read as the graph matcher reads it)."""
    mm = next((n for n in members if n.op in MATMULS), None)
    return {**_scaled_before(mm, before, claimed), **(_key_layout(g, mm) if mm is not None else {})}


ATTENTION = Pattern(
    name="attention",
    match=match_attention,
    spellings=SPELLINGS,
    suggest=_suggest,
    cost_excludes=MATMULS,
    params=lambda choice, members: _sequence_params(members),  # its own reading of op order, not its choice
    params_before=_read_before,
)
