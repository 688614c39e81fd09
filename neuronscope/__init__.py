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

from neuronscope.compare.variants import compare
from neuronscope.decorator import profile_on_neuron
from neuronscope.drive.pipeline import from_profiler
from neuronscope.drive.traces import from_trace
from neuronscope.errors import NeuronscopeError
from neuronscope.export.runs import load
from neuronscope.region import neuron_region, reset
from neuronscope.result.comparison import Comparison
from neuronscope.result.hint import Hint
from neuronscope.result.stats import OpStat
from neuronscope.result.steps import summarize_steps
from neuronscope.result.types import ProfileResult

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
    "summarize_steps",
]
