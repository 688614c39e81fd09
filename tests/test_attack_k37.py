"""Attacks on round 37's changes: suggestions applied as written must keep the program's output."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from neuronscope import from_profiler
from neuronscope.analysis.patterns.attention import UNKNOWN_SCALE
from neuronscope.drive.traces import from_trace

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    s = x - x.amax(dim, keepdim=True)
    return s - torch.log(torch.exp(s).sum(dim, keepdim=True))


def _hints(fn, args, tmp_path: Path, shapes: bool) -> list:  # type: ignore[no-untyped-def]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as prof:
        fn(*args)
    path = tmp_path / f"trace_{shapes}.json"
    prof.export_chrome_trace(str(path))
    return [
        h for r in (from_profiler(prof), from_trace(path)) for h in r.fusion_hints if h.pattern == "log_softmax"
    ]


def test_a_segmentation_loss_over_the_classes_dim_is_no_cross_entropy_of_rows(tmp_path: Path) -> None:
    """``nll_loss(log_softmax(x, 1), t)`` on ``[N, C, H, W]`` logits (segmentation) was read as
    a cross-entropy of rows over the last dim: ``cross_entropy(x.flatten(0, -2),
    target.flatten())``, which is another loss (or a shape error). The loss spellings ran on
    rows reshaped before the log-softmax, so no op's shape was checked against ``x``'s. With
    shapes it is now the log-softmax over dim -3, as written; without, the dim is not known
    and the suggestion says where cross_entropy reads the classes."""
    x, t = torch.randn(2, 5, 8, 8), torch.randint(0, 5, (2, 8, 8))
    fn = lambda x, t: F.nll_loss(_log_softmax(x, 1), t)
    with_shapes = _hints(fn, (x, t), tmp_path, True)
    assert with_shapes and all(h.details["dim"] == -3 and not h.details.get("loss") for h in with_shapes)
    assert torch.allclose(F.log_softmax(x, dim=-3), _log_softmax(x, 1), atol=1e-6)
    for h in _hints(fn, (x, t), tmp_path, False):
        assert h.details["dim"] is None and "cross_entropy(x, target)" in h.suggestion and "dim 1" in h.suggestion
        assert torch.allclose(F.cross_entropy(x, t), fn(x, t), atol=1e-6)  # cross_entropy(x, target), as written


def test_an_nll_loss_weight_is_kept_by_the_suggestion(tmp_path: Path) -> None:
    """``nll_loss(logp, t, weight=w)``, read without shapes, was suggested as ``cross_entropy``
    with the nll_loss's reduction and ignore_index: dropping the class weights changes the loss."""
    x, t, w = torch.randn(32, 10), torch.randint(0, 10, (32,)), torch.rand(10)
    fn = lambda x, t: F.nll_loss(_log_softmax(x, -1), t, weight=w)
    hints = [h for h in _hints(fn, (x, t), tmp_path, False) if h.details.get("loss")]
    assert hints
    for h in hints:
        assert "weight" in h.suggestion
    assert not torch.allclose(F.cross_entropy(x, t), fn(x, t))
    assert torch.allclose(F.cross_entropy(x, t, weight=w), fn(x, t), atol=1e-6)


def test_a_mask_added_before_the_scale_is_scaled_in_the_suggestion() -> None:
    """``softmax((q @ k^T + bias) * d**-0.5) @ v``: the live matcher takes the scores' ops in any
    order, and suggested ``sdpa(q, k, v, attn_mask=mask)`` with the bias as the mask, where sdpa
    adds it to the scaled scores: the code scales the bias too. The suggestion now says so."""
    from neuronscope import profile_on_neuron

    torch.manual_seed(0)
    q, k, v, bias = torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8), torch.randn(1, 4, 16, 16)

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = (q @ k.transpose(-1, -2) + bias) * 8**-0.5
        return torch.softmax(s, -1) @ v

    wrapped = profile_on_neuron(attention)
    for _ in range(2):
        wrapped(q, k, v)
    (h,) = [h for h in wrapped.last_result.fusion_hints if h.pattern == "attention"]
    assert "attn_mask=mask" in h.suggestion and h.details.get("scale") in (None, UNKNOWN_SCALE)  # 8**-0.5: sdpa's default
    as_read = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert not torch.allclose(as_read, attention(q, k, v), atol=1e-5)
    assert "multiplied by the scale" in h.suggestion
    assert torch.allclose(F.scaled_dot_product_attention(q, k, v, attn_mask=bias * 8**-0.5), attention(q, k, v), atol=1e-5)


def test_a_baddbmm_scale_and_bias_read_by_op_order(tmp_path: Path) -> None:
    """``baddbmm(bias, q, k^T, alpha=s) + mask`` (Bloom's alibi and scale in the matmul): op
    order said ``scale=1.0`` (no mul or div between the scores and the softmax) and took only
    the add after it as the mask. Now the alpha is the scale where shapes (and so the call's
    numbers) were recorded, unknown where not, and the bias the matmul adds is a mask too."""
    torch.manual_seed(0)
    q, k, v = torch.randn(8, 16, 8), torch.randn(8, 16, 8), torch.randn(8, 16, 8)
    bias, mask = torch.randn(8, 1, 16), torch.triu(torch.full((16, 16), -1e9), 1)

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = bias.baddbmm(q, k.transpose(1, 2), beta=1.0, alpha=8**-0.5) + mask
        return torch.bmm(torch.softmax(s, -1), v)

    for shapes in (True, False):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as prof:
            expected = attention(q, k, v)
        path = tmp_path / f"trace_{shapes}.json"
        prof.export_chrome_trace(str(path))
        for live, result in ((True, from_profiler(prof)), (False, from_trace(path))):
            (h,) = [h for h in result.fusion_hints if h.pattern == "attention"]
            assert "attn_mask=bias + mask" in h.suggestion, h.suggestion
            scale = h.details["scale"]
            if scale == UNKNOWN_SCALE:  # without shapes, the call's numbers were not recorded
                assert not shapes
                scale = 8**-0.5  # what the code applies, as the user fills it in
            got = F.scaled_dot_product_attention(q, k, v, attn_mask=bias + mask, scale=scale)
            assert torch.allclose(got, expected, atol=1e-5)


def test_a_fused_softmax_over_the_classes_dim_is_no_cross_entropy_of_rows(tmp_path: Path) -> None:
    """``nll_loss(log(softmax(x, 1)), t)`` on ``[N, C, H, W]``: a fused softmax's output has its
    input's shape whatever its dim, so only its recorded dim tells; the loss's ``dim=-1`` was
    declared, not read, and the live capture and a trace file (whose numbers were not read)
    suggested ``cross_entropy(x.flatten(0, -2), target.flatten())``, another loss. Now the dim
    is -1 only where the softmax's dim was recorded as the last."""
    from neuronscope import profile_on_neuron

    x, t = torch.randn(2, 5, 8, 8), torch.randint(0, 5, (2, 8, 8))

    def loss(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.nll_loss(torch.log(torch.softmax(x, 1)), t)

    wrapped = profile_on_neuron(loss)
    for _ in range(2):
        wrapped(x, t)
    hints = [h for h in wrapped.last_result.fusion_hints if h.pattern == "log_softmax"]
    hints += _hints(loss, (x, t), tmp_path, True)
    assert hints
    for h in hints:
        assert "flatten" not in h.suggestion.split(")")[0], h.suggestion
    assert torch.allclose(F.cross_entropy(x, t), loss(x, t), atol=1e-5)  # cross_entropy(x, target), as written
