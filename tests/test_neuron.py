"""The Neuron backend, against the stand-in TorchNeuron built from the docs (tests/neuron_standins/).

There is no Trainium here and torch-neuronx cannot be installed. The stand-in package follows
the Neuron 2.32/2.33 docs and the April-2026 TorchNeuron source (see its common.py); its Kineto
plugin is real C++ registered with the real libkineto of the installed torch, so the REAL
torch.profiler and Kineto run in every test here, decide when the plugin starts and carry its
``privateuse1_runtime`` / ``privateuse1_driver`` events into ``kineto_results`` and the Chrome
trace. The ops run on CPU tensors: real NeuronCores, real event names and real file contents
wait for a run on a Trainium host (``neuronscope doctor`` records them).
"""

from __future__ import annotations

import gzip
import importlib
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from neuronscope import (
    NeuronscopeError,
    announce,
    compare,
    from_trace,
    load,
    neuron_region,
    profile_on_neuron,
)
from neuronscope.announce import NeuronscopeWarning
from neuronscope.capture import neuron as neuron_backend
from neuronscope.capture import neuron_files, resolve_backend
from neuronscope.capture.neuron_api import cores_spec
from neuronscope.capture.neuron_files import dropped_events_note, own_framework_trace
from neuronscope.config import build_options
from neuronscope.errors import BackendUnavailableError, ConfigError
from neuronscope.region import ensure_no_capture_running

STANDINS = Path(__file__).resolve().parent / "neuron_standins"
STANDIN_PATH = STANDINS / "from_docs"
REPO = Path(__file__).resolve().parents[1]
DEVICE_NS = 40_000  # the stand-in's duration of one device execution

pytestmark = [
    # torch's own warning when PrivateUse1 is asked for without the process-wide rename
    pytest.mark.filterwarnings("ignore:The privateuseone is not a valid device option:UserWarning"),
    # every first capture of a name here starts without warm-up; one test checks that warning
    pytest.mark.filterwarnings("ignore:capture .* starts without warm-up"),
    pytest.mark.filterwarnings("ignore:TorchNeuron is loaded"),
]


