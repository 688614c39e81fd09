"""Estimated savings against hint.verify() on the synthetic RMSNorm and LayerNorm cases.

Moved here from tests/test_fusion.py (a timing assertion, flaky on a loaded machine): runs
tests/fusion_cases.py's calibration in a child process with glibc's malloc pinned (no
dynamic mmap threshold, no heap trimming; otherwise whether each fresh 1 MiB tensor
page-faults flips during a run) and prints, per pattern and attempt, the estimate, the
verified saving and their ratio. The estimates are bounded by the kept calibration
(``neuronscope calibrate``, one thread; the child measures it first where none is kept). Usage: ``python3 benchmarks/bench_calibration.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(32 << 20), MALLOC_TRIM_THRESHOLD_=str(256 << 20), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "fusion_cases.py")], check=False, capture_output=True, text=True, env=env, timeout=600
    )
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return 1
    attempts = json.loads(proc.stdout)
    print(f"{'pattern':<12} {'try':>3} {'est us':>10} {'verified us':>12} {'ratio':>7}")
    ok = True
    for pattern, tries in attempts.items():
        ratios = []
        for i, t in enumerate(tries):
            v = t["verified_saving_us"]
            r = t["est_saving_us"] / v if v > 0 else float("inf")
            ratios.append(r)
            print(f"{pattern:<12} {i:>3} {t['est_saving_us']:>10.1f} {v:>12.1f} {r:>7.2f}")
        within = any(0.5 <= r <= 2.0 for r in ratios)
        ok = ok and within
        print(f"{pattern}: {'within' if within else 'NOT within'} a factor of two in some attempt")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
