"""The pictures of a change (issue 37): a diverging bar chart of the modules' and ops' change,
on the diff page (``neuronscope diff A B --html PAGE``) and in a comparison's report; names
escaped, the page drawn offline by real Chromium."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

import neuronscope as ns
from neuronscope.report.diff import diff_results
from neuronscope.report.html import render_diff_report, render_report
from neuronscope.result.modules import ModuleStat
from neuronscope.result.stats import OpStat
from neuronscope.result.types import ProfileResult

CHROMIUM = Path("/usr/bin/chromium")
HOSTILE = '<img src=x onerror="document.title=1">'.replace(".", "")


def _result(slow_mlp: float) -> ProfileResult:
    mods = [
        ModuleStat(name="Net", type="Net", parent=None, depth=0, calls=1, cpu_total_us=1000 + slow_mlp, self_cpu_us=100, share=1.0,
                   backward_cpu_us=500, self_backward_cpu_us=50),
        ModuleStat(name="mlp", type="MLP", parent="Net", depth=1, calls=1, cpu_total_us=600 + slow_mlp, self_cpu_us=600 + slow_mlp, share=0.6,
                   backward_cpu_us=300, self_backward_cpu_us=300),
        ModuleStat(name=HOSTILE, type="Norm", parent="Net", depth=1, calls=1, cpu_total_us=300 - slow_mlp / 10, self_cpu_us=300 - slow_mlp / 10,
                   share=0.3, backward_cpu_us=150, self_backward_cpu_us=150),
    ]
    ops = [OpStat(name="aten::mm", calls=2, cpu_total_us=700 + slow_mlp, self_cpu_us=700 + slow_mlp)]
    return ProfileResult(name=f"run {HOSTILE}", backend="cpu", wall_time_us=1500 + slow_mlp, modules=mods, ops=ops)


def _figure(page: str, pid: str) -> dict:
    block = re.search(rf'<script type="application/json" data-plot="{pid}">(.*?)</script>', page, re.DOTALL)
    assert block is not None, pid
    return json.loads(block.group(1))


def test_diff_page_draws_the_module_that_changed_on_top_with_names_escaped() -> None:
    d = diff_results(_result(0.0), _result(400.0))
    page = render_diff_report(d)
    mods = _figure(page, "ns-dmod")["data"][0]
    # own time: mlp grew by 400, the hostile norm shrank by 40; the root's own time did not change
    assert mods["y"][-1] == "mlp" and mods["x"][-1] == pytest.approx(400.0)
    assert mods["marker"]["color"][-1] == "#c0504d" and mods["marker"]["color"][0] == "#59a14f"
    assert "Net" not in mods["y"]
    assert "inclusive" in mods["hovertext"][-1] or "change" in mods["hovertext"][-1]
    assert HOSTILE not in page and "<img" not in page
    assert page.count("</script>") == page.count("<script")
    assert _figure(page, "ns-dops")["data"][0]["y"] == ["aten::mm"]


def test_diff_html_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from neuronscope.cli import main

    net = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
    runs = []
    for label in ("a", "b"):
        with ns.neuron_region(label, backend="cpu", output_dir=str(tmp_path / "runs"), print_summary=False) as r:
            net(torch.randn(4, 16))
        runs.append(r.result.run_dir)
    page = tmp_path / "diff.html"
    assert main(["diff", runs[0], runs[1], "--html", str(page)]) == 0
    assert f"page: {page}" in capsys.readouterr().out
    text = page.read_text(encoding="utf-8")
    assert 'data-plot="ns-dops"' in text and "Plotly.newPlot" in text


def test_a_comparison_report_has_the_pictures_of_each_variant_against_the_first(tmp_path: Path) -> None:
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    wide = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
    x = torch.randn(32, 64)
    with torch.no_grad():
        cmp = ns.compare({"base": net, "wide": wide}, x, name="widths", output_dir=str(tmp_path), active=2, warmup=1, print_summary=False, check_outputs=False)
    page = render_report(cmp)
    assert "wide against base" in page and 'data-plot="ns-dops-1"' in page and 'data-plot="ns-dmod-1"' in page


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")
def test_chromium_draws_the_diff_page_offline(tmp_path: Path) -> None:
    page = tmp_path / "diff.html"
    page.write_text(render_diff_report(diff_results(_result(0.0), _result(400.0))), encoding="utf-8")
    argv = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--dump-dom", "--enable-logging=stderr", "--v=0",
            "--virtual-time-budget=5000", "--window-size=1400,1200", page.resolve().as_uri()]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert dom.count('class="main-svg"') >= 2 and "<img" not in dom and "<title>1</title>" not in dom
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "net::ERR" in line]
    assert console == [], console