def _drop_torch_neuronx() -> None:
    standin = sys.modules.get("torch_neuronx._standin")
    if standin is not None:
        standin.uninstall()
    for name in list(sys.modules):
        if name == "torch_neuronx" or name.startswith("torch_neuronx."):
            del sys.modules[name]
    sys.modules.pop("torch.neuron", None)
    if "neuron" in vars(torch):
        delattr(torch, "neuron")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """A working directory of its own (the runtime's default output is ./output), no Neuron
    environment variables from the outside, and a fresh per-name warm-up memory."""
    monkeypatch.chdir(tmp_path)
    for var in (
        "NEURON_RT_INSPECT_ENABLE",
        "NEURON_RT_INSPECT_OUTPUT_DIR",
        "NEURON_FRAMEWORK_DEBUG",
        "NEURONSCOPE_DISABLE",
        "NEURON_STANDIN_RENAME",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff-cache-unused"))
    announce.forget_said()  # each case starts as a fresh process: first captures, first warnings
    return tmp_path


@pytest.fixture
def standin(monkeypatch, clean_env):
    """``standin()`` puts the stand-in torch_neuronx on sys.path, imports it and returns its
    record module; everything is undone afterwards."""
    real = sys.modules.get("torch_neuronx")
    if real is not None and not hasattr(real, "_standin"):
        pytest.skip(
            "a real torch_neuronx is loaded (torch's backend autoload); run with "
            "TORCH_DEVICE_BACKEND_AUTOLOAD=0 to use the stand-in"
        )
    _drop_torch_neuronx()

    def use():
        monkeypatch.syspath_prepend(str(STANDIN_PATH))
        importlib.invalidate_caches()
        try:
            import torch_neuronx
        except RuntimeError as err:  # no C++ compiler for the stand-in's Kineto plugin
            pytest.skip(str(err))
        assert torch_neuronx.STANDIN == "from_docs"
        return torch_neuronx._standin

    yield use
    _drop_torch_neuronx()
    assert not hasattr(torch, "neuron")
    assert ensure_no_capture_running()


def _work(n: int = 32) -> torch.Tensor:
    x = torch.randn(n, n)
    return (x @ x).relu().sum()


def _capture(tmp_path: Path, name: str = "step", work=_work, **options):
    options.setdefault("backend", "neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NeuronscopeWarning)
        with neuron_region(name, output_dir=str(tmp_path / "runs"), **options) as region:
            work()
    return region.result


def _files(result) -> dict[str, dict]:
    return {Path(f["path"]).name: f for f in result.artifacts["neuron"]["files"]}


def _neuron_dir(result) -> Path:
    info = result.artifacts["neuron"]
    return Path(result.run_dir or "/") / info["output_dir"]


def _session(result) -> Path:
    return _neuron_dir(result) / result.artifacts["neuron"]["session_dirs"][0]


# ---- a capture, as the docs describe it ------------------------------------------------------


def test_capture_gives_a_complete_run(standin, clean_env):
    record = standin()
    result = _capture(clean_env)

    assert result.backend == "neuron" and result.status == "ok", result.error
    assert result.op("aten::mm") is not None
    run_dir = Path(result.run_dir)
    names = set(os.listdir(run_dir))
    assert {"result.json", "summary.txt", "neuron"} <= names
    trace = run_dir / ("trace.json" if "trace.json" in names else "trace.json.gz")
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as fh:
        cats = {e.get("cat") for e in json.load(fh)["traceEvents"]}
    assert {"cpu_op", "privateuse1_runtime", "privateuse1_driver"} <= cats

    loaded = load(run_dir)
    info = loaded.artifacts["neuron"]
    assert info["api"] == "NeuronConfig" and info["problems"] == []
    assert {"ntrace.pb", "trace_info.pb", "trace.json"} <= set(_files(loaded))
    for entry in info["files"]:
        path = _neuron_dir(loaded) / entry["path"]
        assert path.is_file() and path.stat().st_size == entry["bytes"]
    # <root>/<instance-id>_pid_<pid>/<19-digit nanosecond timestamp>/, as on a real host
    pid_dir, stamp = info["session_dirs"][0].split("/")
    assert pid_dir.endswith(f"_pid_{os.getpid()}") and re.fullmatch(r"\d{19}", stamp)
    assert info["privateuse1_events"]["privateuse1_driver"] >= 3

    # The Explorer line: the root, --ingest-only with a display name, both ports.
    assert info["view_command"] == f"neuron-explorer view -d {_neuron_dir(loaded).resolve()} --ingest-only --display-name step"
    line = next(n for n in loaded.notes if "neuron-explorer view -d" in n)
    assert "3001" in line and "3002" in line and "ssh -L" in line

    # Synchronised while the profiler still ran; one runtime session, into the run.
    ours = [s for s in record.RECORD["synchronize"] if s["caller"] == "neuronscope.capture.neuron"]
    assert ours and all(s["profiler_enabled"] for s in ours)
    (begin,) = record.RECORD["nrt_begin"]
    assert begin["output_dir"] == str((run_dir / "neuron").resolve()) and begin["via"] == "kineto_plugin"


def test_driver_events_give_per_op_device_time(standin, clean_env):
    """Device executions (privateuse1_driver) go to the op that launched them, as kernels do on
    CUDA; they are never ops themselves; dispatch events (privateuse1_runtime) are runtime
    calls, listed as ops the way key_averages lists cudaLaunchKernel."""
    standin()

    def work():
        x = torch.randn(32, 32)
        with neuron_region("inner"):
            y = x.relu()
        return (y + y).sum()

    result = _capture(clean_env, work=work)
    names = {o.name for o in result.ops}
    assert not any("neff_exec" in n for n in names)  # device executions are not ops
    assert "neuron_standin_dispatch" not in names  # a dispatch is a step of its op, no op
    relu = result.op("aten::clamp_min")
    assert relu.self_device_us == pytest.approx(DEVICE_NS / 1e3)
    assert result.op("aten::add").self_device_us == pytest.approx(DEVICE_NS / 1e3)
    driver = result.artifacts["neuron"]["privateuse1_events"]["privateuse1_driver"]
    total_device = sum(o.self_device_us or 0 for o in result.ops)
    assert total_device == pytest.approx(driver * DEVICE_NS / 1e3)
    assert result.device_unattributed_us == 0
    inner = result.regions["inner"]
    assert inner.device_time_us == pytest.approx(DEVICE_NS / 1e3)  # the relu's execution
    assert not any("device time is None" in n for n in result.notes)


@pytest.mark.parametrize("link_ops", [False, True])
def test_executions_linked_by_flow_alone_get_their_ops_device_time(standin, clean_env, link_ops):
    """A build whose executions name no op (no External id, linked correlation 0), joined to
    their dispatch by a flow (ac2g) alone: each execution is the device time of the op open
    around its dispatch, live and from the trace file alike; dispatches are no ops."""
    record = standin()
    record.BEHAVIOUR["link_ops"] = link_ops

    def work():
        x = torch.randn(32, 32)
        with neuron_region("inner"):
            y = x.relu()
        return (y + y).sum()

    live = _capture(clean_env, work=work)
    trace = _session(live) / "trace.json"
    if not link_ops:
        with open(trace) as fh:
            events = json.load(fh)["traceEvents"]
        driver = [e for e in events if e.get("cat") == "privateuse1_driver"]
        assert driver and not any("External id" in e.get("args", {}) for e in driver)
        assert any(e.get("cat") == "ac2g" for e in events)
    read = from_trace(trace)
    for result in (live, read):
        assert not any(o.name.startswith("neuron_standin_") for o in result.ops)
        for name in ("aten::clamp_min", "aten::add"):
            assert result.op(name).self_device_us == pytest.approx(DEVICE_NS / 1e3), name
        executions = live.artifacts["neuron"]["privateuse1_events"]["privateuse1_driver"]
        assert sum(o.self_device_us or 0 for o in result.ops) == pytest.approx(executions * DEVICE_NS / 1e3)
        assert result.device_unattributed_us == 0
        assert result.regions["inner"].device_time_us == pytest.approx(DEVICE_NS / 1e3)


def test_driver_events_without_a_link_are_launched_outside_any_op(standin, clean_env):
    record = standin()
    record.BEHAVIOUR["unlinked_driver"] = 3
    result = _capture(clean_env)
    assert result.device_unattributed_us == pytest.approx(3 * DEVICE_NS / 1e3)
    assert result.op("aten::clamp_min").self_device_us == pytest.approx(DEVICE_NS / 1e3)


def test_a_build_without_device_events_gets_a_plain_note(standin, clean_env):
    record = standin()
    record.BEHAVIOUR["device_events"] = False
    result = _capture(clean_env)
    assert all(o.self_device_us is None and o.device_total_us is None for o in result.ops)
    note = next(n for n in result.notes if "device time is None" in n)
    assert "None (not 0)" in note and "privateuse1_driver" in note and "Neuron Explorer" in note
    assert "tensors" not in note  # not "were the tensors on the neuron device?"
    assert result.artifacts["neuron"]["view_command"]


def test_from_trace_reads_a_neuron_trace_json_the_same_way(standin, clean_env):
    record = standin()
    record.BEHAVIOUR["unlinked_driver"] = 1
    live = _capture(clean_env)
    trace = _session(live) / "trace.json"
    read = from_trace(trace)
    assert read.backend == "neuron"
    for name in ("aten::clamp_min", "aten::sum"):
        assert read.op(name).self_device_us == pytest.approx(live.op(name).self_device_us)
    assert read.device_unattributed_us == pytest.approx(DEVICE_NS / 1e3)
    assert not any("neff_exec" in o.name for o in read.ops)
    assert any("outside any op" in n for n in read.notes)


# ---- NeuronConfig: what the build accepts is read, never assumed ---------------------------


def test_config_gets_modes_cores_output_dir_and_max_events(standin, clean_env):
    record = standin()
    from torch_neuronx import profiling

    result = _capture(clean_env, modes=["runtime", "Device", "cpu_util"], cores="0,1,4-7", max_events_per_nc=500_000)
    (kwargs,) = record.RECORD["config_kwargs"][-1:]
    PM = profiling.ProfileMode
    assert kwargs["modes"] == [PM.RUNTIME, PM.DEVICE, PM.CPU_UTIL]
    assert kwargs["capture_enabled_for_nc"] == "0,1,4-7"
    assert kwargs["max_events_per_nc"] == 500_000
    assert kwargs["profile_output_dir"] == str((Path(result.run_dir) / "neuron").resolve())
    (init,) = record.RECORD["profiler_init"]
    assert isinstance(init["config"], profiling.NeuronConfig)
    config = result.artifacts["neuron"]["config"]
    assert config["signature_read"] is True and config["not_accepted"] == {}
    assert "correlate_device_time" not in config  # undocumented: never passed
    listed = _files(result)
    assert {"profile_nc_0_session_0.ntff", "profile_nc_7_session_0.ntff", "cpu_util.pb"} <= set(listed)
    (exported,) = record.RECORD["export_trace"]
    assert exported.parent == _session(result)
    assert (Path(result.run_dir) / "trace.json").read_bytes() == exported.read_bytes()


def test_default_is_runtime_only_without_hbm_warning(standin, clean_env):
    record = standin()
    from torch_neuronx import profiling

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with neuron_region("step", backend="neuron", output_dir=str(clean_env / "runs")) as r:
            _work()
    assert record.RECORD["config_kwargs"][-1]["modes"] == [profiling.ProfileMode.RUNTIME]
    assert not [w for w in caught if "HBM" in str(w.message)]
    assert not any(f.endswith(".ntff") for f in _files(r.result))


def test_device_mode_warns_about_hbm(standin, clean_env):
    standin()
    with (
        pytest.warns(NeuronscopeWarning, match=r"about 5 GB of HBM"),
        neuron_region("step", backend="neuron", modes="device", output_dir=str(clean_env / "runs")),
    ):
        _work()


def _kwargs_config(profiling, refuse: tuple[str, ...]):
    """A NeuronConfig whose signature cannot be read (``**kwargs``, as a pybind class), and that
    refuses some keywords without naming them, as a C++ constructor may."""

    class KwargsConfig(profiling.NeuronConfig):
        def __init__(self, **kwargs):
            if set(refuse) & set(kwargs):
                raise ValueError("incompatible constructor arguments")  # names nothing
            super().__init__(**kwargs)

    return KwargsConfig


def test_unreadable_signature_tries_each_optional_keyword_alone(standin, clean_env, monkeypatch):
    record = standin()
    from torch_neuronx import profiling

    cache = clean_env / "neff-cache"
    cache.mkdir()
    (cache / "neff_7_vnc_0.neff").write_bytes(b"NEFF")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(cache))
    monkeypatch.setattr(profiling, "NeuronConfig", _kwargs_config(profiling, ("neff_cache_dir",)))
    result = _capture(clean_env, modes=["runtime", "device"], cores=0)
    assert result.status == "ok"
    config = result.artifacts["neuron"]["config"]
    assert config["signature_read"] is False
    assert config["not_accepted"] == {"neff_cache_dir": "ValueError"}
    assert config["capture_enabled_for_nc"] == "0"
    assert "neff_cache_dir" not in record.RECORD["config_kwargs"][-1] or record.RECORD["config_kwargs"][-1]["neff_cache_dir"] is None
    # Without TorchNeuron's copy, neuronscope copied the NEFF in itself.
    assert "neff_7_vnc_0.neff" in _files(result)
    assert result.artifacts["neuron"]["neffs_copied_from"] == str(cache)


def test_a_refused_keyword_the_user_asked_for_is_a_config_error(standin, clean_env, monkeypatch):
    standin()
    from torch_neuronx import profiling

    monkeypatch.setattr(profiling, "NeuronConfig", _kwargs_config(profiling, ("max_events_per_nc",)))
    backend = neuron_backend.NeuronBackend(build_options(None, backend="neuron", max_events_per_nc=10))
    with pytest.raises(ConfigError, match="does not take max_events_per_nc"):
        backend.profiler_kwargs(clean_env / "scratch")


def test_a_build_without_neuron_config_is_one_clear_error(standin, clean_env, monkeypatch):
    standin()
    from torch_neuronx import profiling

    monkeypatch.delattr(profiling, "NeuronConfig")
    with pytest.raises(BackendUnavailableError) as err:
        profile_on_neuron(backend="neuron")
    text = str(err.value)
    assert "2.13.3.0 or later" in text and "no NeuronConfig" in text
    assert '"torch-neuronx==2.14.*"' in text and "https://download.pytorch.org/whl/cpu" in text
    assert "https://pip.repos.neuron.amazonaws.com" in text


def test_a_config_that_is_not_an_experimental_config_is_refused(standin, clean_env, monkeypatch):
    standin()
    from torch_neuronx import profiling

    class Plain:
        def __init__(self, modes=None, profile_output_dir=None):
            pass

    monkeypatch.setattr(profiling, "NeuronConfig", Plain)
    backend = neuron_backend.NeuronBackend(build_options(None, backend="neuron"))
    with pytest.raises(NeuronscopeError, match="not a torch._C._profiler._ExperimentalConfig"):
        backend.profiler_kwargs(clean_env / "scratch")


def test_profile_mode_without_a_member_is_a_config_error(standin, clean_env, monkeypatch):
    standin()
    import enum

    from torch_neuronx import profiling

    monkeypatch.setattr(profiling, "ProfileMode", enum.Enum("ProfileMode", {"RUNTIME": "runtime"}))
    backend = neuron_backend.NeuronBackend(build_options(None, backend="neuron", modes="cpu_util"))
    with pytest.raises(ConfigError, match="has no CPU_UTIL"):
        backend.profiler_kwargs(clean_env / "scratch")
    with (
        pytest.warns(NeuronscopeWarning, match="has no CPU_UTIL"),
        neuron_region("step", backend="neuron", modes="cpu_util", output_dir=str(clean_env / "runs")) as r,
    ):
        _work()
    assert r.result is None


def test_max_events_per_nc_is_validated():
    with pytest.raises(ConfigError, match="max_events_per_nc"):
        build_options(None, max_events_per_nc=0)
    assert build_options(None, max_events_per_nc=5).max_events_per_nc == 5


def test_reaching_max_events_per_nc_is_reported(standin, clean_env):
    """The runtime keeps the newest max_events_per_nc system-trace events per NeuronCore (a ring
    buffer; the stand-in keeps executions), at least 56 of them per execution in the Neuron
    docs' eager run: a capture whose executions make that many says events may be overwritten,
    long before its executions alone would reach the limit."""
    record = standin()

    def many():
        x = torch.randn(8)
        for _ in range(6):
            x = x.relu()

    result = _capture(clean_env, work=many, max_events_per_nc=3)
    assert record.RECORD["nrt_begin"][-1]["max_events_per_nc"] == 3
    assert result.artifacts["neuron"]["privateuse1_events"]["privateuse1_driver"] == 3
    assert any("at or past max_events_per_nc (3)" in n and "about 168 or more" in n for n in result.notes)
    few = _capture(clean_env, "big", work=many, max_events_per_nc=1000)  # 8 executions: about 448 events
    assert few.artifacts["neuron"]["privateuse1_events"]["privateuse1_driver"] * 56 < 1000
    assert not any("max_events_per_nc" in n for n in few.notes)
    # 20 executions, about 1,120 events, pass a limit of 1,000 the executions alone never reach.
    assert dropped_events_note(20, 1000) is not None and dropped_events_note(17, 1000) is None


def test_a_rank_adopts_its_own_framework_trace(tmp_path):
    """In a root all ranks share, every rank's neuron_framework_trace_rank_<N>.json sits at the
    top: a rank takes its own, not the newest (another rank's, written a moment later)."""
    import time as _time

    mine, theirs = tmp_path / "neuron_framework_trace_rank_0.json", tmp_path / "neuron_framework_trace_rank_1.json"
    mine.write_text("{}")
    _time.sleep(0.01)
    theirs.write_text("{}")
    files = [mine, theirs]
    assert own_framework_trace(files, 0) == mine and own_framework_trace(files, 1) == theirs
    assert own_framework_trace(files, None) == theirs  # no rank known: the newest
    plain = tmp_path / "trace.json"  # a session directory's own trace is any rank's
    plain.write_text("{}")
    assert own_framework_trace([mine, theirs, plain], 0) == plain


# ---- session files ---------------------------------------------------------------------------


def test_small_neff_cache_is_handed_to_torch_neuronx(standin, clean_env, monkeypatch):
    record = standin()
    cache = clean_env / "neff-cache"
    cache.mkdir()
    (cache / "neff_7_vnc_0.neff").write_bytes(b"NEFF")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(cache))
    result = _capture(clean_env, modes=["runtime", "device"])
    assert record.RECORD["config_kwargs"][-1]["neff_cache_dir"] == str(cache)
    assert "neff_7_vnc_0.neff" in _files(result)
    assert "neffs_copied_from" not in result.artifacts["neuron"]  # TorchNeuron did it


