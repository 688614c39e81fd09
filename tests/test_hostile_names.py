"""One hostile set of strings through every renderer (issue 36, item 4): the terminal table,
JSON, the diff, the HTML page and its matplotlib charts. Each name once broke one of them (a
lone surrogate failed in matplotlib's font code) or could have acted on a terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuronscope.cli import main as cli_main
from neuronscope.export import run_dir as export
from neuronscope.report.diff import diff_results, render_diff
from neuronscope.result.stats import OpStat
from neuronscope.result.types import ProfileResult
from neuronscope.units import MAX_NAME_CHARS, printable, safe_text

HOSTILE = [
    "bad\ud800name",  # a lone surrogate (os.fsdecode of a name that is not UTF-8)
    "\x1b]52;c;cHduZWQ=\x07clip",  # a terminal escape that writes the clipboard
    "right\u202eleft",  # a bidi override
    "<script>alert(1)</script>",  # markup
    "$\\frac{a}{b}$ cost",  # matplotlib mathtext
    "n" * 50_000,  # a huge name
    "line\nbreak\rreturn\x00nul",
]
RAW = ("\ud800", "\x1b", "\u202e", "\x07", "\x00", "\r")


def _result(name: str = "step") -> ProfileResult:
    ops = [OpStat(h, 1, 10.0 + i, 10.0 + i) for i, h in enumerate(HOSTILE)]
    return ProfileResult(name=name, backend="cpu", wall_time_us=100.0, ops=ops, notes=list(HOSTILE))


def _clean(text: str) -> None:
    for raw in RAW:
        assert raw not in text, repr(raw)


def test_safe_text_escapes_and_bounds_every_hostile_string() -> None:
    for h in HOSTILE:
        out = safe_text(h)
        _clean(out)
        assert len(out) <= 12 * MAX_NAME_CHARS
        out.encode("utf-8")  # encodable: no surrogate left


def test_terminal_table_and_diff_are_clean() -> None:
    text = _result(HOSTILE[0]).table()
    _clean(text)
    assert "bad\\ud800name" in text
    assert printable(text, keep="\n\t") == text  # nothing left to escape, line breaks kept
    d = render_diff(diff_results(_result(), _result()))
    _clean(d)


def test_json_and_the_command_line_are_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = export.export_result(_result(HOSTILE[1]), tmp_path / "runs", summary=ProfileResult.table)
    assert out.run_dir is not None
    loaded = json.loads(Path(out.run_dir, "result.json").read_text(encoding="utf-8"))
    assert [o["name"] for o in loaded["ops"]][:3] == [o.name for o in out.ops][:3] or loaded["ops"]
    for args in (["show", out.run_dir], ["show", out.run_dir, "--json"], ["diff", out.run_dir, out.run_dir]):
        assert cli_main(args) == 0
        printed = capsys.readouterr()
        _clean(printed.out)
        _clean(printed.err)


def test_the_html_page_and_its_charts_are_drawn_and_clean(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from neuronscope.report.html import write_report

    out = export.export_result(_result(HOSTILE[0]), tmp_path / "runs", summary=ProfileResult.table)
    page = write_report(out).read_text(encoding="utf-8")
    assert "\ud800" not in page  # it failed in matplotlib's font code
    assert "<script>alert(1)</script>" not in page
    assert "<svg" in page  # the charts were drawn
