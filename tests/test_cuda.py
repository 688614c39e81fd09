"""The CUDA backend on a real GPU. Skipped where none is present (this CI has none; the CUDA
analysis itself is tested on real A100 traces in test_trace.py)."""

from __future__ import annotations

import pytest
import torch

import neuronscope
from neuronscope import neuron_region, profile_on_neuron

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU on this machine (torch.cuda.is_available() is False)"
)


def test_cuda_capture_has_device_time_per_op() -> None:
    x = torch.randn(1024, 1024, device="cuda")
    with neuron_region("cuda-mm", backend="cuda", export=False) as r:
        for _ in range(3):
            x = torch.relu(x @ x)
    result = r.result
    assert result is not None and result.backend == "cuda"
    mm = result.op("aten::mm")
    assert mm is not None and mm.self_device_us is not None and mm.device_total_us is not None
    matmul = result.op("aten::matmul")
    assert matmul is not None and matmul.device_total_us is not None and matmul.device_total_us >= mm.self_device_us
    assert result.device_name


def test_auto_prefers_cuda_and_compare_runs_on_the_gpu() -> None:
    @profile_on_neuron(warmup=1)
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    x = torch.ones(256, device="cuda")
    f(x)
    f(x)
    assert f.last_result is not None and f.last_result.backend == "cuda"
    cmp = neuronscope.compare({"a": lambda t: t * 2, "b": lambda t: t + t}, x, export=False, active=2, warmup=1)
    assert cmp.backend == "cuda" and all(r.outputs_match is not False for r in cmp.rows)
