"""compare(): real CPU captures of small RMSNorm variants, the run directory, the output check,
the user's exceptions, and the notebook / pandas views of a Comparison."""

from __future__ import annotations

import gzip
import json
import logging
import math
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from neuronscope import (
    Comparison,
    NeuronscopeError,
    ProfileResult,
    compare,
    load,
    neuron_region,
)
from neuronscope.announce import NeuronscopeWarning
from neuronscope.compare.options import COMPARE_PROFILED
from neuronscope.compare.outputs import outputs_agree
from neuronscope.compare.range_ops import NOT_WORK_OPS, dispatched_ops, top_level_ops
from neuronscope.demo import rms_norm_fused, rms_norm_naive
from neuronscope.errors import ConfigError
from neuronscope.events import KIND_ANNOTATION, KIND_OP, EventTable
from neuronscope.export.comparison import adopt_session_files
from neuronscope.region import ensure_no_capture_running
from neuronscope.result.comparison import ComparisonRow

SHAPE = (2, 16, 64)  # small: the suite measures behaviour, not speed
ROUNDS = 6  # timing rounds where a test looks at anything but the timing


@pytest.fixture(scope="module")
def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(*SHAPE), torch.randn(SHAPE[-1])


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory, inputs: Any) -> tuple[Comparison, list[str]]:
    """One exported comparison of the hand-written and the fused RMSNorm, and its log lines."""
    root = tmp_path_factory.mktemp("runs")
    records = _Records()
    logger = logging.getLogger("neuronscope")
    logger.addHandler(records)
    level = logger.level
    logger.setLevel(logging.INFO)  # pytest's root handler would leave it at WARNING
    try:
        cmp = compare(
            {"naive": rms_norm_naive, "fused": rms_norm_fused}, *inputs, name="rms", output_dir=str(root), rounds=ROUNDS
        )
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    return cmp, records.messages


# ---- the table -------------------------------------------------------------------------------
def test_rows_read_like_the_study(study: tuple[Comparison, list[str]]) -> None:
    cmp, _ = study
    assert isinstance(cmp, Comparison)
    assert [r.label for r in cmp.rows] == ["naive", "fused"]
    naive, fused = cmp.row("naive"), cmp.row("fused")
    # Ops dispatched per call: pow, mean, add, rsqrt, mul, mul against one aten::rms_norm,
    # which on a CPU runs more ops inside it than the hand-written form: "all" says so.
    assert naive.op_count == 6
    assert fused.op_count == 1
    assert fused.top_op == "aten::rms_norm"  # the costliest op the variant dispatched, never a nested one
    assert naive.top_op in {"aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"}
    assert fused.all_op_count is not None and fused.all_op_count > fused.op_count
    assert naive.speedup == 1.0 and naive.verdict == "baseline" and naive.speedup_low is None
    per_call = cmp.timing["per_call_us"]
    # The speedup is the median over the rounds of the baseline's time over the variant's.
    ratios = [a / b for a, b in zip(per_call["naive"], per_call["fused"])]
    assert fused.speedup == pytest.approx(statistics.median(ratios))
    assert fused.speedup_low is not None and fused.speedup_high is not None
    assert fused.speedup_low <= fused.speedup <= fused.speedup_high
    assert fused.verdict in {"faster", "slower", "noise", "unsure"}  # unsure: a busy machine
    for row in cmp.rows:
        result = cmp.results[row.label]
        assert row.repeats == ROUNDS == len(per_call[row.label])
        assert row.profiled_calls == COMPARE_PROFILED
        assert row.calls_per_round is not None and row.calls_per_round >= 1
        assert row.outputs_match is True
        assert row.spread_us is not None and row.spread_us >= 0
        assert row.warmup_s is not None and row.warmup_s >= 0
        # A variant's time is the median of its unprofiled per-call times over the rounds.
        assert row.time_us == pytest.approx(statistics.median(per_call[row.label]))
        assert {f"{row.label}#{i}" for i in range(COMPARE_PROFILED)} <= set(result.regions)
        assert result.name == row.label and result.backend == "cpu" and result.status == "ok"
        assert all(o.self_device_us is None for o in result.ops)  # no silent zeros on the CPU
        # The row's top hint is the variant's first hint, its saving a share of the variant's time.
        if result.hints:
            assert row.top_hint is not None and row.top_hint.startswith((result.hints[0].pattern + " (~", result.hints[0].pattern + " (up to ~"))
            assert row.top_hint.endswith("% of its time)")
        else:
            assert row.top_hint is None
    assert "aten::rms_norm" in {o.name for o in cmp.results["fused"].ops}
    assert "aten::rms_norm" not in {o.name for o in cmp.results["naive"].ops}
    text = cmp.table()
    for needle in ("Variant", "Speedup", "naive", "fused", "1.00x", "Spread"):
        assert needle in text


