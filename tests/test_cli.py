"""The ``neuronscope`` command, through ``main(argv)`` on real CPU captures, and once end to
end through the installed console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from neuronscope import compare, neuron_region
from neuronscope.cli import build_parser, main
from neuronscope.demo import rms_norm_fused, rms_norm_naive

SHAPE = (2, 16, 64)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An output root holding two single captures (naive, then fused) and a comparison."""
    root = tmp_path_factory.mktemp("runs")
    torch.manual_seed(0)
    x, w = torch.randn(*SHAPE), torch.randn(SHAPE[-1])
    with neuron_region("step_naive", output_dir=str(root), backend="cpu") as a:
        with neuron_region("norm"):
            rms_norm_naive(x, w)
    with neuron_region("step_fused", output_dir=str(root), backend="cpu") as b:
        rms_norm_fused(x, w)
    cmp = compare({"naive": rms_norm_naive, "fused": rms_norm_fused}, x, w, name="rms", output_dir=str(root), active=2, warmup=1)
    assert a.result is not None and b.result is not None and cmp.run_dir
    return {"root": root, "naive": a.result.run_dir, "fused": b.result.run_dir, "cmp": cmp.run_dir, "comparison": cmp}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("neuronscope: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# ---- show ------------------------------------------------------------------------------------
def test_show_a_run_prints_its_tables(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["show", runs["naive"]], capsys)
    assert code == 0, err
    assert "neuronscope: step_naive [cpu] ok" in out
    for needle in ("aten::mul", "aten::pow", "Self CPU", "Regions:", "norm", f"run: {runs['naive']}"):
        assert needle in out
    code, out2, _ = run(["show", str(Path(runs["naive"]) / "result.json"), "--rows", "2"], capsys)
    assert code == 0 and "more ops" in out2


def test_show_matches_what_the_capture_printed(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["show", runs["fused"]], capsys)
    assert code == 0
    summary = (Path(runs["fused"]) / "summary.txt").read_text()
    assert summary.strip() in out


def test_show_a_comparison(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["show", runs["cmp"]], capsys)
    assert code == 0, err
    for needle in ("neuronscope compare: rms [cpu]", "Variant", "Speedup", "naive", "fused", "aten::rms_norm"):
        assert needle in out


def test_show_one_variant_of_a_comparison(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["show", runs["cmp"] + "#fused"], capsys)
    assert code == 0 and "neuronscope: fused [cpu]" in out and "Variant" not in out
    assert_one_line_error(*run(["show", runs["cmp"] + "#nope"], capsys), "no variant 'nope'", "naive, fused")
    assert_one_line_error(*run(["show", runs["naive"] + "#x"], capsys), "not a comparison")


def test_show_json(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["show", runs["naive"], "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["type"] == "ProfileResult" and data["name"] == "step_naive"
    shapes = next(op["input_shapes"] for op in data["ops"] if op["input_shapes"])
    assert json.dumps(shapes[0]) in out  # a signature on one line, not a dimension a line
    code, out, _ = run(["show", runs["cmp"], "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["type"] == "Comparison" and [r["label"] for r in data["rows"]] == ["naive", "fused"]


def test_show_a_trace_file(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    trace = next(p for p in Path(runs["naive"]).iterdir() if p.name.startswith("trace.json"))
    try:
        from neuronscope.drive.traces import from_trace

        from_trace(trace)
    except NotImplementedError:
        # The trace reader is not in this tree yet: the command must still fail cleanly.
        assert_one_line_error(*run(["show", str(trace)], capsys), "cannot read trace files")
        pytest.skip("neuronscope.drive.traces.from_trace is not implemented yet; checked the clean error only")
    code, out, err = run(["show", str(trace)], capsys)
    assert code == 0, err
    assert "aten::mul" in out and "aten::pow" in out


# ---- ls --------------------------------------------------------------------------------------
def test_ls_lists_runs_newest_first(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["ls", str(runs["root"])], capsys)
    assert code == 0, err
    header = out.splitlines()[0]
    for column in ("Name", "Time", "Backend", "Status", "Total", "Top hint", "Run"):
        assert column in header
    order = [out.index(runs[key]) for key in ("cmp", "fused", "naive")]
    assert order == sorted(order)
    assert "fastest:" in out and "cpu" in out


def test_ls_json(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["ls", str(runs["root"]), "--json"], capsys)
    rows = json.loads(out)
    assert code == 0
    assert [r["run_dir"] for r in rows] == [runs["cmp"], runs["fused"], runs["naive"]]
    assert [r["kind"] for r in rows] == ["comparison", "result", "result"]
    assert rows[1]["name"] == "step_fused" and rows[1]["status"] == "ok" and rows[1]["total_us"] > 0
    assert rows[0]["top_hint"].startswith("fastest: ")


def test_ls_default_root_comes_from_the_environment(
    runs: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURONSCOPE_OUTPUT_DIR", str(runs["root"]))
    code, out, _ = run(["ls", "--json"], capsys)
    assert code == 0 and len(json.loads(out)) == 3


def test_ls_shows_broken_runs_without_failing(tmp_path: Path, runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "step" / "20250101-000000-000001_host_pid1"
    shutil.copytree(runs["naive"], good)
    corrupt = tmp_path / "step" / "20250101-000000-000002_host_pid1"
    corrupt.mkdir()
    (corrupt / "result.json").write_text("{not json")
    half = tmp_path / "step" / "20250101-000000-000003_host_pid1"
    half.mkdir()
    (half / ".incomplete").write_text("")
    code, out, _ = run(["ls", str(tmp_path), "--json"], capsys)
    rows = json.loads(out)
    assert code == 0
    assert [r["status"] for r in rows] == ["incomplete", "unreadable", "ok"]
    assert rows[2]["time"] == "2025-01-01 00:00:00"
    code, out, _ = run(["ls", str(tmp_path)], capsys)
    assert code == 0 and "unreadable" in out and "incomplete" in out


def test_ls_empty_and_missing_roots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["ls", str(tmp_path)], capsys)
    assert code == 0 and "no runs under" in out
    assert_one_line_error(*run(["ls", str(tmp_path / "nope")], capsys), "no such directory")
    (tmp_path / "f").write_text("")
    assert_one_line_error(*run(["ls", str(tmp_path / "f")], capsys), "not a directory")


# ---- diff ------------------------------------------------------------------------------------
def test_diff_two_runs(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["diff", runs["naive"], runs["fused"]], capsys)
    assert code == 0, err
    for needle in ("A: step_naive (cpu) total", "B: step_fused (cpu) total", "change in total:", "Calls A -> B"):
        assert needle in out
    assert "appeared in B (" in out and "aten::rms_norm" in out
    assert "added" in out and "common" in out


def test_diff_lists_a_few_of_many_new_ops(shared_traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = (str(shared_traces / name) for name in ("a100_alexnet.json.gz", "a100_training_step.json.gz"))
    code, out, _ = run(["diff", a, b], capsys)
    assert code == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("appeared in B ("))
    count = int(line.split("(", 1)[1].split(")", 1)[0])
    assert count > 100 and line.count(", ") == 10 and line.endswith("more (--json lists them all)")


def test_diff_json(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["diff", runs["naive"], runs["fused"], "--json"], capsys)
    d = json.loads(out)
    assert code == 0
    assert "aten::rms_norm" in d["added"] and "aten::rms_norm" not in d["removed"]
    assert d["total_delta_us"] == pytest.approx(d["b"]["total_us"] - d["a"]["total_us"])
    by_op = {r["op"]: r for r in d["ops"]}
    assert by_op["aten::rms_norm"]["status"] == "added" and by_op["aten::rms_norm"]["calls_a"] == 0
    assert by_op["aten::pow"]["status"] == "common" and by_op["aten::pow"]["calls_a"] == 1
    deltas = [abs(r["delta_us"]) for r in d["ops"]]
    assert deltas == sorted(deltas, reverse=True)


def test_diff_a_run_with_itself_changes_nothing(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["diff", runs["naive"], runs["naive"], "--json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["total_delta_us"] == 0 and d["added"] == [] and d["removed"] == []
    assert d["total_ratio"] == pytest.approx(1.0)


def test_diff_variants_of_a_comparison(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_line_error(*run(["diff", runs["cmp"], runs["naive"]], capsys), "is a comparison", "#naive")
    code, out, _ = run(["diff", runs["cmp"] + "#naive", runs["cmp"] + "#fused"], capsys)
    assert code == 0 and "A: naive" in out and "B: fused" in out and "aten::rms_norm" in out


# ---- errors: exit 2, one line, no traceback --------------------------------------------------
@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory, runs: dict[str, Any]) -> dict[str, str]:
    base = tmp_path_factory.mktemp("broken")
    out: dict[str, str] = {"missing": str(base / "does-not-exist")}
    plain = base / "plain"
    plain.mkdir()
    out["not_a_run"] = str(plain)
    for key, text in (
        ("corrupt", '{"schema_version": 1, "type": "ProfileResult", "name": '),
        ("empty", ""),
        ("foreign", json.dumps({"hello": "world"})),
    ):
        d = base / key
        d.mkdir()
        (d / "result.json").write_text(text)
        out[key] = str(d)
    newer = base / "newer"
    shutil.copytree(runs["naive"], newer)
    data = json.loads((newer / "result.json").read_text())
    data["schema_version"] = 999
    (newer / "result.json").write_text(json.dumps(data))
    out["newer"] = str(newer)
    half = base / "half"
    half.mkdir()
    (half / ".incomplete").write_text("")
    out["incomplete"] = str(half)
    return out


ERRORS = {
    "missing": "no such file or directory",
    "not_a_run": "not a neuronscope run",
    "corrupt": "not valid JSON",
    "empty": "empty",
    "foreign": "nor a torch.profiler trace (no traceEvents)",
    "newer": "newer neuronscope",
    "incomplete": "incomplete",
}


@pytest.mark.parametrize("case", sorted(ERRORS))
@pytest.mark.parametrize("command", ["show", "diff", "report", "show --json", "diff --json"])
def test_unreadable_runs_exit_2_with_one_line(
    command: str, case: str, broken: dict[str, str], runs: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = command.split()
    if argv[0] == "diff":
        argv[1:1] = [runs["naive"]]
    argv.insert(len(argv) if argv[0] != "diff" else 2, broken[case])
    code, out, err = run(argv, capsys)
    assert_one_line_error(code, out, err, ERRORS[case])
    assert out == ""


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["frobnicate"], ["diff", "a"], ["show", "x", "--rows", "many"], ["demo", "--backend", "tpu"]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, argv
        assert "usage: neuronscope" in err and "Traceback" not in err
        assert err.count("\n") == 1 and err.startswith("neuronscope: error: "), err  # one line


def test_help_for_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("show", "ls", "diff", "report", "demo"):
        assert command in out
        assert main([command, "--help"]) == 0
        text = capsys.readouterr().out
        assert f"usage: neuronscope {command}" in text
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert all(action.help for action in sub._choices_actions)  # type: ignore[attr-defined]
    assert main(["--version"]) == 0 and "neuronscope" in capsys.readouterr().out


# ---- report and demo -------------------------------------------------------------------------
def test_report_writes_report_html(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    code, out, err = run(["report", runs["cmp"]], capsys)
    assert code == 0, err
    path = Path(out.strip())
    assert path == Path(runs["cmp"]) / "report.html" and path.is_file()
    assert "<svg" in path.read_text()


def test_report_without_matplotlib_exits_2(
    runs: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    assert_one_line_error(*run(["report", runs["naive"]], capsys), "pip install matplotlib")


def test_demo_through_main(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from neuronscope import demo

    monkeypatch.setattr(demo, "DEMO_SHAPE", SHAPE)
    code, out, err = run(["demo", "--no-compile", "--output-dir", str(tmp_path), "--backend", "cpu"], capsys)
    assert code == 0, err
    assert "neuronscope compare: rms_norm_demo [cpu]" in out and "naive" in out and "fused" in out
    assert "compiled" not in out
    assert "reopen with: neuronscope show" in out
    (run_dir,) = [p for p in (tmp_path / "rms_norm_demo").iterdir()]
    assert (run_dir / "result.json").is_file()


def test_demo_no_export(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from neuronscope import demo

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(demo, "DEMO_SHAPE", SHAPE)
    code, out, _ = run(["demo", "--no-compile", "--no-export"], capsys)
    assert code == 0 and "Variant" in out and "written to" not in out
    assert list(tmp_path.iterdir()) == []


# ---- the installed console script, end to end ------------------------------------------------
@pytest.mark.slow
def test_console_script_end_to_end(tmp_path: Path) -> None:
    exe = shutil.which("neuronscope")
    if exe is None:
        pytest.skip("the neuronscope console script is not installed (pip install -e .)")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    runs_dir = tmp_path / "out"

    def sh(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)

    demo = sh(exe, "demo", "--output-dir", str(runs_dir), "--no-compile", "--backend", "cpu")
    assert demo.returncode == 0, demo.stderr
    assert "rms_norm_demo" in demo.stdout and "Speedup" in demo.stdout
    assert "Traceback" not in demo.stderr and "USDT" not in demo.stderr
    assert "[1/2] naive: warming up (3 calls)" in demo.stderr and "warm-up took" in demo.stderr
    listing = sh(exe, "ls", str(runs_dir))
    assert listing.returncode == 0 and "rms_norm_demo" in listing.stdout and "fastest:" in listing.stdout
    (run_dir,) = list((runs_dir / "rms_norm_demo").iterdir())
    shown = sh(exe, "show", str(run_dir))
    assert shown.returncode == 0 and "naive" in shown.stdout and "fused" in shown.stdout
    missing = sh(sys.executable, "-m", "neuronscope", "show", str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.startswith("neuronscope: error: ") and "Traceback" not in missing.stderr
    # The module itself runs the command line too (it once imported, did nothing and exited 0).
    by_module = sh(sys.executable, "-m", "neuronscope.cli", "show", str(tmp_path / "nope"))
    assert (by_module.returncode, by_module.stderr) == (missing.returncode, missing.stderr)


# ---- hostile and odd input (issues 19 and 21) --------------------------------------------------


def _write_result(run_dir: Path, data: dict[str, Any] | str | bytes) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    raw = data if isinstance(data, (str, bytes)) else json.dumps(data)
    (run_dir / "result.json").write_bytes(raw.encode() if isinstance(raw, str) else raw)
    return run_dir


def _result_data(**fields: Any) -> dict[str, Any]:
    base = {
        "schema_version": 1,
        "type": "ProfileResult",
        "name": "x",
        "backend": "cpu",
        "wall_time_us": 5.0,
        "ops": [{"name": "aten::mul", "calls": 1, "self_cpu_us": 3.0, "cpu_total_us": 3.0}],
    }
    return {**base, **fields}


ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b]52;c;aGk=\x07\u202e\x9b31m"


def test_show_ls_diff_print_no_escape_sequences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"evil{ESCAPES}name"
    ops = [{"name": f"aten::{ESCAPES}", "calls": 1, "self_cpu_us": 3.0, "cpu_total_us": 3.0}]
    hint = {"kind": "fusion", "pattern": f"p{ESCAPES}", "ops": [f"o{ESCAPES}"], "suggestion": f"s{ESCAPES}"}
    a = _write_result(tmp_path / "root" / "n" / "a", _result_data(name=name, ops=ops, hints=[hint], notes=[ESCAPES]))
    b = _write_result(tmp_path / "root" / "n" / "b", _result_data(name=name))
    outputs = []
    for argv in (["show", str(a)], ["ls", str(tmp_path / "root")], ["diff", str(a), str(b)], ["show", "--json", str(a)]):
        code, out, err = run(argv, capsys)
        assert code == 0, err
        outputs.append(out + err)
    for text in outputs:
        assert not any(ch in text for ch in "\x1b\x07\x9b\u202e"), repr(text[:400])
    assert "\\x1b]0;owned" in outputs[0]  # shown, escaped, not dropped


def test_printable_keeps_letters_and_escapes_controls() -> None:
    from neuronscope.units import printable

    assert printable("ünï©ødé✓ rms_norm") == "ünï©ødé✓ rms_norm"
    assert printable("a\x1bb\ud800c\u202ed") == "a\\x1bb\\ud800c\\u202ed"
    assert printable("a\nb", keep="\n") == "a\nb" and printable("a\nb") == "a\\x0ab"


def test_json_output_never_holds_nan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ops = [{"name": "aten::mul", "calls": 1, "self_cpu_us": "NaN", "cpu_total_us": "Infinity"}]
    a = _write_result(tmp_path / "root" / "n" / "a", _result_data(ops=ops, wall_time_us="nan"))
    for argv in (["show", "--json", str(a)], ["ls", "--json", str(tmp_path / "root")], ["diff", "--json", str(a), str(a)]):
        code, out, err = run(argv, capsys)
        assert code == 0, err
        assert "NaN" not in out and "Infinity" not in out
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))


def test_result_json_with_a_bom_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write_result(tmp_path / "a", b"\xef\xbb\xbf" + json.dumps(_result_data()).encode())
    code, out, err = run(["show", str(a)], capsys)
    assert code == 0 and "aten::mul" in out, err


def test_a_huge_sparse_result_json_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "a"
    run_dir.mkdir()
    with open(run_dir / "result.json", "wb") as fh:
        fh.write(b"{")
        fh.truncate(30 * 2**30)  # 30 GB, sparse: costs no disk
    assert_one_line_error(*run(["show", str(run_dir)], capsys), "MiB", "larger than")


@pytest.mark.parametrize("where", ["rank", "ranks", "world_size", "pid"])
def test_a_5000_digit_number_exits_2_with_one_line(where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    digits = "1" * 5000
    data = _result_data(rank=0, world_size=2)
    if where == "ranks":
        data["ranks"] = [{"rank": 0, "wall_time_us": 1.0}, {"rank": "@", "wall_time_us": 2.0}]
    else:
        data[where] = "@"
    a = _write_result(tmp_path / "a", json.dumps(data).replace('"@"', digits))
    code, out, err = run(["show", str(a)], capsys)
    assert_one_line_error(code, out, err, "result.json")
    assert "set_int_max_str_digits" not in err


def test_a_comparison_with_a_non_string_started_at(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cmp = {"schema_version": 1, "type": "Comparison", "name": "c", "started_at": 5, "backend": 3,
           "rows": [{"label": "a", "time_us": 1.0, "op_count": 1, "top_op": None, "speedup": 1.0}], "results": {}}
    a = _write_result(tmp_path / "root" / "c" / "a", cmp)
    for argv in (["show", str(a)], ["ls", str(tmp_path / "root")], ["report", str(a)]):
        code, _, err = run(argv, capsys)
        assert code == 0, (argv, err)


def test_rows_must_not_be_negative(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["show", "--rows", "-1", runs["naive"]], ["diff", "--rows", "-1", runs["naive"], runs["fused"]]):
        code, _, err = run(argv, capsys)
        assert code == 2 and "0 or more rows" in err


def test_ls_where_nothing_was_captured_yet(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """No ./neuronscope-runs yet (the default root): exit 0 and a friendly line, as for an empty root."""
    monkeypatch.delenv("NEURONSCOPE_OUTPUT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["ls"], capsys)
    assert code == 0 and "no runs yet" in out, err
    code, out, _ = run(["ls", "--json"], capsys)
    assert code == 0 and json.loads(out) == []


def test_show_an_incomplete_run_points_at_its_complete_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from neuronscope.export.runs import INCOMPLETE_MARKER

    run_dir = tmp_path / "n" / "20260101-000000-000000_h_pid1"
    run_dir.mkdir(parents=True)
    (run_dir / INCOMPLETE_MARKER).write_text("")
    (run_dir / "trace.json").write_text('{"traceEvents": []}')
    assert_one_line_error(*run(["show", str(run_dir)], capsys), "incomplete", "its trace is complete", "trace.json")
    _write_result(run_dir, _result_data())
    code, out, _ = run(["show", str(run_dir)], capsys)
    assert code == 0 and "incomplete" in out and "its trace is complete" in out


def test_show_reads_an_array_format_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Chrome trace may be a bare list of events; from_trace reads it, so show must too."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20, "dur": 3, "args": {}},
    ]
    trace = tmp_path / "array.json"
    trace.write_text(json.dumps(events))
    code, out, err = run(["show", str(trace)], capsys)
    assert code == 0 and "aten::mul" in out, err


def test_ls_names_no_winner_when_every_speedup_is_noise() -> None:
    """An identical pair is 1.00x [0.97-1.02] (noise): ls must not call either one fastest."""
    from neuronscope.report.run_list import best_variant as _best_variant
    from neuronscope.report.run_list import fastest_text as _fastest_text
    from neuronscope.result.comparison import Comparison, ComparisonRow

    def row(label: str, speedup: float, low: float, high: float, verdict: str | None) -> ComparisonRow:
        return ComparisonRow(label=label, time_us=10.0, op_count=1, top_op=None, speedup=speedup,
                             speedup_low=low, speedup_high=high, verdict=verdict)

    same = Comparison(name="c", rows=[row("a", 1.0, 1.0, 1.0, None), row("b", 1.003, 0.97, 1.02, "noise")])
    assert _fastest_text(same, same.rows[1]) == "fastest: none told apart from a (best b (1.00x [0.97-1.02] (noise)))"
    faster = Comparison(name="c", rows=[row("a", 1.0, 1.0, 1.0, None), row("b", 2.0, 1.9, 2.1, "faster")])
    assert _fastest_text(faster, faster.rows[1]) == "fastest: b (2.00x [1.90-2.10])"
    # A larger speedup called noise (its median times point the other way) hides no faster one.
    mixed = Comparison(name="c", rows=[row("a", 1.0, 1.0, 1.0, None), row("A", 2.0, 2.0, 2.0, "noise"), row("B", 1.25, 1.2, 1.3, "faster")])
    assert _best_variant(mixed) is mixed.rows[2]
    assert _fastest_text(mixed, _best_variant(mixed)) == "fastest: B (1.25x [1.20-1.30])"
    slower = Comparison(name="c", rows=[row("a", 1.0, 1.0, 1.0, None), row("b", 0.5, 0.4, 0.6, "slower")])
    assert _best_variant(slower) is slower.rows[0]