def test_a_large_neff_cache_is_not_copied_whole(standin, clean_env, monkeypatch):
    """The host-wide cache holds every NEFF ever compiled (eager: one per op): TorchNeuron is
    not asked to copy it, and neuronscope copies the newest ones up to the cap, with a note."""
    record = standin()
    cache = clean_env / "neff-cache"
    cache.mkdir()
    for i in range(5):
        path = cache / f"neff_{i}_vnc_0.neff"
        path.write_bytes(b"NEFF")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(cache))
    monkeypatch.setattr(neuron_files, "MAX_NEFF_COPY_FILES", 2)
    result = _capture(clean_env, modes=["runtime", "device"])
    assert record.RECORD["config_kwargs"][-1]["neff_cache_dir"] is None
    neffs = {k for k, v in _files(result).items() if v["kind"] == "neff"}
    assert neffs == {"neff_4_vnc_0.neff", "neff_3_vnc_0.neff"}  # the newest
    assert any("copied 2 of 5 NEFFs" in n and "TORCH_NEURONX_NEFF_CACHE_DIR" in n for n in result.notes)
    assert any("not asked to copy it" in n for n in result.notes)


def test_missing_neffs_with_device_mode_are_flagged(standin, clean_env):
    standin()
    result = _capture(clean_env, modes=["runtime", "device"])
    assert any("no .neff" in p for p in result.artifacts["neuron"]["problems"])


