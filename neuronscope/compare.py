"""``compare()``: variants of one computation, side by side, measured the same way.

Each variant is warmed up (so compilation never lands in the measurement), then captured once
around ``active`` repeated calls, each call a labelled range (``label#i``), so the per-repeat
times give the median and the spread. The rows read like the motivating study: variant, time
(device time where there is one), ops per call, costliest op, speedup against the first
variant, and the top hint.
"""

from __future__ import annotations

import contextlib
import difflib
import gzip
import json
import logging
import math
import shutil
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from . import export as _export
from .capture import Backend, resolve_backend
from .capture.observe import observe_warmup
from .config import Options, build_options, disabled_by_env
from .errors import ConfigError, NeuronscopeError
from .events import KIND_ANNOTATION, EventTable, table_from_profiler
from .pipeline import now_iso
from .region import (
    _ensure_log_handler,
    _torch_profiler_running,
    current_capture,
    enter,
    leave,
    warn_user,
)
from .result import Comparison, ComparisonRow, Hint, ProfileResult, _fmt_us

__all__ = [
    "COMPARE_REPEATS",
    "COMPARE_WARMUP",
    "NOT_WORK_OPS",
    "adopt_session_files",
    "compare",
    "outputs_agree",
    "top_level_ops",
]

log = logging.getLogger("neuronscope")

#: Warm-up calls per variant: enough for torch.compile's first compile and a recompile for
#: a guard that fails on the second call, and for Neuron's per-op NEFF builds.
COMPARE_WARMUP = 3
#: Repeats captured per variant: the median is robust to one outlier and the spread visible.
COMPARE_REPEATS = 5
#: Tolerances for "the variants compute the same thing": loose enough for fused kernels and
#: compiled code that reassociate float32 sums, tight enough to catch a wrong formula.
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-3
#: Top-level events that are bookkeeping, not work: Dynamo checks its cache before every call
#: of a compiled function. Left in, every compiled variant would count one op too many.
NOT_WORK_OPS = frozenset({"TorchDynamo Cache Lookup"})

_COMPARE_ONLY = {"check_outputs", "rtol", "atol", "call_kwargs"}


# ---- outputs ---------------------------------------------------------------------------------
def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _flatten(item)]
    if isinstance(value, Mapping):
        return [leaf for key in sorted(value, key=str) for leaf in _flatten(value[key])]
    return [value]


def _leaves_equal(x: Any, y: Any, rtol: float, atol: float) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        try:
            return math.isclose(float(x), float(y), rel_tol=rtol, abs_tol=atol) or (
                math.isnan(float(x)) and math.isnan(float(y))
            )
        except (TypeError, ValueError):
            return False
    try:
        return bool(x == y)
    except Exception:  # arrays and other objects whose == is not a bool
        return repr(x) == repr(y)


def outputs_agree(a: Any, b: Any, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL) -> tuple[bool, str]:
    """Whether two outputs hold the same values (tensors within tolerance); and why not.

    Tuples, lists and dicts are compared leaf by leaf; tensors with ``torch.allclose`` after
    moving them to the CPU in float32, so a bfloat16 variant can be checked against a float32 one.
    """
    import torch

    left, right = _flatten(a), _flatten(b)
    if len(left) != len(right):
        return False, f"different structure ({len(left)} vs {len(right)} leaves)"
    for i, (x, y) in enumerate(zip(left, right)):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape:
                return False, f"output {i}: shape {tuple(x.shape)} vs {tuple(y.shape)}"
            xf, yf = x.detach().float().cpu(), y.detach().float().cpu()
            if not torch.allclose(xf, yf, rtol=rtol, atol=atol, equal_nan=True):
                diff = (xf - yf).abs().nan_to_num(nan=math.inf).max().item()
                return False, f"output {i}: max abs difference {diff:.3g} (rtol={rtol}, atol={atol})"
        elif isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            return False, f"output {i}: {type(x).__name__} vs {type(y).__name__}"
        elif not _leaves_equal(x, y, rtol, atol):
            return False, f"output {i}: {x!r:.40} vs {y!r:.40}"
    return True, ""


# ---- measuring one variant ---------------------------------------------------------------------
@contextlib.contextmanager
def _without_capture_line() -> Iterator[None]:
    """Hide the one line every capture logs ("... kept in memory, not exported"): inside
    compare() it would be wrong (the comparison is exported as a whole afterwards) and it
    would drown the progress lines. Warnings still pass."""
    old = log.level
    log.setLevel(max(logging.WARNING, old))
    try:
        yield
    finally:
        log.setLevel(old)


