"""log_softmax: log-softmax written out, alone or as a hand-written cross-entropy."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from neuronscope import from_trace
from neuronscope.drive.pipeline import from_profiler


def _shifted(x: torch.Tensor) -> torch.Tensor:
    s = x - x.amax(-1, keepdim=True)
    return s - torch.log(torch.exp(s).sum(-1, keepdim=True))


def _of_softmax(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x - x.max(-1, keepdim=True).values)
    return torch.log(e / e.sum(-1, keepdim=True))


def _picked(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """makemore's: each row's probability of its target, from a softmax without the max."""
    counts = x.exp()
    return (counts / counts.sum(1, keepdim=True))[torch.arange(x.shape[0]), t]


SPELLINGS = {
    "shifted": (lambda x, t: _shifted(x), ["amax", "sub", "exp", "sum", "log", "sub"], None),
    "logsumexp": (lambda x, t: x - torch.logsumexp(x, -1, keepdim=True), ["logsumexp", "sub"], None),
    "log_of_softmax_op": (lambda x, t: torch.log(torch.softmax(x, -1)), ["softmax", "log"], None),
    "log_of_written_softmax": (lambda x, t: _of_softmax(x), ["max", "sub", "exp", "sum", "div", "log"], None),
    "gather_loss": (lambda x, t: -_shifted(x).gather(-1, t.unsqueeze(-1)).mean(), ["amax", "sub", "exp", "sum", "log", "sub", "gather"], "gather"),
    "nll_loss": (lambda x, t: F.nll_loss(torch.log(F.softmax(x, dim=-1)), t), ["softmax", "log", "nll_loss_nd"], "nll_loss_nd"),
    # makemore: the targets' probabilities picked by index, then their log (the rows' arange
    # is the loss's own: what tells each row's own target picked; cross_entropy needs none)
    "picked": (lambda x, t: -torch.log(torch.softmax(x, -1)[torch.arange(x.shape[0]), t]).mean(), ["softmax", "arange", "index", "log"], "index"),
    "picked_written": (
        lambda x, t: -_picked(x, t).log().mean(),
        ["exp", "sum", "div", "arange", "index", "log"],
        "index",
    ),
}


def _capture(fn, tmp_path: Path):  # type: ignore[no-untyped-def]
    x, t = torch.randn(32, 100), torch.randint(0, 100, (32,))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        fn(x, t)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return from_profiler(prof), from_trace(path)


@pytest.mark.parametrize("name", list(SPELLINGS))
def test_each_spelling_is_one_hint_live_and_from_its_trace(name: str, tmp_path: Path) -> None:
    fn, ops, loss = SPELLINGS[name]
    live, traced = _capture(fn, tmp_path)
    for result in (live, traced):
        (h,) = result.fusion_hints
        assert h.pattern == "log_softmax" and [o.split("::")[-1] for o in h.ops] == ops
        assert h.details.get("loss") == loss
        assert ("cross_entropy" if loss else "log_softmax(x, dim=") in h.suggestion


def test_the_fused_calls_get_no_hint(tmp_path: Path) -> None:
    for fn in (lambda x, t: F.log_softmax(x, -1), lambda x, t: F.cross_entropy(x, t), lambda x, t: torch.softmax(x, -1)):
        live, traced = _capture(fn, tmp_path)
        assert not [h for h in live.fusion_hints if h.pattern == "log_softmax"]
        assert not [h for h in traced.fusion_hints if h.pattern == "log_softmax"]


@pytest.mark.parametrize("loss", [None, "gather", "index"])
def test_verify_rebuilds_it_against_the_fused_call(loss: str | None) -> None:
    from neuronscope.result.hint import Hint

    details = {"shape": [16, 64], "dtype": "float32", "device": "cpu", "dim": -1, **({"loss": loss} if loss else {})}
    hint = Hint("fusion", "log_softmax", ["aten::amax", "aten::sub", "aten::exp", "aten::sum", "aten::log", "aten::sub"], details=details)
    v = hint.verify(compile=False)
    assert v.verified_saving_us is not None


@pytest.mark.parametrize("dim", [1, -1], ids=["dim1", "last"])
def test_log_of_a_softmax_says_the_softmax_s_dim(dim: int) -> None:
    """``log(softmax(x, dim))``: the fused softmax's recorded dim is the suggestion's, live and
    from the user's profiler (a softmax over dim 1 was dropped there as not over the last; live
    and by op order the dim was said unknown), and the suggestion, as written, is the code."""
    from neuronscope import profile_on_neuron

    def code(x: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.softmax(x, dim))

    x = torch.randn(8, 10, 16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        code(x)
    decorated = profile_on_neuron(code, export=False, backend="cpu", print_summary=False)
    decorated(x)
    decorated(x)
    for result in (from_profiler(prof), decorated.last_result):
        (h,) = [h for h in result.fusion_hints if h.pattern == "log_softmax"]
        call = h.suggestion.removeprefix("use ")
        assert call == f"torch.nn.functional.log_softmax(x, dim={dim - 3 if dim >= 0 else dim})", call
        torch.testing.assert_close(eval(call, {"torch": torch}, {"x": x}), code(x))  # our own text
