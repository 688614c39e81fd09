"""How results become JSON and come back: the schema version, the layout of ``result.json``, and
the forgiving readers of its fields (a hand-edited or foreign file holds odd values).

The result types (:mod:`neuronscope.result`) use these in ``to_json`` / ``from_dict``; nothing
here knows the types themselves.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from neuronscope.errors import RunLoadError

__all__ = [
    "SCHEMA_VERSION",
    "as_dict",
    "breakdown_from",
    "breakdown_problem",
    "check_schema",
    "dumps_json",
    "known_fields",
    "malformed",
    "opt_float",
    "opt_int",
    "opt_str",
    "ranks_list",
]

#: Version of the ``result.json`` layout. Bump it when a field changes meaning; ``from_dict``
#: keeps loading every older version and refuses newer ones with a clear message.
SCHEMA_VERSION = 1

def as_dict(obj: Any) -> dict[str, Any]:
    """``dataclasses.asdict(obj)``, the same value, several times quicker on a result's rows.

    ``asdict`` deep-copies every leaf, strings and numbers too: 8 ms of a small transformer's
    first capture went to copying its result's ops, hints and modules for ``result.json``.
    Here the immutable leaves are taken as they are, plain lists, tuples and dicts are copied
    as ``asdict`` copies them, and anything else goes to ``asdict`` itself.
    """
    cls: type = type(obj)
    return {name: _plain(getattr(obj, name)) for name in _field_names(cls)}


@functools.lru_cache(maxsize=64)  # a few result classes, each read once a process
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


_LEAVES = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is list:
        return [_plain(v) for v in value]
    if kind is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    if kind is tuple:
        return tuple(_plain(v) for v in value)
    return asdict(_Boxed(value))["value"]  # a dataclass, a named tuple, a subclass: asdict's way


def _finite(value: Any) -> Any:
    """``value`` with each NaN and infinity as None, in the containers JSON writes."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):  # a key is a string in JSON: a non-finite one as json.dumps names it
        return {json.dumps(k) if isinstance(k, float) and not math.isfinite(k) else k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


@dataclass(frozen=True)
class _Boxed:
    """A value for ``asdict`` to convert as it converts a field."""

    value: Any


def dumps_json(value: Any, indent: int | str | None = 2) -> str:
    """The text of ``json.dumps(value, indent=indent, default=str)``, laid out the same way
    except that a list of numbers nested at most two deep (a shape, an op's input-shape
    signature) stays on one line: a result's shapes would otherwise take a line per dimension.
    Keys are converted as ``json.dumps`` converts them (and refused where it refuses them).

    Strict JSON: a NaN or an infinity (a user's ``alpha=float("nan")`` read into a hint, a
    division by a zero time) is written as ``null``, where ``json.dumps`` writes bare ``NaN``
    / ``Infinity``, which ``jq``, ``JSON.parse`` and most readers refuse."""
    pad = indent if indent is None or isinstance(indent, str) else " " * indent
    try:
        # json.dumps lays the text out (its encoder is several times quicker than walking the
        # value here: a result's JSON is on every capture's path); the value is walked only
        # where it holds a non-finite number.
        text = _indented(value, indent)
    except ValueError:
        text = _indented(_finite(value), indent)
    if pad is None:
        return text
    # Then the lists of numbers, and the lists of those, are joined onto one line. Only text
    # that spans a line break is rewritten: a string holds none (json escapes it), so no
    # string's text is touched.
    flat, nested, sep = _one_line_patterns(pad)

    def one_line(m: re.Match[str]) -> str:
        return "[" + ", ".join(sep.split(m.group(1))) + "]"

    return nested.sub(one_line, flat.sub(one_line, text))


def _indented(value: Any, indent: int | str | None) -> str:
    """``json.dumps(value, indent=indent, default=str, allow_nan=False)``. With an indent,
    json.dumps encodes in Python, not in its C encoder: a small transformer's result.json took
    2.8 ms so, 0.6 ms encoded on one line and laid out by msgspec, which writes the same text
    (its tokens as they are, json's separators). An indent msgspec does not take (a string,
    0), or text it refuses (a lone surrogate's escape, from a file name os.fsdecode made), is
    json.dumps's."""
    if isinstance(indent, int) and not isinstance(indent, bool) and indent > 0:
        import msgspec

        try:
            return msgspec.json.format(json.dumps(value, default=str, allow_nan=False), indent=indent)
        except msgspec.DecodeError:
            pass
    pad = indent if indent is None or isinstance(indent, str) else " " * indent
    return json.dumps(value, indent=pad, default=str, allow_nan=False)


_NUMBER = r"(?:-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null)"
#: A list already on one line that holds numbers only (no string, no object).
_FLAT_LIST = r"\[[^\[\]\n\"{}]*\]"


@functools.lru_cache(maxsize=8)
def _one_line_patterns(pad: str) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """Lists of numbers laid out one item a line, lists of those (or of numbers) once the
    first are on one line, and the break between two items, in ``json.dumps``'s layout with
    ``pad``."""
    ws = f"(?:{re.escape(pad)})*" if pad else ""

    def laid_out(item: str) -> re.Pattern[str]:
        return re.compile(rf"\[\n{ws}({item}(?:,\n{ws}{item})*)\n{ws}\]")

    return laid_out(_NUMBER), laid_out(f"(?:{_NUMBER}|{_FLAT_LIST})"), re.compile(rf",\n{ws}")


def known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` that ``cls`` has as fields: newer writers may add keys we ignore."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def float_or(value: Any, default: float) -> float:
    """A number a result always has, as written: ``default`` where it is absent or ``null``
    (how a non-finite number is written, see :func:`dumps_json`); a value of another type
    raises, for the loader to report the file malformed."""
    return default if value is None else float(value)


def opt_float(value: Any) -> float | None:
    if value is None:
        return None
    out = float(value)
    if math.isnan(out):
        return None
    return out


def opt_int(value: Any) -> int | None:
    """An integer field that may be absent."""
    return None if value is None else int(value)


def opt_str(value: Any) -> str | None:
    """A text field that may be absent: None stays None, anything else becomes its text (a
    hand-edited or foreign file may hold a number where a name belongs)."""
    return None if value is None else str(value)


_RANK_NUMBERS = ("wall_time_us", "total_op_us")


def ranks_list(value: Any) -> list[dict[str, Any]] | None:
    """``ranks`` as the renderers expect it: None, or a list of objects whose times are numbers."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(r, Mapping) for r in value):
        raise TypeError(f"ranks must be a list of objects, got {value!r:.60}")
    out = []
    for r in value:
        entry = dict(r)
        for key in _RANK_NUMBERS:
            if key in entry:
                entry[key] = opt_float(entry[key])
        out.append(entry)
    return out




def malformed(what: str, exc: Exception) -> str:
    """Why a result.json could not be read back, and what to do."""
    if isinstance(exc, KeyError):
        problem = f"the field {exc.args[0]!r} is missing"
    else:
        problem = f"{type(exc).__name__}: {exc}"
    return (
        f"{what} data is malformed ({problem}); the file was edited or not written by "
        f"neuronscope: re-export the run, or open its trace with `neuronscope show TRACE_FILE`"
    )


def check_schema(data: Any, expected_type: str) -> None:
    if not isinstance(data, Mapping):
        raise RunLoadError(f"expected a JSON object for a {expected_type}, got {type(data).__name__}")
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise RunLoadError(f"schema_version must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise RunLoadError(
            f"written by a newer neuronscope (schema {version}, this one reads up to "
            f"{SCHEMA_VERSION}); upgrade neuronscope to read it"
        )
    kind = data.get("type", expected_type)
    if kind != expected_type:
        raise RunLoadError(f"holds a {kind}, not a {expected_type}")


#: The most steps, step starts and chart bins a loaded breakdown keeps (a capture writes at
#: most 64 steps and 400 bins; a hand-made file with 20,000 step starts made report take 33 s).
MAX_LOADED_STEPS = 64
MAX_LOADED_BINS = 2_000
#: The figures the renderers read without checks (report/text.py, report/charts.py).
_TOP_NUMBERS = (
    "window_us", "busy_us", "idle_us", "busy_pct", "idle_host_us", "idle_sync_us", "idle_other_us",
    "compute_us", "communication_us", "memory_us", "overlap_compute_communication_us", "overlap_compute_memory_us",
)
_STEP_NUMBERS = ("start_us", "window_us", "busy_us", "idle_host_us", "idle_sync_us", "idle_other_us")
_LAUNCH_NUMBERS = ("shorter_than_launch", "linked", "median_kernel_us", "median_launch_us", "median_delay_us", "p90_delay_us")


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _rows(value: Any, numbers: tuple[str, ...], text: str | None = None) -> bool:
    """A list of mappings, each with finite ``numbers`` (and a string ``text`` field)."""
    return isinstance(value, list) and all(
        isinstance(r, Mapping) and all(_finite_number(r.get(k)) for k in numbers) and (text is None or isinstance(r.get(text), str))
        for r in value
    )


def breakdown_problem(value: Any) -> str:
    """Why :func:`breakdown_from` left ``value`` out, in a few words (for the result's note)."""
    if not isinstance(value, Mapping):
        return f"not an object ({type(value).__name__})"
    bad = [k for k in _TOP_NUMBERS if not _finite_number(value.get(k))]
    if bad:
        return "missing or not a number: " + ", ".join(bad)
    return "its steps, devices or chart are not what neuronscope writes"


def breakdown_from(value: Any) -> dict[str, Any] | None:
    """A ``breakdown`` read from ``result.json``, or None where it is not one: the renderers
    read its figures without checks, so a malformed one (a string, steps that are not rows,
    figures that are not numbers) is dropped whole, never shown half. Long lists are cut."""
    if not isinstance(value, Mapping):
        return None
    out = dict(value)
    if not all(_finite_number(out.get(k)) for k in _TOP_NUMBERS) or not _finite_number(out.get("device", -1)):
        return None
    steps = out.get("steps", [])
    if not isinstance(steps, list) or not _rows(steps[:MAX_LOADED_STEPS], _STEP_NUMBERS, "name"):
        return None
    if len(steps) > MAX_LOADED_STEPS:
        left = out.get("steps_left_out")
        out["steps_left_out"] = (left if isinstance(left, int) and not isinstance(left, bool) else 0) + len(steps) - MAX_LOADED_STEPS
    out["steps"] = [dict(s) for s in steps[:MAX_LOADED_STEPS]]
    if not _rows(out.get("devices", []), ("device", "busy_us", "window_us")):
        out.pop("devices", None)
    if not _rows(out.get("streams", []), ("busy_us",)):
        out.pop("streams", None)
    launch = out.get("launch")
    if launch is not None and not (isinstance(launch, Mapping) and (not launch.get("linked") or all(_finite_number(launch.get(k)) for k in _LAUNCH_NUMBERS))):
        out.pop("launch", None)
    chart = out.get("chart")
    if chart is not None:
        out["chart"] = _chart_from(chart)
        if out["chart"] is None:
            del out["chart"]
    return out


def _chart_from(chart: Any) -> dict[str, Any] | None:
    if not isinstance(chart, Mapping) or not _finite_number(chart.get("bin_us")):
        return None
    out: dict[str, Any] = {"bin_us": chart["bin_us"]}
    for key, vals in chart.items():
        if key in ("bin_us", "step_starts_us"):
            continue
        if not isinstance(vals, list) or len(vals) > MAX_LOADED_BINS or not all(_finite_number(v) for v in vals):
            return None
        out[key] = vals
    starts = chart.get("step_starts_us", [])
    ok = isinstance(starts, list) and len(starts) <= MAX_LOADED_STEPS and all(_finite_number(v) for v in starts)
    out["step_starts_us"] = starts if ok else []
    return out
