"""Shared by the benchmarks: the workload, timing with medians, and peak memory.

The workload is a small transformer-like step written by hand, so that the analysis has real
work to do (a hand-written RMSNorm is a fusion candidate) and the events nest as in training:
a ``record_function`` range per block, matmuls, elementwise chains, autograd backward.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch
from torch.profiler import ProfilerActivity, profile, record_function

torch.set_num_threads(1)  # a 2-core machine: keep the measured work on one core


def make_model(width: int = 16) -> tuple[Callable[[], None], torch.Tensor]:
    """One training step of a tiny block; returns (step, input)."""
    torch.manual_seed(0)
    w1 = torch.randn(width, width, requires_grad=True)
    w2 = torch.randn(width, width, requires_grad=True)
    g = torch.ones(width, requires_grad=True)
    x = torch.randn(8, width)

    def step() -> None:
        with record_function("block"):
            h = x @ w1
            # A hand-written RMSNorm: pow, mean, add, rsqrt, mul, mul.
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * g
            with record_function("mlp"):
                h = torch.nn.functional.gelu(h @ w2)
            loss = h.sum()
        loss.backward()

    return step, x


def events_per_step(step: Callable[[], None], **profile_kwargs: Any) -> float:
    """Raw events one step records, measured on a short capture."""
    step()
    with profile(activities=[ProfilerActivity.CPU], **profile_kwargs) as prof:
        for _ in range(20):
            step()
    return len(prof.profiler.kineto_results.events()) / 20


def capture(n_events: int, **profile_kwargs: Any) -> tuple[Any, int]:
    """A finished torch.profiler capture of about ``n_events`` raw events."""
    step, _ = make_model()
    per = events_per_step(step, **profile_kwargs)
    steps = max(1, round(n_events / per))
    with profile(activities=[ProfilerActivity.CPU], **profile_kwargs) as prof:
        for _ in range(steps):
            step()
    return prof, len(prof.profiler.kineto_results.events())


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def median_of(fn: Callable[[], Any], runs: int) -> float:
    return statistics.median(timed(fn)[0] for _ in range(runs))


def reset_key_averages(prof: Any) -> None:
    """Forget key_averages' cached FunctionEvents, so that the next call pays in full."""
    inner = prof.profiler
    inner._function_events = None
    if hasattr(inner, "_old_function_events"):
        inner._old_function_events = None


# ---- memory -----------------------------------------------------------------------------------
def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss() -> bool:
    """Start a new peak-RSS window (Linux >= 4.0: writing 5 to clear_refs resets VmHWM)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def rss_mb() -> float:
    kb = _status_kb("VmRSS")
    return (kb or 0) / 1024


def peak_rss_mb() -> float:
    kb = _status_kb("VmHWM")
    if kb is None:
        import resource

        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024


def fmt_s(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.2f} us"


def environment() -> str:
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return (
        f"torch {torch.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load average {load:.1f}"
    )
