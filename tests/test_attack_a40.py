"""Attacks on round 40's changes: fd 2's filter (capture/stderr.py), aten::index's indices read
from its children (analysis/dataflow.py), a loss's rows and target, norms' weights traced to one
tensor (matcher.py), and attention's products' dims by op order (kept.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from neuronscope import from_trace, profile_on_neuron
from neuronscope.drive.pipeline import from_profiler

_X = torch.randn(32, 100, generator=torch.Generator().manual_seed(0))
_T = torch.randint(0, 32, (32,), generator=torch.Generator().manual_seed(1))


def _hints(fn, args, tmp_path: Path, shapes: bool = True) -> dict[str, list]:  # type: ignore[no-untyped-def]
    """The fusion hints of ``fn(*args)``, live, from the user's profiler and from its trace."""
    f = profile_on_neuron(fn, backend="cpu", export=False, print_summary=False)
    f(*args)
    f(*args)
    with torch.profiler.profile(record_shapes=shapes, profile_memory=shapes) as prof:
        fn(*args)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return {"live": f.last_result.fusion_hints, "profiler": from_profiler(prof).fusion_hints, "trace": from_trace(path).fusion_hints}


# ---- a loss's softmax over the batch: no cross-entropy ----------------------------------------

#: A fused softmax recorded over dim 0 of [N, C] logits: each class normalised over the batch.
#: The loss then picks from it is no cross_entropy(x, target), which normalises each row.
_OVER_THE_BATCH = {
    "nll_loss": lambda x, t: F.nll_loss(torch.log(torch.softmax(x, 0)), t),
    "gather": lambda x, t: -torch.log(torch.softmax(x, 0)).gather(-1, t[:, None]),
    "index": lambda x, t: -torch.log(torch.softmax(x, 0)[torch.arange(x.shape[0]), t]),
}


@pytest.mark.parametrize("loss", list(_OVER_THE_BATCH))
def test_a_loss_over_a_softmax_of_the_batch_is_no_cross_entropy(loss: str, tmp_path: Path) -> None:
    """The softmax's dim was recorded (0 of [32, 100]), yet every path said ``use
    cross_entropy(x, target)`` with "dim=<the dim your code sums over>": another value."""
    fn = _OVER_THE_BATCH[loss]
    assert not torch.allclose(F.cross_entropy(_X, _T, reduction="none").mean(), fn(_X, _T).mean())
    for where, hints in _hints(fn, (_X, _T), tmp_path).items():
        claimed = [h.suggestion for h in hints if "cross_entropy" in h.suggestion]
        assert not claimed, (where, claimed)


def test_a_loss_over_the_rows_softmax_is_still_found(tmp_path: Path) -> None:
    """The same losses over dim 1 (the rows' classes) stay one cross_entropy hint each."""
    for fn in (
        lambda x, t: F.nll_loss(torch.log(torch.softmax(x, 1)), t),
        lambda x, t: -torch.log(torch.softmax(x, -1)[torch.arange(x.shape[0]), t]).mean(),
    ):
        for where, hints in _hints(fn, (_X, _T), tmp_path).items():
            assert [h for h in hints if "cross_entropy" in h.suggestion], where


# ---- fd 2's filter and a subprocess started meanwhile ------------------------------------------

_INHERITED = (
    "a subprocess started by another thread while fd 2 is on the filter's scratch file (the "
    "profiler's start or stop) inherits that file as its stderr: subprocess and multiprocessing's "
    "spawn start it without Python's at-fork hooks (posix_spawn/vfork, then exec), so the child's "
    "fd 2 stays there, and what it writes after the filter has read the file back is lost. Fixing "
    "it needs fd 2 on a pipe drained by a thread for as long as any child holds it: no small change"
)


@pytest.mark.xfail(strict=True, reason=_INHERITED)
def test_a_subprocess_started_during_the_filter_keeps_its_stderr() -> None:
    script = (
        "import subprocess, sys, threading\n"
        "from neuronscope.capture.stderr import quiet_native_stderr\n"
        "inside, done = threading.Event(), threading.Event()\n"
        "def capture():\n"
        "    with quiet_native_stderr():\n"
        "        inside.set(); done.wait()\n"
        "t = threading.Thread(target=capture); t.start(); inside.wait()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import sys, time; time.sleep(0.3); sys.stderr.write(\"late line\\\\n\")'])\n"
        "done.set(); t.join(); child.wait()\n"
    )
    run = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60, env=_env())
    assert "late line" in run.stderr, run.stderr


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
