"""The idioms that ``hint.verify()`` rebuilds, written in PyTorch: for each, the hand-written
chain and the replacement torch offers, at the evidence of a hint (its ops, its ``details``).

They are pure PyTorch and need nothing of a capture's events or analysis, so they sit with the
capture stage's timing (:mod:`neuronscope.capture.verify` times them): a result's ``Hint``
reaches them without importing a later stage. The fusion patterns
(:mod:`neuronscope.analysis.patterns`) name them as their ``verify`` builders.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

__all__ = ["BUILDERS", "VERIFY_EPS", "Builders", "Evidence", "gelu", "layer_norm", "rms_norm", "silu_mul", "softmax"]

#: The eps of the rebuilt norms (a recorded one is not needed to time them).
VERIFY_EPS = 1e-6

#: What a builder returns: the hand-written chain, the replacement (or None) and the
#: replacement's name.
Builders = tuple[Callable[[], Any], "Callable[[], Any] | None", "str | None"]


class Evidence(Protocol):
    """What a builder reads of a hint (a :class:`~neuronscope.result.hint.Hint` is one),
    read-only."""

    @property
    def kind(self) -> str: ...
    @property
    def pattern(self) -> str: ...
    @property
    def ops(self) -> Sequence[str]: ...
    @property
    def calls(self) -> int: ...
    @property
    def est_saving_us(self) -> float: ...
    @property
    def details(self) -> Mapping[str, Any]: ...


def _affine(y: Any, w: Any, b: Any) -> Any:
    if w is not None:
        y = w * y
    if b is not None:
        y = y + b
    return y


def rms_norm(hint: Evidence, x: Any, device: Any) -> Builders:
    """RMSNorm in the spelling family captured (``norm``, ``sqrt`` or ``pow``/``rsqrt``, cast
    or not) against ``torch.rms_norm``."""
    import torch

    ops = {o.rsplit("::", 1)[-1].rstrip("_") for o in hint.ops}
    d = x.shape[-1]
    details = hint.details
    w = torch.randn(d, device=device, dtype=x.dtype) if details.get("weight", True) else None
    if details.get("weight_plus_one") and w is not None:
        w = 1 + w
    if ops & {"norm", "linalg_vector_norm"}:
        def chain() -> Any:
            y = x / (x.norm(2, dim=-1, keepdim=True) * (d**-0.5) + VERIFY_EPS)
            return y * w if w is not None else y
    elif "sqrt" in ops:
        def chain() -> Any:
            y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + VERIFY_EPS)
            return y * w if w is not None else y
    else:
        cast = "to" in ops or "_to_copy" in ops

        def chain() -> Any:
            h = x.to(torch.float32) if cast else x
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + VERIFY_EPS)
            h = h.to(x.dtype) if cast else h
            return w * h if w is not None else h

    return chain, (lambda: torch.rms_norm(x, (d,), w, VERIFY_EPS)), "torch.rms_norm"

def layer_norm(hint: Evidence, x: Any, device: Any) -> Builders:
    """LayerNorm in the spelling captured (``var_mean``, ``var``, ``std`` or written out), with
    the user's correction, against ``F.layer_norm``."""
    import torch

    F = torch.nn.functional
    ops = {o.rsplit("::", 1)[-1].rstrip("_") for o in hint.ops}
    d = x.shape[-1]
    details = hint.details
    w = torch.randn(d, device=device, dtype=x.dtype) if details.get("weight", True) else None
    b = torch.randn(d, device=device, dtype=x.dtype) if details.get("bias", False) else None
    if details.get("weight_plus_one") and w is not None:
        w = 1 + w
    # The user's own spread, timed as written: N - correction.
    correction = float(details.get("correction") or 0.0)
    if "var_mean" in ops:
        def chain() -> Any:
            var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=correction)
            return _affine((x - mean) / torch.sqrt(var + VERIFY_EPS), w, b)
    elif "var" in ops:
        def chain() -> Any:
            mean = x.mean(-1, keepdim=True)
            var = x.var(-1, keepdim=True, correction=correction)
            return _affine((x - mean) * torch.rsqrt(var + VERIFY_EPS), w, b)
    elif "std" in ops:
        def chain() -> Any:
            mean = x.mean(-1, keepdim=True)
            return _affine((x - mean) / (x.std(-1, keepdim=True, correction=correction) + VERIFY_EPS), w, b)
    else:
        def chain() -> Any:
            u = x.mean(-1, keepdim=True)
            s = (x - u).pow(2).mean(-1, keepdim=True)
            return _affine((x - u) / torch.sqrt(s + VERIFY_EPS), w, b)

    return chain, (lambda: F.layer_norm(x, (d,), w, b, VERIFY_EPS)), "torch.nn.functional.layer_norm"

def softmax(hint: Evidence, x: Any, device: Any) -> Builders:
    """Softmax written out over the recorded dim against ``torch.softmax``."""
    import torch

    dim = hint.details.get("dim")
    if not isinstance(dim, int) or not -x.dim() <= dim < x.dim():
        dim = -1  # not recorded: the last dim, the usual one

    def chain() -> Any:
        e = torch.exp(x - x.amax(dim, keepdim=True))
        return e / e.sum(dim, keepdim=True)

    return chain, (lambda: torch.softmax(x, dim)), "torch.softmax"

def gelu(hint: Evidence, x: Any, device: Any) -> Builders:
    """GELU written out (tanh or erf form) against ``F.gelu``."""
    import torch

    F = torch.nn.functional
    details = hint.details
    if details.get("approximate") == "tanh":
        def tanh_chain() -> Any:
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

        return tanh_chain, (lambda: F.gelu(x, approximate="tanh")), 'torch.nn.functional.gelu(approximate="tanh")'

    def chain() -> Any:
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))

    return chain, (lambda: F.gelu(x)), "torch.nn.functional.gelu"

def silu_mul(hint: Evidence, x: Any, device: Any) -> Builders:
    """The GLU product (SiLU, sigmoid or GELU gate): no eager replacement, ``torch.compile``
    is its fix."""
    import torch

    F = torch.nn.functional
    ops = {o.rsplit("::", 1)[-1].rstrip("_") for o in hint.ops}
    up = torch.randn_like(x)
    if "sigmoid" in ops:
        def chain() -> Any:
            return x * torch.sigmoid(x) * up
    elif "gelu" in ops:
        def chain() -> Any:
            return F.gelu(x) * up
    else:
        def chain() -> Any:
            return F.silu(x) * up

    return chain, None, None  # torch has no eager fused SwiGLU: torch.compile is the fix


#: The builder of each pattern ``hint.verify()`` can rebuild, by pattern name.
BUILDERS: Mapping[str, Callable[[Evidence, Any, Any], Builders]] = types.MappingProxyType(
    {"rms_norm": rms_norm, "layer_norm": layer_norm, "softmax": softmax, "gelu": gelu, "silu_mul": silu_mul}
)
