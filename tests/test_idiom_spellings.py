"""Tests of the idioms' declared spellings (neuronscope.analysis.patterns.spelling): what the
op-order matcher derives from them is what torch's profiler records for the same code."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from neuronscope.analysis.dataflow import graph_from_table
from neuronscope.analysis.fusion import NOT_FROM_OP_ORDER
from neuronscope.analysis.opgraph import VIEW_OPS
from neuronscope.analysis.patterns import REGISTRY
from neuronscope.analysis.patterns.spelling import Spelling, examples, op_orders, recorded_ops
from neuronscope.events import table_from_profiler

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _profiled_ops(fn: Any, t: Any, **choice: Any) -> list[str]:
    """The user-level ops torch's profiler records for ``fn(t, **choice)`` (views left out, as
    the op-order matcher leaves them out)."""
    fn(t, **choice)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn(t, **choice)
    graph = graph_from_table(table_from_profiler(prof, record_shapes=True))
    return [n.op for n in graph.nodes if n.op not in VIEW_OPS]


def _one_axis_at_a_time(spelling: Spelling) -> list[dict[str, Any]]:
    """Each choice's every value at least once: the first variant, then one axis changed."""
    base = {name: values[0] for name, values in spelling.choices.items()}
    out = [base]
    for name, values in spelling.choices.items():
        out += [{**base, name: v} for v in values[1:]]
    return out


SPELLINGS = [(p.name, i, s) for p in REGISTRY for i, s in enumerate(p.spellings)]


@pytest.mark.parametrize(("pattern", "index", "spelling"), SPELLINGS, ids=[f"{n}-{i}" for n, i, _ in SPELLINGS])
def test_recorded_ops_are_the_profilers(pattern: str, index: int, spelling: Spelling) -> None:
    """The ops a spelling is recorded with (a torch function mode, no profiler) are the
    user-level ops the profiler records for it, in order, in float32 and in bfloat16 (where
    casts copy)."""
    for dtype in (torch.float32, torch.bfloat16):
        t = examples(dtype)
        for choice in _one_axis_at_a_time(spelling):
            assert recorded_ops(spelling.fn, t, **choice) == _profiled_ops(spelling.fn, t, **choice), (pattern, choice, dtype)


def test_every_idiom_a_trace_can_show_is_declared_in_pytorch() -> None:
    """Each pattern but the generic chain (a claim about data flow) has spellings, and their
    op orders are derived, distinct per spelling choice, and never empty."""
    assert {p.name for p in REGISTRY if not p.spellings} == set(NOT_FROM_OP_ORDER)
    for p in REGISTRY:
        if p.spellings:
            orders = op_orders(p.spellings)
            assert orders and all(orders), p.name


def test_a_new_spelling_is_matched_in_a_trace() -> None:
    """Adding a spelling is declaring it: the op-order matcher takes its orders as they are
    derived, with no pattern text to write (here: an RMSNorm through ``torch.sqrt`` and a
    ``reciprocal`` call, which no declared spelling runs)."""

    def written(t: Any) -> Any:  # its dim and eps named (``t.dim``, ``t.eps``): the code's to choose
        x = t.x
        return x * torch.sqrt(x.pow(2).mean(t.dim, keepdim=True) + t.eps).reciprocal() * t.weight

    new = Spelling(written)
    (order,) = op_orders((new,))
    assert order == ("pow", "mean", "add", "sqrt", "reciprocal", "mul", "mul")


def test_a_new_spelling_is_matched_in_a_live_graph() -> None:
    """The graph matcher is derived from spellings too: a spelling declared here is found in a
    capture's op graph (exact links) with its ops and its ``x``, and not where its ``x`` is two
    different tensors."""
    from neuronscope.analysis.dataflow import graph_from_profiler
    from neuronscope.analysis.patterns.matcher import graph_matcher

    def written(t: Any) -> Any:  # its dim and eps named (``t.dim``, ``t.eps``): the code's to choose
        x = t.x
        return x * torch.sqrt(x.pow(2).mean(t.dim, keepdim=True) + t.eps).reciprocal() * t.weight

    match = graph_matcher("a_new_idiom", (Spelling(written),), lambda choice, nodes: {})  # no kept templates
    x, other, w = torch.randn(4, 16, 32), torch.randn(4, 16, 32), torch.randn(32)

    def graph(fn: Any) -> Any:
        fn()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
            fn()
        g = graph_from_profiler(prof, table_from_profiler(prof, record_shapes=True))
        assert g is not None and g.linking == "exact"
        return g

    g = graph(lambda: x * torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6).reciprocal() * w)
    (m,) = [m for n in g.nodes if (m := match(g, n)) is not None]
    assert [n.op for n in m.nodes] == ["pow", "mean", "add", "sqrt", "reciprocal", "mul", "mul"]
    assert m.x is not None and m.x.sizes == (4, 16, 32)
    g = graph(lambda: other * torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6).reciprocal() * w)
    assert not [m for n in g.nodes if match(g, n) is not None]
    # A graph without one of its ops (no sqrt) is not walked for it; the next graph that has
    # them all is, whatever the graphs before it held.
    g = graph(lambda: x * (x.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt() * w)
    assert not [m for n in g.nodes if match(g, n) is not None]
    g = graph(lambda: x * torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6).reciprocal() * w)
    assert len([m for n in g.nodes if match(g, n) is not None]) == 1