def test_some_empty_ntffs_are_expected_all_empty_is_a_problem(standin, clean_env):
    record = standin()
    record.BEHAVIOUR["runtime_writes_neffs"] = True
    record.BEHAVIOUR["empty_ntff"] = "some"
    some = _capture(clean_env, "some", modes=["runtime", "device"])
    assert some.artifacts["neuron"]["problems"] == []
    assert any("1 of 2 .ntff device traces are empty: expected" in n for n in some.notes)
    record.BEHAVIOUR["empty_ntff"] = "all"
    every = _capture(clean_env, "all", modes=["runtime", "device"])
    assert any("all 2 .ntff device traces are empty" in p for p in every.artifacts["neuron"]["problems"])


def test_empty_capture_is_flagged_with_the_right_advice(standin, clean_env, caplog):
    record = standin()
    record.BEHAVIOUR["write_nothing"] = True
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        result = _capture(clean_env)
    (problem,) = result.artifacts["neuron"]["problems"]
    assert "no session files" in problem and "NEURON_RT_INSPECT_ENABLE must be UNSET" in problem
    assert "no session files" in caplog.text


def test_rank_file_written_outside_the_session_is_copied_in_as_trace_json(standin, clean_env):
    record = standin()
    record.BEHAVIOUR["trace_name"] = "neuron_framework_trace_rank_0.json"
    result = _capture(clean_env)
    info = result.artifacts["neuron"]
    assert info["framework_trace"] == "neuron_framework_trace_rank_0.json"
    assert (_session(result) / "trace.json").is_file()  # beside ntrace.pb, where Explorer looks
    assert (Path(result.run_dir) / "trace.json").is_file()


