"""report.html on real CPU captures: content, self-containment, the missing-extra error, and a
real headless browser (Debian's chromium) that renders it without console errors.

The fusion detector and the multi-rank gathering are written elsewhere; to show that the page
renders their output, a real capture's result gets a hint and a rank table added as data.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from neuronscope import (
    Comparison,
    Hint,
    NeuronscopeError,
    ProfileResult,
    compare,
    load,
    neuron_region,
)
from neuronscope.demo import rms_norm_fused, rms_norm_naive
from neuronscope.export.run_dir import finish_run
from neuronscope.report.html import REPORT_FILE, render_report, write_report

pytest.importorskip("matplotlib", reason="the report draws its charts with matplotlib (a dependency)")

SHAPE = (2, 16, 64)
CHROMIUM = Path("/usr/bin/chromium")
# Namespace names inside inline SVG; they are identifiers, never fetched.
NAMESPACES = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> ProfileResult:
    """A real capture with two nested regions, then a fusion hint and two ranks added."""
    root = tmp_path_factory.mktemp("runs")
    torch.manual_seed(0)
    x, w = torch.randn(*SHAPE), torch.randn(SHAPE[-1])
    with neuron_region("<step> & $x$", output_dir=str(root), backend="cpu") as r:
        with neuron_region("norm"):
            rms_norm_naive(x, w)
        with neuron_region("proj"):
            x @ x.transpose(-1, -2)
    result = r.result
    assert result is not None and result.run_dir is not None
    naive_ops = ["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul"]
    hint = (
        Hint(
            kind="fusion",
            pattern="rms_norm",
            ops=naive_ops,
            calls=1,
            time_us=sum(o.time_us for o in result.ops if o.name in naive_ops),
            est_saving_us=42.0,
            suggestion="torch.nn.functional.rms_norm",
            location="model.py:17",
        )
    )
    ranks = [
        {"rank": 0, "wall_time_us": result.wall_time_us, "total_op_us": result.total_op_us, "top_op": "aten::mul"},
        {"rank": 1, "wall_time_us": result.wall_time_us * 1.5, "total_op_us": result.total_op_us, "top_op": "aten::pow"},
    ]
    result = replace(result, hints=[*result.hints, hint], rank=0, world_size=2, ranks=ranks)
    finish_run(Path(result.run_dir), result)
    loaded = load(result.run_dir)
    assert isinstance(loaded, ProfileResult)
    return loaded


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    root = tmp_path_factory.mktemp("cmp")
    torch.manual_seed(0)
    x, w = torch.randn(*SHAPE), torch.randn(SHAPE[-1])
    cmp = compare({"naive": rms_norm_naive, "fused": rms_norm_fused}, x, w, name="rms", output_dir=str(root), active=3, warmup=1)
    assert cmp.run_dir is not None
    return cmp


@pytest.fixture(scope="module")
def single_page(single: ProfileResult) -> tuple[Path, str]:
    assert single.run_dir is not None
    path = write_report(single.run_dir)
    return path, path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def comparison_page(comparison: Comparison) -> tuple[Path, str]:
    assert comparison.run_dir is not None
    path = write_report(comparison.run_dir)
    return path, path.read_text(encoding="utf-8")


def _text(page: str) -> str:
    """The page's visible text, roughly: tags and inline SVG dropped, entities kept (a
    ``<wbr>``, where a name may wrap, adds no space)."""
    page = re.sub(r"<svg.*?</svg>", " ", page, flags=re.DOTALL).replace("<wbr>", "")
    return re.sub(r"<[^>]+>", " ", page)


# ---- content ---------------------------------------------------------------------------------
def test_single_run_report(single: ProfileResult, single_page: tuple[Path, str]) -> None:
    path, page = single_page
    assert path == Path(str(single.run_dir)) / REPORT_FILE
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    text = _text(page)
    # Where the time went: a chart, and the op table under it.
    assert page.count('<svg class="chart"') == 2  # time by op, and the ranks
    assert "Where the time went" in text
    for op in single.ops[:5]:
        assert op.name in text
    # The hint and its evidence.
    for needle in ("rms_norm", "fusion", "aten::rsqrt", "42.0 us", "torch.nn.functional.rms_norm", "model.py:17"):
        assert needle in text, needle
    # Nested regions, and not the capture's own outermost range.
    assert "Nested regions" in text and "norm" in text and "proj" in text
    # Ranks of a multi-process result.
    assert "Ranks" in text and "2 ranks of world size 2" in text and "rank 1" in page
    assert "result.json" in text and "trace.json" in text


def test_comparison_report(comparison: Comparison, comparison_page: tuple[Path, str]) -> None:
    path, page = comparison_page
    assert path.parent == Path(str(comparison.run_dir))
    text = _text(page)
    # The variants chart, then one time chart per variant.
    assert page.count('<svg class="chart"') == 1 + len(comparison.results)
    assert 'aria-label="rms: time per call (median), speedup against' in page
    for row in comparison.rows:
        assert row.label in text and f"{row.speedup:.2f}x" in text
    assert "Ops per call" in text and "Warm-up" in text
    assert "Variant naive" in text and "Variant fused" in text
    assert text.count("Measured calls") == 2 and "3 calls:" in text
    assert "naive#0" not in text  # the per-call ranges are shown as calls, not as regions


def test_reports_are_self_contained(single_page: tuple[Path, str], comparison_page: tuple[Path, str]) -> None:
    for _, whole in (single_page, comparison_page):
        # The one script the page may hold is plotly.js itself, inline (its source names URLs
        # in strings it never fetches offline: the Chromium test checks that nothing is fetched),
        # and the few lines that draw the figures.
        page = re.sub(r"<script>/\*\*\n\* plotly\.js.*?</script>", "", whole, flags=re.DOTALL)
        lowered = page.lower()
        assert "<script src" not in lowered and lowered.count("<script") == lowered.count('<script type="application/json"') + lowered.count("<script>\ndocument.queryselectorall")
        for banned in ("<link", "<iframe", "<img", "@import", " src=", "url(http"):
            assert banned not in lowered, banned
        assert set(re.findall(r"(?:https?:)?//[^\s\"'<>)]+", page)) <= NAMESPACES
        assert "<?xml" not in page and "<!DOCTYPE svg" not in page and "<metadata" not in page
        ids = re.findall(r'\sid="([^"]+)"', page)
        assert len(ids) == len(set(ids)), "inline SVGs share the page's ids; they must not collide"
        for ref in re.findall(r'(?:url\(#|href="#)([^")]+)', page):
            assert ref in ids


def test_names_are_escaped(single_page: tuple[Path, str]) -> None:
    _, page = single_page
    assert "<step>" not in page and "&lt;step&gt; &amp; $x$" in page


def test_write_report_takes_result_json_or_a_result(single: ProfileResult, comparison: Comparison) -> None:
    assert single.run_dir is not None
    assert write_report(Path(single.run_dir) / "result.json") == Path(single.run_dir) / REPORT_FILE
    assert write_report(comparison) == Path(str(comparison.run_dir)) / REPORT_FILE
    with pytest.raises(NeuronscopeError, match="not exported"):
        write_report(ProfileResult(name="mem", backend="cpu"))
    assert "<svg" not in render_report(ProfileResult(name="empty", backend="cpu"))  # no ops, no chart


def test_hint_savings_read_as_the_hint_line_does() -> None:
    """The page's saving column says what the hint's message says: "up to" an upper bound, and
    no replacement where the fused forms are estimated no faster here."""
    from neuronscope.result.hint import NO_FASTER_TEXT, Hint

    upper = Hint("fusion", "gelu", ["aten::mul"], time_us=900.0, est_saving_us=600.0, suggestion="use F.gelu", details={"saving_upper_bound": True})
    none = Hint("fusion", "silu_mul", ["aten::silu"], time_us=50.0, est_saving_us=0.0, suggestion="torch.compile the MLP", details={"fused_no_faster": True})
    page = render_report(ProfileResult(name="r", backend="cpu", hints=[upper, none]))
    assert "up to ~600.0 us" in page and "use F.gelu" in page
    assert "no saving expected" in page and html.escape(NO_FASTER_TEXT) in page and "torch.compile the MLP" not in page


def test_unreadable_runs_raise_neuronscope_errors(tmp_path: Path) -> None:
    with pytest.raises(NeuronscopeError, match="no such file"):
        write_report(tmp_path / "nope")
    with pytest.raises(NeuronscopeError, match="not a neuronscope run"):
        write_report(tmp_path)


def test_without_matplotlib_the_error_says_how_to_install_it(
    single: ProfileResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(NeuronscopeError, match=r"pip install matplotlib"):
        write_report(str(single.run_dir))


def test_the_users_pyplot_backend_is_left_alone(single: ProfileResult) -> None:
    import matplotlib

    before = matplotlib.rcParams["backend"]
    render_report(single)
    assert matplotlib.rcParams["backend"] == before
    assert "matplotlib.pyplot" not in sys.modules or before == matplotlib.rcParams["backend"]


# ---- notebooks -------------------------------------------------------------------------------
def test_result_repr_html(single: ProfileResult) -> None:
    page = single._repr_html_()
    assert page.startswith("<div>") and "<table>" in page and single.ops[0].name in page
    assert "&lt;step&gt;" in page and "<step>" not in page
    assert "rms_norm" in page  # the hints, as a list


# ---- a real browser --------------------------------------------------------------------------
def _chromium(url: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "chromium-profile"
    argv = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # offline: any fetch would fail and log
        *extra,
        url,
    ]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)


needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium is absent; install it with: apt-get install -y --no-install-recommends chromium",
)


@needs_chromium
@pytest.mark.slow
def test_chromium_renders_the_comparison_report(comparison_page: tuple[Path, str], tmp_path: Path) -> None:
    from matplotlib import image

    path, _ = comparison_page
    shot = tmp_path / "report.png"
    done = _chromium(path.resolve().as_uri(), tmp_path, f"--screenshot={shot}", "--window-size=1200,2000")
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(str(shot))
    assert pixels.shape[:2] == (2000, 1200)
    colours = {tuple(p) for p in (pixels[::4, ::4, :3] * 255).round().astype(int).reshape(-1, 3).tolist()}
    assert len(colours) > 50, "the screenshot is (nearly) blank"


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("which", ["single", "comparison"])
def test_chromium_dom_has_the_charts_and_no_console_errors(
    which: str, single_page: tuple[Path, str], comparison_page: tuple[Path, str], tmp_path: Path
) -> None:
    path, page = single_page if which == "single" else comparison_page
    done = _chromium(path.resolve().as_uri(), tmp_path, "--dump-dom", "--enable-logging=stderr", "--v=0")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert dom.count('<svg class="chart"') == page.count('<svg class="chart"') >= 2
    assert "<table>" in dom and "Where the time went" in dom
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "net::ERR" in line]
    assert console == [], console



# ---- hostile and odd content (issues 19 and 21) ------------------------------------------------


def _synthetic_run(tmp_path: Path, **fields: object) -> Path:
    from neuronscope.export.run_dir import export_result
    from neuronscope.result.stats import OpStat

    result = ProfileResult(
        name=str(fields.pop("name", "odd")),
        backend="cpu",
        wall_time_us=100.0,
        ops=list(fields.pop("ops", [OpStat("aten::mul", 1, 60.0, 60.0), OpStat("aten::add", 1, 40.0, 40.0)])),  # type: ignore[call-overload]
        **fields,  # type: ignore[arg-type]
    )
    out = export_result(result, tmp_path / "runs", summary="s")
    assert out.run_dir is not None
    return Path(out.run_dir)


def test_files_named_like_urls_are_never_live_links(tmp_path: Path) -> None:
    run = _synthetic_run(tmp_path)
    hostile = ["javascript:alert(document.domain)", "data:text,hi", "https:evil.example", "a\"><b onmouseover=x()>"]
    for name in hostile:
        (run / name).write_text("x")
    (run / "gone.json").symlink_to(tmp_path / "nowhere.json")  # a link: not listed
    page = write_report(run).read_text(encoding="utf-8")
    hrefs = re.findall(r'<a href="([^"]*)"', page)
    assert len(hrefs) == 6 and all(h.startswith("./") and ":" not in h for h in hrefs), hrefs
    assert "<b onmouseover" not in page and "gone.json" not in page
    from urllib.parse import unquote, urljoin

    for href in hrefs:  # every link resolves to a file that exists beside the report
        target = urljoin(run.as_uri() + "/", href)
        assert target.startswith("file://") and (run / unquote(href[2:])).is_file(), href


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent; apt-get install -y chromium")
@pytest.mark.slow
def test_chromium_sees_only_file_links(tmp_path: Path) -> None:
    run = _synthetic_run(tmp_path)
    (run / "javascript:alert(1)").write_text("x")
    path = write_report(run)
    done = _chromium(path.resolve().as_uri(), tmp_path, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    hrefs = re.findall(r'<a href="([^"]*)"', done.stdout)
    assert "./javascript%3Aalert%281%29" in hrefs, hrefs
    assert not any(h.lower().lstrip().startswith(("javascript", "data:", "http")) for h in hrefs), hrefs


def test_non_finite_numbers_do_not_break_the_report(tmp_path: Path) -> None:
    from neuronscope.result.stats import OpStat

    nan, inf = float("nan"), float("inf")
    run = _synthetic_run(
        tmp_path,
        ops=[OpStat("aten::mul", 1, nan, nan), OpStat("aten::add", 1, inf, inf), OpStat("aten::sub", 1, 5.0, 5.0)],
        rank=0,
        world_size=2,
        ranks=[{"rank": 0, "wall_time_us": nan}, {"rank": 1, "wall_time_us": inf}],
    )
    page = write_report(run).read_text(encoding="utf-8")
    assert "aten::<wbr>sub" in page  # a name may wrap after its namespace only


def _axes_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Records each chart's axes and bar colours (matplotlib's own calls, wrapped)."""
    from matplotlib.axes import Axes

    seen: dict[str, list[Any]] = {"axes": [], "colors": []}
    real_barh = Axes.barh

    def barh(self: Axes, *args: Any, **kwargs: Any) -> Any:
        seen["axes"].append(self)
        seen["colors"].append(kwargs.get("color"))
        return real_barh(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "barh", barh)
    return seen


