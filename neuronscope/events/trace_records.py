"""The records a trace's events are decoded into: only the fields the reader reads (see
:mod:`neuronscope.events.jsontext`, which decodes them, and
:mod:`neuronscope.events.trace_reader`, which reads them)."""

from __future__ import annotations

import json
from typing import Any

import msgspec

__all__ = ["EventArgs", "FastTraceEvent", "RawDimsArgs", "TraceEvent", "dims_value"]


class EventArgs(msgspec.Struct, gc=False):
    """The arguments of a trace event that the reader reads; any others are skipped unparsed.
    ``stream`` is UNSET where absent (the reader then takes the event's ``tid``)."""

    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    #: each argument's kind and, for scalars, value as text (``record_shapes=True``; see
    #: :mod:`neuronscope.events.op_scalars`)
    input_types: Any = msgspec.field(default=None, name="Input type")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")
    #: each input's strides, laid out as ``Input Dims`` (where torch wrote them)
    input_strides: Any = msgspec.field(default=None, name="Input Strides")
    stream: Any = msgspec.UNSET
    device: Any = None


class TraceEvent(msgspec.Struct, gc=False):
    """A trace event's fields that the reader reads, any JSON type (the reader checks each
    before use); every other field is skipped unparsed, never made into Python objects: the
    objects of a parsed document cost more to make and to free than the parsing itself.
    Untracked by the cyclic collector (``gc=False``): JSON makes no reference cycles."""

    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    #: A flow event's id (``ac2g`` arrows: launch to device work); other events have none.
    id: Any = None
    #: Any JSON value: ``args`` that are no object are the reader's to judge (read as none
    #: where falsy, malformed where the reader needs them), and of events it skips, never read.
    args: EventArgs | list | str | int | float | bool | None = None


class RawDimsArgs(EventArgs, gc=False):
    """:class:`EventArgs` as msgspec decodes them from text: ``Input Dims`` kept as its JSON
    text, which the reader decodes once per distinct text (:func:`dims_value`): a loop's ops
    repeat a few shapes, and one list per shape, not one per call, keeps memory low (the
    decoded lists were a third of a big trace's table). ``Input type`` and ``Concrete Inputs``
    likewise, read once per distinct pair (:func:`~.op_scalars.recorded_scalars`)."""

    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b"null"), name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(b"null"), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(b"null"), name="Concrete Inputs")
    input_strides: msgspec.Raw = msgspec.field(default=msgspec.Raw(b"null"), name="Input Strides")


class FastTraceEvent(TraceEvent, gc=False):
    """:class:`TraceEvent` as msgspec decodes it from text (its args: :class:`RawDimsArgs`)."""

    args: RawDimsArgs | list | str | int | float | bool | None = None


def dims_value(text: bytes) -> list[Any] | None:
    """``Input Dims`` from its JSON text: the list, or None where it is no list (no shapes).
    msgspec skipped the text unchecked: what it refuses here (NaN, say) the standard library
    reads, as it reads the document where msgspec refuses it."""
    try:
        value = msgspec.json.decode(text)
    except ValueError:
        value = json.loads(text)
    return value if value.__class__ is list else None


def strides_value(value: Any, cache: dict[bytes, Any]) -> list[Any] | None:
    """``Input Strides`` as read (a list, or its text: decoded once per distinct text into
    ``cache``, the reader's cache of ``Input Dims``), or None where it is no list."""
    if value.__class__ is msgspec.Raw:
        text = bytes(value)
        got = cache.get(text)
        return got if got is not None or text in cache else cache.setdefault(text, dims_value(text))
    return value if value.__class__ is list else None