@pytest.mark.parametrize(
    "name", ["trace.json", "neuron_framework_trace_rank_0.json", "plugins/neuron/trace.json.gz"]
)
def test_the_framework_trace_is_found_under_each_documented_name(standin, clean_env, name):
    """The docs name the framework trace three ways (how-to: trace.json; troubleshooting:
    neuron_framework_trace_rank_<N>.json; schema skill: plugins/*/trace.json.gz): each is
    found, recorded, put beside the system trace as plain trace.json, and read with device time."""
    record = standin()
    record.BEHAVIOUR["trace_name"] = name
    result = _capture(clean_env)
    info = result.artifacts["neuron"]
    assert info["problems"] == [] and Path(info["framework_trace"]).name == Path(name).name
    placed = _session(result) / "trace.json"
    with open(placed) as fh:
        assert json.load(fh)["traceEvents"]
    assert (Path(result.run_dir) / "trace.json").is_file()
    for read in (from_trace(placed), from_trace(_neuron_dir(result))):
        assert read.backend == "neuron"
        assert read.op("aten::clamp_min").self_device_us == pytest.approx(DEVICE_NS / 1e3)


def test_export_false_keeps_session_files_in_a_temp_dir(standin, clean_env):
    standin()
    result = _capture(clean_env, export=False)
    out = Path(result.artifacts["neuron"]["output_dir"])
    try:
        assert result.run_dir is None and out.is_absolute() and out.is_dir()
        assert "ntrace.pb" in _files(result)
        assert not (clean_env / "output").exists()
        assert any("export=False" in n for n in result.notes)
    finally:
        import shutil

        shutil.rmtree(out, ignore_errors=True)


def test_ranks_share_one_neuron_root(standin, clean_env):
    """In a multi-process run every rank's session goes under one root beside the run
    directories, as the docs' multi-rank example does, so Explorer shows all ranks together;
    each rank lists its own process's files (a one-process gloo group stands in for torchrun)."""
    import socket

    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    record = standin()
    other = clean_env / "runs" / "step"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        result = _capture(clean_env)
    finally:
        dist.destroy_process_group()
    run_dir = Path(result.run_dir)
    info = result.artifacts["neuron"]
    root = Path(info["output_dir"])
    assert run_dir.name.endswith("_rank0") and info["shared_root"] is True and info["rank"] == 0
    assert root.parent == other and root.name == "neuron_" + run_dir.name.split("_")[0]
    assert record.RECORD["nrt_begin"][0]["output_dir"] == str(root.resolve())
    # Another rank's process directory under the same root is not listed as this rank's.
    (root / "i-0other_pid_1" / "1778711290599971590").mkdir(parents=True)
    (root / "i-0other_pid_1" / "1778711290599971590" / "ntrace.pb").write_bytes(b"x")
    assert all("_pid_1/" not in f["path"] for f in info["files"])
    assert info["view_command"].startswith(f"neuron-explorer view -d {root.resolve()} ")


RANK_WORKER = """
import json, os, sys, warnings
import torch
import torch.distributed as dist
import torch_neuronx  # the stand-in, on PYTHONPATH
from neuronscope import neuron_region

dist.init_process_group("gloo")
warnings.simplefilter("ignore")
with neuron_region("step", backend="neuron", output_dir=sys.argv[1]) as r:
    (torch.randn(16, 16) @ torch.randn(16, 16)).relu().sum()
info = r.result.artifacts["neuron"]
out = {"rank": dist.get_rank(), "pid": os.getpid(), "run_dir": r.result.run_dir, "info": info}
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as fh:
    json.dump(out, fh, default=str)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_real_ranks_write_under_one_neuron_root(tmp_path):
    """Two torchrun processes with the stand-in: one Neuron root, one pid directory each,
    each rank listing its own files, one Explorer command for the whole run."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    worker = tmp_path / "worker.py"
    worker.write_text(RANK_WORKER)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NEURON")}
    environ.update(PYTHONPATH=os.pathsep.join([str(STANDIN_PATH), str(REPO)]), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
         "--master_addr=127.0.0.1", f"--master_port={port}", str(worker), str(tmp_path)],
        env=environ, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    roots = {r["info"]["output_dir"] for r in ranks}
    assert len(roots) == 1
    root = Path(roots.pop())
    assert sorted(p.name.rsplit("_pid_", 1)[1] for p in root.iterdir() if p.is_dir()) == sorted(str(r["pid"]) for r in ranks)
    for r in ranks:
        assert r["info"]["rank"] == r["rank"] and r["info"]["problems"] == []
        assert all(f"_pid_{r['pid']}/" in f["path"] for f in r["info"]["files"])
        assert Path(r["run_dir"]).name.endswith(f"_rank{r['rank']}")
    assert ranks[0]["info"]["view_command"] == ranks[1]["info"]["view_command"]
    assert not (tmp_path / "output").exists()