def test_a_share_axis_ends_at_100_percent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiled variant is one op at 100%: its axis ran to 128% (ticks to 120%)."""
    from neuronscope.result.stats import OpStat

    seen = _axes_calls(monkeypatch)
    run = _synthetic_run(tmp_path, ops=[OpStat("CompiledFunction", 1, 50.0, 50.0)])
    write_report(run)
    limits = [ax.get_xlim()[1] for ax in seen["axes"]]
    assert limits and all(top <= 100.0 for top in limits), limits


def test_a_slowdown_within_the_noise_is_not_red(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from neuronscope.report.charts import Charts
    from neuronscope.result.comparison import ComparisonRow

    seen = _axes_calls(monkeypatch)
    cmp = Comparison(
        name="n",
        rows=[
            ComparisonRow("base", 100.0, 3, "aten::mul", 1.0, spread_us=10.0),
            ComparisonRow("noisy", 104.0, 3, "aten::mul", 100 / 104, spread_us=10.0),
            ComparisonRow("slow", 200.0, 3, "aten::mul", 0.5, spread_us=10.0),
        ],
    )
    Charts().variants(cmp)
    colors = seen["colors"][-1]
    assert colors[1] != colors[2] and colors[2] == "#c0504d" and colors[1] == colors[0]


def test_a_huge_name_keeps_the_report_small(tmp_path: Path) -> None:
    name = "n" * 50_000
    run = _synthetic_run(tmp_path, name=name, ops=[])
    from neuronscope.result.stats import OpStat

    result = load(run)
    assert isinstance(result, ProfileResult)
    result = replace(result, ops=[OpStat("o" * 50_000, 1, 5.0, 5.0)])
    page = render_report(result)
    assert len(page) < 200_000, len(page)
    assert len(run.parent.name) <= 100 and len(run.name) < 120


def test_setup_makes_matplotlib_a_dependency() -> None:
    """The README's install line must give a working `neuronscope report` (issue 19)."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).resolve().parents[1] / "setup.cfg")
    assert "matplotlib" in cfg["options"]["install_requires"]


