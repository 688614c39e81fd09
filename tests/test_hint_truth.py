"""Hints that hold up when a user checks them: every profiled call is covered, a trace's hint
suggests no argument list it cannot know, a measured loss is said plainly, one answer to
"is this frame user code"."""

from __future__ import annotations

from typing import Any

import torch

import neuronscope
from neuronscope.result import Hint
from neuronscope.units import fmt_us


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h


def _two_norms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _rms(_rms(x, w).relu(), w)


def test_compare_hint_covers_every_profiled_call(tmp_path: Any) -> None:
    """The observation of one warm-up call links every profiled call, not only the first."""
    x, w = torch.randn(8, 32), torch.randn(32)
    c = neuronscope.compare({"eager": _two_norms}, x, w, output_dir=str(tmp_path), active=3, time_budget=0.5)
    r = c.results["eager"]
    pow_calls = next(o.calls for o in r.ops if o.name == "aten::pow")
    (hint,) = [h for h in r.hints if h.pattern == "rms_norm"]
    assert pow_calls == 6
    assert hint.calls == pow_calls
    # compare's "Top hint" is per profiled call: the hint's saving is summed over all three
    assert c.rows[0].top_hint == f"rms_norm (~{fmt_us(hint.est_saving_us / 3)} per call)"


def test_events_frames_use_the_one_answer() -> None:
    from neuronscope.capture import frames as cf
    from neuronscope.events import frames as ef

    assert ef.is_user_file is cf.is_user_file and ef.LIBRARY_ROOTS is cf.LIBRARY_ROOTS
    # a helper of a model library is not the user's line, in a trace as live
    assert ef.user_location("transformers/activations.py(40): forward") is None
    assert cf.is_user_file.cache_info().maxsize == cf.CACHE_SIZE  # bounded