# ---- a CPU-only capture where TorchNeuron is loaded ------------------------------------------


def test_cpu_capture_with_torch_neuronx_loaded_is_contained(standin, clean_env):
    """Real Kineto starts TorchNeuron's plugin in a capture with ProfilerActivity.CPU only (the
    CPU activity includes the PrivateUse1 runtime/driver types); the runtime then writes into
    ./output. neuronscope says so once and moves those files into the run."""
    record = standin()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with neuron_region("cpu_step", backend="cpu", output_dir=str(clean_env / "runs")) as r:
            _work()
        with neuron_region("cpu_step2", backend="cpu", export=False) as r2:
            _work()
    said = [str(w.message) for w in caught if "TorchNeuron is loaded" in str(w.message)]
    assert len(said) == 1 and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in said[0]
    assert [b["output_dir"] for b in record.RECORD["nrt_begin"]] == ["./output", "./output"]
    result = r.result
    assert result.backend == "cpu" and "neuron" not in result.artifacts
    side = result.artifacts["neuron_runtime_side_effect"]
    assert side["sessions"] == 1 and any("moved into the run" in n for n in result.notes)
    moved = Path(result.run_dir) / side["moved_to"][0]
    assert (moved / "ntrace.pb").is_file() and re.fullmatch(r"\d{19}", moved.name)
    assert "removed (nothing is exported)" in r2.result.artifacts["neuron_runtime_side_effect"]["note"]
    assert not (clean_env / "output").exists()  # nothing left in the working directory


@pytest.mark.parametrize("backend", ["neuron", "cpu"])
def test_no_capture_leaves_files_in_the_working_directory(standin, clean_env, backend):
    """Every capture neuronscope starts, the decorator's observed warm-up call (a CPU-only
    capture, which starts TorchNeuron's runtime trace into ./output) included, leaves nothing
    in the working directory; the runs stay under the output root."""
    record = standin()

    @profile_on_neuron(backend=backend, warmup=1, active=2, output_dir=str(clean_env / "runs"))
    def step():
        return _work()

    for _ in range(3):
        step()
    assert step.last_result is not None and step.last_result.backend == backend
    # the warm-up's observation and the captures each started the runtime trace
    assert len(record.RECORD["nrt_begin"]) >= 3
    assert sorted(os.listdir(clean_env)) == ["runs"]


def test_cpu_results_without_torch_neuronx_carry_nothing_neuron(clean_env):
    _drop_torch_neuronx()
    result = _capture(clean_env, backend="cpu")
    assert result.backend == "cpu" and "neuron_runtime_side_effect" not in result.artifacts
    assert not any("neuron" in n.lower() for n in result.notes)
    assert all(o.self_device_us is None for o in result.ops)


# ---- availability and messages ---------------------------------------------------------------


def test_without_torch_neuronx_backend_neuron_fails_at_decoration(clean_env):
    _drop_torch_neuronx()
    if importlib.util.find_spec("torch_neuronx") is not None:
        pytest.skip("a torch_neuronx is importable here")
    with pytest.raises(NeuronscopeError) as err:
        profile_on_neuron(backend="neuron")
    assert isinstance(err.value, BackendUnavailableError)
    text = str(err.value)
    assert "torch-neuronx==2.14.*" in text and "download.pytorch.org/whl/cpu" in text
    assert "backend='cpu'" in text
    with pytest.raises(BackendUnavailableError):
        neuron_region("x", backend="neuron")


def test_without_torch_neuronx_auto_picks_cpu(clean_env):
    _drop_torch_neuronx()
    if importlib.util.find_spec("torch_neuronx") is not None or torch.cuda.is_available():
        pytest.skip("torch_neuronx or CUDA present")
    assert resolve_backend(build_options(None)).name == "cpu"