@pytest.mark.parametrize("n_ranks", [3, 500])
def test_the_ranks_chart_draws_the_slowest_ranks(monkeypatch: pytest.MonkeyPatch, n_ranks: int) -> None:
    # A bar per rank up to RANK_BARS; of a big job, the slowest ones, slowest first (8,000 bars
    # took the report 87 s and said nothing one could read).
    from neuronscope.report.charts import RANK_BARS, Charts

    seen = _axes_calls(monkeypatch)
    ranks = [{"rank": r, "wall_time_us": 1000.0 + (r * 7919) % n_ranks} for r in range(n_ranks)]
    svg = Charts().ranks(ranks)
    colors = seen["colors"][-1]
    by_wall = sorted(ranks, key=lambda r: r["wall_time_us"], reverse=True)
    if n_ranks <= RANK_BARS:
        assert len(colors) == n_ranks and "Wall time per rank" in svg
    else:
        assert len(colors) == RANK_BARS and f"Wall time of the {RANK_BARS} slowest of {n_ranks} ranks" in svg
        assert f"rank {by_wall[0]['rank']}" in svg and f"rank {by_wall[-1]['rank']}" not in svg
    assert colors.count("#c0504d") == 1  # the slowest


# ---- the pictures: module icicle, timeline, memory (issue 37) ----------------------------------
HOSTILE_MODULE = '<img src=x onerror="document.title=1">'.replace(".", "")


