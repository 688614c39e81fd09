"""The Neuron backend, against stand-in torch-neuronx packages (tests/neuron_standins/).

There is no Trainium here and torch-neuronx cannot be installed. Each stand-in follows the
TorchNeuron documentation for one API generation ("config": NeuronConfig / ProfileMode /
NeuronProfiler(config); "legacy": NeuronProfiler(pytorch_activities=..., neuron_output_dir=...);
"raw": only the Kineto plugin reading custom_profiler_config), writes the session files a real
run writes and records what it was asked. The REAL torch.profiler runs with them; the ops run on
CPU tensors, so no test here sees a NeuronCore or a Neuron device event: per-op device time on a
real build, the real file contents and Neuron Explorer wait for a run on a Trainium host.
"""

from __future__ import annotations

import gzip
import importlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity

from neuronscope import (
    NeuronscopeError,
    compare,
    load,
    neuron_region,
    profile_on_neuron,
)
from neuronscope.capture import neuron as neuron_backend
from neuronscope.capture import resolve_backend
from neuronscope.config import build_options
from neuronscope.errors import BackendUnavailableError, ConfigError
from neuronscope.region import NeuronscopeWarning, ensure_no_capture_running

STANDINS = Path(__file__).resolve().parent / "neuron_standins"
REPO = Path(__file__).resolve().parents[1]
GENERATIONS = ("config", "legacy", "raw")