def test_a_first_cpu_capture_does_not_load_the_neuron_api() -> None:
    """Without torch-neuronx, backend 'auto' answers from the import system alone: the
    Neuron module (10 ms to import, more on a busy machine) stays out of a first capture."""
    if importlib.util.find_spec("torch_neuronx") is not None:
        pytest.skip("torch_neuronx present")
    code = (
        "import sys, torch\n"
        "from neuronscope import profile_on_neuron\n"
        "f = profile_on_neuron(lambda: torch.ones(4) * 2, export=False, print_summary=False)\n"
        "f(); f()\n"
        "print(f.last_result.backend, 'neuronscope.capture.neuron_api' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert out.stdout.split()[-2:] == ["cpu", "False"]


def test_auto_prefers_neuron_when_present(standin, clean_env):
    standin()
    assert resolve_backend(build_options(None)).name == "neuron"


def test_no_visible_device(standin, clean_env):
    record = standin()
    record.DEVICE_COUNT = 0
    with pytest.raises(BackendUnavailableError, match=r"is_available\(\) is False"):
        profile_on_neuron(backend="neuron")


def _warnings_of(tmp_path: Path, name: str = "step", **options) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with neuron_region(name, backend="neuron", output_dir=str(tmp_path / "runs"), **options):
            _work()
    return [str(w.message) for w in caught if issubclass(w.category, NeuronscopeWarning)]


def test_a_capture_that_compiled_neffs_says_so(standin, clean_env):
    record = standin()
    assert not any("compiled" in n and "NEFF" in n for n in _capture(clean_env).notes)
    record.BEHAVIOUR["compiles_neffs"] = 3
    result = _capture(clean_env, name="cold")
    assert result.artifacts["neuron"]["neffs_compiled_in_capture"] == 3
    note = next(n for n in result.notes if "compiled 3 NEFF(s)" in n)
    assert "warm up before capturing" in note and "neff-cache-unused" in note


def test_inspect_env_var_is_refused_clearly(standin, clean_env, monkeypatch):
    """NEURON_RT_INSPECT_ENABLE=1 conflicts with torch.profiler capture (Neuron docs): refused
    at decoration time and at a region's start, with the fix; nothing is captured."""
    record = standin()
    monkeypatch.setenv("NEURON_RT_INSPECT_ENABLE", "1")
    with pytest.raises(ConfigError, match=r"NEURON_RT_INSPECT_ENABLE=1 is set.*conflicts.*unset it"):
        profile_on_neuron(backend="neuron")
    with pytest.raises(ConfigError, match="NEURON_RT_INSPECT_ENABLE"):
        with neuron_region("x", backend="neuron", output_dir=str(clean_env / "runs")):
            _work()
    assert record.RECORD["nrt_begin"] == []
    monkeypatch.setenv("NEURON_RT_INSPECT_ENABLE", "0")
    assert _capture(clean_env).backend == "neuron"


def test_with_stack_names_neuron_framework_debug(standin, clean_env, monkeypatch):
    standin()
    msgs = _warnings_of(clean_env, with_stack=True)
    assert any("NEURON_FRAMEWORK_DEBUG=1" in m for m in msgs)
    assert not any("XLA_" in m for m in msgs)
    monkeypatch.setenv("NEURON_FRAMEWORK_DEBUG", "1")
    assert not any("NEURON_FRAMEWORK_DEBUG" in m for m in _warnings_of(clean_env, with_stack=True))
    assert not any("NEURON_FRAMEWORK_DEBUG" in m for m in _warnings_of(clean_env, "no_stack"))


def test_first_capture_without_warmup_warns_once_per_name(standin, clean_env):
    standin()
    assert any("without warm-up" in m for m in _warnings_of(clean_env, "fresh"))
    assert not any("without warm-up" in m for m in _warnings_of(clean_env, "fresh"))
    assert any("without warm-up" in m for m in _warnings_of(clean_env, "other"))


def test_decorator_with_warmup_does_not_warn(standin, clean_env):
    standin()

    @profile_on_neuron(backend="neuron", warmup=1, active=1, output_dir=str(clean_env / "runs"))
    def step():
        return _work()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step()
        step()
    assert step.last_result is not None and step.last_result.backend == "neuron"
    assert not [w for w in caught if issubclass(w.category, NeuronscopeWarning)]


def test_cores_spec():
    assert cores_spec((0, 1, 4, 5, 6, 7)) == "0,1,4-7"
    assert cores_spec((3,)) == "3"
    assert cores_spec((0, 2, 3)) == "0,2,3"
    assert cores_spec(None) is None


# ---- compare() and the demo ------------------------------------------------------------------


def test_compare_runs_on_neuron(standin, clean_env):
    record = standin()
    x = torch.randn(16, 64)

    def naive(t):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)

    def fused(t):
        return torch.rms_norm(t, (t.shape[-1],), eps=1e-6)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NeuronscopeWarning)
        cmp = compare({"naive": naive, "fused": fused}, x, backend="neuron", warmup=1, active=2, output_dir=str(clean_env / "runs"))
    try:
        assert cmp.backend == "neuron" and [r.label for r in cmp.rows] == ["naive", "fused"]
        assert cmp.run_dir is not None, "the comparison export failed"
        assert (Path(cmp.run_dir) / "trace_naive.json.gz").is_file()
        ours = [s["profiler_enabled"] for s in record.RECORD["synchronize"] if s["caller"] == "neuronscope.capture.neuron"]
        assert False in ours and True in ours  # after the warm-up, and inside each capture
        assert all(r.backend == "neuron" and "neuron" in r.artifacts for r in cmp.results.values())
    finally:
        import shutil

        for r in cmp.results.values():  # export=False captures keep their files in temp dirs
            out = r.artifacts.get("neuron", {}).get("output_dir")
            if out and Path(out).is_absolute():
                shutil.rmtree(out, ignore_errors=True)


def test_demo_runs_on_neuron(standin, clean_env, monkeypatch):
    """The demo puts its tensors on 'neuron' and compiles with backend='neuron'. The stand-in has
    no device memory, so here those tensors live on the CPU; the compile backend is the
    stand-in's, registered as the real package's entry point would register it."""
    record = standin()
    import torch_neuronx
    from torch._dynamo.backends import registry

    from neuronscope import demo

    monkeypatch.setitem(registry._BACKENDS, "neuron", None)
    monkeypatch.setitem(registry._COMPILER_FNS, "neuron", torch_neuronx.neuron_dynamo_backend.neuron_backend)
    monkeypatch.setattr(demo, "DEMO_SHAPE", (2, 8, 64))
    real_randn = torch.randn

    def randn(*size, device=None, **kwargs):
        assert device == "neuron"
        return real_randn(*size, **kwargs)

    monkeypatch.setattr(torch, "randn", randn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NeuronscopeWarning)
        cmp = demo.run_demo(backend="neuron", output_dir=str(clean_env / "runs"))
    monkeypatch.setattr(torch, "randn", real_randn)
    try:
        torch._dynamo.reset()
        assert cmp.backend == "neuron"
        assert [r.label for r in cmp.rows] == ["naive", "fused", "compiled"]
        assert record.RECORD["dynamo_compiles"], "torch.compile did not use the 'neuron' backend"
    finally:
        import shutil

        for r in cmp.results.values():
            out = r.artifacts.get("neuron", {}).get("output_dir")
            if out and Path(out).is_absolute():
                shutil.rmtree(out, ignore_errors=True)