@pytest.fixture(scope="module")
def module_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A real capture of a small model (one child with a hostile name), memory on, and its page."""
    import torch
    from torch import nn

    import neuronscope as ns

    out = tmp_path_factory.mktemp("module-runs")
    net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
    net.add_module(HOSTILE_MODULE, nn.LayerNorm(32))
    x = torch.randn(8, 32)
    with ns.neuron_region("modules </script>", backend="cpu", output_dir=str(out), profile_memory=True, print_summary=False) as r:
        net(x).sum().backward()
    assert r.result.run_dir is not None
    path = write_report(r.result.run_dir)
    return path, path.read_text(encoding="utf-8")


def test_page_has_the_pictures_with_names_escaped(module_page: tuple[Path, str]) -> None:
    _, page = module_page
    for plot in ("ns-icicle", "ns-timeline", "ns-memory"):
        assert f'data-plot="{plot}"' in page
    assert "Plotly.newPlot" in page and "https://" not in page.split("<footer>")[0].split("plotly.js v")[0]
    assert HOSTILE_MODULE not in page and "<img" not in page
    assert page.count("</script>") == page.count("<script")  # no name ends a script block


@needs_chromium
@pytest.mark.slow
def test_chromium_draws_the_pictures_offline(module_page: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = module_page
    done = _chromium(path.resolve().as_uri(), tmp_path, "--dump-dom", "--enable-logging=stderr", "--v=0",
                     "--virtual-time-budget=5000", "--window-size=1400,1600")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    # plotly drew each figure (its SVG root), the hostile name stayed text, nothing was fetched
    assert dom.count('class="main-svg"') >= 3
    assert "<img" not in dom and "<title>1</title>" not in dom
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "net::ERR" in line]
    assert console == [], console


def test_page_text_goes_through_the_one_sanitiser() -> None:
    """Terminal control characters in a name, a module or a hint's location reach the page as
    printable escapes (units.safe_text), in the tables and in the pictures' hint cards alike."""
    from neuronscope.result.hint import Hint
    from neuronscope.result.modules import ModuleStat

    bad = "evil\x1b[31m\u202eName"
    mods = [ModuleStat(name=bad, type="Net", parent=None, depth=0, calls=1, cpu_total_us=10.0, self_cpu_us=10.0, share=1.0, hints=(0,))]
    hint = Hint("fusion", "gelu", ["aten::mul"], time_us=9.0, est_saving_us=3.0, location=f"{bad}.py:3", suggestion="use F.gelu")
    page = render_report(ProfileResult(name=bad, backend="cpu", hints=[hint], modules=mods))
    assert "\x1b" not in page and "\u202e" not in page
    assert "evil\\x1b[31m\\u202eName" in page and 'class="hint"' in page


