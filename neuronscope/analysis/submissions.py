"""The eager-versus-compiled rule on Neuron: many NEFF submissions per step.

TorchNeuron in eager mode compiles and runs about one NEFF per op (Neuron docs, "How to
profile a PyTorch workload": eager "typically produces more NEFFs"); ``torch.compile(model,
backend="neuron")`` runs a whole graph as one. The system profile shows it: a public ESM-2 650M
run made 1,050 ``nrt_model_submit`` and 1,968 ``nc_model_switch`` events per step in eager mode
against 1 and 0 compiled (124.5 ms against 15.6 ms). Submissions are counted from Neuron
Explorer's system profile where the result has one (``nrt_model_submit``,
``nc_model_switch``), else from the framework trace's operator dispatches
(``privateuse1_runtime``, one per submitted NEFF: a GUESS no document states).

It is CUDA's launch-overhead rule on another backend (:mod:`neuronscope.analysis.launch`
calls it for ``backend="neuron"``): too many small launches for the device to stay fed; the
cure is fewer, larger units of work.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any

from neuronscope.events import KIND_ANNOTATION
from neuronscope.result.hint import Hint

if TYPE_CHECKING:
    from neuronscope.analysis.context import AnalysisContext

__all__ = ["MIN_SUBMISSIONS_PER_STEP", "submission_hints"]

#: NEFF submissions per step from which the rule speaks. A compiled step submits one or a few
#: NEFFs (graph breaks add one each); an eager step about one per op. A guess between the two.
MIN_SUBMISSIONS_PER_STEP = 20
_STEP = "ProfilerStep#"
#: Share of the busiest range's dispatches an inner range must hold to be named instead.
_MOST = 0.9


def _steps(ctx: AnalysisContext) -> int:
    names = ctx.table.names
    kinds = ctx.table.kinds
    return max(1, sum(1 for n, k in zip(names, kinds) if k == KIND_ANNOTATION and n.startswith(_STEP)))


def _busiest_range(ctx: AnalysisContext) -> tuple[str | None, int]:
    """The innermost range holding nearly all the dispatches of the range holding most (at
    any depth: :data:`_MOST` of them), and how many it holds; (None, 0) where no range holds
    one. The capture's own range holds every dispatch; a user's region inside it that holds
    nearly all of them is the one to compile."""
    table = ctx.table
    by_thread: dict[int, list[int]] = {}
    for thread, start in table.dispatches:
        by_thread.setdefault(thread, []).append(start)
    for starts in by_thread.values():
        starts.sort()
    found: list[tuple[int, int, str]] = []  # (count, duration, name)
    for i, (name, kind) in enumerate(zip(table.names, table.kinds)):
        if kind != KIND_ANNOTATION or name.startswith(_STEP):
            continue
        inside = by_thread.get(table.tids[i])
        if inside:
            n = bisect.bisect_right(inside, table.ends[i]) - bisect.bisect_left(inside, table.starts[i])
            if n:
                found.append((n, table.ends[i] - table.starts[i], name))
    if not found:
        return None, 0
    most = max(f[0] for f in found)
    n, _, name = min((f for f in found if f[0] >= _MOST * most), key=lambda f: f[1])
    return name, n


def _idle_us(ctx: AnalysisContext, profile: dict[str, Any] | None) -> float:
    """What fewer submissions can win back at most: the device's idle time in the capture."""
    bd = ctx.extra.get("breakdown") or {}
    if bd.get("idle_us"):
        return float(bd["idle_us"])
    cores = (profile or {}).get("cores") or []
    return max((float(c.get("idle_us") or 0.0) for c in cores), default=0.0)


def submission_hints(ctx: AnalysisContext) -> list[Hint]:
    """One ``launch:neff_submissions`` hint where a step submits many NEFFs, else none."""
    profile = ctx.extra.get("device_profile")
    subs = (profile or {}).get("submissions") or {}
    region, in_region = _busiest_range(ctx)
    if subs.get("nrt_model_submit"):
        count, source = int(subs["nrt_model_submit"]), "nrt_model_submit events in the system profile"
    elif ctx.table.dispatches:
        count, source = len(ctx.table.dispatches), "operator dispatches in the framework trace"
    else:
        return []
    steps = _steps(ctx)
    per_step = count / steps
    if per_step < MIN_SUBMISSIONS_PER_STEP:
        return []
    switches = subs.get("nc_model_switch")
    where = f"region {region!r}" if region else "the captured code"
    saving = _idle_us(ctx, profile)
    suggestion = (
        f"{per_step:,.0f} NEFF submissions per step ({count:,} {source} over {steps} step(s)"
        + (f", {switches:,} model switches" if switches else "")
        + (f"; {in_region:,} dispatches inside {where}" if region else "")
        + f"): eager mode runs about one NEFF per op; compile {where} with "
        'torch.compile(model, backend="neuron", fullgraph=True) so each step runs as one NEFF '
        "(warm it up before capturing: the first call compiles)"
    )
    return [
        Hint(
            kind="launch",
            pattern="neff_submissions",
            ops=[],
            calls=count,
            time_us=saving,
            est_saving_us=saving,
            suggestion=suggestion,
            location=region,
            confidence="measured",
            details={
                "submissions": count,
                "per_step": per_step,
                "steps": steps,
                "model_switches": switches,
                "source": source,
                "region": region,
                "in_region": in_region,
            },
        )
    ]
