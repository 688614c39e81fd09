"""Shared fixtures. The autouse fixture proves that no test leaves a profiler or region active."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from neuronscope.region import ensure_no_capture_running

#: Real torch.profiler traces carried with the tests (sources and licences in its README.md).
SHARED_TRACES = Path(__file__).resolve().parent / "data" / "traces"


@pytest.fixture(autouse=True)
def _no_capture_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts and ends with no capture running, and writes runs under tmp_path."""
    monkeypatch.setenv("NEURONSCOPE_OUTPUT_DIR", str(tmp_path / "runs"))
    # The cost model's kept constants: none, unless a test keeps some (the `calibrated` fixture);
    # never the user's own.
    monkeypatch.setenv("NEURONSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NEURONSCOPE_DISABLE", raising=False)
    assert ensure_no_capture_running(), "a capture was left running before this test"
    yield
    assert ensure_no_capture_running(), "this test left a neuronscope capture or region active"
    assert not torch.autograd.profiler._is_profiler_enabled, "this test left torch.profiler running"


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    """The export root of this test (what NEURONSCOPE_OUTPUT_DIR points at)."""
    return Path(os.environ["NEURONSCOPE_OUTPUT_DIR"])


@pytest.fixture
def shared_traces() -> Path:
    """The folder of real traces in tests/data/traces (part of the repository: never skipped)."""
    return SHARED_TRACES


#: Constants of a CPU as `neuronscope calibrate` keeps them, fixed so that estimates are exact.
CALIBRATION = {
    "per_op_ns": 3000.0,
    "bandwidth": [[65536, 40.0], [524288, 30.0], [4194304, 20.0], [33554432, 8.0]],
    "compiled_call_ns": 8000.0,
    "eager": {"rms_norm": [0.5, 0.02], "layer_norm": [0.5, 0.05], "softmax": [0.5, 0.05], "gelu": [0.3, 0.07], "log_softmax": [0.5, 0.05]},
    "optimizers": {"AdamW": [15000.0, 0.5], "Adam": [15000.0, 0.5], "SGD": [1000.0, 0.01], "Adagrad": [10000.0, 0.5]},
}


@pytest.fixture
def calibrated(tmp_path: Path) -> Path:
    """This test's cache holds a CPU calibration (fixed constants, float32): estimates of CPU
    captures are bounded by them. The cache file's path."""
    from neuronscope.analysis import calibration

    cal = calibration.Calibration(
        CALIBRATION["per_op_ns"],
        tuple((int(s), float(b)) for s, b in CALIBRATION["bandwidth"]),
        CALIBRATION["compiled_call_ns"],
        {k: (v[0], v[1]) for k, v in CALIBRATION["eager"].items()},
        {k: (v[0], v[1]) for k, v in CALIBRATION["optimizers"].items()},
    )
    return calibration.save("cpu", "float32", cal)


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread for the test, the caller's count after it: on a loaded 2-core machine a
    descheduled OpenMP worker makes single ops take milliseconds, which only adds noise to the
    times the fusion tests look at."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def no_compiled_code_yet() -> Iterator[None]:
    """Python numbers (an eps) come from the observed warm-up call only while torch.compile is
    unused in the process (README, Limits); another test's ``hint.verify()`` must not decide
    what a newcomer round's tests see."""
    torch._dynamo.reset()
    yield
