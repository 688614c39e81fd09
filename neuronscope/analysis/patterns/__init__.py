"""The fusion patterns, one record per idiom (see :class:`~.base.Pattern`), in the order the
matchers claim ops: an attention absorbs the softmax inside it, the norms come before the
generic chain. Adding an idiom: one new module here with its record, and one line below.
"""

from __future__ import annotations

from types import MappingProxyType

from .attention import ATTENTION
from .base import Match, Pattern
from .elementwise_chain import ELEMENTWISE_CHAIN
from .gelu import GELU
from .layer_norm import LAYER_NORM
from .rms_norm import RMS_NORM
from .rotary_embedding import ROTARY_EMBEDDING
from .silu_mul import SILU_MUL
from .softmax import SOFTMAX

__all__ = ["PATTERNS", "REGISTRY", "Match", "Pattern", "pattern_named"]

REGISTRY: tuple[Pattern, ...] = (
    ATTENTION,
    LAYER_NORM,
    RMS_NORM,
    SOFTMAX,
    GELU,
    ROTARY_EMBEDDING,
    SILU_MUL,
    ELEMENTWISE_CHAIN,
)
#: The contract's pattern vocabulary, in claim order.
PATTERNS: tuple[str, ...] = tuple(p.name for p in REGISTRY)
_BY_NAME = MappingProxyType({p.name: p for p in REGISTRY})


def pattern_named(name: str) -> Pattern | None:
    """The record of pattern ``name``, or None."""
    return _BY_NAME.get(name)
