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


#: How deep the check looks into objects' attributes (a model library's cache of layers of
#: tensors is three levels down); deeper objects, and an object met again inside itself (a
#: cycle), are compared by their type only.
MAX_ATTRIBUTE_DEPTH = 6
#: The suffix of the path of a leaf that stands for an object's type (not a value of the output).
TYPE_LEAF = " (type)"


def _flatten(value: Any, path: str = "", depth: int = 0, seen: frozenset[int] = frozenset()) -> list[tuple[str, Any]]:
    """The leaves of an output with where they sit (``[0]``, ``.logits``, ``.past_key_values.layers[1].keys``):
    tensors, numbers, strings..., in the output's own order. Containers are opened, and so are objects
    without an ``__eq__`` of their own (a transformers ``DynamicCache``, a dataclass with
    ``eq=False``): two such objects made by two calls are never ``==`` (identity), though the
    tensors they hold may be the same. A container or object met again inside itself, or an
    object deeper than :data:`MAX_ATTRIBUTE_DEPTH`, gives its type only."""
    opened = isinstance(value, (list, tuple, Mapping)) or _compared_by_identity(value)
    if opened and (id(value) in seen or depth >= MAX_ATTRIBUTE_DEPTH):
        return [(path + TYPE_LEAF, type(value))]
    inner = seen | {id(value)}
    if isinstance(value, (list, tuple)):
        return [leaf for i, item in enumerate(value) for leaf in _flatten(item, f"{path}[{i}]", depth, inner)]
    if isinstance(value, Mapping):
        return [leaf for key in value for leaf in _flatten(value[key], path + _key_path(key), depth, inner)]
    if opened:
        attributes = vars(value)
        kind = [(path + TYPE_LEAF, type(value))]
        return kind + [leaf for key in attributes for leaf in _flatten(attributes[key], f"{path}.{key}", depth + 1, inner)]
    return [(path, value)]


def _key_path(key: Any) -> str:
    """``.name`` for a key that reads as an attribute, ``[repr]`` for any other (``1`` and ``"1"``
    stay apart)."""
    return f".{key}" if isinstance(key, str) and key.isidentifier() else f"[{key!r}]"


def _compared_by_identity(value: Any) -> bool:
    """An object whose ``==`` is ``object``'s (identity) and that has attributes to compare."""
    return type(value).__eq__ is object.__eq__ and not isinstance(value, type) and isinstance(getattr(value, "__dict__", None), dict)


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

    Tuples, lists and dicts are compared leaf by leaf, and so are the attributes of objects
    compared by identity (a model's cache object; see :func:`_flatten`); tensors with
    ``torch.allclose`` after moving them to the CPU in float32, so a bfloat16 variant can be
    checked against a float32 one.
    """
    import torch

    left, right = _flatten(a), dict(_flatten(b))
    if len(left) != len(right) or any(path not in right for path, _ in left):
        missing = next((path for path, _ in left if path not in right), None)
        detail = f": output{missing.removesuffix(TYPE_LEAF)} is in one only" if missing else ""
        values = (sum(not p.endswith(TYPE_LEAF) for p, _ in left), sum(not p.endswith(TYPE_LEAF) for p in right))
        return False, f"different structure ({values[0]} vs {values[1]} leaves){detail}"
    for path, x in left:
        y = right[path]
        where = f"output{path}" if path else "output"
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape:
                return False, f"{where}: shape {tuple(x.shape)} vs {tuple(y.shape)}"
            xf, yf = x.detach().float().cpu(), y.detach().float().cpu()
            if not torch.allclose(xf, yf, rtol=rtol, atol=atol, equal_nan=True):
                diff = (xf - yf).abs().nan_to_num(nan=math.inf).max().item()
                return False, f"{where}: max abs difference {diff:.3g} (rtol={rtol}, atol={atol})"
        elif isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            return False, f"{where}: {type(x).__name__} vs {type(y).__name__}"
        elif not _leaves_equal(x, y, rtol, atol):
            return False, f"{where}: {x!r:.40} vs {y!r:.40}"
    return True, ""
