"""Where a capture's work lands in the module tree: hints on the module that ran their ops
(helper functions included), backward time on the module whose forward made it, hint
locations with ``profile_memory=True``, and the trust check under the default window."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
from torch import nn

import neuronscope as ns


def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A module-level helper, as transformers' ``apply_rotary_pos_emb`` is one."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + 1e-6))


_lines, _first = inspect.getsourcelines(_rms)
HELPER_LINES = range(_first + 1, _first + len(_lines))


class Norm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _rms(x, self.weight)


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = Norm(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(x))


class Net(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(2)])
        self.head = nn.Linear(dim, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _by_name(result: Any) -> dict[str, Any]:
    return {m.name: m for m in result.modules}


def test_profile_memory_keeps_hint_locations() -> None:
    net = Net()

    @ns.profile_on_neuron(backend="cpu", export=False, print_summary=False, profile_memory=True)
    def step(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return net(x)

    for _ in range(2):
        step(torch.randn(4, 16, 64))
    rms = [h for h in step.last_result.hints if h.pattern == "rms_norm"]
    assert rms and rms[0].location is not None
    file, line = rms[0].location.rsplit(":", 1)
    assert file.endswith("test_module_attribution.py") and int(line) in HELPER_LINES


def test_a_hint_in_a_helper_function_sits_on_the_module_that_called_it() -> None:
    net = Net()

    @ns.profile_on_neuron(backend="cpu", export=False, print_summary=False)
    def step(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return net(x)

    for _ in range(2):
        step(torch.randn(4, 16, 64))
    result = step.last_result
    mods = _by_name(result)
    rms = [i for i, h in enumerate(result.hints) if h.pattern == "rms_norm"]
    assert rms, result.hints
    # the deepest module that ran the helper's ops, in each block; not the block, not the head
    assert set(rms) <= set(mods["blocks.0.norm"].hints) and set(rms) <= set(mods["blocks.1.norm"].hints)
    assert not set(rms) & (set(mods["blocks.0"].hints) | set(mods["head"].hints) | set(mods["blocks.0.proj"].hints))
    # the location is still the helper's line, the one to edit; the spans are not kept
    file, line = result.hints[rms[0]].location.rsplit(":", 1)
    assert int(line) in HELPER_LINES and "op_spans" not in result.hints[rms[0]].details
    assert "blocks.0-1" in result.table()
