"""The attention hint's key as the code names it: transposed for the scores (``q @
k.transpose(-2, -1)``, ``k.mT``, ``.contiguous()`` of that, ``bmm(q, k.transpose(1, 2))``) or
already laid out ``[..., E, S]`` for them (the original GPT-2 port's ``key.permute(0, 2, 3,
1)``, SqueezeBERT's, a bmm's key made so). Each suggestion is applied as written in place of
the code it names; the trace of the run, a user's own profiler and the live capture must say
the same of the key; a trace without strides (older torch) keeps the plain reading.
"""

from __future__ import annotations

import glob
import gzip
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from user_rounds import apply, call_in, of

import neuronscope
from neuronscope import from_profiler, profile_on_neuron
from neuronscope.result.hint import Hint

pytestmark = pytest.mark.usefixtures("one_torch_thread", "no_compiled_code_yet")

D, HEADS, T = 64, 4, 8  # head dim 16 != T: a key passed in the wrong layout is a shape error
LAID_OUT = "your code's k is laid out [..., E, S] for the scores; sdpa takes [..., S, E]"


class Scores(nn.Module):
    """Causal-free self-attention from one packed projection, its key made as ``spelling``
    says, the scores' matmul taking it as made (``bmm``: heads folded into the batch)."""

    def __init__(self, spelling: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Linear(D, 3 * D)
        self.spelling = spelling
        self.sdpa: str | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        q, k, v = self.c(x).split(D, dim=2)
        heads = lambda t: t.view(B, S, HEADS, D // HEADS)
        # q, k, v split into heads in that order, as the original GPT-2 port's split_heads
        q = heads(q).permute(0, 2, 1, 3)
        if self.spelling == "permute(0, 2, 3, 1)":  # its split_heads(k=True)
            k = heads(k).permute(0, 2, 3, 1)
        elif self.spelling == "bmm, laid out":
            k = heads(k).permute(0, 2, 3, 1).reshape(B * HEADS, D // HEADS, S)
        else:
            k = heads(k).permute(0, 2, 1, 3)
        v = heads(v).permute(0, 2, 1, 3)
        if self.spelling.startswith("bmm"):
            q, v = (t.reshape(B * HEADS, S, D // HEADS) for t in (q, v))
            if self.spelling == "bmm":
                k = k.reshape(B * HEADS, S, D // HEADS)
        if self.sdpa is not None:
            return apply(self.sdpa, q=q, k=k, v=v)
        if self.spelling == "bmm":
            scores = torch.bmm(q, k.transpose(-1, -2))
        elif self.spelling == "bmm, laid out":
            scores = torch.bmm(q, k)
        elif self.spelling == "bmm, transposed then folded":  # a copy that also changes the shape
            scores = torch.bmm(q, k.transpose(-2, -1).reshape(B * HEADS, D // HEADS, S))
        elif self.spelling == "transpose(-2, -1)":
            scores = torch.matmul(q, k.transpose(-2, -1))
        elif self.spelling == "mT":
            scores = q @ k.mT
        elif self.spelling == "transpose(2, 3).contiguous()":
            scores = torch.matmul(q, k.transpose(2, 3).contiguous())
        else:
            scores = torch.matmul(q, k)
        p = F.softmax(scores / math.sqrt(D // HEADS), dim=-1)
        return torch.bmm(p, v) if self.spelling.startswith("bmm") else torch.matmul(p, v)


def no_grad(m: nn.Module) -> Callable[..., torch.Tensor]:
    def forward(*x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return m(*x)

    return forward


X = torch.randn(2, T, D, generator=torch.Generator().manual_seed(1))
LAID_OUT_SPELLINGS = ("permute(0, 2, 3, 1)", "bmm, laid out")
TRANSPOSED_SPELLINGS = ("transpose(-2, -1)", "mT", "transpose(2, 3).contiguous()", "bmm")


def run(spelling: str, tmp: Path) -> tuple[Scores, Callable[..., torch.Tensor], dict[str, list[Hint]]]:
    """The module, its forward, and its attention hints: live, from the run's trace, and
    from a user's own profiler (with and without profile_memory's exact links)."""
    m = Scores(spelling).eval()
    fwd = no_grad(m)
    f = profile_on_neuron(fwd, backend="cpu", export=True, output_dir=str(tmp), print_summary=False)
    f(X)
    f(X)
    r = f.last_result
    (trace,) = glob.glob(os.path.join(str(r.run_dir), "trace.json*"))
    got = {"live": of(r.hints, "attention"), "trace": of(neuronscope.from_trace(trace).hints, "attention")}
    for memory in (False, True):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, profile_memory=memory) as prof:
            fwd(X)
        got[f"profiler, memory={memory}"] = of(from_profiler(prof).hints, "attention")
    return m, fwd, got


@pytest.mark.parametrize("spelling", LAID_OUT_SPELLINGS + TRANSPOSED_SPELLINGS)
def test_the_suggested_call_holds_for_the_key_as_the_code_names_it(spelling: str, tmp_path: Path) -> None:
    m, fwd, got = run(spelling, tmp_path)
    expected = fwd(X)
    (att,) = got["live"]
    m.sdpa = call_in(att.suggestion, "scaled_dot_product_attention")
    torch.testing.assert_close(fwd(X), expected, atol=1e-5, rtol=1e-4)
    laid_out = spelling in LAID_OUT_SPELLINGS
    assert ("k.transpose(-2, -1)" in att.suggestion) is laid_out and (LAID_OUT in att.suggestion) is laid_out
    # The same reading of the key from the run's trace and from the user's own profiler.
    for source, hints in got.items():
        (h,) = hints
        assert (LAID_OUT in h.suggestion) is laid_out, (source, h.suggestion)
        assert bool(h.details.get("key_laid_out")) is laid_out, source


def test_a_key_transposed_then_folded_by_a_copy_reads_alike_everywhere(tmp_path: Path) -> None:
    """``bmm(q, k.transpose(-2, -1).reshape(B * H, E, S))``: the copy that folds the heads into
    the batch changes the shape, and the key it copies is still the code's transposed one, live,
    from the trace and from the user's profiler (a trace once found no copy of the key's shape
    and read it as laid out)."""
    _, _, got = run("bmm, transposed then folded", tmp_path)
    for source, hints in got.items():
        (h,) = hints
        assert not h.details.get("key_laid_out") and LAID_OUT not in h.suggestion, (source, h.suggestion)


@pytest.mark.parametrize("strides", ["removed", "no list", [[1, "x"]], [[1]], [[]]])
def test_a_trace_without_strides_keeps_the_plain_reading(strides: Any, tmp_path: Path) -> None:
    """A trace torch wrote no ``Input Strides`` in (older torch), or wrote them unlike its
    ``Input Dims``: the layout is not known, so the hint says what it said before, and
    nothing of the key's layout."""
    _, _, got = run("permute(0, 2, 3, 1)", tmp_path / "run")
    (trace,) = glob.glob(str(tmp_path / "run" / "**" / "trace.json*"), recursive=True)
    opened: Any = gzip.open if trace.endswith(".gz") else open
    with opened(trace, "rt") as f:
        doc = json.load(f)
    changed = 0
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        if "Input Strides" in args:
            changed += 1
            if strides == "removed":
                del args["Input Strides"]
            else:
                args["Input Strides"] = strides
    assert changed
    old = tmp_path / "old_trace.json"
    old.write_text(json.dumps(doc))
    (h,) = of(neuronscope.from_trace(str(old)).hints, "attention")
    assert "scaled_dot_product_attention(q, k, v" in h.suggestion and LAID_OUT not in h.suggestion
    assert "key_laid_out" not in h.details
    (with_strides,) = got["trace"]
    assert with_strides.suggestion.replace("k.transpose(-2, -1)", "k").replace(f" ({LAID_OUT})", "") == h.suggestion
