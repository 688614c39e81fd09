"""An op's scalar arguments as a trace records them, read into the values a live capture has.

With ``record_shapes=True`` torch's profiler keeps, for each op, the Python values of its
non-tensor arguments: a live capture's event tree has them in ``extra_fields.inputs``, and an
exported Chrome trace writes them as text in ``args["Concrete Inputs"]``, next to each
argument's kind in ``args["Input type"]``. The analysis reads them from
:attr:`~neuronscope.analysis.opgraph.OpNode.scalars` (a softmax's dim, a baddbmm's alpha, a
var's correction), so a trace's must be the live capture's, argument for argument. torch 2.13
writes (``Input type`` / ``Concrete Inputs`` -> the live value):

- ``"Scalar"`` / ``"1"``, ``"-1"``, ``"0.125"``, ``"1."``, ``"1e+30"``, ``"nan"``, ``"-inf"``,
  ``"True"``, ``"1.5-2.j"`` -> 1, -1, 0.125, 1.0, 1e30, nan, -inf, True, (1.5-2j);
- ``""`` / ``""`` (None, a string or device argument, an undefined tensor) -> None;
- ``"ScalarList"`` / ``"[2, 8]"`` -> None: the live profiler keeps no lists of numbers;
- a tensor (``"float"``, ``"c10::Half"``, ``"bool"``, ...) and ``"TensorList"`` / ``""`` ->
  nothing: the live path counts them as tensors, not scalars.

A value that cannot be one torch wrote (a garbage string, an integer past int64, a list of
another length than the types) is unknown: None in its place, or no scalars at all for the op
where the lists cannot be paired. Nothing here raises on what a file holds.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from msgspec import Raw

__all__ = ["op_scalars", "recorded_scalars", "scalar_value"]

_INT = re.compile(r"-?\d{1,19}")
#: C++'s printing of a double (``1.``, ``1.0000000000000001e-05``, ``nan``, ``-inf``); what
#: Python's ``float()`` accepts beyond it (``1_0``, spaces, ``infinity``) is no value torch wrote.
#: A double has its point or its exponent (an integer's text is an int's).
_FLOAT = re.compile(r"-?(?:\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+|\.\d+(?:e[-+]?\d+)?|nan|inf)", re.IGNORECASE)
_COMPLEX = re.compile(r"-?[\d.e+-]{1,40}[-+][\d.e+-]{0,40}j")
_INT64 = (-(2**63), 2**63 - 1)
_LONGEST = 64  # characters: a printed double is at most about 25
_STRINGS = msgspec.json.Decoder(list[str])
_UNSET = object()


def scalar_value(text: str) -> Any:
    """One ``"Scalar"`` argument's text as the live profiler's value; None where it is none
    torch writes."""
    if len(text) > _LONGEST:
        return None
    if text == "True" or text == "False":
        return text == "True"
    if _INT.fullmatch(text):
        value = int(text)
        return value if _INT64[0] <= value <= _INT64[1] else None
    if _FLOAT.fullmatch(text):
        return float(text)
    if _COMPLEX.fullmatch(text):
        try:
            return complex(text)
        except ValueError:
            return None
    return None


def op_scalars(types: Any, concrete: Any) -> tuple[Any, ...] | None:
    """An op's scalar arguments, in order, from its ``Input type`` and ``Concrete Inputs``
    lists (see the module's text); None where they are no two lists of strings of one length
    (then the tensors cannot be told from the None arguments)."""
    if types.__class__ is not list or concrete.__class__ is not list or len(types) != len(concrete):
        return None
    out: list[Any] = []
    for kind, text in zip(types, concrete):
        if kind.__class__ is not str or text.__class__ is not str:
            return None
        if kind == "Scalar":
            out.append(scalar_value(text))
        elif kind == "" or kind == "ScalarList":
            out.append(None)
        # else a tensor or a list of tensors: no scalar, as in the live capture
    return tuple(out)


def _strings(text: bytes | None) -> Any:
    if text is None:
        return None
    try:
        return _STRINGS.decode(text)
    except (msgspec.DecodeError, ValueError):  # no list of strings: unknown
        return None


def recorded_scalars(
    name: str, types: Any, concrete: Any, cache: dict[Any, Any], last: dict[str, Any]
) -> tuple[Any, ...] | None:
    """:func:`op_scalars` of an event's args as the reader decoded them: both as JSON text
    (:class:`msgspec.Raw`, read once per distinct pair of texts, kept in ``cache``) or both as
    values (the standard library's reading); None where the op recorded none. Each op name's
    last texts and scalars go to ``last``: a loop's next call of the op, its texts alike, is
    then told by two comparisons (see the reader), not by copying and hashing both texts."""
    if concrete.__class__ is Raw:
        text = bytes(concrete)
        key = (bytes(types) if types.__class__ is Raw else None, text)
        got = cache.get(key, _UNSET)
        if got is _UNSET:
            got = cache[key] = None if text == b"null" else op_scalars(_strings(key[0]), _strings(text))
        # Copies: a Raw read from a chunk keeps the whole chunk's text alive.
        last[name] = (concrete.copy(), types.copy() if types.__class__ is Raw else types, got)
        return got
    got = None if concrete is None else op_scalars(types, concrete)
    last[name] = (concrete, types, got)
    return got