def _run_python(code: str, cwd: Path, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON", "XLA_"))}
    environ["PYTHONPATH"] = os.pathsep.join([str(STANDIN_PATH), str(REPO)])
    environ.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False, capture_output=True, text=True, env=environ, timeout=300, cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_in_a_fresh_process_with_the_real_privateuse1_rename(tmp_path):
    """One subprocess (torch takes seconds to import) for what needs a fresh process:

    - importing neuronscope, decorating and a CPU capture do not import torch_neuronx;
    - TorchNeuron renames PrivateUse1 to 'neuron' for the whole process (irreversible): torch then
      prints ProfilerActivity.PrivateUse1 as NEURON, and from_profiler must still call such a
      profile a Neuron one, with the driver events' device time.
    """
    out = _run_python(
        f"""
        import json, sys, warnings
        import neuronscope
        after_import = "torch_neuronx" in sys.modules
        neuronscope.profile_on_neuron(lambda: 0)
        with neuronscope.neuron_region("x", backend="cpu", export=False):
            pass
        after_use = "torch_neuronx" in sys.modules
        import torch
        from torch.profiler import ProfilerActivity, profile
        warnings.simplefilter("ignore")
        with neuronscope.neuron_region("renamed", backend="neuron", output_dir={str(tmp_path)!r}) as r:
            (torch.randn(8, 8) @ torch.randn(8, 8)).relu().sum()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
            torch.randn(8).relu()
        import torch_neuronx
        mine = neuronscope.from_profiler(p)
        print(json.dumps({{
            "after_import": after_import,
            "after_use": after_use,
            "device": str(torch.device("neuron")),
            "activity": str(ProfilerActivity.PrivateUse1),
            "backend": r.result.backend,
            "status": r.result.status,
            "relu_device_us": r.result.op("aten::clamp_min").self_device_us,
            "files": sorted(f["path"].rsplit("/", 1)[-1] for f in r.result.artifacts["neuron"]["files"]),
            "from_profiler": mine.backend,
            "from_profiler_device": mine.op("aten::clamp_min").self_device_us,
        }}))
        """,
        tmp_path,  # the runtime's default output (./output) must not land in the repository
        NEURON_STANDIN_RENAME="1",
    )
    assert out["after_import"] is False and out["after_use"] is False
    assert out["device"] == "neuron" and out["activity"] == "ProfilerActivity.NEURON"
    assert out["backend"] == "neuron" and out["status"] == "ok"
    assert out["relu_device_us"] == pytest.approx(DEVICE_NS / 1e3)
    assert {"ntrace.pb", "trace_info.pb", "trace.json"} <= set(out["files"])
    assert out["from_profiler"] == "neuron" and out["from_profiler_device"] == pytest.approx(DEVICE_NS / 1e3)


REAL_HOST_SCRIPT = """
import json, sys, warnings
import torch
import torch_neuronx
if not torch.neuron.is_available():
    print(json.dumps({"skip": "torch-neuronx is installed but torch.neuron.is_available() is False"}))
    sys.exit(0)
import neuronscope
from neuronscope.demo import rms_norm_naive

x = torch.randn(8, 256, 1024, device="neuron")
w = torch.randn(1024, device="neuron")
for _ in range(3):  # warm-up: the per-op NEFFs compile here, not in the capture
    rms_norm_naive(x, w)
torch.neuron.synchronize()

def summary(result):
    info = result.artifacts.get("neuron", {})
    return {
        "status": result.status, "error": result.error,
        "version": info.get("torch_neuronx_version"), "config": info.get("config"),
        "kinds": sorted({f["kind"] for f in info.get("files", [])}),
        "problems": info.get("problems"), "privateuse1_events": info.get("privateuse1_events"),
        "device_time": result.has_device_time,
        "top": [(o.name, o.self_cpu_us, o.self_device_us) for o in result.ops[:6]],
        "notes": result.notes, "view": info.get("view_command"),
    }

out = {}
for name, modes in (("real_runtime", ["runtime"]), ("real_device", ["runtime", "device"])):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with neuronscope.neuron_region(name, backend="neuron", modes=modes, output_dir="runs") as r:
            rms_norm_naive(x, w)
    out[name] = summary(r.result)
print(json.dumps(out, default=str))
"""


@pytest.mark.slow
def test_on_a_real_trainium_host(tmp_path):
    """The real thing, where it exists: a Trn2/Trn3 host with TorchNeuron. Skipped here (no
    Trainium, torch-neuronx not installable); run `neuronscope doctor` there first."""
    if importlib.util.find_spec("torch_neuronx") is None:
        pytest.skip("no Trainium here: torch-neuronx is not installed, so the real Neuron test cannot run")
    environ = {k: v for k, v in os.environ.items() if k != "NEURON_RT_INSPECT_ENABLE"}
    environ["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-c", REAL_HOST_SCRIPT],
        check=False, capture_output=True, text=True, env=environ, timeout=1800, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    print(json.dumps(out, indent=1))  # what a first real run shows: keep it in the report
    runtime, device = out["real_runtime"], out["real_device"]
    assert runtime["status"] == "ok" and device["status"] == "ok", (runtime["error"], device["error"])
    assert {"system_trace", "trace_info", "framework_trace"} <= set(runtime["kinds"])
    assert runtime["problems"] == []
    assert {"device_trace", "neff"} <= set(device["kinds"])


def test_explorer_command_is_quoted_for_the_shell():
    command, (line,) = neuron_files.explorer_notes(Path("/runs/my run/neuron"), "train step")
    assert command == "neuron-explorer view -d '/runs/my run/neuron' --ingest-only --display-name 'train step'"
    assert "-L 3001:localhost:3001 -L 3002:localhost:3002" in line
