"""What a fusion would stop materialising: the intermediate tensors of a matched idiom.

Each op of an occurrence that hands its output only to later ops of the same occurrence
(RMSNorm's ``x.pow(2)`` and its ``mean``, the ``+ eps`` and the ``rsqrt``) allocates a tensor
the fused form never writes. Its size comes from the tensor as its reader received it (the
shapes the capture recorded, or the observed call's): bytes = elements x element size. An
output also read outside the occurrence (a residual) is still needed, and left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from neuronscope.analysis.opgraph import OpNode, TensorArg

__all__ = ["ITEMSIZE", "MAX_LISTED", "intermediates", "nbytes"]

#: Intermediates a hint lists by name (its total counts them all): a generic chain of
#: thousands of ops would otherwise fill ``result.json`` with them.
MAX_LISTED = 16

#: Bytes per element by torch's dtype names, as the op graph holds them (a trace's tensors
#: have none: 4 bytes, a float32's, is assumed).
ITEMSIZE = MappingProxyType({
    "float64": 8, "int64": 8, "complex64": 8, "float32": 4, "int32": 4,
    "float16": 2, "bfloat16": 2, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
})


def nbytes(t: TensorArg) -> int:
    """The size of tensor ``t`` in bytes."""
    return t.numel * ITEMSIZE.get(t.dtype, 4)


def intermediates(nodes: Sequence[OpNode]) -> list[dict[str, Any]]:
    """The tensors one occurrence (``nodes``, linked) makes and uses only inside itself:
    ``{"op", "shape", "dtype", "bytes"}`` in the order made. Empty without links or shapes."""
    inside = {n.index for n in nodes}
    by_index = {n.index: n for n in nodes}
    seen: set[tuple[int, int]] = set()
    out = []
    for n in nodes:
        for t, p in zip(n.inputs, n.producers):
            if p not in inside or (p, t.key) in seen or not t.sizes:
                continue
            maker = by_index[p]
            if any(c not in inside for c in maker.consumers):
                continue  # read outside the idiom too: the fused form still writes it
            seen.add((p, t.key))
            out.append({"op": maker.name, "shape": list(t.sizes), "dtype": t.dtype, "bytes": nbytes(t)})
    return out
