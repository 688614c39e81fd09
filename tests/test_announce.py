"""What a capture says: one line naming its run directory once, readable under the
application's own logging, and warnings for options the backend ignores."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import torch

from neuronscope import neuron_region
from neuronscope.announce import NeuronscopeWarning

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "NEURONSCOPE_OUTPUT_DIR": str(tmp_path / "runs"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)


def test_the_done_line_names_the_run_directory_once(tmp_path: Path) -> None:
    done = _run(
        "import torch\nfrom neuronscope import neuron_region\n"
        "with neuron_region('once', backend='cpu') as r:\n    torch.ones(4).sin()\n"
        "print(r.result.run_dir)\n",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    run_dir = done.stdout.strip()
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("neuronscope: once ok [cpu]")]
    assert len(lines) == 1 and lines[0].count(run_dir) == 1, done.stderr
    assert lines[0].endswith(f"neuronscope show {run_dir}")


def test_with_basic_config_the_logger_is_named_once(tmp_path: Path) -> None:
    done = _run(
        "import logging, torch\nlogging.basicConfig(level=logging.INFO)\n"
        "from neuronscope import neuron_region\n"
        "with neuron_region('lg', backend='cpu', export=False):\n    torch.ones(4).sin()\n",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "INFO:neuronscope:lg ok [cpu]" in done.stderr, done.stderr
    assert "neuronscope:neuronscope" not in done.stderr


def test_modes_and_cores_on_the_cpu_backend_warn_once() -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            with neuron_region("cpu_cores", backend="cpu", cores="0-3", modes=["runtime", "device"], export=False) as r:
                torch.ones(2).sin()
    said = [str(w.message) for w in record if issubclass(w.category, NeuronscopeWarning)]
    assert len(said) == 1 and "modes and cores apply to the Neuron profiler only" in said[0], said
    assert r.result is not None and r.result.status == "ok"
