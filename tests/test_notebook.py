"""In a notebook, through a real Jupyter kernel (nbclient): immediate feedback at the first
warm-up call, a re-run cell with a new window captures again, and ``neuronscope.reset()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]

CELLS = [
    # 0: set-up: this checkout's neuronscope, runs under the test's directory
    """
import os, sys
sys.path.insert(0, {root!r})
os.environ["NEURONSCOPE_OUTPUT_DIR"] = {runs!r}
import torch, neuronscope
from neuronscope import neuron_region, profile_on_neuron
assert neuronscope.__file__.startswith({root!r}), neuronscope.__file__
""",
    # 1: decorate and call once: all warm-up, said at once (a kernel never reaches exit)
    """
@profile_on_neuron(backend="cpu", export=False)
def step(x):
    return x.sin()

step(torch.ones(4))
""",
    # 2: a loop cell with a window counted by region name
    """
for _ in range(3):
    with neuron_region("nb_loop", warmup=2, active=1, backend="cpu", export=False) as r:
        torch.ones(8).exp()
print("RESULTS", len(r.results), [op.name for op in r.results[-1].ops])
""",
    # 3: the same cell re-run with a new window and new work: a fresh window
    """
for _ in range(2):
    with neuron_region("nb_loop", warmup=1, active=1, backend="cpu", export=False) as r:
        torch.ones(8).cos()
print("RESULTS", len(r.results), [op.name for op in r.results[-1].ops])
""",
    # 4: the same window again: only after neuronscope.reset()
    """
neuronscope.reset()
for _ in range(2):
    with neuron_region("nb_loop", warmup=1, active=1, backend="cpu", export=False) as r:
        torch.ones(8).tanh()
print("RESULTS", len(r.results), [op.name for op in r.results[-1].ops])
""",
    # 5: a module defined in a cell, decorated, captured; its hints' lines name the cell
    """
class Norm(torch.nn.Module):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

norm = profile_on_neuron(torch.nn.Sequential(torch.nn.Linear(16, 16), Norm()), backend="cpu", export=False)
norm(torch.randn(4, 16)); norm(torch.randn(4, 16))
res = norm.last_result
print("MODULES", [m.name for m in res.modules])
print("LOCATIONS", [h.location for h in res.hints])
print("HTML", "Modules" in res._repr_html_())
""",
    # 6: the same call again, in a new cell: its window is used up, and the cell says so
    """
norm(torch.randn(4, 16))
""",
    # 7: the advice of cell 6 followed: reset by the callable's name captures again
    """
neuronscope.reset('Sequential')
norm(torch.randn(4, 16)); norm(torch.randn(4, 16))
print("CAPTURES", len(norm.results))
""",
]


def _text(cell: Any) -> str:
    return "".join(out.get("text", "") for out in cell.outputs if out.get("output_type") == "stream")


def test_notebook_feedback_rerun_and_reset(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src.format(root=str(ROOT), runs=runs)) for src in CELLS]
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    out = [_text(cell) for cell in nb.cells]
    # 1: one line at the first warm-up call, saying what will be captured when
    assert "step: warm-up (1 call, not captured); will capture call 2" in out[1], out[1]
    # 2: the window's line, then the capture's line
    assert "nb_loop: warm-up (2 calls, not captured); will capture call 3" in out[2], out[2]
    assert "nb_loop ok [cpu]" in out[2] and "RESULTS 1" in out[2] and "aten::exp" in out[2]
    # 3: a new warmup= / active= starts a fresh window; results[-1] is the new capture
    assert "nb_loop ok [cpu]" in out[3] and "aten::cos" in out[3], out[3]
    # 4: reset() starts the windows again
    assert "nb_loop ok [cpu]" in out[4] and "aten::tanh" in out[4] and "RESULTS 2" in out[4], out[4]
    # 5: the module tree, and hint lines by the notebook's own cell names
    assert "MODULES ['Sequential', '1', '0']" in out[5] or "MODULES ['Sequential', '0', '1']" in out[5], out[5]
    assert "LOCATIONS ['In [6], line 3'" in out[5] and "ipykernel_" not in out[5], out[5]
    assert "HTML True" in out[5]
    # 6: a re-run past the window is told, with how to capture again; said once, not per call
    assert "window (warmup=1, active=1) is used up" in out[6] and "neuronscope.reset('Sequential')" in out[6], out[6]
    assert "hold the 1 earlier capture(s)" in out[6], out[6]
    # 7: following that advice captures again
    assert "CAPTURES 2" in out[7], out[7]
    assert "is used up" not in out[5]
