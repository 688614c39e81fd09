"""The cost model's constants: measured by `neuronscope calibrate`, kept per machine, read by
the analysis (which times nothing itself)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import torch

from neuronscope.analysis import calibration, cost
from neuronscope.cli import main


def test_the_cache_lives_where_the_user_says(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NEURONSCOPE_CACHE_DIR", str(tmp_path / "a"))
    assert calibration.cache_path() == tmp_path / "a" / "calibration.json"
    monkeypatch.delenv("NEURONSCOPE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert calibration.cache_path() == tmp_path / "xdg" / "neuronscope" / "calibration.json"


def test_an_entry_is_kept_per_device_torch_dtype_and_threads(calibrated: Path) -> None:
    """What was kept is read back; float32's stands in for a dtype without its own; another
    thread count, torch version or device has none; another entry leaves it in place."""
    key = calibration.calibration_key("cpu")
    assert torch.__version__ in key and f"threads {torch.get_num_threads()}" in key and "float32" in key
    cal = calibration.load("cpu")
    assert cal is not None and cal.per_op_ns == 3000.0 and cal.eager["rms_norm"] == (0.5, 0.02)
    assert calibration.load("cpu", "bfloat16") == cal  # float32's, for lack of its own
    assert calibration.load("cuda") is None and cost.device_costs("cuda") is None
    calibration.save("cpu", "bfloat16", cal._replace(per_op_ns=1.0))
    assert calibration.load("cpu", "bfloat16").per_op_ns == 1.0 and calibration.load("cpu") == cal
    old = torch.get_num_threads()
    torch.set_num_threads(old + 1)
    try:
        assert calibration.load("cpu") is None  # costs measured on other threads are not these
    finally:
        torch.set_num_threads(old)


def test_a_damaged_or_older_cache_is_as_none(calibrated: Path) -> None:
    data = json.loads(calibrated.read_text())
    calibrated.write_text(json.dumps({**data, "version": calibration.CACHE_VERSION - 1}))
    assert calibration.load("cpu") is None
    calibrated.write_text("{not json")
    assert calibration.load("cpu") is None
    data["entries"][calibration.calibration_key("cpu")]["bandwidth"] = "fast"
    calibrated.write_text(json.dumps(data))
    assert calibration.load("cpu") is None


def _rms_norm_hint() -> object:
    from torch.profiler import ProfilerActivity, profile

    from neuronscope.drive.pipeline import from_profiler

    x, w = torch.randn(64, 256), torch.randn(256)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    (h,) = [h for h in from_profiler(prof).hints if h.pattern == "rms_norm"]
    return h


def test_without_a_calibration_a_cpu_estimate_uses_the_shipped_defaults(monkeypatch) -> None:
    """Never calibrated here: a CPU estimate is bounded by the shipped constants (not the
    capture's op times alone, which carry the profiler's per-op overhead), and its model says
    whose constants they are and which command measures this machine's. A calibration kept
    later replaces them."""
    assert calibration.load("cpu") is None and calibration.constants("cpu") == calibration.DEFAULT_CPU
    assert calibration.constants("cuda") is None and cost.device_costs("neuron") is None
    h = _rms_norm_hint()
    model = h.details["estimate_model"]
    assert "saving_upper_bound" not in h.details and not h.saving_text.startswith("up to")
    assert calibration.DEFAULT_CPU_MACHINE in model and "neuronscope calibrate" in model and "at most" in model
    # The bound is the defaults': free launches there make the saving vanish.
    free = calibration.DEFAULT_CPU._replace(per_op_ns=0.0, bandwidth=((1, 1e9),), eager={})
    monkeypatch.setattr(calibration, "DEFAULT_CPU", free)
    assert _rms_norm_hint().est_saving_us < h.est_saving_us
    calibration.save("cpu", "float32", calibration.DEFAULT_CPU._replace(per_op_ns=1.0))
    kept = _rms_norm_hint().details["estimate_model"]
    assert calibration.DEFAULT_CPU_MACHINE not in kept and "measured per-op cost" in kept


def test_the_measurements_are_of_this_cpu() -> None:
    """The device's own probes (a tiny op, the bandwidth) and a fused optimizer's rates: real
    timings, positive, the bandwidth never slower for a smaller tensor."""
    from neuronscope.capture import machine

    per_op, bandwidth = machine.device_costs()
    assert per_op > 0 and [s for s, _ in bandwidth] == list(machine.BANDWIDTH_SIZES)
    assert all(a[1] >= b[1] > 0 for a, b in itertools.pairwise(bandwidth))
    rates = calibration._optimizer_rates("SGD", "float32")
    assert rates is not None and min(rates) >= 0


def test_calibrate_refuses_another_device_and_the_cli_a_bad_dtype(capsys) -> None:
    import pytest

    from neuronscope.errors import NeuronscopeError

    with pytest.raises(NeuronscopeError, match="CPU only"):
        calibration.calibrate("cuda")
    assert main(["calibrate", "--dtype", "int8"]) == 2
    assert "float32" in capsys.readouterr().err
    assert main(["calibrate", "--threads", "0"]) == 2


def test_the_cli_measures_this_cpu_keeps_it_and_estimates_read_it(capsys) -> None:
    """`neuronscope calibrate` end to end (real probes, some tens of seconds here): the constants
    are printed and kept in the cache, and a later estimate is bounded by them, not by the
    shipped defaults."""
    assert main(["calibrate"]) == 0
    out = capsys.readouterr().out
    cal = calibration.load("cpu")
    assert cal is not None and cal.per_op_ns > 0 and {"rms_norm", "layer_norm", "softmax"} <= set(cal.eager)
    assert f"per-op call: {cal.per_op_ns:.0f} ns" in out and str(calibration.cache_path()) in out
    model = _rms_norm_hint().details["estimate_model"]
    assert calibration.DEFAULT_CPU_MACHINE not in model and "measured per-op cost" in model
