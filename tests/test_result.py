"""Result types, serialisation, from_profiler and the run directory."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

import neuronscope
from neuronscope import Comparison, Hint, NeuronscopeError, OpStat, ProfileResult, from_profiler
from neuronscope.export.run_dir import new_run_dir
from neuronscope.export.runs import INCOMPLETE_MARKER, find_runs
from neuronscope.export.safe_io import atomic_write_text
from neuronscope.result.comparison import ComparisonRow
from neuronscope.result.serial import SCHEMA_VERSION, dumps_json
from neuronscope.result.stats import RegionStat


def _sample_result() -> ProfileResult:
    return ProfileResult(
        name="sample",
        backend="cuda",
        wall_time_us=1234.5,
        ops=[
            OpStat("aten::mm", 2, 10.0, 20.0, 300.0, 300.0, [[[4, 4], [4, 4]]]),
            OpStat("aten::add", 1, 5.0, 5.0, None, None),
        ],
        hints=[
            Hint(
                kind="fusion",
                pattern="rms_norm",
                ops=["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul"],
                calls=12,
                time_us=2355.0,
                est_saving_us=1950.0,
                suggestion="use torch.rms_norm",
                location="model.py:42",
                details={"shape": [8, 1024]},
            )
        ],
        regions={"attn": RegionStat("attn", 2, 100.0, 50.0, [OpStat("aten::mm", 2, 10.0, 20.0, 300.0, 300.0)])},
        run_dir=None,
        rank=1,
        world_size=2,
        ranks=[{"rank": 0, "wall_time_us": 10.0, "top_op": "aten::mm"}],
        artifacts={"neuron": {"files": ["ntrace.pb"]}},
        notes=["hello"],
    )


def test_every_field_survives_to_dict_and_from_dict() -> None:
    original = _sample_result()
    data = json.loads(original.to_json())
    assert data["schema_version"] == SCHEMA_VERSION
    again = ProfileResult.from_dict(data)
    assert again.to_dict() == original.to_dict()
    assert again.hints[0].ops[0] == "aten::pow" and again.hints[0].location == "model.py:42"
    assert again.regions["attn"].ops[0].self_device_us == 300.0
    assert again.ops[1].self_device_us is None  # None stays None, never a silent 0


def test_json_keeps_each_shape_signature_on_one_line() -> None:
    r = _sample_result()
    r = replace(r, ops=[replace(r.ops[0], input_shapes=[[[8, 1024], [1024, 1024]], [[2, 3], []]]), *r.ops[1:]])
    text = r.to_json()
    assert json.loads(text) == json.loads(json.dumps(r.to_dict()))  # the same data as json.dumps
    assert "        [[8, 1024], [1024, 1024]],\n" in text and "[[2, 3], []]\n" in text
    assert '"notes": [\n    "hello"\n  ]' in text  # lists of names and notes: one item a line
    assert r.to_json(indent=None) == json.dumps(r.to_dict())
    # Everything else as json.dumps writes it: keys, indent strings, refusals.
    odd = {True: 1, None: 2, float("inf"): [3, [4]], 5: {"k": ["a"]}}
    assert dumps_json(odd, "\t") == json.dumps(odd, indent="\t").replace('[\n\t\t3,\n\t\t[\n\t\t\t4\n\t\t]\n\t]', "[3, [4]]")
    with pytest.raises(TypeError):
        dumps_json({(1, 2): 3})
    # Strings that read like lists stay as they are; depth 3 keeps its outer lines; any indent.
    tricky = {"s": ["[1,\n 2]", "[3]"], "deep": [[[1, 2]], [3]], "mixed": [1, "a"], "e": [[], [1e-7, None, True]]}
    assert json.loads(dumps_json(tricky, "\t")) == tricky
    assert dumps_json(tricky, 0) == '{\n"s": [\n"[1,\\n 2]",\n"[3]"\n],\n"deep": [\n[[1, 2]],\n[3]\n],\n"mixed": [\n1,\n"a"\n],\n"e": [[], [1e-07, null, true]]\n}'


def test_json_laid_out_by_msgspec_is_json_dumps_layout() -> None:
    """An int indent is laid out from the one-line text (json.dumps in C, then msgspec): the
    same text as json.dumps(indent=...) writes; a NaN is refused as json.dumps refuses it (then
    written as null, above)."""
    from neuronscope.result.serial import _indented

    values = [
        {"a": [1, 2.5, -0.0, 1e-07, 2**70, 5e-324, True, None], "e": [[], {}, [[]]], "s": "é\u2028\"\n[1, 2]"},
        {1: "int key", None: [{"k": {"deep": [[1, [2, [3]]]]}}], 2.5: "float key"},
        [],
        "text",
    ]
    for value in values:
        for indent in (1, 2, 4):
            assert _indented(value, indent) == json.dumps(value, indent=indent, default=str)
    assert _indented({"x": [1]}, 0) == json.dumps({"x": [1]}, indent=0)
    assert _indented({"x": object()}, 2).startswith('{\n  "x": "<object object')  # default=str
    assert _indented({"name": "run\udc80"}, 2) == json.dumps({"name": "run\udc80"}, indent=2)  # msgspec refuses it
    with pytest.raises(ValueError):
        _indented({"nan": [float("nan")]}, 2)
    assert json.loads(dumps_json({"nan": [float("nan"), 1.5]})) == {"nan": [None, 1.5]}


def test_derived_properties_and_repr() -> None:
    r = _sample_result()
    assert r.top_op is not None and r.top_op.name == "aten::mm"
    assert r.has_device_time and r.total_device_us == 300.0
    assert r.total_cpu_us == 15.0
    assert r.op("aten::add") is r.ops[1] and r.op("nope") is None
    assert r.fusion_hints == r.hints
    text = repr(r)
    assert "sample" in text and "1.23 ms" in text and "\n" not in text
    assert "rms_norm" in r.hints[0].message and "x12" in r.hints[0].message
    assert "(measured: 250.0 us)" in replace(r.hints[0], verified_saving_us=250.0).message


def test_comparison_round_trip() -> None:
    cmp = Comparison(
        name="study",
        rows=[ComparisonRow("naive", 2355.0, 6, "aten::mul", 1.0), ComparisonRow("fused", 403.3, 1, "aten::_fused_rms_norm", 5.84)],
        results={"naive": _sample_result()},
        backend="neuron",
    )
    again = Comparison.from_dict(json.loads(cmp.to_json()))
    assert again.to_dict() == cmp.to_dict()
    assert again.row("fused").speedup == pytest.approx(5.84)
    assert "fused" in again.table() and "5.84x" in again.table()


def test_newer_schema_and_foreign_data_are_refused() -> None:
    data = _sample_result().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(NeuronscopeError, match="newer neuronscope"):
        ProfileResult.from_dict(data)
    with pytest.raises(NeuronscopeError):
        ProfileResult.from_dict({"schema_version": 1, "type": "ProfileResult"})
    with pytest.raises(NeuronscopeError):
        ProfileResult.from_dict([1, 2])  # type: ignore[arg-type]


def test_from_profiler_on_a_capture_the_user_ran() -> None:
    x = torch.randn(16, 16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("block"):
            for _ in range(3):
                x = torch.tanh(x @ x)
    result = from_profiler(prof, name="mine")
    assert result.name == "mine" and result.backend == "cpu"
    assert result.op("aten::tanh") is not None and result.op("aten::tanh").calls == 3
    assert result.regions["block"].calls == 1
    ka = {e.key: e for e in prof.key_averages()}
    ours = result.op("aten::mm")
    assert ours is not None and ours.calls == ka["aten::mm"].count
    assert ours.self_cpu_us == pytest.approx(ka["aten::mm"].self_cpu_time_total, rel=0.01)


def test_from_profiler_refuses_a_profiler_that_did_not_run() -> None:
    with pytest.raises(NeuronscopeError, match="finished torch.profiler"):
        from_profiler(object())


def test_run_directories_never_collide(tmp_path: Path) -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 6)
    a = new_run_dir(tmp_path, "x", when=when)
    b = new_run_dir(tmp_path, "x", when=when)
    c = new_run_dir(tmp_path, "x", rank=3, when=when)
    assert a != b and len({a, b, c}) == 3
    assert a.name.startswith("20260102-030405-000006_") and f"_pid{os.getpid()}" in a.name
    assert b.name.startswith("20260102-030405-000007_")
    assert c.name.endswith("_rank3")
    assert sorted([b, a]) == [a, b]
    assert (a / INCOMPLETE_MARKER).exists()
    assert find_runs(tmp_path)[0] == b


def test_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "result.json"
    atomic_write_text(target, "{}")
    assert target.read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_load_reopens_an_exported_run_and_names_bad_paths(tmp_path: Path, runs_dir: Path) -> None:
    with neuronscope.neuron_region("saved") as r:
        torch.ones(4).add_(1)
    assert r.result is not None and r.result.run_dir is not None
    loaded = neuronscope.load(r.result.run_dir)
    assert isinstance(loaded, ProfileResult)
    assert loaded.to_dict() == r.result.to_dict()
    assert neuronscope.load(Path(r.result.run_dir) / "result.json").name == "saved"
    summary = (Path(r.result.run_dir) / "summary.txt").read_text()
    assert "aten::add_" in summary
    with pytest.raises(NeuronscopeError, match="no such file"):
        neuronscope.load(tmp_path / "missing")
    with pytest.raises(NeuronscopeError, match="not a neuronscope run"):
        neuronscope.load(tmp_path)
    # A folder of runs names its newest; a trace file says to use from_trace; a result.json
    # that lost a field says which.
    with pytest.raises(NeuronscopeError, match=f"holds 1 run; pass one of them \\(the newest is {r.result.run_dir}\\)"):
        neuronscope.load(runs_dir)
    trace = tmp_path / "trace.json.gz"
    with gzip.open(trace, "wt") as f:
        f.write('{"traceEvents": []}')
    with pytest.raises(NeuronscopeError, match="is a gzip file, not a neuronscope result.json.*from_trace"):
        neuronscope.load(trace)
    data = r.result.to_dict()
    del data["name"]
    (tmp_path / "edited").mkdir()
    (tmp_path / "edited" / "result.json").write_text(json.dumps(data))
    with pytest.raises(NeuronscopeError, match="the field 'name' is missing.*re-export"):
        neuronscope.load(tmp_path / "edited")


def test_trace_json_is_a_chrome_trace(runs_dir: Path) -> None:
    with neuronscope.neuron_region("traced") as r:
        torch.ones(4).add_(1)
    assert r.result is not None and r.result.run_dir is not None
    trace = json.loads((Path(r.result.run_dir) / "trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "aten::add_" in names and "traced" in names
    assert r.result.artifacts["trace"] == "trace.json"


def test_table_lists_ops_regions_and_hints() -> None:
    text = _sample_result().table()
    assert "aten::mm" in text and "Self CUDA" in text and "rms_norm" in text and "attn" in text


def test_dataframe_and_html() -> None:
    pd = pytest.importorskip("pandas")
    df = _sample_result().to_dataframe()
    assert isinstance(df, pd.DataFrame) and list(df["name"]) == ["aten::mm", "aten::add"]
    html = _sample_result()._repr_html_()
    assert "<table>" in html and "aten::mm" in html
    regions = _sample_result().to_dataframe("regions")
    assert "attn" in regions.index and regions.loc["attn", "top_op"] is not None
    assert int(regions.loc["attn", "distinct_ops"]) == len(_sample_result().regions["attn"].ops)
    hints = _sample_result().to_dataframe("hints")
    assert list(hints["pattern"]) == ["rms_norm"] and " -> " in hints["ops"][0]
    with pytest.raises(NeuronscopeError, match="'ops', 'regions', 'hints', 'steps' or 'modules'"):
        _sample_result().to_dataframe("kernels")


def test_table_says_when_the_hint_rules_found_nothing() -> None:
    with neuronscope.neuron_region("plain", export=False) as r:
        torch.ones(8).add_(1)
    assert r.result is not None and r.result.hints == []
    assert "Hints: none found" in r.result.table()
    with neuronscope.neuron_region("off", export=False, hints=False) as r2:
        torch.ones(8).add_(1)
    assert r2.result is not None and "Hints: none found" not in r2.result.table()
    assert "hint rules off (hints=False)" in r2.result.table()


def test_a_breakdown_that_cannot_be_read_is_left_out_with_a_note() -> None:
    """An older or edited result.json whose step breakdown lacks a number the table reads still
    loads (the measurement is kept) and prints, with a note; it never loads and then breaks."""
    data = _sample_result().to_dict()
    data["breakdown"] = {"window_us": 10.0, "device": 0}  # no busy_us, idle_us, ...
    loaded = ProfileResult.from_dict(data)
    assert loaded.breakdown is None and any("breakdown" in n and "busy_us" in n for n in loaded.notes)
    assert "step breakdown" in loaded.table()


def test_rows_to_dict_copy_as_asdict_does() -> None:
    import dataclasses
    from collections import namedtuple

    from neuronscope.result.modules import ModuleStat

    point = namedtuple("point", "x y")
    details = {"shape": (2, [3, 4]), "at": point(1, [2]), "nested": {"k": [OpStat("aten::mm", 1, 1.0, 1.0)]}, 3: None}
    hint = Hint(kind="fusion", pattern="rms_norm", ops=["aten::mul"], details=details)
    op = OpStat("aten::mm", 2, 1.5, 2.5, input_shapes=[[[2, 3], [3, 4]]])
    module = ModuleStat("m", "M", None, 0, 1, 1.0, 1.0, top_ops=(("aten::mm", 1.0, None, 1),), hints=(0,))
    for row in (hint, op):
        d = row.to_dict()
        assert d == dataclasses.asdict(row) and json.dumps(d, default=str) == json.dumps(dataclasses.asdict(row), default=str)
    assert module.to_dict()["top_ops"] == [["aten::mm", 1.0, None, 1]]
    # a copy: changing it leaves the row as it was
    d = hint.to_dict()
    d["details"]["shape"][1].append(5)
    d["details"]["nested"]["k"][0]["calls"] = 9
    assert hint.details["shape"] == (2, [3, 4]) and hint.details["nested"]["k"][0].calls == 1
    assert d["details"]["at"] == point(1, [2]) and type(d["details"]["at"]) is point
