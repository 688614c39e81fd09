"""One profiler session over several captures (issue 38, item 4): CUDA hands back kernel
records on another clock in every profiler session after a process's first
(pytorch/pytorch#192021), so a call window's captures share one session, each a marked range,
split after the stop. Tested with the real torch profiler (CPU): the sessions torch prepares
are counted, and each capture's slice is compared with a session of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.autograd.profiler as autograd_profiler

from neuronscope.capture import resolve_backend
from neuronscope.capture.base import profiler_running
from neuronscope.capture.record import MARKER, CaptureSession, SharedSession
from neuronscope.config import build_options
from neuronscope.events import table_from_profiler


@pytest.fixture
def sessions(monkeypatch):
    """How many profiler sessions torch prepares and enables (Kineto's prepare: where CUDA
    registers CUPTI's callbacks again)."""
    count = {"prepare": 0, "enable": 0}
    prepare, enable = autograd_profiler._prepare_profiler, autograd_profiler._enable_profiler

    def counted_prepare(*a, **k):
        count["prepare"] += 1
        return prepare(*a, **k)

    def counted_enable(*a, **k):
        count["enable"] += 1
        return enable(*a, **k)

    monkeypatch.setattr(autograd_profiler, "_prepare_profiler", counted_prepare)
    monkeypatch.setattr(autograd_profiler, "_enable_profiler", counted_enable)
    return count


def _work(i: int) -> None:
    x = torch.randn(16, 16)
    with autograd_profiler.record_function(f"step{i}"):
        y = (x @ x).relu()
        for _ in range(i + 1):
            y = y + 1
    (y * 2).sum()


def _between() -> None:  # the user's code between two captures: not recorded
    torch.randn(8).sigmoid().tanh()


def _ops(table) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in table.names:
        counts[name] = counts.get(name, 0) + 1
    return counts


def _backend():
    return resolve_backend(build_options(None, backend="cpu", export=False))


def test_a_window_of_three_captures_is_one_session_and_each_slice_is_its_capture(sessions) -> None:
    shared = SharedSession(_backend())
    records = []
    caps = []
    for i in range(3):
        cap = CaptureSession(shared.backend, shared=shared)
        cap.start()
        _work(i)
        records.append(cap.stop())
        caps.append(cap)
        _between()
    assert profiler_running()  # kept over the window ...
    shared.finish()
    assert not profiler_running()  # ... and stopped at its end
    assert sessions == {"prepare": 1, "enable": 1} and shared.sessions_started == 1
    done = [cap.complete(r) for cap, r in zip(caps, records)]
    assert "aten::sigmoid" not in table_from_profiler(shared.prof).names  # toggled off between

    own = {"prepare": 0, "enable": 0}
    for i, record in enumerate(done):
        before = dict(sessions)
        alone = CaptureSession(_backend())
        alone.start()
        _work(i)
        separate = alone.stop()
        own = {k: sessions[k] - before[k] for k in sessions}
        sliced, single = table_from_profiler(record.prof), table_from_profiler(separate.prof)
        assert _ops(sliced) == _ops(single), i
        assert not any(n.startswith(MARKER) for n in sliced.names)
        assert "aten::sigmoid" not in sliced.names  # the code between captures
        assert record.wall_time_us > 0 and record.error is None
    assert own == {"prepare": 1, "enable": 1}  # a capture of its own: a session of its own


def test_a_slice_saves_only_its_capture_in_the_chrome_trace(tmp_path: Path) -> None:
    shared = SharedSession(_backend())
    markers = []
    for i in range(2):
        markers.append(shared.open())
        _work(i)
        shared.close()
    shared.finish()
    first = shared.slice(markers[0])
    first.export_chrome_trace(str(tmp_path / "t.json"))
    names = [e.get("name") for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]]
    assert "step0" in names and "step1" not in names and not any(str(n).startswith(MARKER) for n in names)
    tree = first.profiler.kineto_results.experimental_event_tree()
    assert [n.name for n in tree][:1] == ["step0"] or "step0" in [n.name for n in tree]
