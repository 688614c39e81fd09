"""Attacks on this round's changes (round 2): the user's own torch.profiler started inside a
captured or observed call. Real torch profiler (CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import neuronscope
from neuronscope import neuron_region, profile_on_neuron

ROOT = Path(__file__).resolve().parent.parent


def _theirs() -> torch.profiler.profile:
    return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])


def test_an_observed_warmup_call_never_stops_the_users_profiler_started_inside_it(tmp_path) -> None:
    # The default window observes its warm-up call under a profiler of its own. The user's
    # torch.profiler started inside that call replaced it; the observation's stop then ended
    # theirs ("disableProfiler called but no active profiling session"): their profile had no
    # events at all, the ops they ran after the call included.
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    held: dict[str, torch.profiler.profile] = {}

    @profile_on_neuron(backend="cpu", output_dir=str(tmp_path))
    def f(x: torch.Tensor) -> torch.Tensor:
        if not held:
            held["p"] = _theirs()
            held["p"].__enter__()
        return lin(x).relu()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(x)  # the observed warm-up call
        x.sigmoid()
        held["p"].__exit__(None, None, None)
        names = {e.name for e in held["p"].events()}
        assert "aten::sigmoid" in names and "aten::relu" in names
        f(x)  # the capture still works afterwards
    assert len(f.results) == 1 and f.results[0].op("aten::relu") is not None


def test_a_range_begun_in_neuronscopes_session_is_not_ended_inside_the_users(tmp_path, monkeypatch) -> None:
    # The region's own range (and a module call's) opened in neuronscope's session and closed
    # after the user's torch.profiler replaced it: ending it ran the old session's callbacks in
    # theirs, and reading their prof.events() raised MemoryError (std::bad_alloc) in about one
    # fresh process in two (torch 2.13; see the subprocess test below).
    import torch.autograd.profiler as ap

    inside = {"on": False, "bad": []}
    exit_ = ap.record_function.__exit__

    def spy(self, *args):
        if inside["on"]:
            inside["bad"].append(self.name)
        return exit_(self, *args)

    monkeypatch.setattr(ap.record_function, "__exit__", spy)
    x = torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with neuron_region("r", backend="cpu", output_dir=str(tmp_path)):
            theirs = _theirs()
            theirs.__enter__()
            inside["on"] = True
            x.relu()
        x.sigmoid()
        inside["on"] = False
        theirs.__exit__(None, None, None)
    assert inside["bad"] == []
    assert "aten::sigmoid" in {e.name for e in theirs.events()}


_FRESH = """
import os, warnings, torch
warnings.simplefilter("ignore")
from neuronscope import profile_on_neuron
m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
x = torch.randn(4, 8)
held = {}
@profile_on_neuron(backend="cpu", warmup=0, output_dir=os.environ["OUT"])
def f(x):
    held["p"] = torch.profiler.profile(); held["p"].__enter__()
    return m(x)
f(x)
m(x).sum()
held["p"].__exit__(None, None, None)
print("events", len(held["p"].events()))
"""


def test_the_users_profile_started_in_a_capture_reads_back_in_fresh_processes(tmp_path) -> None:
    # The symptom itself, where it shows: a process's first such capture. 3 processes: each
    # failed with std::bad_alloc about half the time before the fix.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path)}
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", textwrap.dedent(_FRESH)], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 0 and "events" in run.stdout, run.stderr[-2000:]


def test_a_capture_replaced_from_another_thread_leaves_later_captures_working(tmp_path) -> None:
    # In a process of its own: the state it leaves would break every later capture of the
    # test process's main thread.
    code = """
import os, threading, warnings, torch
warnings.simplefilter("ignore")
import neuronscope
from neuronscope import neuron_region, profile_on_neuron
x = torch.randn(4, 8)
started, done, held = threading.Event(), threading.Event(), {}
def user_thread():
    with torch.profiler.profile() as p:
        started.set(); x.sum(); done.wait(10)
    held["p"] = p
with neuron_region("r", backend="cpu", output_dir=os.environ["OUT"]):
    t = threading.Thread(target=user_thread); t.start(); started.wait(10)
    x.relu(); done.set()
t.join()
assert "aten::sum" in {e.name for e in held["p"].events()}
@profile_on_neuron(backend="cpu", warmup=0, output_dir=os.environ["OUT"])
def g(x):
    return x.relu()
g(x)
print("captured", len(g.results))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0 and "captured 1" in run.stdout, run.stderr[-2000:]


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.softmax((q @ k.transpose(-1, -2)) * 0.125, dim=dim) @ v


def _attention_hints(result) -> list:
    return [h for h in result.hints if h.pattern == "attention"]


@pytest.mark.parametrize("dim", [1, -2])
def test_a_softmax_over_the_queries_is_no_attention_hint(tmp_path, dim: int) -> None:
    # softmax(q @ k.T * s, dim=1) @ v normalises over the queries; sdpa over the keys: the
    # suggested scaled_dot_product_attention(q, k, v, scale=0.125) computes something else.
    # Both the decorated capture (exact links, the softmax's dim recorded) and a default
    # profile with record_shapes=True (dim recorded) claimed it.
    q, k, v = (torch.randn(2, 16, 8) for _ in range(3))
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.125)
    assert not torch.allclose(fused, _attention(q, k, v, dim), atol=1e-4)
    f = profile_on_neuron(lambda: _attention(q, k, v, dim), name="attn", backend="cpu", output_dir=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f()
        f()
        with torch.profiler.profile(record_shapes=True) as prof:
            _attention(q, k, v, dim)
    assert _attention_hints(f.results[-1]) == []
    assert _attention_hints(neuronscope.from_profiler(prof)) == []


@pytest.mark.parametrize("dim", [-1, 2])
def test_a_softmax_over_the_keys_is_still_an_attention_hint(tmp_path, dim: int) -> None:
    q, k, v = (torch.randn(2, 16, 8) for _ in range(3))
    f = profile_on_neuron(lambda: _attention(q, k, v, dim), name="attn", backend="cpu", output_dir=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f()
        f()
        with torch.profiler.profile(record_shapes=True) as prof:
            _attention(q, k, v, dim)
    assert len(_attention_hints(f.results[-1])) == 1
    assert len(_attention_hints(neuronscope.from_profiler(prof))) == 1


def test_a_sum_of_another_tensor_is_no_softmax_in_a_default_profile() -> None:
    x, y = torch.randn(4, 16, 32), torch.randn(4, 16, 32)

    def not_softmax(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - y.amax(-1, keepdim=True))
        return e / y.sum(-1, keepdim=True)

    assert not torch.allclose(not_softmax(x, y), torch.softmax(x, dim=-1))
    with torch.profiler.profile(record_shapes=True) as prof:
        not_softmax(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = neuronscope.from_profiler(prof)
    assert [h for h in result.hints if h.pattern == "softmax"] == []
