"""Log-softmax written out, alone or as a hand-written cross-entropy:
``x - max - log(sum(exp(x - max)))``, ``x - logsumexp(x)`` or ``log(softmax(x))``, then
``gather`` / ``nll_loss``; or ``log(softmax(x)[rows, target])``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType, SimpleNamespace
from typing import Any

from neuronscope.analysis.opgraph import OpNode
from neuronscope.analysis.patterns.base import SOFTMAXES, Match, Pattern, softmax_dim, softmax_on_last_dim
from neuronscope.analysis.patterns.softmax import DIMS, UNKNOWN_DIM, written_softmax
from neuronscope.analysis.patterns.spelling import Spelling, named

__all__ = ["LOG_SOFTMAX"]

def _spelling(t: Any, form: str, shift: str | None, division: str, loss: str | None, dim: int = -1) -> Any:
    """Log-softmax written out (``z - log(sum(exp(z)))``, ``z`` shifted by ``max`` / ``amax`` or
    not), through ``logsumexp``, or ``log(softmax(x))`` (softmax fused or written out); alone or
    read by ``gather`` / ``nll_loss`` (a hand-written cross-entropy)."""
    import torch

    # A loss reads rows: the log-softmax over x's last dim, then as rows (a view, no op), so
    # that a match checks the ops' shapes against x's (a dim-1 log-softmax is no loss's).
    x, dim = t.x, named("dim", -1 if loss else dim)
    if loss == "index":  # makemore: each row's probability of its target picked, then its log
        p = torch.softmax(x, dim) if form == "log(softmax)" else written_softmax(SimpleNamespace(x=x), shift=shift, form=division, dim=dim)
        rows = p.reshape(-1, p.shape[-1])
        return torch.log(rows[torch.arange(named("rows", rows.shape[0])), t.target])  # arange: the loss's own
    if form == "logsumexp":
        logp = x - torch.logsumexp(x, dim, keepdim=True)
    elif form == "log(softmax)":
        logp = torch.log(torch.softmax(x, dim))
    elif form == "log(written softmax)":
        logp = torch.log(written_softmax(SimpleNamespace(x=x), shift=shift, form=division, dim=dim))
    else:
        z = x if shift is None else x - (x.amax(dim, keepdim=True) if shift == "amax" else x.max(dim=dim, keepdim=True).values)
        logp = z - torch.log(torch.exp(z).sum(dim, keepdim=True))
    if loss:
        logp = logp.reshape(-1, logp.shape[-1])
    if loss == "gather":
        return logp.gather(dim, t.target[:, None])
    if loss == "nll_loss":
        return torch.nn.functional.nll_loss(logp, t.target, ignore_index=named("ignore_index", -100))
    return logp


def _replacement(t: Any, loss: str | None, dim: int, **_: Any) -> tuple[str, Callable[[], Any]]:
    import torch

    F = torch.nn.functional
    if loss:
        rows = t.x.reshape(-1, t.x.shape[-1])
        return "torch.nn.functional.cross_entropy", lambda: F.cross_entropy(rows, t.target)
    return "torch.nn.functional.log_softmax", lambda: F.log_softmax(t.x, dim)


_SHIFTS = (None, "max", "amax")
_FORMS = (
    {"form": ("written",), "shift": _SHIFTS, "division": ("div",)},
    {"form": ("logsumexp", "log(softmax)"), "shift": (None,), "division": ("div",)},
    {"form": ("log(written softmax)",), "shift": _SHIFTS, "division": ("div", "twice", "reciprocal")},
)
#: Alone over a dim, or read by a loss (over rows: the last dim).
_READS = ({"loss": (None,), "dim": DIMS}, {"loss": ("gather", "nll_loss"), "dim": (-1,)})
#: Or a softmax whose target probabilities are picked by index, then their log taken.
_PICKED = MappingProxyType({"form": ("log(softmax)", "log(written softmax)"), "shift": _SHIFTS, "division": ("div", "twice", "reciprocal")})
SPELLINGS = (
    *(Spelling(_spelling, {**form, **reads}, per_row=("target",)) for form in _FORMS for reads in _READS),
    Spelling(_spelling, {**_PICKED, "loss": ("index",), "dim": (-1,)}, per_row=("target",)),
)


#: The ops that end a loss: its op in what the hint says.
_LOSS_OPS = frozenset({"gather", "nll_loss_nd", "index"})


def _params(choice: Mapping[str, Any], nodes: list[OpNode]) -> dict[str, Any] | None:
    """The dim (a loss reads rows: the last), and the op of the loss where there is one; None
    for a loss whose fused softmax was recorded over a dim no cross_entropy reads classes from."""
    if choice["loss"] and not all(_classes_dim(n) for n in nodes if n.op in SOFTMAXES):
        return None
    if choice["loss"]:
        # Over the last dim only where the shapes said so, and a fused softmax's own dim (a
        # number, where recorded) is its input's last: op order alone also fits a log-softmax
        # over the classes of [N, C, H, W] read by nll_loss (segmentation).
        fused = [n for n in nodes if n.op in SOFTMAXES]
        known = bool(nodes[0].inputs and nodes[0].inputs[0].sizes) and all(n.scalars for n in fused) and softmax_on_last_dim(nodes)
        return {"dim": -1 if known else None, "loss": next(n.op for n in reversed(nodes) if n.op in _LOSS_OPS)}
    # A fused softmax's recorded dim says which dim (its shapes do not); else the shapes'.
    recorded = softmax_dim(nodes)
    return {"dim": choice["dim"] if recorded is None else recorded}


def _classes_dim(n: OpNode) -> bool:
    """May the fused softmax ``n`` normalise over a loss's classes: its last dim (the rows'
    classes), or dim 1 (cross_entropy's own, of ``[N, C, H, W]``), or a dim or rank not
    recorded? Over dim 0 of ``[N, C]`` it normalises each class over the batch: the loss then
    picks from that is no cross-entropy of ``x``."""
    dim = softmax_dim([n])
    rank = len(n.inputs[0].sizes) if n.inputs and n.inputs[0].sizes else 0
    return dim is None or not rank or dim in (-1, 1 - rank)


def _suggest(m: Match, backend: str) -> str:
    dim = m.params.get("dim")
    dim_text = UNKNOWN_DIM if dim is None else dim
    loss = m.params.get("loss")
    if loss:
        # cross_entropy takes dim 1 as the classes: logits of more than two dims ([B, T, V])
        # are passed as rows, as the code's loss reads them (unknown shapes: rows too, a no-op
        # on [N, V]). The match ends at the gather, before the code's own negation and
        # reduction (a mean or a sum: not ours to guess), or at an nll_loss, whose reduction
        # and ignore_index the call must keep.
        rows = m.x is not None and len(m.x.sizes) == 2
        args = "x, target" if rows or dim is None else "x.flatten(0, -2), target.flatten()"
        classes = (
            "; x's classes in its dim 1, as cross_entropy reads them: x.flatten(0, -2), target.flatten() where they are the last dim"
            if dim is None
            else ""
        )
        # Which rows an index picks is not recorded (its indices are no recorded input).
        picked = "; the same only where your index picks each row's own target: x[torch.arange(N), target]"
        if loss in ("gather", "index"):
            return (
                f'use torch.nn.functional.cross_entropy({args}, reduction="none") (log_softmax over dim={dim_text} and '
                f"the loss in one call: the gathered log-probabilities negated, one a row; reduce them as the code does{classes}"
                + (picked if loss == "index" else "")
                + ")"
            )
        return (
            f"use torch.nn.functional.cross_entropy({args}) (log_softmax over dim={dim_text} and the loss in one call; "
            f"pass it the nll_loss's reduction, ignore_index and weight{classes})"
        )
    return f"use torch.nn.functional.log_softmax(x, dim={dim_text})"


LOG_SOFTMAX = Pattern(
    name="log_softmax",
    spellings=SPELLINGS,
    params=_params,
    fused_passes=2,
    suggest=_suggest,
    replacement=_replacement,
)
