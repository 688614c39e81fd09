"""Whether two variants' outputs hold the same values: compare()'s output check."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_ATOL", "DEFAULT_RTOL", "outputs_agree"]

#: Tolerances for "the variants compute the same thing": loose enough for fused kernels and
#: compiled code that reassociate float32 sums, tight enough to catch a wrong formula.
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-3


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