def _repeat_names(label: str, repeats: int) -> list[str]:
    return [f"{label}#{i}" for i in range(repeats)]


def _repeat_times(result: ProfileResult, label: str, repeats: int) -> list[float]:
    """Per-repeat time from the labelled ranges: device time where there is one, else the
    inclusive wall time of the range on the CPU."""
    times = []
    for name in _repeat_names(label, repeats):
        region = result.regions.get(name)
        if region is None:
            continue
        dev = region.device_time_us
        times.append(dev if dev is not None and result.has_device_time else region.time_us)
    return times


def top_level_ops(table: EventTable, range_names: list[str]) -> dict[str, int]:
    """How many ops each named range dispatched itself: ops directly inside the range (or
    inside user annotations within it), not the ops those ops called in turn.

    For the hand-written RMSNorm that is six (pow, mean, add, rsqrt, mul, mul), for
    ``torch.rms_norm`` one, for a ``torch.compile``d function one compiled region: the count
    the motivating study compared, where a sum over ``OpStat.calls`` would also count
    ``aten::mean``'s inner ``aten::sum`` and every ``aten::to``.
    """
    wanted = set(range_names)
    counts = {name: 0 for name in range_names}
    by_thread: dict[int, list[int]] = {}
    for i in range(len(table)):
        by_thread.setdefault(table.tids[i], []).append(i)
    starts, ends, kinds, names = table.starts, table.ends, table.kinds, table.names
    for indices in by_thread.values():
        indices.sort(key=lambda i: (starts[i], -ends[i]))
        stack: list[int] = []
        for i in indices:
            while stack and ends[stack[-1]] <= starts[i]:
                stack.pop()
            if kinds[i] != KIND_ANNOTATION and names[i] not in NOT_WORK_OPS:
                for j in reversed(stack):
                    if kinds[j] != KIND_ANNOTATION:
                        break  # nested inside another op: that op is the one dispatched
                    if names[j] in wanted:
                        counts[names[j]] += 1
                        break
            stack.append(i)
    return counts


def _ops_per_call(prof: Any, result: ProfileResult, label: str, repeats: int) -> int:
    names = _repeat_names(label, repeats)
    try:
        counts = top_level_ops(table_from_profiler(prof), names)
        per_repeat = [counts[n] for n in names if n in result.regions]
    except Exception:  # reading the events again must not cost the measurement
        per_repeat = []
    if not per_repeat:
        return sum(o.calls for o in result.ops) // max(repeats, 1)
    return int(statistics.median(per_repeat))


def _run_variant(
    label: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: Options,
    backend: Backend,
    index: int,
    total: int,
) -> tuple[ProfileResult, Any, list[float], int, float, Any]:
    """Warm up, then capture ``options.active`` calls. Returns the result, the last output,
    the per-repeat times, the ops per call, the warm-up seconds and the profiler object.

    The user's exception passes through unchanged (the capture is stopped first)."""
    repeats = options.active or COMPARE_REPEATS
    log.info("neuronscope compare: [%d/%d] %s: warming up (%d calls)...", index, total, label, options.warmup)
    t0 = time.perf_counter()
    output: Any = None
    try:
        for i in range(options.warmup):
            with observe_warmup(label, options.hints and i == options.warmup - 1):  # exact links for the hints
                output = fn(*args, **kwargs)
        backend.synchronize()
    except BaseException as exc:
        log.info("neuronscope compare: [%d/%d] %s raised %s during warm-up", index, total, label, type(exc).__name__)
        _note_mistyped_option(exc, kwargs)
        raise
    warm_s = time.perf_counter() - t0
    if not options.enabled:
        times = []
        for _ in range(repeats):
            t1 = time.perf_counter_ns()
            output = fn(*args, **kwargs)
            backend.synchronize()
            times.append((time.perf_counter_ns() - t1) / 1e3)
        result = ProfileResult(name=label, backend=backend.name, wall_time_us=sum(times), started_at=now_iso())
        result.target = getattr(fn, "__qualname__", None)
        result.notes.append("profiler disabled: wall-clock time per call only, no op table")
        log.info("neuronscope compare: [%d/%d] %s: warm-up %.2f s; timed %d calls (profiler disabled)", index, total, label, warm_s, repeats)
        return result, output, times, 0, warm_s, None
    log.info("neuronscope compare: [%d/%d] %s: warm-up took %.2f s; capturing %d calls", index, total, label, warm_s, repeats)
    import torch.autograd.profiler as autograd_profiler

    entry = enter(options.with_name(label), label, getattr(fn, "__qualname__", label))
    if entry.kind != "outer":
        leave(entry, None)
        raise NeuronscopeError(
            "compare() could not start a capture: another capture or torch.profiler is running; "
            "call compare() outside of it"
        )
    try:
        for name in _repeat_names(label, repeats):
            with autograd_profiler.record_function(name):
                output = fn(*args, **kwargs)
                backend.synchronize()
    except BaseException as exc:
        with _without_capture_line():
            leave(entry, exc)
        log.info("neuronscope compare: [%d/%d] %s raised %s", index, total, label, type(exc).__name__)
        _note_mistyped_option(exc, kwargs)
        raise
    with _without_capture_line():
        captured = leave(entry, None)
    assert captured is not None and entry.session is not None and entry.session.capture is not None
    result, prof = captured, entry.session.capture.prof
    times = _repeat_times(result, label, repeats)
    ops = _ops_per_call(prof, result, label, repeats)
    if times:
        log.info(
            "neuronscope compare: [%d/%d] %s: %s per call (median of %d), %d op%s per call",
            index, total, label, _fmt_us(statistics.median(times)), len(times), ops, "" if ops == 1 else "s",
        )
    return result, output, times, ops, warm_s, prof