pytestmark = [
    # torch's own warning when PrivateUse1 is asked for without the process-wide rename
    pytest.mark.filterwarnings("ignore:The privateuseone is not a valid device option:UserWarning"),
    # every first capture of a name here starts without warm-up; one test checks that warning
    pytest.mark.filterwarnings("ignore:capture .* starts without warm-up"),
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
        "XLA_IR_DEBUG",
        "XLA_HLO_DEBUG",
        "NEURONSCOPE_DISABLE",
        "NEURON_STANDIN_RENAME",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff-cache-unused"))
    monkeypatch.setattr(neuron_backend, "_captured_names", set())
    return tmp_path


@pytest.fixture
def standin(monkeypatch, clean_env):
    """``standin("config" | "legacy" | "raw")`` puts that stand-in torch_neuronx on sys.path,
    imports it and returns its record module; everything is undone afterwards."""
    real = sys.modules.get("torch_neuronx")
    if real is not None and not hasattr(real, "_standin"):
        pytest.skip(
            "a real torch_neuronx is loaded (torch's backend autoload); run with "
            "TORCH_DEVICE_BACKEND_AUTOLOAD=0 to use the stand-ins"
        )
    _drop_torch_neuronx()

    def use(generation: str):
        monkeypatch.syspath_prepend(str(STANDINS / f"gen_{generation}"))
        importlib.invalidate_caches()
        import torch_neuronx

        assert torch_neuronx.GENERATION == generation
        return torch_neuronx._standin

    yield use
    _drop_torch_neuronx()
    assert not hasattr(torch, "neuron")
    assert ensure_no_capture_running()


def _work(n: int = 32) -> torch.Tensor:
    x = torch.randn(n, n)
    return (x @ x).relu().sum()


def _capture(tmp_path: Path, name: str = "step", **options):
    options.setdefault("backend", "neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NeuronscopeWarning)
        with neuron_region(name, output_dir=str(tmp_path / "runs"), **options) as region:
            _work()
    return region.result


def _files(result) -> dict[str, dict]:
    return {Path(f["path"]).name: f for f in result.artifacts["neuron"]["files"]}


def _neuron_dir(result) -> Path:
    info = result.artifacts["neuron"]
    return Path(result.run_dir or "/") / info["output_dir"]


# ---- each generation gets a working capture -------------------------------------------------


@pytest.mark.parametrize("generation", GENERATIONS)
def test_each_generation_gives_a_complete_run(standin, clean_env, generation):
    record = standin(generation)
    result = _capture(clean_env)

    assert result.backend == "neuron" and result.status == "ok", result.error
    assert result.op("aten::mm") is not None
    run_dir = Path(result.run_dir)
    names = set(os.listdir(run_dir))
    assert {"result.json", "summary.txt", "neuron"} <= names
    assert names & {"trace.json", "trace.json.gz"}
    trace = run_dir / ("trace.json" if "trace.json" in names else "trace.json.gz")
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as fh:
        assert any(e.get("name") == "aten::mm" for e in json.load(fh)["traceEvents"])

    # The Neuron session files are in the run directory and listed in result.json.
    loaded = load(run_dir)
    info = loaded.artifacts["neuron"]
    assert info["api"] == generation
    listed = _files(loaded)
    assert {"ntrace.pb", "trace_info.pb"} <= set(listed)
    for entry in info["files"]:
        path = _neuron_dir(loaded) / entry["path"]
        assert path.is_file() and path.stat().st_size == entry["bytes"]
    assert info["session_dirs"] and "_pid_" in info["session_dirs"][0]
    assert info["view_command"].startswith("neuron-explorer view -d ")
    assert any("neuron-explorer view -d" in n for n in loaded.notes)
    assert info["problems"] == [] or generation != "legacy"

    # The device was synchronised by neuronscope while the profiler still ran, and the runtime
    # trace was started once (never twice: a legacy NeuronProfiler and the plugin together).
    ours = [s for s in record.RECORD["synchronize"] if s["caller"] == "neuronscope.capture.neuron"]
    assert ours and all(s["profiler_enabled"] for s in ours)
    assert len(record.RECORD["nrt_begin"]) == 1
    assert record.RECORD["nrt_begin"][0]["output_dir"] == str((run_dir / "neuron").resolve())


@pytest.mark.parametrize("layout", ["timestamp", "flat"])
def test_session_files_found_in_both_layouts(standin, clean_env, layout):
    record = standin("config")
    record.BEHAVIOUR["layout"] = layout
    result = _capture(clean_env)
    session = result.artifacts["neuron"]["session_dirs"][0]
    assert session.count("/") == (1 if layout == "timestamp" else 0)
    assert {"ntrace.pb", "trace_info.pb", "trace.json"} <= set(_files(result))


# ---- generation "config": NeuronConfig from the options -------------------------------------


def test_config_gets_modes_cores_output_dir_and_correlation(standin, clean_env):
    record = standin("config")
    from torch_neuronx import profiling

    result = _capture(clean_env, modes=["runtime", "Device", "cpu_util"], cores="0,1,4-7")

    (kwargs,) = record.RECORD["config_kwargs"]
    PM = profiling.ProfileMode
    assert kwargs["modes"] == [PM.RUNTIME, PM.DEVICE, PM.CPU_UTIL]
    assert kwargs["capture_enabled_for_nc"] == "0,1,4-7"
    assert kwargs["profile_output_dir"] == str((Path(result.run_dir) / "neuron").resolve())
    assert kwargs["correlate_device_time"] is True
    assert kwargs["neff_cache_dir"] == os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"]  # device mode only
    (init,) = record.RECORD["profiler_init"]
    assert isinstance(init["config"], profiling.NeuronConfig)

    # export_trace wrote the framework trace beside the session files; the run dir has a copy.
    (exported,) = record.RECORD["export_trace"]
    assert exported.parent.name == Path(result.artifacts["neuron"]["session_dirs"][0]).name
    assert (Path(result.run_dir) / "trace.json").read_bytes() == exported.read_bytes()
    listed = _files(result)
    assert {"profile_nc_0_session_0.ntff", "profile_nc_7_session_0.ntff", "cpu_util.pb"} <= set(listed)
    assert listed["ntrace.pb"]["kind"] == "system_trace"
    config = result.artifacts["neuron"]["config"]
    assert config["modes"] == ["runtime", "device", "cpu_util"] and config["not_accepted"] == []


def test_default_is_runtime_only_without_hbm_warning(standin, clean_env):
    record = standin("config")
    from torch_neuronx import profiling

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with neuron_region("step", backend="neuron", output_dir=str(clean_env / "runs")) as r:
            _work()
    assert record.RECORD["config_kwargs"][0]["modes"] == [profiling.ProfileMode.RUNTIME]
    assert "neff_cache_dir" not in r.result.artifacts["neuron"]["config"] or not r.result.artifacts["neuron"]["config"]["neff_cache_dir"]
    assert not [w for w in caught if "HBM" in str(w.message)]
    assert not any(f.endswith(".ntff") for f in _files(r.result))


def test_device_mode_warns_about_hbm(standin, clean_env):
    standin("config")
    with (
        pytest.warns(NeuronscopeWarning, match=r"about 5 GB of HBM"),
        neuron_region("step", backend="neuron", modes="device", output_dir=str(clean_env / "runs")),
    ):
        _work()


def test_profile_mode_members_are_accepted(standin, clean_env):
    record = standin("config")
    from torch_neuronx.profiling import ProfileMode

    _capture(clean_env, modes=[ProfileMode.RUNTIME, ProfileMode.HOST_MEMORY])
    assert record.RECORD["config_kwargs"][0]["modes"] == [ProfileMode.RUNTIME, ProfileMode.HOST_MEMORY]


def test_config_without_correlate_device_time_is_left_out_and_said(standin, clean_env, monkeypatch):
    record = standin("config")
    from torch_neuronx import profiling

    monkeypatch.setattr(profiling, "NeuronConfig", profiling.NeuronConfigDocTable)
    result = _capture(clean_env)
    assert result.status == "ok"
    assert "correlate_device_time" not in record.RECORD["config_kwargs"][0]
    assert result.artifacts["neuron"]["config"]["not_accepted"] == ["correlate_device_time"]
    assert any("does not take correlate_device_time" in n for n in result.notes)


def test_config_keyword_rejected_at_call_time_is_dropped(standin, clean_env, monkeypatch):
    """A NeuronConfig whose signature cannot be read (``**kwargs``) is tried, and a keyword it
    rejects with TypeError is left out."""
    standin("config")
    from torch_neuronx import profiling

    class KwargsConfig(profiling.NeuronConfigDocTable):
        def __init__(self, **kwargs):
            if "correlate_device_time" in kwargs:
                raise TypeError("__init__() got an unexpected keyword argument 'correlate_device_time'")
            super().__init__(**kwargs)

    monkeypatch.setattr(profiling, "NeuronConfig", KwargsConfig)
    result = _capture(clean_env)
    assert result.status == "ok"
    assert result.artifacts["neuron"]["config"]["not_accepted"] == ["correlate_device_time"]


def test_profile_mode_without_a_member_is_a_config_error(standin, clean_env, monkeypatch):
    standin("config")
    import enum

    from torch_neuronx import profiling

    monkeypatch.setattr(profiling, "ProfileMode", enum.Enum("ProfileMode", {"RUNTIME": "runtime"}))
    backend = neuron_backend.NeuronBackend(build_options(None, backend="neuron", modes="cpu_util"))
    with pytest.raises(ConfigError, match="has no CPU_UTIL"):
        backend.profiler_kwargs(clean_env / "scratch")
    # In a region the error becomes a warning and the block runs unprofiled (never breaks it).
    with (
        pytest.warns(NeuronscopeWarning, match="has no CPU_UTIL"),
        neuron_region("step", backend="neuron", modes="cpu_util", output_dir=str(clean_env / "runs")) as r,
    ):
        _work()
    assert r.result is None


def test_rank_file_written_outside_the_session_is_copied_in(standin, clean_env):
    record = standin("config")
    record.BEHAVIOUR["trace_name"] = "neuron_framework_trace_rank_0.json"
    result = _capture(clean_env)
    info = result.artifacts["neuron"]
    assert info["framework_trace"] == "neuron_framework_trace_rank_0.json"
    session = _neuron_dir(result) / info["session_dirs"][0]
    assert (session / "neuron_framework_trace_rank_0.json").is_file()  # the documented fix
    assert (Path(result.run_dir) / "trace.json").is_file()


# ---- generation "legacy": neuronscope drives the early NeuronProfiler -----------------------


def test_legacy_profiler_owns_the_torch_profiler(standin, clean_env):
    record = standin("legacy")
    result = _capture(clean_env, cores=[0, 1], with_stack=True)

    (init,) = record.RECORD["profiler_init"]
    # CPU only: PrivateUse1 would make the Kineto plugin start a second runtime trace.
    assert init["pytorch_activities"] == [ProfilerActivity.CPU]
    assert init["record_shapes"] is True
    assert init["neuron_output_dir"] == str((Path(result.run_dir) / "neuron").resolve())
    assert init["event_filters"] == {"nc": ["0", "1"]}
    (begin,) = record.RECORD["nrt_begin"]
    assert begin["via"] == "nrt_bindings" and begin["cores"] == [0, 1]

    assert result.op("aten::mm") is not None  # the inner profiler's events reached the pipeline
    listed = _files(result)
    assert listed["pytorch_trace.json"]["kind"] == "framework_trace"
    assert any(k.startswith("framework_mapping_") for k in listed)
    assert "trace.json" in listed  # copied beside trace_info.pb for Neuron Explorer
    assert result.artifacts["neuron"]["framework_trace"] == "pytorch_trace.json"
    assert any("with_stack and profile_memory were not applied" in n for n in result.notes)


def test_legacy_start_failure_is_a_neuronscope_error(standin, clean_env, monkeypatch):
    standin("legacy")
    from torch_neuronx import profiling

    def fail(self):
        raise profiling.NRTProfilerError("Failed to start NRT profiling. Status: 4")

    monkeypatch.setattr(profiling.NeuronProfiler, "start", fail)
    backend = neuron_backend.NeuronBackend(build_options(None, backend="neuron"))
    backend.profiler_kwargs(clean_env / "scratch")
    with pytest.raises(NeuronscopeError, match="NeuronProfiler failed to start.*Status: 4"):
        backend.make_profiler({}).start()
    with (
        pytest.warns(NeuronscopeWarning, match="NeuronProfiler failed to start"),
        neuron_region("step", backend="neuron", output_dir=str(clean_env / "runs")) as r,
    ):
        _work()
    assert r.result is None and ensure_no_capture_running()


def test_legacy_stop_failure_keeps_the_measurement(standin, clean_env, monkeypatch):
    standin("legacy")
    import torch_neuronx

    monkeypatch.setattr(torch_neuronx._C, "_nrt_inspect_stop", lambda: 1)
    result = _capture(clean_env)
    assert result.status == "error"
    assert "failed to stop" in result.error
    assert result.op("aten::mm") is not None


# ---- generation "raw": custom_profiler_config ------------------------------------------------


def test_raw_generation_writes_the_plugin_config(standin, clean_env):
    record = standin("raw")
    region = neuron_region(
        "step", backend="neuron", modes=["runtime", "host_memory"], cores="0,1", output_dir=str(clean_env / "runs")
    )
    with pytest.warns(NeuronscopeWarning, match="modes cannot be chosen"), region as r:
        _work()
    text = r.result.artifacts["neuron"]["config"]["custom_profiler_config"]
    out = (Path(r.result.run_dir) / "neuron").resolve()
    assert text == f"profile_output_dir:{out};capture_enabled_for_nc:0,1;host_memory:true"
    (begin,) = record.RECORD["nrt_begin"]
    assert begin["via"] == "kineto_plugin" and begin["cores"] == [0, 1]
    assert {"host_mem.pb", "cpu_util.pb", "trace.json"} <= set(_files(r.result))


def test_no_profiling_api_at_all_is_a_clear_error(standin, clean_env, monkeypatch):
    standin("raw")
    monkeypatch.setattr(neuron_backend, "_experimental_config_takes_custom", lambda: False)
    with pytest.raises(NeuronscopeError, match="offers no profiling API"):
        profile_on_neuron(backend="neuron")


# ---- availability ---------------------------------------------------------------------------


def test_without_torch_neuronx_backend_neuron_fails_at_decoration(clean_env):
    _drop_torch_neuronx()
    if importlib.util.find_spec("torch_neuronx") is not None:
        pytest.skip("a torch_neuronx is importable here")
    with pytest.raises(NeuronscopeError) as err:
        profile_on_neuron(backend="neuron")
    assert isinstance(err.value, BackendUnavailableError)
    assert "torch-neuronx" in str(err.value) and "pip install" in str(err.value)
    assert "backend='cpu'" in str(err.value)
    with pytest.raises(BackendUnavailableError):
        neuron_region("x", backend="neuron")


def test_without_torch_neuronx_auto_picks_cpu(clean_env):
    _drop_torch_neuronx()
    if importlib.util.find_spec("torch_neuronx") is not None or torch.cuda.is_available():
        pytest.skip("torch_neuronx or CUDA present")
    assert resolve_backend(build_options(None)).name == "cpu"
    result = _capture(clean_env, backend="auto")
    assert result.backend == "cpu"
    assert "neuron" not in result.artifacts


def test_auto_prefers_neuron_when_present(standin, clean_env):
    standin("config")
    assert resolve_backend(build_options(None)).name == "neuron"


def test_no_visible_device(standin, clean_env):
    record = standin("config")
    record.DEVICE_COUNT = 0
    with pytest.raises(BackendUnavailableError, match=r"is_available\(\) is False"):
        profile_on_neuron(backend="neuron")
    if not torch.cuda.is_available():
        assert resolve_backend(build_options(None)).name == "cpu"


# ---- environment warnings -------------------------------------------------------------------


def _warnings_of(tmp_path: Path, name: str = "step", **options) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with neuron_region(name, backend="neuron", output_dir=str(tmp_path / "runs"), **options):
            _work()
    return [str(w.message) for w in caught if issubclass(w.category, NeuronscopeWarning)]


def test_inspect_env_var_warns(standin, clean_env, monkeypatch):
    standin("config")
    monkeypatch.setenv("NEURON_RT_INSPECT_ENABLE", "1")
    assert any("NEURON_RT_INSPECT_ENABLE" in m for m in _warnings_of(clean_env))


def test_with_stack_without_xla_debug_warns(standin, clean_env, monkeypatch):
    standin("config")
    assert any("XLA_IR_DEBUG" in m for m in _warnings_of(clean_env, with_stack=True))
    monkeypatch.setenv("XLA_IR_DEBUG", "1")
    monkeypatch.setenv("XLA_HLO_DEBUG", "1")
    assert not any("XLA_IR_DEBUG" in m for m in _warnings_of(clean_env, with_stack=True))
    assert not any("XLA_IR_DEBUG" in m for m in _warnings_of(clean_env, "no_stack"))


def test_first_capture_without_warmup_warns_once_per_name(standin, clean_env):
    standin("config")
    assert any("without warm-up" in m for m in _warnings_of(clean_env, "fresh"))
    assert not any("without warm-up" in m for m in _warnings_of(clean_env, "fresh"))
    assert any("without warm-up" in m for m in _warnings_of(clean_env, "other"))


def test_decorator_with_warmup_does_not_warn(standin, clean_env):
    standin("config")

    @profile_on_neuron(backend="neuron", warmup=1, active=1, output_dir=str(clean_env / "runs"))
    def step():
        return _work()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step()
        step()
    assert step.last_result is not None and step.last_result.backend == "neuron"
    assert not [w for w in caught if "warm-up" in str(w.message)]
    assert not [w for w in caught if issubclass(w.category, NeuronscopeWarning)]


# ---- device time ----------------------------------------------------------------------------


def test_device_time_is_none_with_a_note_never_zero(standin, clean_env):
    standin("config")
    result = _capture(clean_env)
    assert all(o.self_device_us is None and o.device_total_us is None for o in result.ops)
    note = next(n for n in result.notes if "device time" in n)
    assert "None (not 0)" in note and "correlate_device_time=True" in note
    assert "privateuse1_events" not in result.artifacts["neuron"]  # none reached the profiler


@pytest.mark.parametrize("generation", ["legacy", "raw"])
def test_device_time_note_says_to_upgrade_on_older_builds(standin, clean_env, generation):
    standin(generation)
    result = _capture(clean_env)
    assert any("upgrade torch-neuronx" in n and "None (not 0)" in n for n in result.notes)


def test_no_device_time_note_when_device_events_arrived(standin, clean_env):
    standin("config")
    backend = neuron_backend.NeuronBackend(build_options(None, backend="neuron"))
    assert not any("device time" in n for n in backend.extra_notes(True))
    assert any("device time" in n for n in backend.extra_notes(False))


# ---- session file checks and NEFFs -----------------------------------------------------------


def test_neffs_are_copied_in_from_the_compile_cache(standin, clean_env, monkeypatch):
    standin("raw")  # its runtime leaves the NEFFs in the cache
    cache = clean_env / "neff-cache"
    for sub, name in (("MODULE_1", "model.neff"), ("MODULE_2", "model.neff"), ("", "neff_42.neff")):
        (cache / sub).mkdir(parents=True, exist_ok=True)
        (cache / sub / name).write_bytes(b"NEFF " + sub.encode())
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(cache))
    result = _capture(clean_env)
    info = result.artifacts["neuron"]
    assert info["neffs_copied_from"] == str(cache)
    neffs = {k for k, v in _files(result).items() if v["kind"] == "neff"}
    assert neffs == {"model.neff", "MODULE_1_model.neff", "neff_42.neff"} or neffs == {
        "model.neff",
        "MODULE_2_model.neff",
        "neff_42.neff",
    }
    assert not [p for p in info["problems"] if ".neff" in p]


def test_config_generation_asks_torch_neuronx_to_copy_neffs(standin, clean_env, monkeypatch):
    standin("config")
    cache = clean_env / "neff-cache"
    cache.mkdir()
    (cache / "neff_7.neff").write_bytes(b"NEFF")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(cache))
    result = _capture(clean_env, modes=["runtime", "device"])
    assert "neff_7.neff" in _files(result)
    assert "neffs_copied_from" not in result.artifacts["neuron"]  # TorchNeuron did it