# ---- the page as a reader sees it (issue 41): legend and tool bar, wrapped names, wording --------
#: Measures the drawn page: each figure's legend and modebar boxes, and where each ``td code``
#: wraps (the two characters around each line break), written into the DOM for --dump-dom.
_PROBE_JS = """
setTimeout(function () {
  var plots = [].map.call(document.querySelectorAll('.js-plotly-plot'), function (p) {
    function box(sel) { var e = p.querySelector(sel); if (!e) return null;
      var r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }
    return {id: p.id, legend: box('.legend'), modebar: box('.modebar')};
  });
  var breaks = [];
  document.querySelectorAll('td code').forEach(function (code) {
    var text = code.textContent, walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT), top = null, node;
    var at = 0;
    while ((node = walker.nextNode())) {
      for (var i = 0; i < node.length; i++, at++) {
        var range = document.createRange(); range.setStart(node, i); range.setEnd(node, i + 1);
        var rect = range.getBoundingClientRect();
        if (rect.width === 0) continue;
        if (top !== null && rect.top > top + 2) breaks.push(text.slice(Math.max(at - 2, 0), at) + '|' + text.slice(at, at + 2));
        top = rect.top;
      }
    }
  });
  var out = document.createElement('pre'); out.id = 'ns-probe';
  out.textContent = JSON.stringify({plots: plots, breaks: breaks});
  document.body.appendChild(out);
}, 1500);
"""


