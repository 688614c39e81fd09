"""Neuron's device level: Neuron Explorer's figures in the result, against the stand-in
``neuron-explorer`` (tests/neuron_standins/bin, built from the profile schema reference) and
the stand-in TorchNeuron; the eager-vs-compile hint; the capture guards.

No Trainium and no real neuron-explorer here: the stand-in reads the session's framework
trace where the real tool decodes ntrace.pb and the NTFFs (see its docstring).
"""

# ruff: noqa: F811  (the Neuron fixtures come from test_neuron.py by import; tests take them)
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from test_neuron import DEVICE_NS, _capture, _neuron_dir, _session, clean_env, standin  # noqa: F401

from neuronscope import from_trace, load, neuron_region
from neuronscope.capture.neuron_explorer import read_summary

EXPLORER_BIN = Path(__file__).resolve().parent / "neuron_standins" / "bin"

pytestmark = [
    pytest.mark.filterwarnings("ignore:The privateuseone is not a valid device option:UserWarning"),
    pytest.mark.filterwarnings("ignore:capture .* starts without warm-up"),
    pytest.mark.filterwarnings("ignore:TorchNeuron is loaded"),
]


@pytest.fixture
def explorer(monkeypatch):
    """The stand-in neuron-explorer on PATH; ``explorer(mode)`` sets its behaviour."""
    pytest.importorskip("pyarrow")
    monkeypatch.setenv("PATH", f"{EXPLORER_BIN}{os.pathsep}{os.environ.get('PATH', '')}")

    def mode(value: str = "ok") -> None:
        monkeypatch.setenv("NEURON_EXPLORER_STANDIN", value)

    mode()
    return mode


def _step():
    x = torch.randn(32, 32)
    with neuron_region("inner"):
        y = x.relu()
    return (y + y).sum()


def test_the_device_profile_is_in_the_result_its_table_and_result_json(standin, clean_env, explorer):
    record = standin()
    record.BEHAVIOUR["device_events"] = False  # the framework trace carries no device time
    result = _capture(clean_env, work=_step)
    dp = result.device_profile
    assert dp is not None and dp["version"].startswith("neuron-explorer") and dp["notes"] == []
    assert dp["summary"]["mfu_estimated_percent"] == pytest.approx(31.5)
    assert {"hfu_estimated_percent", "mbu_estimated_percent", "dma_active_time_percent"} <= set(dp["summary"])
    (core,) = dp["cores"]
    assert core["nc_idx"] == 0 and core["executions"] == dp["submissions"]["nc_exec_running"] >= 3
    assert core["busy_us"] > 0 and core["idle_us"] >= 0
    # device time per op and region from the system profile, joined by flow ids
    ops = {o["name"]: o for o in dp["ops"]}
    assert ops["aten::clamp_min"]["device_us"] == pytest.approx(DEVICE_NS / 1e3)
    assert ops["aten::add"]["device_us"] == pytest.approx(DEVICE_NS / 1e3)
    assert dp["regions"]["inner"] == pytest.approx(DEVICE_NS / 1e3)
    # output inside the run, the session's file list untouched by it
    explorer_dir = _neuron_dir(result) / "explorer"
    assert (explorer_dir / "summary.json").is_file() and list(explorer_dir.rglob("SystemProfileEvents.parquet"))
    assert not any("explorer" in f["path"] for f in result.artifacts["neuron"]["files"])
    text = result.table()
    assert "Neuron device profile" in text and "MFU 31.5%" in text and "NeuronCore 0" in text
    loaded = load(result.run_dir)
    assert loaded.device_profile == dp
    assert list(loaded.to_dataframe("device_profile")["name"])[:1] == [dp["ops"][0]["name"]]


def test_from_trace_on_a_neuron_session_reads_the_same(standin, clean_env, explorer):
    record = standin()
    record.BEHAVIOUR["device_events"] = False
    live = _capture(clean_env, work=_step)
    trace = _session(live) / "trace.json"
    read = from_trace(trace)  # the run's explorer output, read again
    assert read.device_profile["ops"] == live.device_profile["ops"]
    assert read.device_profile["summary"] == live.device_profile["summary"]
    # A session directory alone (copied out of the run): the tool is run into a temp dir.
    import shutil

    copy = clean_env / "copied_session"
    shutil.copytree(_session(live), copy)
    again = from_trace(copy)
    assert again.device_profile["ops"] == live.device_profile["ops"]
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in _session(live).iterdir())


