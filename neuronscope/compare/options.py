"""compare()'s options: its defaults, which keywords configure the comparison and which go to
the variants (:func:`split_options`), and its own options validated (:class:`Settings`)."""

from __future__ import annotations

import difflib
import inspect
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from neuronscope.capture.timing import DEFAULT_TIME_BUDGET_S
from neuronscope.compare import intervals as stats
from neuronscope.compare.outputs import DEFAULT_ATOL, DEFAULT_RTOL
from neuronscope.config import Options
from neuronscope.errors import ConfigError

__all__ = [
    "COMPARE_PROFILED",
    "COMPARE_WARMUP",
    "OPTION_NAMES",
    "Settings",
    "split_options",
]


#: Warm-up calls per variant: enough for torch.compile's first compile and a recompile for
#: a guard that fails on the second call, and for Neuron's per-op NEFF builds.
COMPARE_WARMUP = 3
#: Profiled calls per variant (the ``active`` option): the op counts are their median, so one
#: call that the scheduler interrupted does not change them.
COMPARE_PROFILED = 3
#: Options only compare() takes (the shared ones are :class:`~neuronscope.config.Options`).
COMPARE_ONLY = frozenset(
    {"check_outputs", "rtol", "atol", "call_kwargs", "rounds", "time_budget", "confidence", "seed", "timer"}
)
#: Every keyword compare() reads itself; any other keyword goes to the variants.
OPTION_NAMES = frozenset(Options.__dataclass_fields__) | COMPARE_ONLY


def _takes_keyword(fn: Callable[..., Any], key: str) -> bool:
    """Whether ``fn`` names ``key`` as a parameter (``**kwargs`` does not count: it would take
    a mistyped option too)."""
    try:
        param = inspect.signature(fn).parameters.get(key)
    except (TypeError, ValueError):  # builtins and C functions without a signature
        return False
    return param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)


def split_options(
    variants: Mapping[str, Callable[..., Any]], options: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(compare's options, keyword arguments for the variants).

    The rule: a keyword that is an option name configures the comparison. Any other keyword
    goes to the variants, unless it looks like an option's name (``check_output=``,
    ``activ=``) and not every variant names it as a parameter: that is taken for a typo and
    raises :class:`ConfigError` suggesting the option. ``call_kwargs={...}`` passes keywords
    to the variants whatever their names (one that clashes with an option, or a near miss).
    """
    call_kwargs = options.pop("call_kwargs", None) or {}
    if not isinstance(call_kwargs, Mapping):
        raise ConfigError(f"call_kwargs must be a dict of keyword arguments for the variants, got {call_kwargs!r:.60}")
    passed = dict(call_kwargs)
    for key in [k for k in options if k not in OPTION_NAMES]:
        close = difflib.get_close_matches(key, sorted(OPTION_NAMES), n=1, cutoff=0.75)
        if close and not all(_takes_keyword(fn, key) for fn in variants.values()):
            raise ConfigError(
                f"compare() got {key}=, which is not an option: did you mean {close[0]}=? "
                f"(to pass {key}= to the variants, use call_kwargs={{{key!r}: ...}})"
            )
        passed[key] = options.pop(key)
    return options, passed


@dataclass(frozen=True)
class Settings:
    """compare()'s own options, validated."""

    check_outputs: bool = True
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    rounds: int | None = None
    time_budget: float = DEFAULT_TIME_BUDGET_S
    confidence: float = stats.DEFAULT_CONFIDENCE
    seed: int = 0
    timer: Callable[[], float] = time.perf_counter

    @classmethod
    def pop_from(cls, options: dict[str, Any]) -> Settings:
        given = {k: options.pop(k) for k in list(options) if k in COMPARE_ONLY}
        s = cls(**given)
        if not isinstance(s.check_outputs, bool):
            raise ConfigError(f"check_outputs must be True or False, got {s.check_outputs!r}")
        for key in ("rtol", "atol", "time_budget", "confidence"):
            value = getattr(s, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"{key} must be a non-negative number, got {value!r}")
        if s.rounds is not None and (isinstance(s.rounds, bool) or not isinstance(s.rounds, int) or s.rounds < 2):
            raise ConfigError(f"rounds must be an int of at least 2 (or None: as many as fit in time_budget), got {s.rounds!r}")
        if not 0 < s.confidence < 1:
            raise ConfigError(f"confidence must be between 0 and 1 (e.g. 0.99), got {s.confidence!r}")
        if isinstance(s.seed, bool) or not isinstance(s.seed, int):
            raise ConfigError(f"seed must be an int, got {s.seed!r}")
        if not callable(s.timer):
            raise ConfigError(f"timer must be a callable returning seconds (like time.perf_counter), got {s.timer!r:.60}")
        return s
