"""Hints that hold up when a user checks them: every profiled call is covered, a trace's hint
suggests no argument list it cannot know, a measured loss is said plainly, one answer to
"is this frame user code"."""

from __future__ import annotations

from typing import Any

import torch

import neuronscope
from neuronscope.result import Hint


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
    # compare's "Top hint" is the hint's share of the profiled calls' time: the hint's saving,
    # summed over all three calls, against the three calls' time together
    calls_us = sum(r.regions[f"eager#{i}"].time_us for i in range(3))
    assert c.rows[0].top_hint == f"rms_norm (~{min(hint.est_saving_us / calls_us, 1.0):.0%} of its time)"


def test_events_frames_use_the_one_answer() -> None:
    from neuronscope.capture import frames as cf
    from neuronscope.events import frames as ef

    assert ef.is_user_file is cf.is_user_file and ef.LIBRARY_ROOTS is cf.LIBRARY_ROOTS
    # a helper of a model library is not the user's line, in a trace as live
    assert ef.user_location("transformers/activations.py(40): forward") is None
    assert cf.is_user_file.cache_info().maxsize == cf.CACHE_SIZE  # bounded


def _rms_hint() -> Hint:
    return Hint(
        kind="fusion", pattern="rms_norm", ops=["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul"],
        calls=2, time_us=100.0, est_saving_us=38.8, suggestion="use torch.nn.functional.rms_norm(x, (32,), weight, eps=1e-06)",
        details={"shape": [8, 32], "dtype": "float32", "device": "cpu", "weight": True},
    )


def _fake_rounds(monkeypatch: Any, chain: list[float], fused: list[float]) -> None:
    """The rounds verify() timed, fixed: the decision it makes from them is what is tested."""
    from neuronscope.analysis import verify

    monkeypatch.setattr(verify, "_time", lambda variants, *a: {name: list(chain if name == "chain" else fused) for name in variants})


def test_a_verified_loss_is_said_plainly(monkeypatch: Any) -> None:
    _fake_rounds(monkeypatch, [10.0] * 9, [50.0] * 9)
    h = _rms_hint()
    v = h.verify(compile=False)
    assert v.slower and v.verified_saving_us < 0
    assert h.est_saving_us <= 0 and "save ~" not in h.message
    assert "verify measured the fused form slower here: keep the code as it is on this device" in h.message
    assert "rms_norm(" not in h.message  # no longer recommends what it measured slower
    assert Hint.from_dict(h.to_dict()).message == h.message  # survives export


def test_a_verified_gain_keeps_the_suggestion(monkeypatch: Any) -> None:
    _fake_rounds(monkeypatch, [50.0] * 9, [10.0] * 9)
    h = _rms_hint()
    v = h.verify(compile=False)
    assert not v.slower and not v.notes and h.est_saving_us == 38.8
    assert "rms_norm(" in h.message and "measured: 80.0 us" in h.message


def test_verify_notes_rounds_that_disagree_widely(monkeypatch: Any) -> None:
    _fake_rounds(monkeypatch, [10.0, 12.0, 400.0, 11.0, 10.0, 900.0, 10.0, 10.0, 10.0], [5.0] * 9)
    v = _rms_hint().verify(compile=False)
    assert v.notes and "disagree widely" in v.notes[0] and "chain" in v.notes[0]


def test_a_traces_rms_norm_saving_counts_its_intermediates(monkeypatch: Any, tmp_path: Any) -> None:
    """The cost model's second bound on a trace (ops in order, no links) counts the
    intermediates the chain passes on, as on a live capture: it was 0 there before."""
    from torch.profiler import profile

    from neuronscope.analysis import cost
    from neuronscope.analysis.dataflow import graph_from_profiler, graph_from_table
    from neuronscope.analysis.fusion import find_matches, find_sequence_matches
    from neuronscope.trace.reader import read_files

    x, w = torch.randn(64, 256), torch.randn(256)
    with profile(record_shapes=True, profile_memory=True) as prof:
        _rms(x, w)
    live = graph_from_profiler(prof, None)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    table, _ = read_files([tmp_path / "trace.json"])
    trace = graph_from_table(table)
    (lm,) = [m for m in find_matches(live) if m.pattern == "rms_norm"]
    (tm,) = [m for m in find_sequence_matches(trace) if m.pattern == "rms_norm"]
    monkeypatch.setattr(cost, "device_costs", lambda device="cpu": (0.0, 1.0))  # 1 byte per ns, free launches
    monkeypatch.setattr(cost, "eager_api_faster", lambda pattern, device="cpu": True)
    on_trace = cost.grounded_saving_ns("rms_norm", tm.nodes, trace, "cpu")
    on_links = cost.grounded_saving_ns("rms_norm", lm.nodes, live, "cpu")
    assert on_trace is not None and on_trace > 0
    assert on_trace == on_links
    assert tm.params == {"weight": True}  # the trailing mul by a (256,) tensor is the weight



def test_a_trace_without_shapes_names_the_weight_as_the_users_to_carry(tmp_path: Any) -> None:
    """Without shapes a trailing mul may or may not be a weight: the suggestion says so."""
    from torch.profiler import profile

    from neuronscope.analysis.dataflow import graph_from_table
    from neuronscope.analysis.fusion import find_sequence_matches
    from neuronscope.analysis.patterns import pattern_named
    from neuronscope.trace.reader import read_files

    with profile() as prof:
        _rms(torch.randn(8, 32), torch.randn(32))
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    table, _ = read_files([tmp_path / "trace.json"])
    (m,) = [m for m in find_sequence_matches(graph_from_table(table)) if m.pattern == "rms_norm"]
    text = pattern_named("rms_norm").suggest(m, "cpu")  # type: ignore[union-attr]
    assert "<weight, if your code multiplies by one>" in text and "None" not in text
    assert "eps=<the eps your code uses>" in text