def test_missing_neffs_with_device_mode_are_flagged(standin, clean_env):
    standin("config")
    result = _capture(clean_env, modes=["runtime", "device"])
    assert any("no .neff" in p for p in result.artifacts["neuron"]["problems"])


def test_empty_capture_is_flagged(standin, clean_env, caplog):
    record = standin("config")
    record.BEHAVIOUR["write_nothing"] = True
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        result = _capture(clean_env)
    problems = result.artifacts["neuron"]["problems"]
    assert any("wrote nothing" in p for p in problems)
    assert any("wrote nothing" in n for n in result.notes)
    assert "wrote nothing" in caplog.text


def test_zero_byte_ntffs_are_flagged(standin, clean_env):
    record = standin("config")
    record.BEHAVIOUR["empty_ntff"] = True
    result = _capture(clean_env, modes=["runtime", "device"])
    assert any("2 of 2 .ntff device traces are empty" in p for p in result.artifacts["neuron"]["problems"])


def test_log_line_names_the_explorer_command(standin, clean_env, caplog):
    standin("config")
    with caplog.at_level(logging.INFO, logger="neuronscope"):
        result = _capture(clean_env)
    assert result.artifacts["neuron"]["view_command"] in caplog.text


def test_export_false_keeps_session_files_in_a_temp_dir(standin, clean_env):
    standin("config")
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


