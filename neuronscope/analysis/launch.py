"""The launch-overhead rule: the device sat idle waiting for the host to launch short kernels.

Reads the step breakdown (:mod:`neuronscope.events.timeline`): where the host not launching
kernels explains a large part of the device's idle time (its lateness before a copy from the
host does not count: it was making the data), and many kernels ran shorter than the runtime
call that launched them, the step is launch-bound; the cure is fewer, larger kernels
(fusion, ``torch.compile``) or launching the whole step at once (CUDA graphs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neuronscope.analysis.submissions import submission_hints
from neuronscope.events.timeline import step_breakdown
from neuronscope.result.hint import Hint

if TYPE_CHECKING:
    from neuronscope.analysis.context import AnalysisContext

__all__ = ["MIN_HOST_IDLE_SHARE", "MIN_SHORT_SHARE", "launch_hints"]

#: Share of the device window idle because the host had not launched the next work, from which
#: the rule speaks: below it, launch overhead is not what holds the step back.
MIN_HOST_IDLE_SHARE = 0.2
#: Share of the linked kernels that ran shorter than their launch call: the kernels are too
#: small for the host to keep the device fed.
MIN_SHORT_SHARE = 0.3
#: Fewest linked kernels for a statistic worth stating.
MIN_KERNELS = 50


def launch_hints(ctx: AnalysisContext) -> list[Hint]:
    """One ``launch:launch_overhead`` hint where launch overhead dominates, else none; on
    Neuron, first the eager-versus-compiled form of the same finding, NEFF submissions per
    step (:mod:`neuronscope.analysis.submissions`), which gives the same cure."""
    if ctx.backend == "neuron":
        found = submission_hints(ctx)
        if found:
            return found
    # The pipeline's breakdown, None where it made none on purpose (a counter-mode trace's
    # kernels are replays: their timeline says nothing of launches).
    bd: dict[str, Any] | None = ctx.extra["breakdown"] if "breakdown" in ctx.extra else step_breakdown(ctx.table)
    if not bd or not bd.get("window_us"):
        return []
    la = bd.get("launch") or {}
    # The host's lateness before kernels only: before a copy from the host it was making the
    # data (no launch to save). Older results have the whole of it.
    window, host = float(bd["window_us"]), float(la.get("idle_host_before_kernels_us", bd["idle_host_us"]))
    linked, short = int(la.get("linked") or 0), int(la.get("shorter_than_launch") or 0)
    if linked < MIN_KERNELS or host < MIN_HOST_IDLE_SHARE * window or short < MIN_SHORT_SHARE * linked:
        return []
    if ctx.backend == "neuron":
        cure = "compile larger graphs (torch.compile, fewer graph breaks) so each launch does more work"
    else:
        cure = (
            "fuse small ops (torch.compile), or launch the step as one CUDA graph "
            "(torch.compile(mode='reduce-overhead'), torch.cuda.graphs)"
        )
    return [
        Hint(
            kind="launch",
            pattern="launch_overhead",
            ops=[],
            calls=linked,
            time_us=host,
            # What the host's lateness cost: the most that fewer, larger launches can win back.
            est_saving_us=host,
            suggestion=(
                f"the device waited {100 * host / window:.0f}% of the time for the host to launch kernels, and "
                f"{short:,} of {linked:,} kernels ran shorter than their launch call "
                f"(median kernel {la['median_kernel_us']:.1f} us, launch {la['median_launch_us']:.1f} us): {cure}"
            ),
            confidence="measured",
            details={"window_us": window, "idle_host_us": host, "kernels": linked, "shorter_than_launch": short},
        )
    ]
