"""``compare()``: variants of one computation, side by side, timed the same way.

Four phases, each announced on the ``neuronscope`` logger before it starts:

1. **warm-up**: ``warmup`` unprofiled calls per variant, so compilation (``torch.compile``,
   Neuron's per-op builds) never lands in a measurement;
2. **timing**: unprofiled calls in interleaved, shuffled rounds (:mod:`neuronscope.timing`), the device
   synchronised before each clock read; a variant's time is its median per-call time over the
   rounds, and each speedup gets an interval (:mod:`neuronscope.stats`);
3. **profiling**: ``active`` calls per variant under the profiler, each call a labelled range
   ``label#i``, for the op table, the ops per call and the hints (the profiler's per-op cost
   would penalise a variant of many small ops, so no time in the table comes from here);
4. **export**: one run directory for the whole comparison (:mod:`neuronscope.compare_export`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

from neuronscope.announce import ensure_log_handler, log, warn_user
from neuronscope.capture import Backend, profiler_running, resolve_backend
from neuronscope.capture.observe import Observation, observe_warmup
from neuronscope.capture.timing import (
    MAX_ROUNDS,
    MIN_ROUNDS,
    MIN_SAMPLE_S,
    SAMPLES_PER_ROUND,
    Rounds,
    block_timer,
    budget_note,
    calibrate,
    calls_per_sample,
    plan_rounds,
    run_rounds,
)
from neuronscope.compare import intervals as stats
from neuronscope.compare.options import COMPARE_PROFILED, COMPARE_WARMUP, Settings, split_options
from neuronscope.compare.outputs import outputs_agree
from neuronscope.compare.range_ops import Profiled, variant_figures
from neuronscope.config import Options, build_options, disabled_by_env
from neuronscope.drive.owner import Owner
from neuronscope.drive.pipeline import now_iso
from neuronscope.drive.scope import CAPTURE, enter, leave
from neuronscope.drive.window import CallWindow
from neuronscope.errors import ConfigError, NeuronscopeError
from neuronscope.export.comparison import export_comparison
from neuronscope.result.comparison import Comparison, ComparisonRow
from neuronscope.result.hint import Hint
from neuronscope.result.types import ProfileResult
from neuronscope.units import fmt_us

__all__ = [
    "compare",
]


class _VariantOwner(Owner):
    """A variant's profiled calls: a capture like a region's, whose end compare() reports
    itself (the comparison is exported as a whole). The variants may share one call window
    (one profiler session for all: ``one_session``); each keeps its own observation."""

    announce = False
    result: ProfileResult | None = None

    def observation(self) -> Observation | None:
        return self.observed

    def on_result(self, result: ProfileResult) -> None:
        self.result = result


# ---- phases --------------------------------------------------------------------------------------
def _call_names(label: str, calls: int) -> list[str]:
    return [f"{label}#{i}" for i in range(calls)]


def _warm_up(
    label: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    calls: int,
    sync: Callable[[], None],
    where: str,
    observe: bool,
) -> tuple[Any, float, Observation | None]:
    """Run ``calls`` unprofiled calls; return the last output, the seconds taken and, with
    ``observe``, what the last one observed for the hints' exact data flow (capture.observe)."""
    log.info("neuronscope compare: %s %s: warming up (%d calls)...", where, label, calls)
    t0 = time.perf_counter()
    output: Any = None
    observed: Observation | None = None
    for i in range(calls):
        with observe_warmup(observe and i == calls - 1) as obs:
            output = fn(*args, **kwargs)
        if obs is not None and obs.profiler is not None:
            observed = obs
    sync()
    seconds = time.perf_counter() - t0
    log.info("neuronscope compare: %s %s: warm-up took %.2f s", where, label, seconds)
    return output, seconds, observed