def test_each_rank_gets_its_own_neuron_directory(standin, clean_env):
    """In a multi-process run the run directory carries the rank, and the Neuron output
    directory lies inside it (a one-process gloo group stands in for torchrun here)."""
    import socket

    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    record = standin("config")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        result = _capture(clean_env)
    finally:
        dist.destroy_process_group()
    run_dir = Path(result.run_dir)
    assert run_dir.name.endswith("_rank0")
    assert record.RECORD["nrt_begin"][0]["output_dir"] == str((run_dir / "neuron").resolve())
    assert result.artifacts["neuron"]["rank"] == 0


# ---- compare() and the demo ------------------------------------------------------------------


def test_compare_runs_on_neuron(standin, clean_env):
    record = standin("config")
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
    record = standin("config")
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


# ---- nothing leaks ---------------------------------------------------------------------------


def test_cpu_results_carry_nothing_neuron(standin, clean_env):
    record = standin("config")
    result = _capture(clean_env, backend="cpu")
    assert result.backend == "cpu"
    assert "neuron" not in result.artifacts
    assert not any("neuron" in n.lower() for n in result.notes)
    assert not (Path(result.run_dir) / "neuron").exists()
    assert record.RECORD["nrt_begin"] == [] and record.RECORD["synchronize"] == []
    assert all(o.self_device_us is None for o in result.ops)


