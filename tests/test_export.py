"""The export API a capture engine calls once the result is finished: export_result / save_result
(make and fill a new run directory, or rewrite one), written small files first, never changing
the result it is given; and the notebook views of results (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuronscope import load
from neuronscope.export import run_dir as export
from neuronscope.export import runs, trace_out
from neuronscope.result.comparison import Comparison, ComparisonRow
from neuronscope.result.hint import Hint
from neuronscope.result.stats import OpStat, RegionStat
from neuronscope.result.types import ProfileResult


def _result(**fields: object) -> ProfileResult:
    return ProfileResult(
        name="step",
        backend="cpu",
        wall_time_us=100.0,
        ops=[OpStat("aten::mul", 2, 60.0, 60.0), OpStat("aten::add", 1, 40.0, 40.0)],
        **fields,  # type: ignore[arg-type]
    )


def test_export_result_returns_a_new_result_and_leaves_the_given_one_alone(tmp_path: Path) -> None:
    given = _result()

    def trace(run_dir: Path) -> Path:
        path = run_dir / "trace.json"
        export.atomic_write_with(path, lambda tmp: tmp.write_text('{"traceEvents": []}'))
        return path

    out = export.export_result(given, tmp_path, summary=lambda r: f"summary of {r.name}\n", trace_writer=trace, rank=3)
    assert given.run_dir is None and given.artifacts == {} and given.notes == []
    assert out.run_dir is not None and out.run_dir.endswith("_rank3") and out.artifacts["trace"] == "trace.json"
    run = Path(out.run_dir)
    assert sorted(p.name for p in run.iterdir()) == ["result.json", "summary.txt", "trace.json"]
    assert (run / "summary.txt").read_text() == "summary of step\n"
    loaded = load(run)
    assert isinstance(loaded, ProfileResult) and loaded.artifacts["trace"] == "trace.json"


def test_a_failing_trace_costs_only_the_trace(tmp_path: Path) -> None:
    def trace(run_dir: Path) -> Path:
        raise OSError(28, "No space left on device")

    out = export.export_result(_result(), tmp_path, summary=lambda r: "\n".join(r.notes), trace_writer=trace)
    run = Path(out.run_dir or "")
    assert sorted(p.name for p in run.iterdir()) == ["result.json", "summary.txt"]
    assert "trace not written" in (run / "summary.txt").read_text()
    assert any("No space left" in n for n in load(run).notes)


def test_ctrl_c_during_the_trace_keeps_what_was_written(tmp_path: Path) -> None:
    def trace(run_dir: Path) -> Path:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export.export_result(_result(), tmp_path, summary="s", trace_writer=trace)
    (run,) = runs.find_runs(tmp_path)
    assert runs.is_incomplete(run) and load(run).ops  # the measurement is on disk


def test_save_result_rewrites_an_exported_run_in_place(tmp_path: Path) -> None:
    first = export.save_result(_result(), tmp_path, summary=lambda r: f"ranks: {r.ranks}\n")
    assert first.run_dir is not None
    second = export.save_result(
        ProfileResult(**{**first.__dict__, "ranks": [{"rank": 0, "wall_time_us": 1.0}]}), tmp_path, summary=lambda r: f"ranks: {r.ranks}\n"
    )
    assert second.run_dir == first.run_dir and len(runs.find_runs(tmp_path)) == 1
    loaded = load(first.run_dir)
    assert isinstance(loaded, ProfileResult) and loaded.ranks == [{"rank": 0, "wall_time_us": 1.0}]
    assert "rank': 0" in (Path(first.run_dir) / "summary.txt").read_text()


def test_a_comparison_is_exported_too(tmp_path: Path) -> None:
    cmp = Comparison(name="c", rows=[ComparisonRow("a", 1.0, 1, None, 1.0)], results={"a": _result()})
    out = export.export_result(cmp, tmp_path, summary="c\n")
    assert isinstance(load(out.run_dir or ""), Comparison) and cmp.run_dir is None


# ---- notebook views ------------------------------------------------------------------------------


def _with_hints_and_regions() -> ProfileResult:
    hint = Hint(kind="fusion", pattern="rms_norm", ops=["aten::pow", "aten::mean"], est_saving_us=12.0, suggestion="torch.rms_norm")
    regions = {"step": RegionStat("step", 1, 100.0), "<attn>": RegionStat("<attn>", 2, 40.0, ops=[OpStat("aten::bmm", 1, 5.0, 5.0)])}
    return _result(hints=[hint], regions=regions, notes=["a note"])


def test_repr_html_shows_hints_regions_and_notes() -> None:
    page = _with_hints_and_regions()._repr_html_()
    assert "rms_norm" in page and "torch.rms_norm" in page  # the hint
    assert "&lt;attn&gt;" in page and "aten::bmm" in page  # the nested region, escaped
    assert "a note" in page and "<table>" in page


def test_a_comparisons_repr_html_shows_each_variants_hints() -> None:
    cmp = Comparison(name="c", rows=[ComparisonRow("naive", 1.0, 1, None, 1.0)], results={"naive": _with_hints_and_regions()})
    page = cmp._repr_html_()
    assert "naive" in page and "rms_norm" in page and "&lt;attn&gt;" in page


@pytest.mark.slow
def test_repr_html_in_a_real_jupyter_kernel() -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    root = Path(__file__).resolve().parents[1]
    cell = (
        f"import sys; sys.path.insert(0, {str(root)!r})\n"
        "from neuronscope.result.types import ProfileResult, OpStat, Hint, RegionStat\n"
        "r = ProfileResult(name='nb', backend='cpu', wall_time_us=5.0, ops=[OpStat('aten::mul', 1, 3.0, 3.0)],\n"
        "    hints=[Hint(kind='fusion', pattern='gelu', ops=['aten::tanh'], suggestion='F.gelu')],\n"
        "    regions={'nb': RegionStat('nb', 1, 5.0), 'inner': RegionStat('inner', 1, 2.0)})\n"
        "r"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "gelu" in html and "inner" in html, json.dumps(outputs)[:2000]


class _FakeProfile:
    """What make_trace_writer needs of a torch profile: export_chrome_trace(path)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def export_chrome_trace(self, path: str) -> None:
        if self.fail:
            raise OSError(28, "No space left on device")
        Path(path).write_text('{"traceEvents": []}')


