"""Measure what a fusion hint promises: what ``hint.verify()`` times.

:func:`measure` rebuilds the idiom of a ``fusion`` hint (:mod:`neuronscope.capture.idioms`) at the recorded shape and dtype, on
the capture's device, and times three forms of it outside any profiler:

- the hand-written chain, in a canonical spelling of the same family as the one captured
  (``pow``/``rsqrt`` or ``sqrt``/``div`` RMSNorm, BERT-style or ``var``-based LayerNorm...);
- the replacement the hint suggests (``torch.rms_norm``, ``F.layer_norm``, ``torch.softmax``,
  ``F.gelu``), where torch has one;
- ``torch.compile`` of the chain.

The variants run interleaved, in rounds, so that a load spike on a shared machine hits every
variant of a round alike; within a round each variant's time is the fastest of a few short
blocks (a block that another process interrupted is not the variant's cost), and rounds that
still disagree widely are followed by as many again. Each reported time is the median over
rounds; the saving per call is the median over rounds of (chain - replacement) in the same
round, for the better of the two replacements, times the hint's ``calls``.

:func:`measure` returns those measurements (a :class:`Verification`) and changes nothing;
``hint.verify()`` (:meth:`neuronscope.result.hint.Hint.verify`) returns a new hint carrying
them. It reads the hint through :class:`~neuronscope.capture.idioms.Evidence`, so this module
never imports the result stage that calls it. Rounds that disagree
widely get a note in :attr:`Verification.notes`. Verification runs at the thread count
torch has now, like the capture did.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from neuronscope.capture import torch_private
from neuronscope.capture.idioms import BUILDERS, Evidence
from neuronscope.capture.timing import block_timer, calibrate, run_rounds
from neuronscope.errors import NeuronscopeError
from neuronscope.units import shorten

__all__ = [
    "Verification",
    "floating_dtype",
    "measure",
    "paired_difference",
    "paired_saving_ns",
    "time_variants",
]



def __getattr__(name: str) -> Any:
    """``VERIFIABLE_PATTERNS``: the patterns :func:`measure` can rebuild (those whose
    declaration registered a builder; attention, rotary and elementwise chains have too many
    shapes and spellings to rebuild from a hint's evidence)."""
    if name == "VERIFIABLE_PATTERNS":
        return tuple(BUILDERS)
    raise AttributeError(name)

#: Rounds of the interleaved timing; the median of an odd count is one real measurement.
DEFAULT_REPEATS = 9
#: Least duration of one timed block: long enough that timer resolution and the Python loop
#: are noise, short enough that nine rounds of three variants take well under a second for
#: the shapes hints carry.
MIN_BLOCK_S = 0.002
#: Blocks per variant and round, the fastest kept: on a shared machine a block is often slowed
#: by another process (2-5x between runs of one verify with one block a round), rarely all three.
BEST_OF = 3
#: Fastest over slowest round of a variant (after :data:`BEST_OF`) beyond which the rounds
#: disagree and as many rounds again are timed, once.
MORE_ROUNDS_SPREAD = 1.5
#: Untimed calls of each variant first (allocator, caches, lazy initialisation).
WARMUP_CALLS = 3
#: Share of rounds in which the fused form must be slower for a loss to count as measured
#: (beyond the noise): one slow round of the chain or of the replacement does not decide it.
SLOWER_SHARE = 0.75
#: Slowest over fastest round of one variant beyond which the rounds disagree widely: the
#: machine was busy, and the Verification says so.
WIDE_SPREAD = 3.0



@dataclass
class Verification:
    """What :func:`measure` measured, per call unless named otherwise (microseconds)."""

    pattern: str
    device: str
    shape: list[int]
    dtype: str
    calls: int
    chain_us: float
    replacement: str | None
    replacement_us: float | None
    compiled_us: float | None
    compile_error: str | None
    saving_per_call_us: float
    verified_saving_us: float
    est_saving_us: float
    #: the fused form was slower in at least :data:`SLOWER_SHARE` of the rounds: a loss
    #: beyond the noise, and the hint now says to keep the code as it is
    slower: bool = False
    #: what the user should know about the measurement (rounds that disagree widely)
    notes: list[str] = field(default_factory=list)

    @property
    def best_us(self) -> float:
        """The faster of the replacement and the compiled chain."""
        times = [t for t in (self.replacement_us, self.compiled_us) if t is not None]
        return min(times) if times else self.chain_us

    @property
    def estimate_ratio(self) -> float | None:
        """The hint's estimate over the verified saving (1.0: the estimate was exact)."""
        if self.verified_saving_us <= 0:
            return None
        return self.est_saving_us / self.verified_saving_us

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _torch() -> Any:
    import torch

    return torch


def _device(hint: Evidence, device: str | None) -> Any:
    torch = _torch()
    name = device or str(hint.details.get("device") or "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NeuronscopeError(
            f"this hint was captured on {name!r}, which is not available here; pass device='cpu' "
            f"to verify on the CPU instead"
        )
    if name.startswith("neuron"):
        try:
            import torch_neuronx  # noqa: F401
        except ImportError as exc:
            raise NeuronscopeError(
                "verifying a Neuron hint needs torch-neuronx; install it from the Neuron repository "
                "or pass device='cpu'"
            ) from exc
    try:
        dev = torch.device(name)
        torch.empty(0, device=dev)  # a device this torch has no backend for (an MTIA hint here)
    except (RuntimeError, ValueError, AssertionError) as exc:  # torch's "not compiled with X" is an AssertionError
        raise NeuronscopeError(
            f"this hint was captured on {name!r}, which this torch cannot run ({type(exc).__name__}); "
            "pass device='cpu' to verify on the CPU instead"
        ) from None
    return dev


def _sync(device: Any) -> Callable[[], None]:
    torch = _torch()
    mod = getattr(torch, device.type, None)
    fn = getattr(mod, "synchronize", None) if device.type != "cpu" else None
    return fn if callable(fn) else (lambda: None)


def time_variants(
    variants: dict[str, Callable[[], Any]],
    sync: Callable[[], None],
    repeats: int = DEFAULT_REPEATS,
    min_block_s: float = MIN_BLOCK_S,
    best_of: int = BEST_OF,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Microseconds per call of each variant, one sample per round, the variants interleaved
    within each round as :func:`~neuronscope.timing.run_rounds` runs them (compare() times
    the same way): a sample is the fastest of ``best_of`` blocks of at least ``min_block_s``;
    where a variant's rounds still spread beyond :data:`MORE_ROUNDS_SPREAD`, ``repeats`` more
    rounds are timed. ``clock`` (seconds) is injectable for tests."""
    timers = {name: block_timer(fn, (), {}, sync, clock) for name, fn in variants.items()}
    calls: dict[str, int] = {}
    for name, fn in variants.items():
        for _ in range(WARMUP_CALLS):
            fn()
        calls[name] = max(1, math.ceil(min_block_s / max(calibrate(timers[name]), 1e-7)))
    samples = run_rounds(timers, calls, repeats, samples=best_of).per_call_us
    if any(max(v) > MORE_ROUNDS_SPREAD * min(v) for v in samples.values()):
        more = run_rounds(timers, calls, repeats, samples=best_of, seed=1).per_call_us
        for name, values in more.items():
            samples[name].extend(values)
    return samples


def paired_difference(first: list[float], other: list[float]) -> float:
    """Median over rounds of ``first``'s time less ``other``'s in the same round (samples of
    :func:`time_variants`): a load spike that slows one round slows both, and cancels."""
    return statistics.median(c - o for c, o in zip(first, other))


def paired_saving_ns(slow: Callable[[], Any], fast: Callable[[], Any], repeats: int) -> float:
    """What ``fast`` saves per call against ``slow`` on the CPU, in ns (negative: it is
    slower): :func:`time_variants` in blocks of a millisecond, :func:`paired_difference`."""
    times = time_variants({"slow": slow, "fast": fast}, lambda: None, repeats, 0.001)
    return paired_difference(times["slow"], times["fast"]) * 1e3


def floating_dtype(name: Any) -> Any:
    """The torch floating-point dtype named ``name`` ("bfloat16"), else float32 (a name torch
    does not know, an integer dtype, none at all)."""
    torch = _torch()
    dtype = getattr(torch, str(name or "float32"), None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32


def measure(
    hint: Evidence,
    *,
    device: str | None = None,
    compile: bool = True,
    repeats: int = DEFAULT_REPEATS,
    min_block_s: float = MIN_BLOCK_S,
    seed: int = 0,
) -> Verification:
    """Time the hand-written idiom of ``hint`` against its replacement and ``torch.compile``.

    ``device`` overrides the capture's device (``"cpu"`` to check a CUDA hint on a laptop);
    ``compile=False`` skips ``torch.compile`` (which costs seconds the first time);
    ``repeats`` rounds of interleaved timing, each block at least ``min_block_s`` long.
    Returns the measurements; ``hint`` is not changed (``hint.verify()`` applies them).
    Raises :class:`~neuronscope.errors.NeuronscopeError` for patterns it cannot rebuild
    (see :data:`VERIFIABLE_PATTERNS`) and for a hint without a recorded shape.
    """
    torch = _torch()
    if hint.kind != "fusion":
        raise NeuronscopeError(f"only fusion hints can be verified; this one is {hint.kind!r}")
    if hint.pattern not in BUILDERS:
        raise NeuronscopeError(
            f"verification is not available for pattern {hint.pattern!r}; it is for "
            f"{', '.join(BUILDERS)}"
        )
    shape = hint.details.get("shape")
    if not shape:
        raise NeuronscopeError(
            "this hint has no recorded input shape (the capture ran without record_shapes=True); "
            "capture again with record_shapes=True to verify it"
        )
    # A result.json edited or from elsewhere: a shape of other than sizes would fail in torch's
    # own words, and one too big for this machine is said as such.
    if not (isinstance(shape, (list, tuple)) and all(type(n) is int and n >= 0 for n in shape)):
        raise NeuronscopeError(f"this hint's input shape, {shorten(repr(shape))}, is no list of sizes; capture again to verify it")
    dev = _device(hint, device)
    dtype = floating_dtype(hint.details.get("dtype"))
    gen = torch.Generator(device="cpu").manual_seed(seed)
    try:
        x = torch.randn(*shape, generator=gen, dtype=torch.float32).to(device=dev, dtype=dtype)
    except (RuntimeError, MemoryError) as exc:
        raise NeuronscopeError(
            f"this hint's input of shape {shorten(repr(list(shape)))} cannot be built here ({shorten(str(exc))}); verify it on the machine it was captured on"
        ) from None

    # The user's random stream is theirs: the builders' weights draw from a forked one.
    with torch.no_grad(), torch.random.fork_rng(devices=[dev.index or 0] if dev.type == "cuda" else []):
        chain, replacement, replacement_name = BUILDERS[hint.pattern](hint, x, dev)
        variants: dict[str, Callable[[], Any]] = {"chain": chain}
        if replacement is not None:
            variants["replacement"] = replacement
        compile_error: str | None = None
        if compile:
            try:
                compiled = torch_private.own_compile(chain, dynamic=False)  # no use by the user's program
                compiled()  # compile now, outside the timing
                variants["compiled"] = compiled
            except Exception as exc:
                compile_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if len(variants) == 1:
            why = f"torch.compile failed ({compile_error})" if compile else "compile=False left torch.compile out"
            raise NeuronscopeError(
                f"nothing to compare the {hint.pattern} chain with: {why}, and torch has no eager replacement for it"
            )
        samples = time_variants(variants, _sync(dev), repeats, min_block_s)

    times = {name: statistics.median(v) for name, v in samples.items()}
    best = max((name for name in samples if name != "chain"), key=lambda name: paired_difference(samples["chain"], samples[name]))
    per_call = paired_difference(samples["chain"], samples[best])
    losses = sum(1 for c, o in zip(samples["chain"], samples[best]) if c < o)
    slower = per_call < 0 and losses >= SLOWER_SHARE * len(samples[best])
    result = Verification(
        pattern=hint.pattern,
        device=str(dev),
        shape=list(shape),
        dtype=str(dtype).rsplit(".", 1)[-1],
        calls=hint.calls,
        chain_us=times["chain"],
        replacement=replacement_name,
        replacement_us=times.get("replacement"),
        compiled_us=times.get("compiled"),
        compile_error=compile_error,
        saving_per_call_us=per_call,
        verified_saving_us=per_call * hint.calls,
        est_saving_us=hint.est_saving_us,
        slower=slower,
        notes=_spread_notes(samples, dev),
    )
    return result


def _spread_notes(samples: dict[str, list[float]], device: Any) -> list[str]:
    """A note where one variant's rounds disagree widely (slowest over fastest beyond
    :data:`WIDE_SPREAD`): the medians are robust to a few busy rounds, but not to a machine
    busy all along."""
    wide = {name: (min(v), max(v)) for name, v in samples.items() if v and max(v) > WIDE_SPREAD * max(min(v), 1e-9)}
    if not wide:
        return []
    ranges = ", ".join(f"{name} {lo:.1f}-{hi:.1f} us" for name, (lo, hi) in wide.items())
    note = f"the rounds disagree widely ({ranges} per call): the machine was busy, so these numbers are rough"
    threads = _torch().get_num_threads()
    if device.type == "cpu" and threads > 1:
        note += f"; torch runs {threads} threads per op here: torch.set_num_threads(1) steadies CPU timings"
    return [note]
