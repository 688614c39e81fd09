"""Threads and generators that once crashed the process (issue 36), run as a script so that a
segmentation fault fails the calling test, not the suite: ``python thread_scenarios.py NAME
ROUNDS``. Each round uses fresh regions and callables; the script prints one ``ok`` line per
round with what it checked, and exits 0 only when every round held."""

from __future__ import annotations

import asyncio
import atexit
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator

import torch

import neuronscope
from neuronscope import neuron_region, profile_on_neuron
from neuronscope.region import ensure_no_capture_running

warnings.simplefilter("ignore")
OUT = tempfile.mkdtemp(prefix="ns-threads-")
atexit.register(shutil.rmtree, OUT, ignore_errors=True)  # the runs are checked, not kept


def work() -> torch.Tensor:
    x = torch.randn(32, 32)
    return (x @ x).relu().sum()


def captures_again(tag: str) -> None:
    """The profiler is free and a capture on this thread works, exported."""
    assert ensure_no_capture_running(), "the profiler was left claimed"
    with neuron_region(f"again_{tag}", backend="cpu", output_dir=OUT) as r:
        work()
    assert r.result is not None and r.result.status == "ok" and r.result.run_dir is not None, r.result


def two_threads_decorated(i: int) -> str:
    """Two threads call a decorated function with the default options' shape (warmup=1,
    active=2) three times each: the observed warm-up call and a capture race for the profiler."""

    @profile_on_neuron(warmup=1, active=2, backend="cpu", output_dir=OUT, name=f"f{i}")
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x @ x).relu().sum()

    x = torch.randn(48, 48)
    barrier = threading.Barrier(2)

    def worker() -> None:
        barrier.wait()
        for _ in range(3):
            f(x)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    captured = len(f.results)
    assert captured + f.skipped_calls >= 2, (captured, f.skipped_calls)
    assert all(r.status == "ok" for r in f.results)
    captures_again(f"d{i}")
    return f"captured={captured} skipped={f.skipped_calls}"


def _generator(name: str, **options: object) -> Callable[[], Iterator[torch.Tensor]]:
    def gen() -> Iterator[torch.Tensor]:
        with neuron_region(name, backend="cpu", output_dir=OUT, **options):
            yield work()
            yield work()

    return gen


def _run_in_thread(fn: Callable[[], object]) -> None:
    t = threading.Thread(target=fn)
    t.start()
    t.join()


def gen_main_to_thread(i: int) -> str:
    """Started here, finished on another thread."""
    gen = _generator(f"g{i}")()
    next(gen)
    _run_in_thread(lambda: list(gen))
    captures_again(f"m{i}")
    return "held"


def gen_thread_to_main(i: int) -> str:
    """Started on a thread that then ends, finished here."""
    box: list[Iterator[torch.Tensor]] = []

    def start() -> None:
        box.append(_generator(f"h{i}")())
        next(box[0])

    _run_in_thread(start)
    list(box[0])
    captures_again(f"t{i}")
    return "held"


def gen_thread_to_thread(i: int) -> str:
    """Started on a thread that lives on, finished on a third; the first thread enters
    neuronscope again later (and stops its own session then)."""
    gen = _generator(f"k{i}")()
    started, finished, again = threading.Event(), threading.Event(), threading.Event()

    def owner() -> None:
        next(gen)
        started.set()
        finished.wait()
        with neuron_region(f"owner_again{i}", backend="cpu", export=False):
            work()
        again.set()

    a = threading.Thread(target=owner)
    a.start()
    started.wait()
    _run_in_thread(lambda: list(gen))
    finished.set()
    a.join()
    assert again.is_set()
    captures_again(f"k{i}")
    return "held"


def gen_observed_warmup(i: int) -> str:
    """The observed (last) warm-up pass of a windowed region, held across threads."""
    make = _generator(f"w{i}", warmup=1, active=1)
    gen = make()
    next(gen)
    _run_in_thread(lambda: list(gen))
    captures_again(f"w{i}")
    return "held"


def to_thread_inside_capture(i: int) -> str:
    """asyncio.to_thread copies the context: the worker sees the capture as its scope."""

    async def main() -> None:
        with neuron_region(f"async{i}", backend="cpu", output_dir=OUT) as r:

            def inner() -> None:
                with neuron_region(f"inner{i}"):
                    work()

            await asyncio.to_thread(inner)
            work()
        assert r.result is not None and r.result.status == "ok"

    asyncio.run(main())
    captures_again(f"a{i}")
    return "held"


SCENARIOS = {f.__name__: f for f in (
    two_threads_decorated, gen_main_to_thread, gen_thread_to_main, gen_thread_to_thread,
    gen_observed_warmup, to_thread_inside_capture,
)}


if __name__ == "__main__":
    name, rounds = sys.argv[1], int(sys.argv[2])
    for i in range(rounds):
        print("ok", name, i, SCENARIOS[name](i), flush=True)
    neuronscope.reset()