@pytest.mark.parametrize("fmt,name", [("json", "trace.json"), ("gz", "trace.json.gz")])
def test_the_trace_policy_names_its_file_so_result_json_is_written_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, name: str
) -> None:
    written: list[str] = []
    real = export.atomic_write_with

    def counting(path: Path, write: object) -> None:
        written.append(path.name)
        real(path, write)  # type: ignore[arg-type]

    monkeypatch.setattr(export, "atomic_write_with", counting)
    out = export.export_result(_result(), tmp_path, summary="s", trace_writer=trace_out.make_trace_writer(_FakeProfile(), fmt, 10))
    assert written.count("result.json") == 1 and out.artifacts["trace"] == name
    run = Path(out.run_dir or "")
    assert sorted(p.name for p in run.iterdir()) == sorted(["result.json", "summary.txt", name])
    failed = export.export_result(_result(), tmp_path, summary="s", trace_writer=trace_out.make_trace_writer(_FakeProfile(True), fmt, 10))
    assert "trace" not in failed.artifacts and "trace" not in load(failed.run_dir or "").artifacts
    assert trace_out.make_trace_writer(_FakeProfile(), "none", 10) is None
    assert trace_out.make_trace_writer(_FakeProfile(), "auto", trace_out.GZIP_TRACE_ABOVE_EVENTS + 1).filename == "trace.json.gz"  # type: ignore[union-attr]


def test_lone_surrogates_in_names_do_not_fail_the_export(tmp_path: Path) -> None:
    """os.fsdecode of a non-UTF-8 file name gives lone surrogates; nothing may raise on them."""
    odd = "model\udcff\ud800"
    result = ProfileResult(name=odd, backend="cpu", wall_time_us=5.0, ops=[OpStat(f"aten::{odd}", 1, 3.0, 3.0)], notes=[odd])
    out = export.export_result(result, tmp_path, summary=lambda r: f"{r.name} {r.notes}\n")
    run = Path(out.run_dir or "")
    assert run.parent.name == "model"  # the surrogates are not letters: cut, then stripped
    loaded = load(run)
    assert loaded.name == odd and loaded.ops[0].name == f"aten::{odd}"
    assert "\\udcff" in (run / "summary.txt").read_text()


def test_export_comparison_leaves_the_comparison_it_was_given_unchanged(tmp_path: Path) -> None:
    """Results are values: a comparison's export returns it as written (its run_dir, and its
    variants') and sets no field on the one it was given, nor on its variants."""
    from neuronscope.config import build_options
    from neuronscope.export.comparison import export_comparison

    row = ComparisonRow(label="a", time_us=1.0, op_count=1, top_op=None, speedup=1.0)
    cmp = Comparison(name="c", rows=[row], results={"a": _result()})
    cmp_before = cmp.to_dict()
    written = export_comparison(cmp, {}, build_options(None, output_dir=str(tmp_path)), "summary")
    assert written.run_dir is not None and written.results["a"].run_dir == written.run_dir
    assert cmp.to_dict() == cmp_before and cmp.run_dir is None and cmp.results["a"].run_dir is None
    assert load(written.run_dir).to_dict() == {**written.to_dict(), "run_dir": written.run_dir}


def test_results_cannot_be_changed_in_place() -> None:
    import dataclasses

    values = [
        _result(),
        OpStat("aten::mul", 1, 1.0, 1.0),
        RegionStat("r", 1, 1.0),
        Hint("fusion", "rms_norm"),
        ComparisonRow(label="a", time_us=1.0, op_count=1, top_op=None, speedup=1.0),
        Comparison(name="c"),
    ]
    for value in values:
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.run_dir = "elsewhere"  # type: ignore[misc]
