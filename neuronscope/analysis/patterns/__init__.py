"""The fusion patterns, one record per idiom (see :class:`~.base.Pattern`), in the order the
matchers claim ops: an attention absorbs the softmax inside it, the norms come before the
generic chain. Adding an idiom: one new module here with its record, and one line below.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from neuronscope.analysis.patterns.attention import ATTENTION
from neuronscope.analysis.patterns.base import Match, Pattern
from neuronscope.analysis.patterns.elementwise_chain import ELEMENTWISE_CHAIN
from neuronscope.analysis.patterns.gelu import GELU
from neuronscope.analysis.patterns.layer_norm import LAYER_NORM
from neuronscope.analysis.patterns.log_softmax import LOG_SOFTMAX
from neuronscope.analysis.patterns.matcher import graph_matcher
from neuronscope.analysis.patterns.replacement import builder
from neuronscope.analysis.patterns.rms_norm import RMS_NORM
from neuronscope.analysis.patterns.rotary_embedding import ROTARY_EMBEDDING
from neuronscope.analysis.patterns.silu_mul import SILU_MUL
from neuronscope.analysis.patterns.softmax import SOFTMAX
from neuronscope.capture import idioms

__all__ = ["PATTERNS", "REGISTRY", "Match", "Pattern", "pattern_named"]


def _derived(record: Pattern) -> Pattern:
    """``record`` with what its spellings give where it declares nothing else (see :class:`Pattern`)."""
    match, verify = record.match, record.verify
    if match is None and record.find is None and record.spellings:
        match = graph_matcher(record.name, record.spellings, record.params or (lambda choice, nodes: {}))
    if verify is None and record.replacement is not None:
        verify = builder(record.spellings, record.replacement)
    return dataclasses.replace(record, match=match, verify=verify)


REGISTRY: tuple[Pattern, ...] = tuple(
    map(_derived, (ATTENTION, LAYER_NORM, RMS_NORM, LOG_SOFTMAX, SOFTMAX, GELU, ROTARY_EMBEDDING, SILU_MUL, ELEMENTWISE_CHAIN))
)
for _record in REGISTRY:  # hint.verify() rebuilds an idiom from its declaration
    if _record.verify is not None:
        idioms.register(_record.name, _record.verify)
#: The contract's pattern vocabulary, in claim order.
PATTERNS: tuple[str, ...] = tuple(p.name for p in REGISTRY)
_BY_NAME = MappingProxyType({p.name: p for p in REGISTRY})


def pattern_named(name: str) -> Pattern | None:
    """The record of pattern ``name``, or None."""
    return _BY_NAME.get(name)