def _hint_text(hint: Hint, repeats: int) -> str:
    """The row's top hint, its saving per call like the row's time (a hint's saving is summed
    over every call in the capture)."""
    return f"{hint.pattern} (~{_fmt_us(hint.est_saving_us / max(repeats, 1))} per call)"


def _spread(times: list[float]) -> float | None:
    """Half the interquartile range: the ``±`` around the median. Robust, as the median is,
    to the one call that the scheduler or the profiler's first event made slow, which would
    dominate a standard deviation of five samples (torch.utils.benchmark reports the IQR too)."""
    if len(times) < 2:
        return None
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return (q3 - q1) / 2


# ---- the run directory -------------------------------------------------------------------------
def _merged_trace(traces: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """All variants on one timeline (they ran one after another in this process). Each
    variant's profiler span is renamed after it; repeated metadata events appear once."""
    merged: list[Any] = []
    seen_meta: set[str] = set()
    base: int | None = None
    extra: dict[str, Any] = {}
    for label, trace in traces.items():
        shift_us = 0.0
        this_base = trace.get("baseTimeNanoseconds")
        if isinstance(this_base, int):
            if base is None:
                base = this_base
            shift_us = (this_base - base) / 1e3
        for key in ("schemaVersion", "deviceProperties", "record_shapes"):
            if key in trace and key not in extra:
                extra[key] = trace[key]
        for ev in trace.get("traceEvents", []):
            if not isinstance(ev, dict):
                continue
            if ev.get("ph") == "M":
                key = json.dumps(ev, sort_keys=True, default=str)
                if key in seen_meta:
                    continue
                seen_meta.add(key)
            if shift_us and isinstance(ev.get("ts"), (int, float)):
                ev = {**ev, "ts": ev["ts"] + shift_us}
            if ev.get("cat") == "Trace" and str(ev.get("name", "")).startswith("PyTorch Profiler"):
                ev = {**ev, "name": f"PyTorch Profiler ({label})"}
            merged.append(ev)
    out: dict[str, Any] = {**extra, "traceEvents": merged, "displayTimeUnit": "us"}
    if base is not None:
        out["baseTimeNanoseconds"] = base
    return out


def adopt_session_files(result: ProfileResult, run_dir: Path, label: str) -> None:
    """Move a variant's Neuron session files (ntff, neff, ntrace.pb), which its unexported
    capture left in a temporary directory, into ``run_dir/neuron/<label>`` so that they belong
    to the comparison's run, and point the result's record and notes at their new place."""
    info = result.artifacts.get("neuron")
    if not isinstance(info, dict):
        return
    src_text = info.get("output_dir")
    if not isinstance(src_text, str) or not Path(src_text).is_absolute() or not Path(src_text).is_dir():
        return
    dest = run_dir / "neuron" / _export.safe_name(label)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(src_text, dest)
    info["output_dir"] = dest.relative_to(run_dir).as_posix()
    for key, value in list(info.items()):
        if isinstance(value, str) and src_text in value:
            info[key] = value.replace(src_text, str(dest))
    result.notes = [
        n.replace(src_text, str(dest)) for n in result.notes if not (n.startswith("export=False") and src_text in n)
    ]


def _export_comparison(cmp: Comparison, profs: dict[str, Any], options: Options) -> None:
    """One run directory for the whole comparison: result.json (the Comparison with each
    variant's result), summary.txt, one trace per variant and ``trace.json.gz`` holding all
    variants on one timeline."""
    run_dir = _export.new_run_dir(options.output_root, cmp.name)
    try:
        traces: dict[str, dict[str, Any]] = {}
        for label, prof in profs.items():
            cmp.results[label].run_dir = str(run_dir)
            if prof is not None:
                # Before the session files move: the Neuron backend's saved trace is among them.
                fname = f"trace_{_export.safe_name(label)}.json.gz"
                raw = run_dir / f".trace_{_export.safe_name(label)}.json"
                try:
                    _export.save_chrome_trace(prof, raw)
                    traces[label] = json.loads(raw.read_text())
                    _export.gzip_file(raw, run_dir / fname)
                finally:
                    raw.unlink(missing_ok=True)
                cmp.results[label].artifacts["trace"] = fname
            adopt_session_files(cmp.results[label], run_dir, label)
        if traces:
            payload = json.dumps(_merged_trace(traces)).encode()

            def write_trace(tmp: Path) -> None:
                with gzip.open(tmp, "wb", compresslevel=1) as fh:
                    fh.write(payload)

            _export.atomic_write_with(run_dir / "trace.json.gz", write_trace)
        summary = cmp.table() + "\n" + "\n".join(r.table() for r in cmp.results.values())
        _export.write_run(run_dir, cmp, summary)
    except Exception:
        if not (run_dir / "neuron").is_dir():  # never delete measurements moved in already
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


# ---- compare() ---------------------------------------------------------------------------------
def _note_mistyped_option(exc: BaseException, call_kwargs: dict[str, Any]) -> None:
    """A keyword that is no option goes to the callables; when one of them refuses it and it
    looks like an option's name (``bakend=``), say so on the user's exception (a note: the
    exception itself passes through unchanged)."""
    if not isinstance(exc, TypeError) or "unexpected keyword argument" not in str(exc):
        return
    known = sorted(set(Options.__dataclass_fields__) | _COMPARE_ONLY)
    for key in call_kwargs:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        if f"'{key}'" in str(exc) and close:
            note = (
                f"neuronscope: compare() passed {key}= to the variants, since it is no compare() "
                f"option; did you mean {close[0]}=?"
            )
            if hasattr(exc, "add_note"):  # Python 3.11+: shown under the traceback
                exc.add_note(note)
            else:
                log.warning("%s", note)


def _split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(neuronscope options, keyword arguments for the callables)."""
    option_names = set(Options.__dataclass_fields__) | _COMPARE_ONLY
    call_kwargs: dict[str, Any] = dict(options.pop("call_kwargs", None) or {})
    call_kwargs.update({k: options.pop(k) for k in list(options) if k not in option_names})
    return options, call_kwargs


def compare(variants: Mapping[str, Callable[..., Any]], *args: Any, **options: Any) -> Comparison:
    """Run each callable of ``{label: callable}`` on the same arguments and compare them.

    Each variant gets ``warmup`` unprofiled calls (default 3, so ``torch.compile`` compiles
    before the measurement), then one capture of ``active`` calls (default 5), each call its own
    labelled range ``label#i``. A variant's time is the median over those calls (device time
    where the backend has it, else the call's inclusive time on the CPU) and its spread half
    the interquartile range; ``op_count`` is the ops it dispatched per call (six for a
    hand-written RMSNorm, one for ``torch.rms_norm`` or a compiled region).

    Keyword arguments that are options (``name``, ``backend``, ``output_dir``, ``export``,
    ``warmup``, ``active``, ``record_shapes``, ..., plus ``check_outputs``, ``rtol``, ``atol``)
    configure the comparison; any other keyword goes to the callables (or pass them as
    ``call_kwargs={...}`` where a name clashes). Outputs are checked against the first
    variant's unless ``check_outputs=False``; a mismatch is warned about, noted in the
    comparison and shown in its table. A variant that raises stops the comparison and its
    exception passes through unchanged. With ``enabled=False`` (or ``NEURONSCOPE_DISABLE=1``)
    the variants are only timed with a wall clock, and nothing is written.

    Returns a :class:`~neuronscope.result.Comparison`; with ``export`` (the default) the whole
    comparison is one run directory that :func:`neuronscope.load` re-opens.
    """
    if not isinstance(variants, Mapping) or not variants:
        raise ConfigError("compare() needs a non-empty mapping {label: callable}, e.g. {'naive': f, 'fused': g}")
    for label, fn in variants.items():
        if not isinstance(label, str) or not label.strip():
            raise ConfigError(f"compare() labels must be non-empty strings, got {label!r}")
        if not callable(fn):
            raise ConfigError(f"compare() variant {label!r} is not callable: {fn!r:.60}")
    options, call_kwargs = _split_options(dict(options))
    check_outputs = options.pop("check_outputs", True)
    if not isinstance(check_outputs, bool):
        raise ConfigError(f"check_outputs must be True or False, got {check_outputs!r}")
    try:
        rtol = float(options.pop("rtol", DEFAULT_RTOL))
        atol = float(options.pop("atol", DEFAULT_ATOL))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"rtol and atol must be numbers: {exc}") from exc
    opts = build_options({"warmup": COMPARE_WARMUP, "active": COMPARE_REPEATS, "name": "compare"}, **options)
    if not opts.enabled or disabled_by_env():  # the kill switch: no profiler, no files
        opts = build_options(None, **{**opts.to_dict(), "enabled": False, "export": False})
    if opts.enabled and (current_capture() is not None or _torch_profiler_running()):
        raise NeuronscopeError(
            "compare() cannot run inside another capture (a neuron_region, a decorated call or "
            "torch.profiler): the profiler runs one capture at a time; call compare() outside it"
        )
    backend = resolve_backend(opts)
    _ensure_log_handler()
    cmp = Comparison(name=opts.name or "compare", backend=backend.name, started_at=now_iso())
    capture_opts = build_options(None, **{**opts.to_dict(), "export": False, "print_summary": False})
    outputs: dict[str, Any] = {}
    profs: dict[str, Any] = {}
    measured: dict[str, tuple[float, float | None, int, int, float]] = {}
    total = len(variants)
    for index, (label, fn) in enumerate(variants.items(), 1):
        result, output, times, ops, warm_s, prof = _run_variant(
            label, fn, args, call_kwargs, capture_opts, backend, index, total
        )
        cmp.results[label] = result
        outputs[label] = output
        profs[label] = prof
        median = statistics.median(times) if times else result.wall_time_us
        spread = _spread(times)
        measured[label] = (median, spread, len(times), ops, warm_s)
    if not opts.enabled:
        cmp.notes.append("profiler disabled (enabled=False or NEURONSCOPE_DISABLE=1): wall-clock times only")
    first_label = next(iter(variants))
    base_time = measured[first_label][0]
    for label in variants:
        result = cmp.results[label]
        median, spread, repeats, ops, warm_s = measured[label]
        match: bool | None = None
        if check_outputs:
            match = True
            if label != first_label:
                match, why = outputs_agree(outputs[first_label], outputs[label], rtol=rtol, atol=atol)
                if not match:
                    message = f"outputs of {label!r} differ from {first_label!r}: {why}"
                    cmp.notes.append(message)
                    warn_user(f"neuronscope compare: {message}")
        top_hint = result.hints[0] if result.hints else None
        cmp.rows.append(
            ComparisonRow(
                label=label,
                time_us=median,
                op_count=ops,
                top_op=result.top_op.name if result.top_op else None,
                speedup=(base_time / median) if median > 0 else math.inf,
                top_hint=_hint_text(top_hint, repeats) if top_hint else None,
                spread_us=spread,
                repeats=repeats,
                outputs_match=match,
                warmup_s=warm_s,
            )
        )
    if opts.export:
        try:
            _export_comparison(cmp, profs, opts)
        except Exception as err:
            cmp.run_dir = None
            for result in cmp.results.values():
                result.run_dir = None
            warn_user(
                f"neuronscope: could not export comparison {cmp.name!r} ({type(err).__name__}: {err}); "
                "the comparison stays in memory (run_dir=None)"
            )
    if cmp.run_dir:
        log.info(
            "neuronscope compare: %s done -> %s  (neuronscope show %s; neuronscope report %s)",
            cmp.name, cmp.run_dir, cmp.run_dir, cmp.run_dir,
        )
    else:
        log.info("neuronscope compare: %s done (kept in memory, not exported)", cmp.name)
    return cmp
