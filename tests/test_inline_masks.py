"""Attention whose causal mask is built inside the forward, between the scores and the
``masked_fill`` (``torch.tril(torch.ones(T, T)) == 0``, ``arange`` comparisons,
``torch.full(...).triu(1)`` added...): op order holds the mask's own ops (``ones``, ``tril``,
``eq``) amid the attention's. It is found live, from the user's own ``torch.profiler`` and from
that profiler's exported trace, with the same ops (the mask's left out), and the suggested call,
applied as written with the mask it names, gives the module's output. A softmax with ops after
it that build no mask it takes in, and the idioms around such ops, stay as op order had them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from neuronscope import from_profiler, from_trace, profile_on_neuron
from neuronscope.analysis import fusion
from neuronscope.analysis.patterns.attention import UNKNOWN_SCALE
from neuronscope.result.hint import Hint

pytestmark = pytest.mark.usefixtures("one_torch_thread")

B, T, C, H = 2, 8, 64, 4
D = C // H  # not T: by op order a [B, H, T, D] tensor is no scores of [B, H, T, T]

#: How code builds its causal mask in the forward: (the mask, True where attention is blocked
#: for masked_fill / the float tensor added to the scores, whether it is added).
MASKS: dict[str, tuple[Callable[[nn.Module], torch.Tensor], bool]] = {
    "tril_ones_eq": (lambda m: torch.tril(torch.ones(T, T)) == 0, False),
    "triu_ones_bool": (lambda m: torch.triu(torch.ones(T, T), diagonal=1).bool(), False),
    "bool_ones_triu": (lambda m: torch.ones(T, T, dtype=torch.bool).triu(1), False),
    "ones_tril_view_eq": (lambda m: torch.ones(T, T).tril().view(1, 1, T, T) == 0, False),
    "arange_lt": (lambda m: torch.arange(T)[:, None] < torch.arange(T)[None, :], False),
    "buffer_slice_eq": (lambda m: m.bias[:, :, :T, :T] == 0, False),
    "full_triu_added": (lambda m: torch.full((T, T), float("-inf")).triu(1), True),
}


class CausalAttention(nn.Module):
    """nanoGPT's attention, its causal mask built by ``mask``."""

    def __init__(self, mask: Callable[[nn.Module], torch.Tensor], added: bool) -> None:
        super().__init__()
        self.mask, self.added = mask, added
        self.qkv, self.o = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.register_buffer("bias", torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16))

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(t.view(B, T, H, D).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.heads(x)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = self.mask(self)
        att = att + mask if self.added else att.masked_fill(mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        return self.o((att @ v).transpose(1, 2).contiguous().view(B, T, C))


def _attention(hints: list[Hint]) -> Hint:
    (hint,) = [h for h in hints if h.pattern == "attention"]
    return hint


def _three_ways(module: nn.Module, x: torch.Tensor, tmp_path: Path) -> dict[str, list[Hint]]:
    """The hints on ``module(x)`` live (decorated, default options), from the user's own
    profiler with shapes, and from that profiler's exported trace."""
    f = profile_on_neuron(module.forward, export=False, backend="cpu", print_summary=False)
    with torch.no_grad():
        f(x)
        f(x)
        with torch.profiler.profile(record_shapes=True) as prof:
            module(x)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    return {"live": f.last_result.hints, "from_profiler": from_profiler(prof).hints, "from_trace": from_trace(trace).hints}


def _applied(hint: Hint, module: CausalAttention, x: torch.Tensor) -> torch.Tensor:
    """The module's output with its attention replaced by the hint's call as written: q, k, v
    as the code makes them, ``cond`` / ``mask`` the mask it builds (what the hint names)."""
    (call,) = re.findall(r"torch\.nn\.functional\.scaled_dot_product_attention\((?:[^()]|\([^()]*\))*\)", hint.suggestion)
    # A trace records no numbers: the op-order hint names the scale for the user to fill in.
    call = call.replace(UNKNOWN_SCALE, repr(D**-0.5))
    with torch.no_grad():
        q, k, v = module.heads(x)
        built = module.mask(module)
        names = {"q": q, "k": k, "v": v, "cond": built, "mask": built}
        out = eval(call, {"torch": torch}, names)  # our own text
        return module.o(out.transpose(1, 2).contiguous().view(B, T, C))


@pytest.mark.parametrize("form", list(MASKS))
def test_an_inline_causal_mask_is_found_by_op_order_as_live(form: str, tmp_path: Path) -> None:
    """Each mask form: the attention by op order (the user's profiler, its trace) holds the
    live hint's ops and calls, without the mask's own ops, and says the same mask."""
    torch.manual_seed(0)
    mask, added = MASKS[form]
    module, x = CausalAttention(mask, added).eval(), torch.randn(B, T, C)
    hints = _three_ways(module, x, tmp_path)
    live = _attention(hints["live"])
    assert [op.removeprefix("aten::") for op in live.ops] == ["matmul", "mul", "add" if added else "masked_fill", "softmax", "matmul"]
    for how in ("from_profiler", "from_trace"):
        seq = _attention(hints[how])
        assert seq.confidence == "sequence", how
        assert (seq.ops, seq.calls) == (live.ops, live.calls), (how, seq.ops, live.ops)
        assert seq.details["mask"] == live.details["mask"] == ("add" if added else "masked_fill"), how


@pytest.mark.parametrize("form", list(MASKS))
def test_the_suggestion_with_the_mask_it_names_is_the_module(form: str, tmp_path: Path) -> None:
    """Live and by op order, the suggested sdpa call with the mask the code builds (``~cond``
    for a masked_fill, ``mask`` for one added) gives the module's output."""
    torch.manual_seed(0)
    mask, added = MASKS[form]
    module, x = CausalAttention(mask, added).eval(), torch.randn(B, T, C)
    with torch.no_grad():
        expected = module(x)
    for how, hints in _three_ways(module, x, tmp_path).items():
        torch.testing.assert_close(_applied(_attention(hints), module, x), expected, atol=1e-5, rtol=1e-4, msg=how)


@pytest.mark.parametrize("form", list(MASKS))
def test_without_shapes_op_order_and_the_declaration_say_it(form: str) -> None:
    """A profiler run without ``record_shapes``: op order alone, the mask's ops left out."""
    torch.manual_seed(0)
    mask, added = MASKS[form]
    module, x = CausalAttention(mask, added).eval(), torch.randn(B, T, C)
    with torch.no_grad(), torch.profiler.profile() as prof:
        module(x)
    hint = _attention(from_profiler(prof).hints)
    assert [op.removeprefix("aten::") for op in hint.ops] == ["matmul", "mul", "add" if added else "masked_fill", "softmax", "matmul"]
    # What op order alone took for the mask's ops, said (a buffer's slice compared is no such op).
    assert ("no shapes were recorded" in hint.suggestion) == bool(hint.details.get("built_unseen")) == (form != "buffer_slice_eq")


def _as_before(monkeypatch: pytest.MonkeyPatch, prof: Any) -> list[tuple[Any, ...]]:
    """The op-order hints of ``prof`` now, and as op order had them before ops building a
    tensor from nothing were left out (none is): they must be the same."""
    now = [(h.pattern, h.ops, h.calls, h.details.get("mask")) for h in from_profiler(prof).hints]
    with monkeypatch.context() as m:
        m.setattr(fusion, "built_runs", lambda seq: [])
        before = [(h.pattern, h.ops, h.calls, h.details.get("mask")) for h in from_profiler(prof).hints]
    assert now == before
    return now


def test_a_softmax_then_ops_that_are_no_mask_stay_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scores, then a tensor built from nothing that no op of the attention takes in (position
    ids, added after the softmax; a mask filling another tensor), then the softmax: no
    attention by op order, as before (live follows the data: it is an attention there)."""
    torch.manual_seed(0)
    q, k, v, other = (torch.randn(B, H, T, D) for _ in range(4))

    def scores_then_positions() -> torch.Tensor:
        s = (q @ k.transpose(-2, -1)) * D**-0.5
        pos = torch.arange(T).view(1, 1, T, 1).to(torch.float32)  # built from nothing, taken in after
        p = torch.softmax(s, dim=-1)
        return p @ v + pos

    def mask_of_another_tensor() -> torch.Tensor:
        s = (q @ k.transpose(-2, -1)) * D**-0.5
        filled = other.masked_fill(torch.tril(torch.ones(T, D)) == 0, 0.0)  # not the scores
        return torch.softmax(s, dim=-1) @ v + filled

    for fn in (scores_then_positions, mask_of_another_tensor):
        with torch.no_grad(), torch.profiler.profile(record_shapes=True) as prof:
            fn()
        assert [h for h in _as_before(monkeypatch, prof) if h[0] == "attention"] == [], fn.__name__


def test_other_idioms_around_a_tensor_built_from_nothing_stay_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """A factory op right before an RMSNorm that casts first, and a GELU after a ``ones``
    multiplied in: their hints by op order are what they were (only an idiom declaring a side
    tensor built in place leaves such ops out)."""
    torch.manual_seed(0)
    x, w = torch.randn(B, T, C, dtype=torch.bfloat16), torch.randn(C)

    def norm_and_gelu() -> torch.Tensor:
        ones = torch.ones(C)
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        y = (w * h).to(torch.bfloat16).float() * torch.ones(C)
        return 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * torch.pow(y, 3.0)))) + ones

    with torch.no_grad(), torch.profiler.profile(record_shapes=True) as prof:
        norm_and_gelu()
    found = _as_before(monkeypatch, prof)
    assert {h[0] for h in found} >= {"rms_norm", "gelu"}, found