class _Block(torch.nn.Module):
    """A forward-only block of hand-written parts: a dozen module classes for the legend,
    an RMSNorm written out (a hint whose ops fill the Ops column)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = _Norm(d)
        self.attn = torch.nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Dropout(0.0), torch.nn.Linear(2 * d, d))
        self.post = torch.nn.LayerNorm(d)
        self.act = torch.nn.SiLU()
        self.gate = torch.nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        h = x + self.attn(h, h, h, need_weights=False)[0]
        return self.post(h + self.mlp(h) * self.gate(self.act(h)))


class _Norm(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


@pytest.fixture(scope="module")
def forward_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A real forward-only capture of a small model with many module classes, and its page."""
    import neuronscope as ns

    out = tmp_path_factory.mktemp("forward-runs")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 32), _Block(32), _Block(32), torch.nn.Linear(32, 64)).eval()
    ids = torch.randint(0, 64, (2, 16))

    @ns.profile_on_neuron(backend="cpu", output_dir=str(out), print_summary=False)
    def forward(ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return model(ids)

    for _ in range(2):
        forward(ids)
    result = forward.last_result
    assert result is not None and result.run_dir is not None and result.modules
    assert any(h.pattern == "rms_norm" for h in result.hints)
    path = write_report(result.run_dir)
    return path, path.read_text(encoding="utf-8")


def test_a_forward_only_page_says_nothing_of_backward(forward_page: tuple[Path, str], module_page: tuple[Path, str]) -> None:
    """'backward counts for the module whose forward made it' belongs to captures with a
    backward pass (module_page runs one), not to a forward-only one."""
    for sentence in ("backward counts for the module whose forward made it", "backward ops by the module whose forward made them"):
        assert sentence not in forward_page[1]
        assert sentence in module_page[1]


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 1000])
def test_chromium_legends_clear_the_modebar_and_names_wrap_between_words(
    forward_page: tuple[Path, str], module_page: tuple[Path, str], tmp_path: Path, width: int
) -> None:
    """Drawn by a real Chromium: no figure's legend runs under plotly's modebar (the timeline's
    last entries did, T5Attention under the tool bar), and a name in a table cell wraps only
    after ``::``, ``_``, ``.`` or ``/`` (``ate n::mul_`` before)."""
    wrapped = 0
    for n, (path, page) in enumerate((forward_page, module_page)):
        probe = path.with_name(f"probe-{width}-{n}.html")
        probe.write_text(page.replace("</body>", f"<script>{_PROBE_JS}</script></body>"), encoding="utf-8")
        done = _chromium(probe.resolve().as_uri(), tmp_path, "--dump-dom", "--virtual-time-budget=8000", f"--window-size={width},900")
        assert done.returncode == 0, done.stderr[-2000:]
        found = re.search(r'<pre id="ns-probe">(.*?)</pre>', done.stdout, flags=re.DOTALL)
        assert found is not None, "the probe did not run"
        seen = json.loads(html.unescape(found.group(1)))
        assert any(p["legend"] for p in seen["plots"]), seen["plots"]  # the timeline's legend was drawn
        for p in seen["plots"]:
            if p["legend"] and p["modebar"]:
                (l1, t1, r1, b1), (l2, t2, r2, b2) = p["legend"], p["modebar"]
                assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1, p
        mid_word = [b for b in seen["breaks"] if not re.match(r"(::|.[_./ ]|. )\|", b) and not b.startswith(" ")]
        assert mid_word == [], mid_word
        wrapped += len(seen["breaks"])
    assert wrapped > 0, "no name wrapped at all: the check above saw nothing"
