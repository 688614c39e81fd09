"""neuronscope: one-line profiling of PyTorch code on AWS Trainium, CUDA and CPU, with hints on
what to fuse.

    from neuronscope import profile_on_neuron, neuron_region

    @profile_on_neuron
    def step(x): ...

    with neuron_region("attn") as r:
        ...
    print(r.result.table())
"""

from __future__ import annotations

from .compare import compare
from .decorator import profile_on_neuron
from .errors import NeuronscopeError
from .export import load
from .pipeline import from_profiler
from .region import neuron_region, reset
from .result import Comparison, Hint, OpStat, ProfileResult
from .trace import from_trace

__version__ = "0.1.0"

__all__ = [
    "Comparison",
    "Hint",
    "NeuronscopeError",
    "OpStat",
    "ProfileResult",
    "compare",
    "from_profiler",
    "from_trace",
    "load",
    "neuron_region",
    "profile_on_neuron",
    "reset",
]