def _time_variants(
    variants: Mapping[str, Callable[..., Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    sync: Callable[[], None],
    settings: Settings,
) -> Rounds:
    """Calibrate each variant (a few single timed calls), then run the interleaved rounds."""
    timers = {label: block_timer(fn, args, kwargs, sync, settings.timer) for label, fn in variants.items()}
    per_call = {label: calibrate(timer) for label, timer in timers.items()}
    # One sample size for all (from the median variant), so that identical variants are timed
    # identically however the calibration went; a much quicker variant gets larger samples.
    shared = calls_per_sample(statistics.median(per_call.values()))
    calls = {label: max(shared, calls_per_sample(s, MIN_SAMPLE_S / 8)) for label, s in per_call.items()}
    round_s = SAMPLES_PER_ROUND * sum(max(per_call[label], 0.0) * calls[label] for label in timers)
    if settings.rounds is not None:
        rounds, budget = settings.rounds, None
        log.info(
            "neuronscope compare: timing %s in %d interleaved rounds of unprofiled calls (about %.1f s, "
            "planned from one calibration call each)...",
            ", ".join(variants), rounds, rounds * round_s,
        )
    else:
        # The rounds run until the budget is spent, not to a count planned from the calibration:
        # calibration calls that met a busy moment would plan too few.
        rounds, budget = MAX_ROUNDS, settings.time_budget
        log.info(
            "neuronscope compare: timing %s in interleaved rounds of unprofiled calls until time_budget=%g s "
            "is spent (%d to %d rounds; about %d fit, planned from one calibration call each)...",
            ", ".join(variants), budget, MIN_ROUNDS, MAX_ROUNDS, plan_rounds(round_s, budget),
        )
    done = run_rounds(timers, calls, rounds, budget_s=budget, now=settings.timer, seed=settings.seed)
    log.info("neuronscope compare: timed %d rounds in %.1f s", done.count, done.seconds)
    return done


def _profile_variant(
    label: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: Options,
    where: str,
    observed: Observation | None = None,
    window: CallWindow | None = None,
) -> Callable[[], Profiled]:
    """``options.active`` calls of ``fn`` in one capture, each its own range ``label#i``;
    returns what makes the variant's figures once its result is in (with a ``window`` shared
    by the variants, at the last variant's end). The user's exception passes through
    unchanged (the capture is stopped first)."""
    import torch.autograd.profiler as autograd_profiler

    calls = options.active or COMPARE_PROFILED
    log.info("neuronscope compare: %s %s: profiling %d call%s for the op table and hints...", where, label, calls, "" if calls == 1 else "s")
    owner = _VariantOwner(options.with_name(label), label, getattr(fn, "__qualname__", label), window)
    owner.observed = observed
    entry = enter(owner)
    if entry.kind != CAPTURE:
        leave(entry, None)
        raise NeuronscopeError(
            "compare() could not start a capture: another capture or torch.profiler is running; "
            "call compare() outside of it"
        )
    assert entry.session is not None and entry.session.backend is not None
    backend = entry.session.backend
    names = _call_names(label, calls)
    try:
        for name in names:
            with autograd_profiler.record_function(name):
                fn(*args, **kwargs)
                backend.synchronize()
    except BaseException as exc:
        leave(entry, exc)
        raise
    done = leave(entry, None)
    if done is not None:
        owner.on_result(done)
    session = entry.session
    return lambda: variant_figures(label, names, options, owner.result, session.prof)


def _unprofiled_result(label: str, fn: Callable[..., Any], backend: Backend, times_us: list[float]) -> ProfileResult:
    return ProfileResult(
        name=label,
        backend=backend.name,
        wall_time_us=sum(times_us),
        started_at=now_iso(),
        target=getattr(fn, "__qualname__", None),
        notes=["profiler disabled: time per call only, no op table"],
    )


def _hint_text(hint: Hint, calls_us: float) -> str:
    """The row's top hint, its saving as a share of the profiled calls' time: a share, not a
    time, so that it cannot disagree with the row's time, which comes from unprofiled calls
    (the profiler's per-op cost, or a busy moment, inflates the profiled ones)."""
    if calls_us <= 0 and not hint.expects_no_saving:
        return hint.pattern
    share = min(hint.est_saving_us / calls_us, 1.0) if calls_us > 0 else 0.0
    return f"{hint.pattern} ({hint.describe_saving(f'{share:.0%} of its time')})"


def _busy_rounds_note(rounds: Rounds, backend: str) -> str | None:
    """Say how many timed samples were far from their variant's median (the machine was busy
    then); the medians and intervals are robust to them, but the user should know."""
    far = total = 0
    for values in rounds.samples_us.values():
        if values:
            mid = statistics.median(values)
            far += sum(1 for v in values if v > stats.FAR_FACTOR * mid)
            total += len(values)
    if not far:
        return None
    import torch

    threads = torch.get_num_threads()
    advice = (
        f"; torch runs {threads} threads per op here, which wait for each other when the cores are busy: "
        "torch.set_num_threads(1) steadies CPU timings"
        if backend == "cpu" and threads > 1
        else ""
    )
    return (
        f"{far} of {total} timed samples took over {stats.FAR_FACTOR:g}x their variant's median: the machine "
        f"was busy at times (each round keeps a variant's quickest sample, and the medians and intervals discount "
        f"busy rounds; a quiet machine narrows them){advice}"
    )


# ---- compare() ---------------------------------------------------------------------------------
def compare(variants: Mapping[str, Callable[..., Any]], *args: Any, **options: Any) -> Comparison:
    """Run each callable of ``{label: callable}`` on the same arguments and compare them.

    Each variant gets ``warmup`` unprofiled calls first (default 3, so ``torch.compile``
    compiles before anything is measured). Then all variants are timed, without the
    profiler, in interleaved rounds (each round three passes over the variants, each pass in a
    freshly shuffled order, a variant's quickest sample of the round kept), the device
    synchronised before each clock read: a variant's ``time_us`` is its median per-call time
    over the rounds, and each
    speedup (the median over the rounds of the first variant's time over this one's in the
    same round) comes with an interval (a seeded bootstrap, ``confidence`` 0.99) and a
    ``verdict``: ``faster``, ``slower``, or ``noise`` when the interval holds 1.0, the
    speedup is within 2 % of it, or the variants' median times point the other way (a note
    then says so). Last, ``active`` calls per variant
    (default 3) run under the profiler, for the op table, ``op_count`` (the ops the variant's
    own code dispatched per call: six for a hand-written RMSNorm, one for ``torch.rms_norm``
    or a compiled region), ``all_op_count`` (with the ops nested inside those) and the hints.

    Options: the shared ones (``name``, ``backend``, ``output_dir``, ``export``, ``warmup``,
    ``active``, ``record_shapes``, ``enabled``, ...), and ``time_budget`` (seconds for the
    timing rounds, default 10: as many rounds as fit, 20 to 100; on a machine slower than
    planned the rounds run past the budget to reach 20, but stop at three budgets with at
    least 5), ``rounds`` (a fixed number instead), ``confidence``, ``seed`` (of the
    bootstrap), ``timer`` (the clock, seconds; inject one to test), ``check_outputs``,
    ``rtol``, ``atol``. Any other keyword goes to the callables, except one that looks like
    an option's name (``activ=``) and that not every variant names as a parameter: that raises
    :class:`ConfigError`; pass such keywords as ``call_kwargs={...}``. Outputs are checked against the first variant's unless
    ``check_outputs=False``; a mismatch is warned about, noted and shown in the table. A
    variant that raises stops the comparison and its exception passes through unchanged.
    With ``enabled=False`` (or ``NEURONSCOPE_DISABLE=1``) nothing is profiled or written.

    Returns a :class:`~neuronscope.result.Comparison`; with ``export`` (the default) the whole
    comparison is one run directory that :func:`neuronscope.load` re-opens.
    """
    started = time.perf_counter()
    if not isinstance(variants, Mapping) or not variants:
        raise ConfigError("compare() needs a non-empty mapping {label: callable}, e.g. {'naive': f, 'fused': g}")
    for label, fn in variants.items():
        if not isinstance(label, str) or not label.strip():
            raise ConfigError(f"compare() labels must be non-empty strings, got {label!r}")
        if not callable(fn):
            raise ConfigError(f"compare() variant {label!r} is not callable: {fn!r:.60}")
    options, call_kwargs = split_options(variants, dict(options))
    settings = Settings.pop_from(options)
    opts = build_options({"warmup": COMPARE_WARMUP, "active": COMPARE_PROFILED, "name": "compare"}, **options)
    if not opts.enabled or disabled_by_env():  # the kill switch: no profiler, no files
        opts = build_options(None, **{**opts.to_dict(), "enabled": False, "export": False})
    if opts.enabled and profiler_running():
        raise NeuronscopeError(
            "compare() cannot run inside another capture (a neuron_region, a decorated call or "
            "torch.profiler): the profiler runs one capture at a time; call compare() outside it"
        )
    backend = resolve_backend(opts)
    ensure_log_handler()
    started_at = now_iso()
    total = len(variants)
    where = {label: f"[{i}/{total}]" for i, label in enumerate(variants, 1)}
    outputs: dict[str, Any] = {}
    warm_s: dict[str, float] = {}
    observed: dict[str, Observation | None] = {}
    for label, fn in variants.items():
        outputs[label], warm_s[label], observed[label] = _warm_up(
            label, fn, args, call_kwargs, opts.warmup, backend.synchronize, where[label], opts.enabled and opts.hints
        )
    rounds = _time_variants(variants, args, call_kwargs, backend.synchronize, settings)
    rounds_note = None if settings.rounds is not None else budget_note(rounds.count, rounds.seconds, settings.time_budget)
    capture_opts = build_options(None, **{**opts.to_dict(), "export": False, "print_summary": False})
    profiled: dict[str, Profiled] = {}
    results: dict[str, ProfileResult] = {}
    # The variants' captures in one profiler session where the options say so (CUDA: each
    # session after a process's first can return kernel records on another clock).
    window = CallWindow(0, len(variants)) if opts.enabled else None
    figures: dict[str, Callable[[], Profiled]] = {}
    try:
        for label, fn in variants.items():
            if opts.enabled:
                figures[label] = _profile_variant(label, fn, args, call_kwargs, capture_opts, where[label], observed[label], window)
            else:
                profiled[label] = Profiled(_unprofiled_result(label, fn, backend, rounds.per_call_us[label]))
            if opts.warmup == 0 and settings.check_outputs:
                outputs[label] = fn(*args, **call_kwargs)  # no warm-up output to check
    finally:
        if window is not None and window.end_shared is not None:  # a variant failed: the rest is kept
            window.end_shared()
    for label in variants:
        if label in figures:
            profiled[label] = figures[label]()
        results[label] = profiled[label].result
    rows, notes = _fill_rows(variants, rounds, profiled, outputs, settings, opts, warm_s)
    notes += [note for note in (rounds_note, _busy_rounds_note(rounds, backend.name)) if note]
    if not opts.enabled:
        notes.append("profiler disabled (enabled=False or NEURONSCOPE_DISABLE=1): times only, no op tables")
    timing = {
        "rounds": rounds.count,
        "calls_per_round": rounds.calls,
        "samples_per_round": SAMPLES_PER_ROUND,
        "timing_s": round(rounds.seconds, 3),
        "time_budget_s": settings.time_budget,
        "confidence": settings.confidence,
        "unsure_width": stats.UNSURE_WIDTH,
        "resamples": stats.DEFAULT_RESAMPLES,
        "seed": settings.seed,
        "profiled_calls": opts.active if opts.enabled else 0,
        "warmup_calls": opts.warmup,
        "per_call_us": rounds.per_call_us,
    }
    cmp = Comparison(
        name=opts.name or "compare",
        rows=rows,
        results=results,
        backend=backend.name,
        notes=notes,
        started_at=started_at,
        wall_time_us=(time.perf_counter() - started) * 1e6,
        timing=timing,
    )
    if opts.export:
        cmp = _export(cmp, {label: p.prof for label, p in profiled.items()}, opts)
    if cmp.run_dir:
        log.info(
            "neuronscope compare: %s done -> %s  (neuronscope show %s; neuronscope report %s)",
            cmp.name, cmp.run_dir, cmp.run_dir, cmp.run_dir,
        )
    else:
        log.info("neuronscope compare: %s done (kept in memory, not exported)", cmp.name)
    return cmp


def _fill_rows(
    variants: Mapping[str, Callable[..., Any]],
    rounds: Rounds,
    profiled: dict[str, Profiled],
    outputs: dict[str, Any],
    settings: Settings,
    opts: Options,
    warm_s: dict[str, float],
) -> tuple[list[ComparisonRow], list[str]]:
    """One row per variant: the median of its rounds, the speedup with its interval and
    verdict, the op counts from its profiled calls, whether its output agrees and how long
    its warm-up took; and the notes the rows need (a verdict that the medians contradict,
    outputs that differ)."""
    rows: list[ComparisonRow] = []
    notes: list[str] = []
    first = next(iter(variants))
    base = rounds.per_call_us[first]
    base_median = statistics.median(base)
    calls = opts.active or COMPARE_PROFILED
    for label in variants:
        times = rounds.per_call_us[label]
        median = statistics.median(times)
        speedup, low, high = 1.0, None, None
        verdict = "baseline" if label == first else None
        if label != first and min(base + times) > 0:
            speedup, low, high = stats.paired_speedup(base, times, settings.confidence, seed=settings.seed)
            paired = stats.verdict(low, high, speedup)
            verdict = stats.verdict(low, high, speedup, medians=(base_median, median))
            if verdict == "unsure":
                notes.append(_unsure_note(label, speedup, low, high, base + times))
            elif verdict != paired:
                won = sum((t < b) == (paired == "faster") for b, t in zip(base, times))
                notes.append(
                    f"{label!r} is not called {paired}: {speedup:.2f}x over the rounds paired, but its median "
                    f"time ({fmt_us(median)}) is not {'below' if paired == 'faster' else 'above'} that of {first!r} "
                    f"({fmt_us(base_median)}); it was {paired} in {won} of {len(times)} rounds, its "
                    "times depending on the round more than on the code"
                )
        elif label != first:  # a clock that did not move (an injected one): no ratio to take
            speedup = math.inf if median <= 0 < base_median else 1.0
        match: bool | None = None
        if settings.check_outputs:
            match, why = (True, "") if label == first else _check_outputs(outputs[first], outputs[label], settings)
            if match is None:  # the check itself failed: said, and the measurement kept
                message = f"outputs of {label!r} were not checked against {first!r}: {why}"
                notes.append(message)
                warn_user(f"neuronscope compare: {message}")
            elif not match:
                message = f"outputs of {label!r} differ from {first!r}: {why}"
                notes.append(message)
                warn_user(f"neuronscope compare: {message}")
        p = profiled[label]
        top_hint = p.result.hints[0] if p.result.hints else None
        rows.append(
            ComparisonRow(
                label=label,
                time_us=median,
                op_count=p.op_count,
                top_op=p.top_op,
                speedup=speedup,
                top_hint=_hint_text(top_hint, p.calls_us) if top_hint else None,
                spread_us=stats.half_iqr(times),
                repeats=len(times),
                outputs_match=match,
                speedup_low=low,
                speedup_high=high,
                verdict=verdict,
                calls_per_round=rounds.calls[label],
                all_op_count=p.all_op_count,
                device_time_us=p.device_us,
                profiled_calls=calls if p.prof is not None else 0,
                warmup_s=warm_s[label],
            )
        )
    return rows, notes


def _unsure_note(label: str, speedup: float, low: float, high: float, times: list[float]) -> str:
    """Why a row's verdict is ``unsure``, with the figures."""
    return (
        f"{label!r}: unsure, the machine was too busy: {speedup:.2f}x with an interval of [{low:.2f}-{high:.2f}], "
        f"ends {high / low:.1f}x apart (over {stats.UNSURE_WIDTH:g}x says nothing, whatever side of 1.0 it sits); "
        f"the timed samples ranged from {fmt_us(min(times))} to {fmt_us(max(times))}: measure again on a quieter machine"
    )


def _check_outputs(a: Any, b: Any, settings: Settings) -> tuple[bool | None, str]:
    """:func:`outputs_agree`, which never raises for the outputs' sake; anything else it meets
    (a RecursionError, a MemoryError on a huge tensor) costs the check, never the comparison."""
    try:
        return outputs_agree(a, b, settings.rtol, settings.atol)
    except Exception as err:
        return None, f"the check failed ({type(err).__name__}: {err})"


def _export(cmp: Comparison, profs: dict[str, Any], opts: Options) -> Comparison:
    """``cmp`` as exported (its ``run_dir`` set), or ``cmp`` itself, in memory only, where the
    export failed (a warning says why)."""
    summary = cmp.table() + "\n" + "\n".join(r.table() for r in cmp.results.values())
    try:
        return export_comparison(cmp, profs, opts, summary)
    except Exception as err:
        warn_user(
            f"neuronscope: could not export comparison {cmp.name!r} ({type(err).__name__}: {err}); "
            "the comparison stays in memory (run_dir=None)"
        )
        return cmp
