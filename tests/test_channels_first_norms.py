"""A norm written by hand over dim 1 of ``[N, C, H, W]`` or ``[N, C, L]`` (the "channels_first"
LayerNorm of ConvNeXt's original repo, Segment Anything's LayerNorm2d, VitDet, many UNets; a
PixelNorm-like RMSNorm over the channels) is a ``layer_norm`` / ``rms_norm`` hint over that
dim, found live, from the user's profiler and from an exported trace alike. Its suggestion,
evaluated as written, computes what the module computes, and ``verify()`` times that call.
A mean over the channels or the pixels that is a pooling is no norm.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from fusion_cases import LayerNorm2d
from torch import nn

from neuronscope import from_profiler, from_trace, profile_on_neuron
from neuronscope.analysis.patterns import pattern_named
from neuronscope.analysis.patterns.base import UNKNOWN_EPS
from neuronscope.result.hint import Hint

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N, C, H, W, L = 2, 32, 8, 8, 24
EPS = 1e-6


class ChannelRMSNorm(nn.Module):
    """An RMSNorm over the channels of ``[N, C, L]`` (a 1-d UNet's), weight ``[C, 1]``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + EPS) * self.weight[:, None]


class SqueezeExcite(nn.Module):
    """Pooling, not norms: an SE block's ``x.mean((2, 3))`` and a spatial attention's mean
    and max over the channels (CBAM), each then scaling ``x``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(channels, channels // 4, 1), nn.Conv2d(channels // 4, channels, 1)
        self.spatial = nn.Conv2d(2, 1, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        x = x * torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))
        pooled = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], dim=1)
        x = x * torch.sigmoid(self.spatial(pooled))
        centred = x - x.mean(1, keepdim=True)  # a centring alone: no spread, no norm
        return centred * torch.sigmoid(centred.mean(1, keepdim=True))


def _hints(how: str, module: nn.Module, x: torch.Tensor, tmp_path: Path) -> list[Hint]:
    with torch.no_grad():
        if how == "decorated":
            f = profile_on_neuron(module.forward, export=False, backend="cpu", print_summary=False)
            f(x)
            f(x)
            return f.last_result.hints
        with torch.profiler.profile(record_shapes=True) as prof:
            module(x)
    if how == "from_profiler":
        return from_profiler(prof).hints
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return from_trace(path).hints


def _one(hints: list[Hint], pattern: str) -> Hint:
    (hint,) = [h for h in hints if h.pattern == pattern]
    return hint


def _applied(hint: Hint, fn: str, **names: torch.Tensor) -> torch.Tensor:
    """The suggested call, as written, on the module's own tensors; an eps the capture did
    not record (from op order) filled in as the user would."""
    (call,) = re.findall(rf"torch\.nn\.functional\.{fn}\((?:[^()]|\([^()]*\))*\)(?:\.movedim\(-?\d+, -?\d+\))?", hint.suggestion)
    with torch.no_grad():
        return eval(call.replace(UNKNOWN_EPS, repr(EPS)), {"torch": torch}, names)  # our own text


CASES = {
    "layer_norm": (LayerNorm2d, (N, C, H, W), {"weight": True, "bias": True}),
    "rms_norm": (ChannelRMSNorm, (N, C, L), {"weight": True, "bias": False}),
}


@pytest.mark.parametrize("how", ["decorated", "from_profiler", "from_trace"])
@pytest.mark.parametrize("pattern", list(CASES))
def test_a_norm_over_the_channels_is_a_norm_hint_applied_as_written(pattern: str, how: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    cls, shape, affine = CASES[pattern]
    module, x = cls(C).eval(), torch.randn(*shape)
    hint = _one(_hints(how, module, x, tmp_path), pattern)
    assert hint.details["dim"] == 1, hint.details
    assert hint.details["shape"] == list(shape)
    assert {k: hint.details.get(k) for k in affine} == affine
    assert hint.details.get("vector_shapes") is None  # weight[:, None, None] is the vector of dim 1
    assert f"x.movedim(1, -1), ({C},)" in hint.suggestion and ".movedim(-1, 1)" in hint.suggestion
    assert "over its dim 1" in hint.suggestion
    expected = module(x).detach()
    got = _applied(hint, pattern, x=x, weight=module.weight.detach(), bias=getattr(module, "bias", torch.zeros(0)).detach())
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("pattern", list(CASES))
def test_the_three_sources_say_the_same(pattern: str, tmp_path: Path) -> None:
    """Live (data flow), the user's profiler and a trace (op order) find one hint with the same
    ops, dim and affine parameters (live alone may read the eps: not where torch.compile ran
    earlier in the process, see tests/test_user_u35.py)."""
    torch.manual_seed(0)
    cls, shape, _ = CASES[pattern]
    module, x = cls(C).eval(), torch.randn(*shape)
    keys = ("dim", "shape", "weight", "bias")
    found = {how: _one(_hints(how, module, x, tmp_path), pattern) for how in ("decorated", "from_profiler", "from_trace")}
    said = {how: (h.ops, {k: h.details.get(k) for k in keys}) for how, h in found.items()}
    assert said["decorated"] == said["from_profiler"] == said["from_trace"], said
    assert found["decorated"].details.get("eps") in (EPS, None)
    assert "elementwise_chain" not in {h.pattern for h in _hints("decorated", module, x, tmp_path)}


@pytest.mark.parametrize("pattern", list(CASES))
def test_verify_times_the_moved_replacement(pattern: str, tmp_path: Path) -> None:
    """What verify() builds from the hint: the user's spelling over dim 1 and the fused call
    over x moved (its weight the channels-first vector), computing the same; and verify() runs."""
    torch.manual_seed(0)
    cls, shape, _ = CASES[pattern]
    module, x = cls(C).eval(), torch.randn(*shape)
    hint = _one(_hints("decorated", module, x, tmp_path), pattern)
    chain, replacement, name = pattern_named(pattern).verify(hint, x, "cpu")
    assert replacement is not None and name and pattern in name
    with torch.no_grad():
        torch.testing.assert_close(replacement(), chain(), atol=1e-5, rtol=1e-4)
    verified = hint.verify(repeats=3, min_block_s=0.001)
    assert verified.details["verification"]["replacement"] == name
    assert verified.details["verification"]["shape"] == list(shape)


@pytest.mark.parametrize("how", ["decorated", "from_profiler", "from_trace"])
def test_a_pooling_over_channels_or_pixels_is_no_norm(how: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    hints = _hints(how, SqueezeExcite(C).eval(), torch.randn(N, C, H, W), tmp_path)
    assert not {"layer_norm", "rms_norm"} & {h.pattern for h in hints}, [h.pattern for h in hints]


def test_a_last_dim_norm_says_no_dim(tmp_path: Path) -> None:
    """Over x's last dim, as before: no ``dim``, no movedim."""

    class LastDim(LayerNorm2d):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            u = x.mean(-1, keepdim=True)
            s = (x - u).pow(2).mean(-1, keepdim=True)
            return self.weight * ((x - u) / torch.sqrt(s + EPS)) + self.bias

    torch.manual_seed(0)
    hint = _one(_hints("decorated", LastDim(C).eval(), torch.randn(N, H, W, C), tmp_path), "layer_norm")
    assert "dim" not in hint.details and "movedim" not in hint.suggestion


def test_shapes_with_the_normalized_dim_moved_last() -> None:
    """What the matchers check a capture's shapes as: the statistic [N, 1, H, W] is
    [N, H, W, 1]; weight[:, None, None] is the vector [C]; a bare [C] broadcasts onto W, no
    vector of the channels; the last dim leaves every shape as it is."""
    from neuronscope.analysis.patterns.shapes import dim_last, dims_to_try, is_plain_vector

    x = (N, C, H, W)
    assert dim_last((N, 1, H, W), 4, 1) == (N, H, W, 1)
    assert dim_last((C, 1, 1), 4, 1) == (C,)
    assert dim_last((C,), 4, 1) == (C, 1)
    assert dim_last((N, 1, H, W), 4, -1) == (N, 1, H, W)
    assert is_plain_vector((C, 1, 1), x, 1) and not is_plain_vector((C,), x, 1)
    assert dims_to_try(x, any_dim=False) == [3] and dims_to_try(x, any_dim=True) == [3, 1, 2]
    assert dims_to_try((N, 1, L), any_dim=True) == [2]  # a dim of one element, or the batch: no norm's
