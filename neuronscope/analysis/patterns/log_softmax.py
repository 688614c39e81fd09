"""Log-softmax written out, alone or as a hand-written cross-entropy:
``x - max - log(sum(exp(x - max)))``, ``x - logsumexp(x)`` or ``log(softmax(x))``, then
``gather`` / ``nll_loss``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from neuronscope.analysis.opgraph import OpGraph, OpNode
from neuronscope.analysis.patterns.base import SOFTMAXES, Match, Pattern, same_value, single_consumer
from neuronscope.analysis.patterns.softmax import UNKNOWN_DIM, match_softmax, reduced_dims, written_softmax
from neuronscope.analysis.patterns.spelling import Spelling, builder

__all__ = ["LOG_SOFTMAX", "match_log_softmax"]

#: What reads log-probabilities in a hand-written cross-entropy (the loss the fused call computes).
LOSSES = frozenset({"gather", "nll_loss", "nll_loss_nd", "nll_loss2d"})


def _spelling(t: Any, form: str, shift: str | None, division: str, loss: str | None) -> Any:
    """Log-softmax written out (``z - log(sum(exp(z)))``, ``z`` shifted by ``max`` / ``amax`` or
    not), through ``logsumexp``, or ``log(softmax(x))`` (softmax fused or written out); alone or
    read by ``gather`` / ``nll_loss`` (a hand-written cross-entropy)."""
    import torch

    x, dim = (t.x.reshape(-1, t.x.shape[-1]), -1) if loss else (t.x, t.dim)  # a loss reads rows
    if form == "logsumexp":
        logp = x - torch.logsumexp(x, dim, keepdim=True)
    elif form == "log(softmax)":
        logp = torch.log(torch.softmax(x, dim))
    elif form == "log(written softmax)":
        logp = torch.log(written_softmax(SimpleNamespace(x=x, dim=dim), shift=shift, form=division))
    else:
        z = x if shift is None else x - (x.amax(dim, keepdim=True) if shift == "amax" else x.max(dim=dim, keepdim=True).values)
        logp = z - torch.log(torch.exp(z).sum(dim, keepdim=True))
    if loss == "gather":
        return logp.gather(-1, t.target[:, None])
    if loss == "nll_loss":
        return torch.nn.functional.nll_loss(logp, t.target)
    return logp


def _replacement(t: Any, loss: str | None, **_: Any) -> tuple[str, Callable[[], Any]]:
    import torch

    F = torch.nn.functional
    if loss:
        rows = t.x.reshape(-1, t.x.shape[-1])
        return "torch.nn.functional.cross_entropy", lambda: F.cross_entropy(rows, t.target)
    return "torch.nn.functional.log_softmax", lambda: F.log_softmax(t.x, t.dim)


SPELLINGS = (
    Spelling(
        _spelling,
        {"form": ("written", "logsumexp", "log(softmax)", "log(written softmax)"), "shift": (None, "max", "amax"),
         "division": ("div", "twice", "reciprocal"), "loss": (None, "gather", "nll_loss")},
    ),
)


def _written_out(g: OpGraph, n: OpNode) -> tuple[list[OpNode], Any, int | None] | None:
    """``shifted - log(sum(exp(shifted)))``, ``shifted`` being ``x - max(x)`` or ``x`` itself."""
    if n.op != "sub" or len(n.inputs) != 2:
        return None
    log = g.producer(n, 1)
    s = g.producer(log, 0) if log is not None and log.op == "log" else None
    e = g.producer(s, 0) if s is not None and s.op == "sum" else None
    if log is None or s is None or e is None or e.op != "exp" or not e.inputs or not same_value(g, e, 0, n, 0):
        return None
    dims = reduced_dims(s, log.inputs[0]) if log.inputs else None
    if dims is not None and len(dims) != 1:
        return None  # a sum over several dims: no log-softmax
    nodes, x = [n, log, s, e], n.inputs[0]
    sub = g.producer(n, 0)
    mx = g.producer(sub, 1) if sub is not None and sub.op == "sub" and len(sub.inputs) == 2 else None
    if sub is not None and mx is not None and mx.op in ("max", "amax") and mx.inputs and same_value(g, mx, 0, sub, 0):
        nodes += [sub, mx]
        x = sub.inputs[0]
    return nodes, x, dims[0] if dims else None


def _via_logsumexp(g: OpGraph, n: OpNode) -> tuple[list[OpNode], Any, int | None] | None:
    """``x - logsumexp(x, dim, keepdim=True)``."""
    lse = g.producer(n, 1) if n.op == "sub" and len(n.inputs) == 2 else None
    if lse is None or lse.op != "logsumexp" or not lse.inputs or not same_value(g, lse, 0, n, 0):
        return None
    dims = reduced_dims(lse, n.inputs[1])
    if dims is not None and len(dims) != 1:
        return None
    return [n, lse], n.inputs[0], dims[0] if dims else None


def match_log_softmax(g: OpGraph, n: OpNode) -> Match | None:
    """Log-softmax ending at ``n`` (the ``sub`` of the written-out form, or ``log`` of a
    softmax), with the ``gather`` / ``nll_loss`` that reads it where there is one."""
    found = _written_out(g, n) or _via_logsumexp(g, n)
    if found is None and n.op == "log" and n.inputs:
        p = g.producer(n, 0)
        if p is not None and p.op in SOFTMAXES and p.inputs:
            found = [p, n], p.inputs[0], p.consts[0] if p.consts and isinstance(p.consts[0], int) else None
        elif p is not None and (soft := match_softmax(g, p)) is not None:
            found = [*soft.nodes, n], soft.x, soft.params.get("dim")
    if found is None:
        return None
    nodes, x, dim = found
    params: dict[str, Any] = {"dim": dim}
    loss = single_consumer(g, n)
    if loss is not None and loss.op in LOSSES:
        nodes.append(loss)
        params["loss"] = loss.op
    return Match("log_softmax", sorted(set(nodes), key=lambda m: m.index), x, params)


def _suggest(m: Match, backend: str) -> str:
    dim = m.params.get("dim")
    dim_text = UNKNOWN_DIM if dim is None else dim
    if m.params.get("loss"):
        return f"use torch.nn.functional.cross_entropy(x, target) (log_softmax over dim={dim_text} and the loss in one call)"
    return f"use torch.nn.functional.log_softmax(x, dim={dim_text})"


def _sequence_params(members: list[OpNode]) -> dict[str, Any]:
    """A trace's log-softmax: over the last dim where shapes were recorded, else not known."""
    params: dict[str, Any] = {"dim": -1} if all(m.inputs for m in members) else {}
    if members[-1].op in LOSSES:
        params["loss"] = members[-1].op
    return params


LOG_SOFTMAX = Pattern(
    name="log_softmax",
    match=match_log_softmax,
    spellings=SPELLINGS,
    sequence_shapes="row",
    fused_passes=2,
    suggest=_suggest,
    verify=builder(SPELLINGS, _replacement),
    sequence_params=_sequence_params,
)