@pytest.mark.parametrize("mode", ["fail", "no_summary", "no_parquet"])
def test_a_failing_explorer_is_a_note_and_the_capture_stays(standin, clean_env, explorer, mode):
    standin()
    explorer(mode)
    result = _capture(clean_env)
    assert result.status == "ok" and result.op("aten::mm") is not None
    assert result.artifacts["neuron"]["problems"] == []
    assert any("neuron-explorer" in n for n in result.notes)


def test_a_slow_explorer_is_bounded(standin, clean_env, explorer, monkeypatch):
    standin()
    explorer("hang")
    monkeypatch.setenv("NEURONSCOPE_EXPLORER_TIMEOUT_S", "2")
    result = _capture(clean_env)
    assert result.status == "ok"
    assert any("timed out" in n for n in result.notes)


def test_no_explorer_is_one_note_and_false_turns_it_off(standin, clean_env, monkeypatch):
    standin()
    monkeypatch.setenv("PATH", "/nonexistent")
    result = _capture(clean_env)
    assert result.device_profile is None
    assert any("no neuron-explorer on PATH" in n for n in result.notes)
    off = _capture(clean_env, name="off", neuron_explorer=False)
    assert off.device_profile is None and not any("neuron-explorer on PATH" in n for n in off.notes)


def test_a_path_option_names_the_tool(standin, clean_env, monkeypatch):
    pytest.importorskip("pyarrow")
    standin()
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # python3, no neuron-explorer
    result = _capture(clean_env, neuron_explorer=str(EXPLORER_BIN / "neuron-explorer"))
    assert result.device_profile["summary"]["mfu_estimated_percent"] == pytest.approx(31.5)
    bad = _capture(clean_env, name="bad", neuron_explorer=str(clean_env / "nope"))
    assert bad.device_profile is None and any("no executable file" in n for n in bad.notes)


def test_summary_json_is_read_wherever_its_rows_are():
    assert read_summary('{"profiles": {"a": {"mfu_estimated_percent": 3.5, "name": "x"}}}') == [
        {"mfu_estimated_percent": 3.5, "name": "x"}
    ]
    assert read_summary('[{"hfu_estimated_percent": 1}, {"hfu_estimated_percent": 2}]')[1] == {"hfu_estimated_percent": 2}
    assert read_summary("not json") == [] and read_summary('{"other": 1}') == []


# ---- the eager-vs-compile hint -----------------------------------------------------------------


def _eager_step(n_ops: int = 30):
    def work():
        x = torch.randn(8, 8)
        with neuron_region("block"):
            for _ in range(n_ops):  # eager: one NEFF per op
                x = x.relu()
        return x

    return work


