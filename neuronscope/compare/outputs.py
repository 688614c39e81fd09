"""Whether two variants' outputs hold the same values: compare()'s output check.

The two outputs are walked side by side, without recursion (a 2,000-deep list is walked like
a flat one), each pair of containers once (a list holding the level below twice, 20 deep, is
20 pairs, not 2^20 leaves; a cycle ends where it closes). Leaves are compared by value with a
rule that fits their kind: integers and booleans exactly (token ids 30000 and 30029 differ,
whatever the float tolerance), floats and complex numbers within the tolerances (both parts
of a complex), arrays and frames element by element (numpy, pandas, sparse tensors made
dense). A check that cannot finish says so (``None`` and why) instead of raising.
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_ATOL", "DEFAULT_RTOL", "outputs_agree"]

#: Tolerances for "the variants compute the same thing": loose enough for fused kernels and
#: compiled code that reassociate float32 sums, tight enough to catch a wrong formula.
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-3

#: How deep the check looks into objects' attributes (a model library's cache of layers of
#: tensors is three levels down); deeper objects are compared by their type only. Containers
#: (lists, tuples, dicts) are walked at any depth.
MAX_ATTRIBUTE_DEPTH = 6

_INTEGER_KINDS = frozenset("biu")
_NUMBER_KINDS = frozenset("biufc")


def outputs_agree(a: Any, b: Any, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL) -> tuple[bool | None, str]:
    """Whether two outputs hold the same values; and why not.

    ``(True, "")`` when they do, ``(False, why)`` at the first difference (``why`` names where:
    ``output.logits``, ``output[0]``), ``(None, why)`` when the check could not be made (a value
    whose comparison raises). Tuples, lists and dicts are compared item by item, and so are the
    attributes of objects compared by identity (a model's cache object: two calls' caches are
    never ``==``, though the tensors they hold may be the same).
    """
    stack: list[tuple[str, Any, Any, int]] = [("", a, b, 0)]
    seen: set[tuple[int, int]] = set()
    keep: list[Any] = []  # the pairs in ``seen`` stay alive, so that their ids are not reused
    while stack:
        path, x, y, depth = stack.pop()
        where = f"output{path}"
        try:
            found = _step(path, x, y, depth, stack, seen, keep, rtol, atol)
        except Exception as err:  # a value that cannot be compared: say so, never raise
            return None, f"{where}: could not be compared ({type(err).__name__}: {err})"
        if found is not None:
            return found
    return True, ""


def _step(
    path: str,
    x: Any,
    y: Any,
    depth: int,
    stack: list[tuple[str, Any, Any, int]],
    seen: set[tuple[int, int]],
    keep: list[Any],
    rtol: float,
    atol: float,
) -> tuple[bool | None, str] | None:
    """Compare one pair: a leaf now, a container by pushing its items (last first, so that
    the walk goes in the output's own order)."""
    where = f"output{path}"
    container = isinstance(x, (list, tuple, Mapping)) or _compared_by_identity(x)
    if container:
        if (id(x), id(y)) in seen:
            return None  # this pair was (or is being) compared: shared or a cycle
        seen.add((id(x), id(y)))
        keep.append((x, y))
    if isinstance(x, (list, tuple)):
        if not isinstance(y, (list, tuple)):
            return False, f"{where}: {type(x).__name__} vs {type(y).__name__}"
        if len(x) != len(y):
            return False, f"different structure: {where} has {len(x)} vs {len(y)} items"
        stack.extend((f"{path}[{i}]", x[i], y[i], depth) for i in reversed(range(len(x))))
        return None
    if isinstance(x, Mapping):
        if not isinstance(y, Mapping):
            return False, f"{where}: {type(x).__name__} vs {type(y).__name__}"
        return _push_mapping(path, x, y, depth, stack)
    if container:  # an object compared by identity: its type, then its attributes
        if type(x) is not type(y):
            return False, f"{where}: {type(x).__name__} vs {type(y).__name__}"
        if depth >= MAX_ATTRIBUTE_DEPTH:
            return None
        return _push_mapping(path, vars(x), vars(y), depth + 1, stack, attributes=True)
    return _leaf(where, x, y, stack, path, depth, rtol, atol)


def _push_mapping(
    path: str, x: Mapping[Any, Any], y: Mapping[Any, Any], depth: int, stack: list[tuple[str, Any, Any, int]], attributes: bool = False
) -> tuple[bool | None, str] | None:
    keys = list(x)
    missing = next((k for k in keys if k not in y), None)
    if missing is None and len(keys) != len(y):
        missing = next(k for k in y if k not in x)
    if missing is not None:
        return False, f"different structure: output{path}{_key_path(missing, attributes)} is in one only"
    stack.extend((path + _key_path(k, attributes), x[k], y[k], depth) for k in reversed(keys))
    return None


def _key_path(key: Any, attribute: bool = False) -> str:
    """``.name`` for a key that reads as an attribute, ``[repr]`` for any other (``1`` and ``"1"``
    stay apart)."""
    return f".{key}" if attribute or (isinstance(key, str) and key.isidentifier()) else f"[{key!r}]"


def _compared_by_identity(value: Any) -> bool:
    """An object whose ``==`` is ``object``'s (identity) and that has attributes to compare."""
    return type(value).__eq__ is object.__eq__ and not isinstance(value, type) and isinstance(getattr(value, "__dict__", None), dict)


def _leaf(
    where: str, x: Any, y: Any, stack: list[tuple[str, Any, Any, int]], path: str, depth: int, rtol: float, atol: float
) -> tuple[bool | None, str] | None:
    import torch

    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            return False, f"{where}: {type(x).__name__} vs {type(y).__name__}"
        return _tensors(where, x, y, rtol, atol)
    frame = _pandas_parts(x)
    if frame is not None:
        other = _pandas_parts(y)
        if other is None or type(x) is not type(y):
            return False, f"{where}: {type(x).__name__} vs {type(y).__name__}"
        return _push_mapping(path, frame, other, depth, stack, attributes=True)
    if _array_like(x) or _array_like(y):
        import numpy as np

        xa, ya = np.asarray(x), np.asarray(y)
        if xa.dtype.kind == "O" or ya.dtype.kind == "O":  # objects inside: compared one by one
            if xa.shape != ya.shape:
                return False, f"{where}: shape {xa.shape} vs {ya.shape}"
            stack.append((path, xa.tolist(), ya.tolist(), depth))
            return None
        return _arrays(where, xa, ya, rtol, atol)
    if isinstance(x, (bool, int)) and isinstance(y, (bool, int)):
        return None if x == y else (False, f"{where}: {x!r:.40} vs {y!r:.40}")
    if isinstance(x, (int, float, complex)) and isinstance(y, (int, float, complex)):
        close = cmath.isclose(x, y, rel_tol=rtol, abs_tol=atol) or (cmath.isnan(x) and cmath.isnan(y))
        return None if close else (False, f"{where}: {x!r:.40} vs {y!r:.40}")
    same = x == y
    if not isinstance(same, bool):
        same = bool(same)  # raises for an elementwise result: the check says it could not compare
    return None if same else (False, f"{where}: {x!r:.40} vs {y!r:.40}")


def _array_like(value: Any) -> bool:
    """numpy arrays and scalars, and anything else that converts to an array (``__array__``)."""
    return hasattr(value, "__array__") and not isinstance(value, (str, bytes))


def _pandas_parts(value: Any) -> dict[str, Any] | None:
    """A pandas frame, series or index as the parts that make its value (index, columns, each
    column's values); None for anything else."""
    if type(value).__module__.split(".", 1)[0] != "pandas" or not hasattr(value, "to_numpy"):
        return None
    if hasattr(value, "columns"):  # a DataFrame: column by column, each in its own dtype
        return {
            "index": value.index.to_numpy(),
            "columns": value.columns.to_numpy(),
            "values": [value.iloc[:, i].to_numpy() for i in range(value.shape[1])],
        }
    if hasattr(value, "index"):  # a Series
        return {"index": value.index.to_numpy(), "values": value.to_numpy()}
    return {"values": value.to_numpy()}  # an Index


def _tensors(where: str, x: Any, y: Any, rtol: float, atol: float) -> tuple[bool | None, str] | None:
    import torch

    if x.shape != y.shape:
        return False, f"{where}: shape {tuple(x.shape)} vs {tuple(y.shape)}"
    x, y = x.detach(), y.detach()
    if x.layout != torch.strided:
        x = x.to_dense()
    if y.layout != torch.strided:
        y = y.to_dense()
    x, y = x.cpu(), y.cpu()
    exact = not (x.is_floating_point() or x.is_complex() or y.is_floating_point() or y.is_complex())
    if exact:  # integers and booleans: equal or not, no tolerance
        if torch.equal(x.to(torch.int64), y.to(torch.int64)):
            return None
        differ = int((x.to(torch.int64) != y.to(torch.int64)).sum())
        return False, f"{where}: {differ} of {x.numel()} integer values differ (compared exactly)"
    kind = torch.complex128 if x.is_complex() or y.is_complex() else torch.float64
    xf, yf = x.to(kind), y.to(kind)
    if torch.allclose(xf, yf, rtol=rtol, atol=atol, equal_nan=True):
        return None
    diff = (xf - yf).abs().nan_to_num(nan=math.inf).max().item()
    return False, f"{where}: max abs difference {diff:.3g} (rtol={rtol}, atol={atol})"


def _arrays(where: str, x: Any, y: Any, rtol: float, atol: float) -> tuple[bool | None, str] | None:
    import numpy as np

    if x.shape != y.shape:
        return False, f"{where}: shape {x.shape} vs {y.shape}"
    kinds = {x.dtype.kind, y.dtype.kind}
    if kinds <= _INTEGER_KINDS or not kinds <= _NUMBER_KINDS:  # exact: integers, strings, dates
        if np.array_equal(x, y):
            return None
        if kinds <= _INTEGER_KINDS:
            differ = int(np.count_nonzero(x != y))
            return False, f"{where}: {differ} of {x.size} integer values differ (compared exactly)"
        return False, f"{where}: values differ"
    kind = np.complex128 if "c" in kinds else np.float64
    xf, yf = x.astype(kind), y.astype(kind)
    if np.allclose(xf, yf, rtol=rtol, atol=atol, equal_nan=True):
        return None
    diff = np.nan_to_num(np.abs(xf - yf), nan=np.inf).max()
    return False, f"{where}: max abs difference {float(diff):.3g} (rtol={rtol}, atol={atol})"
