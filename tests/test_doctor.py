"""``neuronscope doctor``: without Neuron it says what it would do; against the stand-in
TorchNeuron (tests/neuron_standins/, built from the docs, with a real Kineto plugin) it writes a
report of the shape of the fixtures in tests/data/neuron_doctor/, and every such fixture (a
real host's report dropped in there too) loads and its framework-trace slice reads as a Neuron
trace with per-op device time."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuronscope import NeuronscopeError, from_trace
from neuronscope.capture.neuron_explorer import read_summary
from neuronscope.cli import main as cli_main
from neuronscope.doctor import REPORT_KEYS, doctor_trace, load_doctor_report

REPO = Path(__file__).resolve().parents[1]
STANDIN_PATH = REPO / "tests" / "neuron_standins" / "from_docs"
FIXTURES = sorted((REPO / "tests" / "data" / "neuron_doctor").glob("*.json"))
OPTIONAL = ("correlate_device_time", "max_events_per_nc", "capture_enabled_for_nc", "neff_cache_dir", "precache_node_info")


def test_without_neuron_it_says_what_it_would_do_and_exits_0(tmp_path, monkeypatch, capsys):
    if importlib.util.find_spec("torch_neuronx") is not None:
        pytest.skip("a torch_neuronx is importable here")
    monkeypatch.chdir(tmp_path)
    assert cli_main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "torch-neuronx is not installed here" in out and "python -m neuronscope doctor" in out
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.fixture(scope="module")
def standin_report(tmp_path_factory) -> dict:
    """One doctor run against the stand-in, in a fresh process and directory."""
    where = tmp_path_factory.mktemp("doctor")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NEURON")}
    environ["PYTHONPATH"] = os.pathsep.join([str(STANDIN_PATH), str(REPO)])
    environ["PATH"] = os.pathsep.join([str(REPO / "tests" / "neuron_standins" / "bin"), environ.get("PATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "neuronscope", "doctor", "--out", str(where / "report.json")],
        capture_output=True, text=True, env=environ, cwd=where, timeout=300, check=False,
    )
    if proc.returncode != 0 and "C++ compiler" in proc.stderr:
        pytest.skip("no C++ compiler for the stand-in's Kineto plugin")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wrote" in proc.stdout
    assert sorted(p.name for p in where.iterdir()) == ["report.json"]  # the CPU-only probe cleaned up
    return load_doctor_report(where / "report.json")


def _shape(value, depth: int = 2):
    if isinstance(value, dict) and depth:
        return {k: _shape(v, depth - 1) for k, v in value.items()}
    return type(value).__name__


def test_doctor_against_the_standin_matches_the_fixture_shape(standin_report):
    fixture = load_doctor_report(FIXTURES[0])
    assert set(REPORT_KEYS) <= set(standin_report)
    for key in ("api", "keywords", "cpu_only_capture"):
        assert _shape(standin_report[key]) == _shape(fixture[key]), key
    assert set(standin_report["capture"]) == set(fixture["capture"])


def test_doctor_records_what_the_stand_in_does(standin_report):
    api = standin_report["api"]
    assert "modes" in api["NeuronConfig"]["signature"]
    assert any(c.endswith("_ExperimentalConfig") for c in api["NeuronConfig"]["mro"])
    assert api["ProfileMode_members"]["RUNTIME"]["value_type"] == "str"
    kw = standin_report["keywords"]
    assert kw["base"]["is_experimental_config"] is True
    assert kw["correlate_device_time"]["accepted"] is False  # not in the docs table
    assert kw["unknown_keyword"] == {
        "accepted": False,
        "error_type": "TypeError",
        "message": kw["unknown_keyword"]["message"],
    }
    capture = standin_report["capture"]
    assert capture["activity_types"]["privateuse1_driver"] >= 1
    assert "neuron_standin_neff_exec" in capture["key_averages"]  # a CPU-side row in torch's table
    assert any(f["path"].endswith("ntrace.pb") for f in capture["files"])
    explorer = standin_report["neuron_explorer"]
    assert explorer["version"].startswith("neuron-explorer") and explorer["path"].endswith("neuron-explorer")
    assert explorer["summary_rows"][0]["mfu_estimated_percent"] == 31.5
    assert json.loads(explorer["summary_json"])  # the tool's own text, kept
    cpu = standin_report["cpu_only_capture"]
    assert cpu["wrote_output_dir"] is True  # Kineto started the plugin with CPU activity only
    assert cpu["activity_types"].get("privateuse1_driver", 0) >= 1


@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_every_doctor_fixture_loads_and_its_trace_reads(fixture, tmp_path):
    report = load_doctor_report(fixture)
    kw = report["keywords"]
    for key in (*OPTIONAL, "unknown_keyword"):
        assert isinstance(kw[key]["accepted"], bool), key
    explorer = report.get("neuron_explorer") or {}
    if explorer.get("summary_json"):  # a user's report: its Summary reads as a result's would
        assert read_summary(explorer["summary_json"]) == explorer["summary_rows"]
    trace = doctor_trace(report, tmp_path / "slice.json")
    assert trace is not None
    result = from_trace(trace)
    assert result.backend == "neuron"
    drivers = {e["name"] for e in report["capture"]["trace_slice"]["traceEvents"] if e.get("cat") == "privateuse1_driver"}
    assert not drivers & {o.name for o in result.ops}  # device executions are never ops
    if drivers:
        assert any(o.self_device_us for o in result.ops)


def test_a_file_that_is_not_a_report_is_refused(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(NeuronscopeError, match="not a neuronscope doctor report"):
        load_doctor_report(bad)
