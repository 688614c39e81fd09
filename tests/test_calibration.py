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


def test_without_a_calibration_estimates_say_how_to_bound_them() -> None:
    """Never calibrated here: the estimate is the capture's own op times, an upper bound, and
    the model names the command that bounds it."""
    from torch.profiler import ProfilerActivity, profile

    from neuronscope.drive.pipeline import from_profiler

    x, w = torch.randn(64, 256), torch.randn(256)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    (h,) = [h for h in from_profiler(prof).hints if h.pattern == "rms_norm"]
    assert h.details["saving_upper_bound"] is True and "neuronscope calibrate" in h.details["estimate_model"]


def test_the_measurements_are_of_this_cpu() -> None:
    """The device's own probes (a tiny op, the bandwidth) and a fused optimizer's rates: real
    timings, positive, the bandwidth never slower for a smaller tensor."""
    per_op, bandwidth = calibration._device_costs()
    assert per_op > 0 and [s for s, _ in bandwidth] == list(calibration.BANDWIDTH_SIZES)
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