def test_cores_spec():
    assert neuron_backend.cores_spec((0, 1, 4, 5, 6, 7)) == "0,1,4-7"
    assert neuron_backend.cores_spec((3,)) == "3"
    assert neuron_backend.cores_spec((0, 2, 3)) == "0,2,3"
    assert neuron_backend.cores_spec(None) is None


def _run_python(code: str, generation: str, cwd: Path, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON", "XLA_"))}
    environ["PYTHONPATH"] = os.pathsep.join([str(STANDINS / f"gen_{generation}"), str(REPO)])
    environ.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False, capture_output=True, text=True, env=environ, timeout=120, cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_in_a_fresh_process_with_the_real_privateuse1_rename(tmp_path):
    """One subprocess (torch takes seconds to import) for what needs a fresh process:

    - importing neuronscope, decorating and a CPU capture do not import torch_neuronx;
    - TorchNeuron renames PrivateUse1 to 'neuron' for the whole process (irreversible): torch then
      calls torch.neuron.synchronize itself, ProfilerActivity.PrivateUse1 prints as NEURON, and
      from_profiler must still call such a profile a Neuron one.
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
            (torch.randn(8, 8) @ torch.randn(8, 8)).sum()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
            torch.randn(8).relu()
        import torch_neuronx
        print(json.dumps({{
            "after_import": after_import,
            "after_use": after_use,
            "device": str(torch.device("neuron")),
            "activity": str(ProfilerActivity.PrivateUse1),
            "backend": r.result.backend,
            "status": r.result.status,
            "files": sorted(f["path"].rsplit("/", 1)[-1] for f in r.result.artifacts["neuron"]["files"]),
            "from_profiler": neuronscope.from_profiler(p).backend,
            "sync_callers": sorted({{s["caller"] for s in torch_neuronx._standin.RECORD["synchronize"]}}),
        }}))
        """,
        "config",
        tmp_path,  # the runtime's default output (./output) must not land in the repository
        NEURON_STANDIN_RENAME="1",
    )
    assert out["after_import"] is False and out["after_use"] is False
    assert out["device"] == "neuron" and out["activity"] == "ProfilerActivity.NEURON"
    assert out["backend"] == "neuron" and out["status"] == "ok"
    assert {"ntrace.pb", "trace_info.pb", "trace.json"} <= set(out["files"])
    assert out["from_profiler"] == "neuron"
    assert "neuronscope.capture.neuron" in out["sync_callers"]


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
        "status": result.status, "error": result.error, "api": info.get("api"),
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
        with neuronscope.neuron_region(name, backend="neuron", modes=modes, cores=0, output_dir="runs") as r:
            rms_norm_naive(x, w)
    out[name] = summary(r.result)
print(json.dumps(out, default=str))
"""


@pytest.mark.slow
def test_on_a_real_trainium_host(tmp_path):
    """The real thing, where it exists: a Trn2/Trn3 host with TorchNeuron. Skipped here (no
    Trainium, torch-neuronx not installable); the stand-in tests above cover the rest."""
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
    assert runtime["api"] in GENERATIONS
    assert {"system_trace", "trace_info", "framework_trace"} <= set(runtime["kinds"])
    assert runtime["problems"] == []
    assert {"device_trace", "neff"} <= set(device["kinds"])