def test_progress_lines_name_the_variant_and_the_warm_up(study: tuple[Comparison, list[str]]) -> None:
    _, messages = study
    joined = "\n".join(messages)
    assert "[1/2] naive: warming up (3 calls)" in joined
    assert "[2/2] fused: warm-up took" in joined
    assert f"timing naive, fused in {ROUNDS} interleaved rounds of unprofiled calls" in joined
    assert f"timed {ROUNDS} rounds in " in joined  # what ran, said after it
    assert "[2/2] fused: profiling 3 calls for the op table and hints" in joined
    # Each phase is announced before it starts.
    order = [next(i for i, m in enumerate(messages) if key in m) for key in ("warming up", "timing", "profiling", "done")]
    assert order == sorted(order)
    assert "done ->" in joined and "neuronscope show" in joined
    # The per-capture line ("kept in memory, not exported") would be wrong inside compare().
    assert not any("kept in memory" in m for m in messages)


# ---- the run directory -----------------------------------------------------------------------
def test_one_run_directory_that_load_reopens(study: tuple[Comparison, list[str]]) -> None:
    cmp, _ = study
    assert cmp.run_dir is not None
    run = Path(cmp.run_dir)
    names = {p.name for p in run.iterdir()}
    assert {"result.json", "summary.txt", "trace.json.gz", "trace_naive.json.gz", "trace_fused.json.gz"} <= names
    assert ".incomplete" not in names
    again = load(run)
    assert isinstance(again, Comparison)
    assert again.to_dict()["rows"] == cmp.to_dict()["rows"]
    assert set(again.results) == {"naive", "fused"}
    assert again.results["naive"].artifacts["trace"] == "trace_naive.json.gz"
    assert again.row("fused").warmup_s == pytest.approx(cmp.row("fused").warmup_s)
    assert "Variant" in (run / "summary.txt").read_text()


def test_merged_trace_holds_every_variant_on_one_timeline(study: tuple[Comparison, list[str]]) -> None:
    cmp, _ = study
    assert cmp.run_dir is not None
    with gzip.open(Path(cmp.run_dir) / "trace.json.gz", "rt") as fh:
        trace = json.load(fh)
    events = trace["traceEvents"]
    names = {e.get("name") for e in events}
    assert {"naive#0", "naive#2", "fused#0", "fused#2", "PyTorch Profiler (naive)", "PyTorch Profiler (fused)"} <= names
    start = {e["name"]: e["ts"] for e in events if e.get("name") in ("naive#0", "fused#0")}
    assert start["naive#0"] < start["fused#0"]  # they ran one after another
    meta = [json.dumps(e, sort_keys=True) for e in events if e.get("ph") == "M"]
    assert len(meta) == len(set(meta))


def test_export_false_keeps_it_in_memory(inputs: Any, tmp_path: Path) -> None:
    cmp = compare({"a": rms_norm_naive}, *inputs, export=False, output_dir=str(tmp_path), active=2, warmup=1, rounds=3)
    assert cmp.run_dir is None and list(tmp_path.iterdir()) == []
    assert cmp.row("a").repeats == 3 and cmp.row("a").profiled_calls == 2 and cmp.row("a").speedup == 1.0


