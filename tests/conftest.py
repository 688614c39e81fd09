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
