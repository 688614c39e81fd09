"""Run a snippet of user code in a fresh Python process: for attacks that could crash or hang
the process (a crash there fails the calling test, not the suite)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def run_fresh(tmp_path: Path, *parts: str, timeout: int = 120, env: dict[str, str] | None = None) -> str:
    """Run ``parts`` (each dedented, in order: a prelude, then the body) with this checkout on
    ``PYTHONPATH`` and ``OUT`` set to ``tmp_path``; its stdout. It must exit 0 within
    ``timeout`` seconds (its output's tails say why where it did not)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    full = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path), **(env or {})}
    code = "".join(textwrap.dedent(p) for p in parts)
    run = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=timeout, check=False)
    assert run.returncode == 0, f"rc={run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    return run.stdout