def test_export_failure_warns_and_keeps_the_comparison(inputs: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(NeuronscopeWarning, match="could not export") as record:
        cmp = compare({"a": rms_norm_naive}, *inputs, output_dir=str(blocker), active=1, warmup=0, rounds=2)
    assert cmp.run_dir is None and cmp.rows[0].label == "a"
    assert record[0].filename == __file__  # the warning names the caller's line


# ---- warm-up and torch.compile ---------------------------------------------------------------
def test_compilation_stays_in_the_warm_up(inputs: Any, tmp_path: Path) -> None:
    # aot_eager runs Dynamo and AOTAutograd (about a second here) without inductor's C++
    # compile, which costs 25 s cold on a 2-core machine; the guard is the same either way.
    torch._dynamo.reset()
    compiled = torch.compile(rms_norm_naive, backend="aot_eager")
    cmp = compare({"naive": rms_norm_naive, "compiled": compiled}, *inputs, export=False, active=3, rounds=ROUNDS)
    row = cmp.row("compiled")
    assert row.warmup_s is not None and row.warmup_s * 1e6 > 20 * row.time_us
    assert row.outputs_match is True
    assert row.op_count == 1  # one compiled region per call (Dynamo's cache lookup is not work)
    names = {o.name for o in cmp.results["compiled"].ops}
    assert any("0/0" in n for n in names)  # the compiled frame itself ("Torch-Compiled Region: 0/0")


# ---- outputs ---------------------------------------------------------------------------------
def test_outputs_that_differ_are_said_to_differ(inputs: Any) -> None:
    def wrong(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return rms_norm_naive(x, w) + 0.5

    with pytest.warns(NeuronscopeWarning, match="outputs of 'wrong' differ from 'naive'"):
        cmp = compare({"naive": rms_norm_naive, "wrong": wrong}, *inputs, export=False, active=2, warmup=1, rounds=2)
    assert cmp.row("naive").outputs_match is True
    assert cmp.row("wrong").outputs_match is False
    assert any("max abs difference" in n for n in cmp.notes)
    assert "NO" in cmp.table()


def test_output_check_can_be_switched_off(inputs: Any) -> None:
    def wrong(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x

    with warnings.catch_warnings():
        warnings.simplefilter("error", NeuronscopeWarning)
        cmp = compare(
            {"a": rms_norm_naive, "b": wrong}, *inputs, export=False, active=1, warmup=0, check_outputs=False, rounds=2
        )
    assert [r.outputs_match for r in cmp.rows] == [None, None]
    # Nothing said about outputs (a busy machine may still get its note about the samples).
    assert not any("outputs" in n for n in cmp.notes)


def test_tolerances_are_options(inputs: Any) -> None:
    def off(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return rms_norm_naive(x, w) + 0.01

    cmp = compare({"a": rms_norm_naive, "b": off}, *inputs, export=False, active=1, warmup=0, atol=0.1, rounds=2)
    assert cmp.row("b").outputs_match is True


def test_outputs_agree() -> None:
    t = torch.ones(3)
    assert outputs_agree((t, {"k": 2}), (t.clone(), {"k": 2})) == (True, "")
    assert outputs_agree(t, t.double())[0]
    assert not outputs_agree(t, torch.ones(4))[0]
    assert "structure" in outputs_agree((t, t), (t,))[1]
    assert not outputs_agree(t, 1.0)[0]
    assert outputs_agree(1.0, 1.0 + 1e-9)[0] and not outputs_agree(1.0, 2.0)[0]
    assert outputs_agree(torch.tensor([float("nan")]), torch.tensor([float("nan")]))[0]
    assert not outputs_agree("a", "b")[0]
    numpy = pytest.importorskip("numpy")
    assert outputs_agree(numpy.zeros(2), numpy.zeros(2))[0]  # == on arrays is not a bool
    assert outputs_agree({"a": 1, "b": t}, {"b": t, "a": 1})[0]  # leaves matched by where they sit
    assert outputs_agree({"x": t}, {"x": torch.zeros(3)})[1].startswith("output.x: max abs difference 1")
    assert "output.y is in one only" in outputs_agree({"y": t}, {"x": t})[1]
    # Keys that print alike stay apart; cycles and deep objects are compared, not called different.
    assert outputs_agree({1: 1, "1": 2}, {1: 1, "1": 2}) == (True, "")
    assert outputs_agree({1: 1, "1": 2}, {1: 1, "1": 3})[1] == "output['1']: 2 vs 3"

    class Node:
        def __init__(self, depth: int) -> None:
            self.me = self
            self.child = Node(depth - 1) if depth else None
            self.value = t.clone()

    assert outputs_agree(Node(8), Node(8)) == (True, "")
    loop_a: list[Any] = [1]
    loop_a.append(loop_a)
    loop_b: list[Any] = [1]
    loop_b.append(loop_b)
    assert outputs_agree(loop_a, loop_b) == (True, "")
    other = Node(8)
    other.value = torch.zeros(3)
    assert outputs_agree(Node(8), other)[1].startswith("output.value: max abs difference 1")


def test_outputs_of_a_model_library_agree_through_its_cache_object() -> None:
    """A transformers forward returns a ModelOutput holding a DynamicCache, compared by identity:
    two calls' caches are never ==, though their tensors are the same. Its tensors are compared."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model, other = transformers.LlamaForCausalLM(cfg).eval(), transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 8))
    with torch.no_grad():
        first, again, different = model(ids), model(ids), other(ids)
    assert outputs_agree(first, again) == (True, "")
    agree, why = outputs_agree(first, different)
    assert not agree and why.startswith("output.logits: max abs difference")
    # The check looks into the cache: same logits, different cached keys are told apart.
    again.past_key_values.layers[0].keys.add_(1.0)
    agree, why = outputs_agree(first, again)
    assert not agree and ".layers[0].keys: max abs difference 1" in why


# ---- arguments and options -------------------------------------------------------------------
def test_keyword_arguments_reach_the_callables(inputs: Any) -> None:
    seen: list[Any] = []

    def f(x: torch.Tensor, w: torch.Tensor, eps: float = 0.0, name: str = "") -> torch.Tensor:
        seen.append((eps, name))
        return x

    compare({"f": f}, *inputs, eps=0.25, call_kwargs={"name": "mine"}, export=False, active=1, warmup=1, rounds=2)
    assert seen and all(s == (0.25, "mine") for s in seen)


@pytest.mark.parametrize(
    "variants",
    [{}, {"a": 1}, {"": rms_norm_naive}, {3: rms_norm_naive}, [rms_norm_naive]],
)
def test_bad_variants_fail_before_anything_runs(variants: Any) -> None:
    with pytest.raises(ConfigError):
        compare(variants, export=False)


def test_bad_options_fail_with_config_error(inputs: Any) -> None:
    with pytest.raises(ConfigError, match="backend"):
        compare({"a": rms_norm_naive}, *inputs, backend="tpu")
    with pytest.raises(ConfigError, match="check_outputs"):
        compare({"a": rms_norm_naive}, *inputs, check_outputs="yes")
    with pytest.raises(ConfigError, match="active"):
        compare({"a": rms_norm_naive}, *inputs, active=0)


# ---- when things go wrong --------------------------------------------------------------------
def test_user_exception_in_warm_up_passes_through_unchanged(inputs: Any, tmp_path: Path) -> None:
    err = ValueError("boom in warm-up")

    def bad(x: torch.Tensor, w: torch.Tensor) -> None:
        raise err

    with pytest.raises(ValueError) as info:
        compare({"ok": rms_norm_naive, "bad": bad}, *inputs, output_dir=str(tmp_path))
    assert info.value is err
    assert list(tmp_path.iterdir()) == []


def test_user_exception_in_capture_passes_through_unchanged(inputs: Any, tmp_path: Path) -> None:
    err = KeyError("boom while captured")
    calls = []

    def flaky(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) > 1:
            raise err
        return x

    with pytest.raises(KeyError) as info:
        compare({"flaky": flaky}, *inputs, warmup=1, output_dir=str(tmp_path), rounds=2)
    assert info.value is err
    assert ensure_no_capture_running() and not torch.autograd.profiler._is_profiler_enabled
    assert list(tmp_path.iterdir()) == []


def test_compare_inside_a_capture_is_refused(inputs: Any) -> None:
    with neuron_region("outer", export=False, backend="cpu"):
        with pytest.raises(NeuronscopeError, match="inside another capture"):
            compare({"a": rms_norm_naive}, *inputs, export=False)


def test_disabled_compare_only_times(inputs: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NEURONSCOPE_DISABLE", "1")
    cmp = compare({"a": rms_norm_naive, "b": rms_norm_fused}, *inputs, active=3, warmup=1, output_dir=tmp_path, rounds=3)
    assert [r.repeats for r in cmp.rows] == [3, 3] and [r.profiled_calls for r in cmp.rows] == [0, 0]
    assert all(r.time_us > 0 and r.op_count == 0 and r.top_op is None for r in cmp.rows)
    assert cmp.results["a"].ops == [] and any("disabled" in n for n in cmp.notes)
    assert cmp.run_dir is None and list(tmp_path.iterdir()) == []  # the kill switch writes nothing


@pytest.mark.parametrize(("typo", "option"), [("check_output", "check_outputs"), ("activ", "active"), ("bakend", "backend")])
def test_a_mistyped_option_is_caught_before_anything_runs(inputs: Any, typo: str, option: str) -> None:
    calls: list[int] = []

    def f(x: torch.Tensor, w: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        return x

    with pytest.raises(ConfigError, match=rf"{typo}=, which is not an option: did you mean {option}=\?") as info:
        compare({"f": f}, *inputs, export=False, **{typo: 3})
    assert f"call_kwargs={{'{typo}': ...}}" in str(info.value)
    assert calls == []  # nothing ran: the typo was not passed to the user's function


def test_a_parameter_that_looks_like_an_option_reaches_the_variants(inputs: Any) -> None:
    seen: list[Any] = []

    def f(x: torch.Tensor, w: torch.Tensor, output: str = "", activ: int = 0) -> torch.Tensor:
        seen.append((output, activ))
        return x

    # Both look like options (output_dir, active), but every variant names them: no typo.
    compare({"f": f, "g": f}, *inputs, output="o", activ=2, export=False, active=1, warmup=1, rounds=2)
    assert seen and set(seen) == {("o", 2)}
    seen.clear()

    def h(x: torch.Tensor, w: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        seen.append(kwargs)
        return x

    compare({"h": h}, *inputs, call_kwargs={"activ": 1}, export=False, active=1, warmup=1, rounds=2)
    assert seen and all(k == {"activ": 1} for k in seen)
    with pytest.raises(ConfigError, match="call_kwargs must be a dict"):
        compare({"h": h}, *inputs, call_kwargs=[1], export=False)


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("rounds", 1, "rounds must be an int of at least 2"),
        ("rounds", 2.5, "rounds must be an int"),
        ("time_budget", -1, "time_budget must be a non-negative number"),
        ("time_budget", float("nan"), "time_budget"),
        ("confidence", 1.5, "confidence must be between 0 and 1"),
        ("seed", "x", "seed must be an int"),
        ("timer", 3, "timer must be a callable"),
    ],
)
def test_bad_timing_options_fail_with_config_error(inputs: Any, option: str, value: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compare({"a": rms_norm_naive}, *inputs, export=False, **{option: value})


# ---- counting the ops a call dispatched ------------------------------------------------------
def test_top_level_ops_counts_only_what_the_range_dispatched() -> None:
    t = EventTable()
    t.append("v#0", KIND_ANNOTATION, 1, 0, 100)
    t.append(next(iter(NOT_WORK_OPS)), KIND_OP, 1, 1, 2)
    t.append("aten::mean", KIND_OP, 1, 5, 20)
    t.append("aten::sum", KIND_OP, 1, 6, 15)  # inside aten::mean: not dispatched by the range
    t.append("inner", KIND_ANNOTATION, 1, 30, 60)  # a user's label: look through it
    t.append("aten::mul", KIND_OP, 1, 31, 40)
    t.append("aten::add", KIND_OP, 2, 31, 40)  # another thread
    t.append("v#1", KIND_ANNOTATION, 1, 200, 300)
    t.append("aten::rms_norm", KIND_OP, 1, 210, 290)
    t.append("aten::pow", KIND_OP, 1, 220, 230)
    t.append("aten::mul", KIND_OP, 1, 400, 410)  # outside every range
    assert top_level_ops(t, ["v#0", "v#1"]) == {"v#0": 2, "v#1": 1}
    ops = dispatched_ops(t, ["v#0", "v#1"])
    # "total" counts the nested ops too: aten::sum in aten::mean, aten::pow in aten::rms_norm.
    assert (ops["v#0"].dispatched, ops["v#0"].total) == (2, 3)
    assert (ops["v#1"].dispatched, ops["v#1"].total) == (1, 2)
    # Inclusive times (ns in the table, us here) of the dispatched ops only: the row's top op.
    assert ops["v#0"].inclusive_us == {"aten::mean": 0.015, "aten::mul": 0.009}
    assert ops["v#1"].inclusive_us == {"aten::rms_norm": 0.08}


# ---- notebooks and data tools ----------------------------------------------------------------
def test_comparison_to_dataframe(study: tuple[Comparison, list[str]]) -> None:
    pytest.importorskip("pandas")
    cmp, _ = study
    df = cmp.to_dataframe()
    assert list(df.index) == ["naive", "fused"]
    assert {"time_us", "op_count", "top_op", "speedup", "spread_us", "outputs_match"} <= set(df.columns)
    assert df.loc["naive", "op_count"] == 6
    assert df.loc["fused", "speedup"] == pytest.approx(cmp.row("fused").speedup)
    ops = cmp.results["naive"].to_dataframe()
    assert {"name", "calls", "self_cpu_us", "self_device_us"} <= set(ops.columns)
    assert ops["name"].iloc[0] == cmp.results["naive"].ops[0].name
    assert list(Comparison(name="empty").to_dataframe().columns)[:2] == ["time_us", "op_count"]


def test_to_dataframe_without_pandas_says_how_to_get_it(
    study: tuple[Comparison, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cmp, _ = study
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(NeuronscopeError, match=r"pip install 'neuronscope\[pandas\]'"):
        cmp.to_dataframe()
    with pytest.raises(NeuronscopeError, match="pandas"):
        cmp.results["naive"].to_dataframe()


def test_comparison_repr_html(study: tuple[Comparison, list[str]]) -> None:
    cmp, _ = study
    page = cmp._repr_html_()
    assert page.startswith("<div>") and "<table>" in page
    for needle in ("naive", "fused", "1.00x", "Speedup", "Outputs agree"):
        assert needle in page
    odd = Comparison(name="<b>x</b>", notes=["a < b"])
    assert "<b>x</b>" not in odd._repr_html_() and "a &lt; b" in odd._repr_html_()


def test_comparison_repr_is_short(study: tuple[Comparison, list[str]]) -> None:
    cmp, _ = study
    text = repr(cmp)
    assert text.startswith("Comparison('rms'") and "naive=" in text and "x)" in text
    assert math.isfinite(cmp.row("fused").speedup)
    assert isinstance(cmp.results["naive"], ProfileResult)


def test_neuron_session_files_move_into_the_comparison_run(tmp_path: Path) -> None:
    # A variant's capture is not exported on its own, so the Neuron backend leaves its session
    # files in a temporary directory (no Neuron device here: the record is built as data).
    temp = tmp_path / "neuronscope-neuron-abc"
    (temp / "session").mkdir(parents=True)
    (temp / "session" / "ntrace.pb").write_bytes(b"x")
    given = ProfileResult(
        name="fused",
        backend="neuron",
        artifacts={"neuron": {"output_dir": str(temp), "view_command": f"neuron-explorer view {temp}/session"}},
        notes=[f"export=False: the Neuron session files stay in {temp}", f"see {temp}/session"],
    )
    before = given.to_dict()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = adopt_session_files(given, run_dir, "fused")
    dest = run_dir / "neuron" / "fused"
    assert (dest / "session" / "ntrace.pb").is_file() and not temp.exists()
    info = result.artifacts["neuron"]
    assert info["output_dir"] == "neuron/fused" and info["view_command"] == f"neuron-explorer view {dest}/session"
    assert result.notes == [f"see {dest}/session"]
    assert given.to_dict() == before  # a new result: the one given is unchanged
    cpu = ProfileResult(name="naive", backend="cpu")
    assert adopt_session_files(cpu, run_dir, "naive") is cpu  # nothing to move
    assert cpu.artifacts == {} and sorted(p.name for p in (run_dir / "neuron").iterdir()) == ["fused"]


def test_a_speedup_within_the_spreads_is_marked_as_noise() -> None:
    base = ComparisonRow(label="a", time_us=100.0, op_count=6, top_op=None, speedup=1.0, spread_us=10.0)
    near = ComparisonRow(label="b", time_us=95.0, op_count=1, top_op=None, speedup=100 / 95, spread_us=10.0)
    far = ComparisonRow(label="c", time_us=50.0, op_count=1, top_op=None, speedup=2.0, spread_us=5.0)
    assert base.speedup_text(base) == "1.00x"
    assert near.speedup_text(base) == "1.05x (noise)"
    assert far.speedup_text(base) == "2.00x"
    cmp = Comparison(name="c", backend="cpu", rows=[base, near, far])
    assert "1.05x (noise)" in cmp.table() and "2.00x" in cmp.table()


# ---- labels that share a file name (issue 21, item 13) ---------------------------------------
def test_labels_that_map_to_one_file_name_keep_their_own_traces(inputs: Any, tmp_path: Path) -> None:
    labels = ["fused (v1)", "fused [v1]", "FUSED (V1)"]
    cmp = compare(
        {label: rms_norm_fused for label in labels}, *inputs, output_dir=str(tmp_path), rounds=2, active=1, warmup=1
    )
    assert cmp.run_dir is not None
    run = Path(cmp.run_dir)
    files = [cmp.results[label].artifacts["trace"] for label in labels]
    assert len({f.lower() for f in files}) == 3  # distinct, even on a case-blind file system
    for label, fname in zip(labels, files):
        with gzip.open(run / fname, "rt") as fh:
            names = {e.get("name") for e in json.load(fh)["traceEvents"]}
        assert f"{label}#0" in names  # each variant's file holds its own calls, no other's
        assert not ({f"{other}#0" for other in labels if other != label} & names)
    again = load(run)
    assert isinstance(again, Comparison)
    assert [again.results[label].artifacts["trace"] for label in labels] == files


# ---- the profiled calls ----------------------------------------------------------------------
def test_a_profiled_call_far_from_its_siblings_is_flagged(inputs: Any) -> None:
    import time as _time

    profiled: list[int] = []

    def sometimes_slow(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if torch.autograd.profiler._is_profiler_enabled:
            profiled.append(1)
            if len(profiled) == 2:
                _time.sleep(0.2)  # stands for a moment the machine was busy
        return x

    # hints=False: no observed warm-up call, so the profiler runs for the three profiled calls only
    cmp = compare({"v": sometimes_slow}, *inputs, export=False, rounds=2, active=3, check_outputs=False, hints=False)
    assert len(profiled) == 3
    notes = cmp.results["v"].notes
    assert any(n.startswith("times far apart: the 3 profiled calls of 'v' range from") for n in notes), notes


def test_variants_that_run_modules_count_ops_not_module_calls(tmp_path: Path) -> None:
    """The capture labels each module call with a range; to a comparison's columns it is a
    label, never an op the variant dispatched (a transformers model's row once read
    'Ops/call 1', top op 'nn.Module: MistralForCausalLM')."""
    lin = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    x = torch.randn(4, 16)
    cmp = compare({"a": lin, "b": lambda t: lin(t)}, x, output_dir=str(tmp_path), export=False, time_budget=0.3)
    for row in cmp.rows:
        assert row.top_op is not None and not row.top_op.startswith("nn.Module"), row.top_op
        assert row.op_count >= 2, row  # linear and relu at least, not one module call