def test_the_kept_op_orders_are_what_the_spellings_run() -> None:
    """A trace is matched on the op orders kept with the package (reading one needs no torch);
    they are the spellings' own: after a spelling changes, ``python -m
    neuronscope.analysis.patterns`` keeps them again."""
    from neuronscope.analysis.patterns.kept import ORDERS_FILE, orders_text
    from neuronscope.analysis.patterns.spelling import order_shapes, vector_choices

    declared = [p for p in REGISTRY if p.spellings]
    derived = orders_text(
        {p.name: op_orders(p.spellings) for p in declared},
        {p.name: order_shapes(p.spellings) for p in declared},
        {p.name: vector_choices(p.spellings) for p in declared},
    )
    assert ORDERS_FILE.read_text() == derived, "run: python -m neuronscope.analysis.patterns"


def test_damaged_kept_op_orders_are_derived_instead(tmp_path, monkeypatch) -> None:
    # A line with a field missing, or choices that are no JSON list of objects: the op orders
    # are derived from the spellings, as where the file is missing (before, the fusion rule
    # raised and every fusion hint of a trace was lost).
    from neuronscope.analysis import fusion
    from neuronscope.analysis.patterns import kept

    good = kept.ORDERS_FILE.read_text().splitlines()
    expected = fusion._orders()["rms_norm"].orders
    for damaged in (good[0].rsplit("\t", 1)[0], good[0].rsplit("\t", 2)[0] + "\t[1, 2]\t"):
        bad = tmp_path / "op_orders.txt"
        bad.write_text("\n".join([damaged, *good[1:]]) + "\n")
        monkeypatch.setattr(kept, "ORDERS_FILE", bad)
        kept.kept_orders.cache_clear()
        fusion._orders.cache_clear()
        try:
            assert kept.kept_orders() == {}
            assert fusion._orders()["rms_norm"].orders == expected
        finally:
            monkeypatch.undo()
            kept.kept_orders.cache_clear()
            fusion._orders.cache_clear()


def test_the_kept_graph_templates_are_what_the_spellings_run() -> None:
    """A capture is matched on the graph templates kept with the package (a first capture
    derives nothing), which are its spellings' own, read back as they were derived."""
    from neuronscope.analysis.patterns.kept import TEMPLATES_FILE, kept_templates, templates_text
    from neuronscope.analysis.patterns.spelling import templates

    matched = {p.name: templates(p.match.derived_from) for p in REGISTRY if hasattr(p.match, "derived_from")}
    assert {"softmax", "log_softmax", "gelu", "silu_mul", "rotary_embedding"} <= set(matched)
    assert TEMPLATES_FILE.read_text() == templates_text(matched), "run: python -m neuronscope.analysis.patterns"
    assert {name: [(ops, dict(c)) for ops, c in found] for name, found in kept_templates().items()} == {
        name: [(ops, dict(c)) for ops, c in found] for name, found in matched.items()
    }


def test_reading_a_trace_imports_no_torch(tmp_path: Any) -> None:
    """from_trace on a trace with idioms, in a fresh process: torch is never imported."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    x, r, w = [4, 8, 64], [4, 8, 1], [64]
    rms = [("aten::pow", [x, []]), ("aten::mean", [x, [], [], []]), ("aten::add", [r, [], []]),
           ("aten::rsqrt", [r]), ("aten::mul", [x, r]), ("aten::mul", [w, x])]
    events = [
        {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5, "args": {"Input Dims": dims}}
        for i, (name, dims) in enumerate(rms)
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    code = (
        "import sys; from neuronscope import from_trace; r = from_trace(sys.argv[1]); "
        "print([h.pattern for h in r.hints], 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, timeout=120, check=False)
    assert out.stdout.strip() == "['rms_norm'] False", out.stderr