@pytest.mark.parametrize("with_explorer", [False, True])
def test_many_neff_submissions_per_step_suggest_compiling_the_region(standin, clean_env, monkeypatch, with_explorer):
    """Eager ops each submit a NEFF; the hint names the count, the region and
    torch.compile(backend="neuron"), from the system profile where there is one, else from the
    framework trace's dispatches, live and from the trace file alike."""
    record = standin()
    if with_explorer:
        pytest.importorskip("pyarrow")
        monkeypatch.setenv("PATH", f"{EXPLORER_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    else:
        monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    result = _capture(clean_env, work=_eager_step(30))
    dispatches = record.RECORD["nrt_begin"] and result.artifacts["neuron"]["privateuse1_events"]["privateuse1_runtime"]
    (hint,) = [h for h in result.hints if h.pattern == "neff_submissions"]
    assert hint.kind == "launch" and hint.calls == dispatches >= 30
    assert hint.details["region"] == "block" and hint.details["in_region"] >= 30
    assert 'torch.compile(model, backend="neuron"' in hint.suggestion and "'block'" in hint.suggestion
    source = "nrt_model_submit" if with_explorer else "operator dispatches"
    assert source in hint.details["source"]
    if with_explorer:
        assert hint.details["model_switches"] is not None
    read = from_trace(_session(result) / "trace.json")
    (again,) = [h for h in read.hints if h.pattern == "neff_submissions"]
    assert again.calls == hint.calls and again.details["region"] == "block"


def test_few_submissions_per_step_give_no_hint(standin, clean_env, monkeypatch):
    standin()
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    result = _capture(clean_env, work=_eager_step(3))
    assert not [h for h in result.hints if h.pattern == "neff_submissions"]


def test_a_cuda_capture_never_gets_the_neuron_hint():
    from neuronscope.analysis.context import AnalysisContext
    from neuronscope.analysis.submissions import submission_hints
    from neuronscope.events import EventTable
    from neuronscope.result.summary import summarize

    table = EventTable()
    table.dispatches = [(0, i) for i in range(100)]
    ctx = AnalysisContext(table=table, summary=summarize(table), backend="cuda")
    from neuronscope.analysis.launch import launch_hints

    assert launch_hints(ctx) == []
    assert submission_hints(AnalysisContext(table=table, summary=summarize(table), backend="neuron"))


def test_from_trace_finds_a_ranks_explorer_output_in_a_shared_root(tmp_path, monkeypatch):
    """Ranks share one Neuron root; each rank's explorer output is explorer_pid_<pid>/."""
    from neuronscope.capture.neuron_explorer import device_profile_for_trace, explorer_dir_name

    monkeypatch.setenv("PATH", "/nonexistent")  # no tool: only what is on disk is read
    session = tmp_path / "neuron_x" / "i-0abc_pid_4242" / "1796613364354504544"
    session.mkdir(parents=True)
    (session / "ntrace.pb").write_bytes(b"x")
    (session / "trace.json").write_text('{"traceEvents": []}')
    out = tmp_path / "neuron_x" / explorer_dir_name(4242)
    out.mkdir()
    (out / "summary.json").write_text('[{"mfu_estimated_percent": 12.5}]')
    found = device_profile_for_trace(session / "trace.json")
    assert found["summary"] == {"mfu_estimated_percent": 12.5} and found["read_from"] == str(out)
    assert device_profile_for_trace(tmp_path / "elsewhere.json") is None


def test_system_profile_device_time_goes_into_the_op_table(standin, clean_env, explorer):
    """The framework trace carries no device time: each op's self device time, its regions'
    and the device totals come from the system profile, joined by flow id, and say so."""
    record = standin()
    record.BEHAVIOUR["device_events"] = False
    result = _capture(clean_env, work=_step)
    dev = DEVICE_NS / 1e3
    joined = result.device_profile["ops_from_system_profile"]
    assert {"aten::add", "aten::clamp_min"} <= set(joined)
    for name in joined:
        op = result.op(name)
        profile_op = next(o for o in result.device_profile["ops"] if o["name"] == name)
        assert op.self_device_us == pytest.approx(profile_op["device_us"]), name
    assert result.op("aten::add").self_device_us == pytest.approx(dev)
    assert result.regions["inner"].device_time_us == pytest.approx(dev)
    assert any("system profile" in n and "flow id" in n for n in result.notes)
    assert not any("per-op Neuron device time is None" in n for n in result.notes)
    # the per-flow figures are transient: not in the result, nor in result.json
    assert "_device_ns_by_flow" not in result.device_profile
    loaded = load(result.run_dir)
    assert loaded.op("aten::add").self_device_us == pytest.approx(dev)
    read = from_trace(_session(result) / "trace.json")
    assert read.op("aten::add").self_device_us == pytest.approx(dev)
    assert read.device_profile["ops_from_system_profile"] == joined


def test_device_time_the_framework_trace_carries_is_not_added_to_twice(standin, clean_env, explorer, monkeypatch):
    standin()  # device events in the framework trace, and the same executions in the profile
    with_profile = _capture(clean_env, work=_step)
    assert "ops_from_system_profile" not in with_profile.device_profile
    monkeypatch.setenv("PATH", "/nonexistent")
    without = _capture(clean_env, name="without", work=_step)
    for op in without.ops:
        assert with_profile.op(op.name).self_device_us == pytest.approx(op.self_device_us), op.name
