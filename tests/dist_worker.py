"""One rank of a real multi-process run, launched by tests/test_distributed.py through torchrun.

    python -m torch.distributed.run --nproc_per_node=2 --master_addr=127.0.0.1 \
        --master_port=PORT tests/dist_worker.py OUT_DIR

Every rank writes ``OUT_DIR/rank<r>.json``: one record per capture (its result's rank fields,
notes, hints, run directory) and the seconds spent agreeing on the start time and gathering.
One launch covers every case, because starting two ranks costs most of the test's time:

1. "warm" once (the first capture of a process pays torch's one-time costs), then "step"
   twice: rank 1 sleeps 0.3 s inside the first (a straggler); the second is even.
2. "slow" three times with a 1 s timeout: rank 1 sleeps 2.5 s inside the first (rank 0 stops
   waiting and records what it has); after a barrier the third has both ranks again.
3. "skippy" four times, each step with an all_reduce and half a second of work: rank 1 runs
   the second step uncaptured (a window, an ``if``). Captures must match again from the third on
   and rank 0 must not wait for the one rank 1 skipped (a 20 s timeout would show).
4. rank 1 exits without a word, as a crashed rank does; rank 0 captures "gone" twice with a
   1 s timeout: the first waits it out, the second does not wait.

With ``kill`` as the second argument, a shorter run instead: after one warm capture, rank 1 is
SIGKILLed inside its capture of "killed" while rank 0 waits for its record; torchrun then stops
rank 0 too. Rank 0 writes ``OUT_DIR/killed-run`` (its run directory) before it waits.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import neuronscope.drive.distributed as nd
from neuronscope import neuron_region

OUT = Path(sys.argv[1])
records: list[dict[str, Any]] = []
begin_seconds: list[float] = []
_begin = nd.begin


def _timed_begin(*args: Any, **kwargs: Any) -> Any:
    t0 = time.perf_counter()
    try:
        return _begin(*args, **kwargs)
    finally:
        begin_seconds.append(time.perf_counter() - t0)


nd.begin = _timed_begin  # the capture engine calls it through the module
_gather = nd.gather
gather_seconds: list[float] = []


def _timed_gather(*args: Any, **kwargs: Any) -> Any:
    """The whole gather of a capture, its exports included."""
    t0 = time.perf_counter()
    try:
        return _gather(*args, **kwargs)
    finally:
        gather_seconds.append(time.perf_counter() - t0)


nd.gather = _timed_gather


def capture(name: str, sleep_on_rank1: float = 0.0, collective: bool = True, die_on_rank1: bool = False) -> None:
    gather_seconds.clear()
    x = torch.randn(64, 64)
    with neuron_region(name, output_dir=str(OUT / "runs")) as r:
        y = torch.relu(x @ x)
        if collective:
            dist.all_reduce(y)
        if sleep_on_rank1 and dist.get_rank() == 1:
            time.sleep(sleep_on_rank1)
        if die_on_rank1 and dist.get_rank() == 1:
            time.sleep(0.5)  # rank 0 is in its gather by now
            os.kill(os.getpid(), signal.SIGKILL)
    res = r.result
    assert res is not None
    records.append(
        {
            "name": name,
            "rank": res.rank,
            "world_size": res.world_size,
            "ranks": res.ranks,
            "run_dir": res.run_dir,
            "wall_time_us": res.wall_time_us,
            "notes": res.notes,
            "hints": [{"kind": h.kind, "pattern": h.pattern, "details": h.details} for h in res.hints],
            "gather_seconds": gather_seconds[-1] if gather_seconds else None,
            "begin_seconds": begin_seconds[-1],
        }
    )


def save() -> None:
    (OUT / f"rank{dist.get_rank()}.json").write_text(json.dumps(records, indent=1))


def main_kill() -> None:
    """Rank 1 dies inside a capture; rank 0's measurement must be on disk before it waits."""
    dist.init_process_group("gloo")
    os.environ[nd.TIMEOUT_ENV] = "60"
    capture("warm", collective=False)
    dist.barrier()
    real_gather = nd._gather

    def gather_after_telling(*args: Any, **kwargs: Any) -> Any:  # rank 0 only: where the run is
        run_dirs = sorted((OUT / "runs" / "killed").glob("*_rank0"))
        (OUT / "killed-run").write_text(str(run_dirs[-1]) if run_dirs else "")
        return real_gather(*args, **kwargs)

    nd._gather = gather_after_telling
    capture("killed", collective=False, die_on_rank1=True)
    (OUT / "rank0-finished").write_text("the gather returned before torchrun stopped rank 0")


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    os.environ[nd.TIMEOUT_ENV] = "20"
    # The first capture of a process pays torch's one-time costs (the profiler imports
    # torch._inductor); keep them out of the straggler case.
    capture("warm", collective=False)
    dist.barrier()
    capture("step", sleep_on_rank1=0.3, collective=False)
    dist.barrier()
    capture("step")
    os.environ[nd.TIMEOUT_ENV] = "1"
    capture("slow", sleep_on_rank1=2.5)
    capture("slow")
    dist.barrier()
    capture("slow")
    dist.barrier()
    os.environ[nd.TIMEOUT_ENV] = "20"
    for i in range(4):
        time.sleep(0.5)  # the step's other work: longer than JOIN_WINDOW_S
        if rank == 1 and i == 1:
            dist.all_reduce(torch.zeros(64, 64))  # this step runs uncaptured on rank 1
        else:
            capture("skippy")
    save()
    dist.barrier()
    if rank == 1:
        os._exit(0)  # gone without a word, as a crashed rank is
    os.environ[nd.TIMEOUT_ENV] = "1"
    capture("gone", collective=False)
    capture("gone", collective=False)
    save()
    # No destroy_process_group: its peer is gone, and exiting is enough.


if __name__ == "__main__":
    main_kill() if sys.argv[2:] == ["kill"] else main()
