"""What the newcomer and attack rounds' test files share: picking a pattern's hints, applying a
suggestion's own text, small transformers configs, a model table's entry built, and one call's
hints live and from its trace."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from neuronscope import from_trace, profile_on_neuron
from neuronscope.result.hint import Hint


def of(hints: list[Hint], pattern: str) -> list[Hint]:
    return [h for h in hints if h.kind == "fusion" and h.pattern == pattern]


def call_in(text: str, fn: str) -> str:
    """The one ``torch.nn.functional.<fn>(...)`` call a suggestion names, with a method called
    on its output (sdpa's ``.transpose(-3, -2)`` back to the code's layout)."""
    (call,) = re.findall(rf"torch\.nn\.functional\.{fn}\((?:[^()]|\([^()]*\))*\)(?:\.\w+\([^()]*\))?", text)
    return call


def apply(call: str, **names: Any) -> torch.Tensor:
    return eval(call, {"torch": torch}, names)  # our own suggestion text


def eager(cfg: Any) -> Any:
    cfg._attn_implementation = "eager"
    return cfg


COMMON = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64,
}  # fmt: skip


def built(
    entry: tuple[Callable[[], torch.nn.Module], Callable[[Any, torch.Tensor], Any], torch.Tensor],
) -> tuple[torch.nn.Module, Callable[[torch.Tensor], Any], torch.Tensor]:
    """A model table's entry (its maker, how to run it, its input) built: the model in eval
    mode, its forward under no_grad, the input."""
    make, run, x = entry
    m = make().eval()

    def forward(x: torch.Tensor) -> Any:
        with torch.no_grad():
            return run(m, x)

    return m, forward, x


def live_and_traced(
    fn: Callable[..., Any], args: tuple[torch.Tensor, ...], tmp_path: Path, pattern: str
) -> tuple[list[Hint], list[Hint]]:
    """``pattern``'s hints on ``fn(*args)``: live (decorated, its second call) and from the trace
    of the user's own ``torch.profiler(record_shapes=True)``."""
    f = profile_on_neuron(fn, backend="cpu", export=False, print_summary=False)
    f(*args)
    f(*args)
    with torch.profiler.profile(record_shapes=True) as prof:
        fn(*args)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return [h for h in f.last_result.hints if h.pattern == pattern], [h for h in from_trace(path).hints if h.pattern == pattern]


def captured(fn: Callable[..., Any], *args: Any, tmp: Path, **kw: Any) -> tuple[list[Hint], list[Hint]]:
    """The hints of a decorated ``fn`` (one warm-up call, one captured), and those
    ``neuronscope.from_trace`` reads from the trace file of its run."""
    f = profile_on_neuron(fn, backend="cpu", export=True, output_dir=str(tmp), print_summary=False, **kw)
    f(*args)
    f(*args)
    r = f.last_result
    (trace,) = glob.glob(os.path.join(str(r.run_dir), "trace.json*"))
    return r.hints, from_trace(trace).hints


def fusion_keys(hints: list[Hint]) -> list[tuple[str, int, int]]:
    """What op order can show of the fusion hints: pattern, calls, op count (no
    ``elementwise_chain``, which needs data flow)."""
    return sorted((h.pattern, h.calls, len(h.ops)) for h in hints if h.kind == "fusion" and h.pattern != "elementwise_chain")


def lm(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A causal LM's logits for token ids ``x``: how a model table runs one."""
    return m(input_ids=x).logits


def enc(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """An encoder's first output for ``x``: how a model table runs one."""
    return m(x)[0]
