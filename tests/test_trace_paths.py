"""The reading paths agree: a file read at once (msgspec, up to WHOLE_AT_ONCE_BYTES), streamed
in chunks, or whole with the standard library's json (odd layouts, NaN) gives one result or one
TraceFormatError, whichever path takes it; and no path holds more memory than the hostile-file
bound. Each test builds its file in tmp_path."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from neuronscope.drive.traces import from_trace
from neuronscope.errors import TraceFormatError
from neuronscope.events import jsontext
from neuronscope.events import trace_reader as reader

OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}
PEAK_BOUND = 160 << 20


def _ops(n: int) -> list[str]:
    return [json.dumps({**OP, "ts": 10 + 10 * i}) for i in range(n)]


def _outcome(path: Path) -> Any:
    try:
        d = from_trace(path).to_dict()
    except TraceFormatError as exc:
        return ("TraceFormatError", str(exc).split(": ", 1)[1][:60])
    d.pop("started_at", None)
    return d


def _three_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The same file read at once, streamed in 4 KiB chunks, and whole with the stdlib json."""
    out = {"at-once": _outcome(path)}
    with monkeypatch.context() as m:
        m.setattr(jsontext, "WHOLE_AT_ONCE_BYTES", 0)
        m.setattr(jsontext, "CHUNK_BYTES", 4096)
        out["streamed"] = _outcome(path)
    with monkeypatch.context() as m:

        def refuse(*args: Any) -> Any:
            raise jsontext.Fallback

        def not_msgspec(data: bytes) -> Any:
            raise ValueError("read with the standard library")

        m.setattr(reader, "stream", refuse)
        m.setattr(jsontext, "_decode", not_msgspec)
        out["checked"] = _outcome(path)
    return out


def _short(v: Any) -> Any:
    return v if isinstance(v, tuple) else ("ok", [(o["name"], o["calls"]) for o in v["ops"]])


def _assert_agree(out: dict[str, Any]) -> None:
    assert out["at-once"] == out["streamed"] == out["checked"], {k: _short(v) for k, v in out.items()}


# ---- whitespace: JSON's four characters, on every path -----------------------------------------
@pytest.mark.parametrize(
    "prefix, suffix",
    [(b"\x0c", b""), (b"\x0b", b""), (b"", "\u00a0".encode()), (b"", b"\x1c"), (b"", "\u3000".encode())],
    ids=["formfeed-before", "vtab-before", "nbsp-after", "fs-after", "ideographic-space-after"],
)
def test_array_layout_with_non_json_whitespace_reads_the_same_every_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: bytes, suffix: bytes
) -> None:
    # Regular expressions' \s and str.strip() take more than JSON does: no path may.
    path = tmp_path / "arr.json"
    path.write_bytes(prefix + b"[" + ",".join(_ops(600)).encode() + b"]" + suffix)
    _assert_agree(_three_ways(path, monkeypatch))


# ---- a second "traceEvents": the document's is the top-level one, the last (as json has it) ----
# The key may be spelt with an escape ("trace\u0045vents" is "traceEvents" to any JSON reader).
SECOND_EVENTS_LIST = {
    "nested-in-metadata": '{"meta":{"traceEvents":[EVS],"x":1},"schemaVersion":1,"traceEvents":[ADD]}',
    "duplicate-key": '{"schemaVersion":1,"traceEvents":[EVS],"traceEvents":[ADD]}',
    "nested-then-escaped": '{"a":{"traceEvents":[EVS]},"trace\\u0045vents":[ADD],"schemaVersion":1}',
    "nested-in-a-list-then-escaped": '{"x":[{"traceEvents":[EVS]}],"trace\\u0045vents":[ADD],"b":2}',
    "escaped-duplicate-after": '{"traceEvents":[EVS],"x":1,"trace\\u0045vents":[ADD]}',
    "escaped-duplicate-before": '{"trace\\u0045vents":[ADD],"traceEvents":[EVS]}',
}


@pytest.mark.parametrize("document_events", ["none", "one"])
@pytest.mark.parametrize("layout", list(SECOND_EVENTS_LIST))
def test_a_second_trace_events_list_reads_the_same_every_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, document_events: str
) -> None:
    add = json.dumps({**OP, "name": "aten::add"}) if document_events == "one" else ""
    text = SECOND_EVENTS_LIST[layout].replace("EVS", ",".join(_ops(600))).replace("ADD", add)
    path = tmp_path / "two.json"
    path.write_text(text)
    out = _three_ways(path, monkeypatch)
    _assert_agree(out)
    # The events read are the ones json.loads has as the document's (the last top-level list).
    names = [event["name"] for event in json.loads(text)["traceEvents"]]
    read = _short(out["at-once"])
    if names:
        assert read == ("ok", [(names[0], len(names))])
    else:  # no events: an empty result where the file says it is a profiler's (schemaVersion)
        assert read == ("ok", []) or "holds no torch.profiler events" in read[1]


@pytest.mark.parametrize("first", ["[1]", '["x", 2]', "[[]]"], ids=["int", "str-int", "list"])
def test_a_first_list_of_values_the_events_override_is_read_as_json_does(tmp_path: Path, first: str) -> None:
    # The list cut out runs from the first "traceEvents" to the last event: no list of events.
    # Its first value is of the wrong shape for an event; read at once (as here) or whole,
    # the document's events are the last list's, as json.loads has them.
    path = tmp_path / "override.json"
    path.write_text('{"traceEvents":' + first + ',"traceEvents":[' + ",".join(_ops(3)) + '],"x":[{}]}')
    assert from_trace(path).op("aten::mm").calls == len(json.loads(path.read_text())["traceEvents"]) == 3
    # Where the events themselves hold such a value, that is the error, at its place.
    path.write_text('{"traceEvents":[' + ",".join([*_ops(3), first[1:-1]]) + '],"x":[{}]}')
    with pytest.raises(TraceFormatError, match=r"malformed trace event: .* at `traceEvents\[3\]`"):
        from_trace(path)


# ---- args that are no object: none where falsy, never read where the event is skipped ---------
@pytest.mark.parametrize("args", [0, "", [], False], ids=["zero", "empty-str", "empty-list", "false"])
@pytest.mark.parametrize("cat", ["cpu_op", "kernel", "cuda_runtime"])
def test_falsy_args_are_read_as_no_args_as_before(tmp_path: Path, args: Any, cat: str) -> None:
    odd = {"ph": "X", "cat": cat, "name": "x", "pid": 1, "tid": 1 if cat != "kernel" else 7, "ts": 3, "dur": 1, "args": args}
    path = tmp_path / "a.json"
    path.write_text('{"schemaVersion":1,"traceEvents":[' + ",".join([*_ops(600), json.dumps(odd)]) + "]}")
    res = from_trace(path)
    assert res.op("aten::mm").calls == 600
    if cat == "kernel":  # read, linked to nothing: time launched outside any op
        assert res.device_unattributed_us == 1.0
    else:  # an op, or a runtime call: a row of its own
        assert res.op("x").calls == 1


@pytest.mark.parametrize(
    "event",
    [
        {"ph": "M", "name": "process_name", "pid": 1, "args": "x"},
        {"ph": "i", "name": "marker", "args": [1, 2]},
        {"ph": "f", "cat": "ac2g", "name": "flow", "args": 7},
    ],
    ids=["metadata-event-str-args", "no-cat-list-args", "flow-event-int-args"],
)
def test_args_of_events_the_reader_skips_are_not_checked(tmp_path: Path, event: dict[str, Any]) -> None:
    path = tmp_path / "skip.json"
    path.write_text('{"schemaVersion":1,"traceEvents":[' + ",".join([*_ops(600), json.dumps(event)]) + "]}")
    assert from_trace(path).op("aten::mm").calls == 600


# ---- memory: NaN (which msgspec refuses) sends no file onto a path that holds it all twice ------
def _peak(path: Path) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        try:
            out: Any = from_trace(path)
        except Exception as exc:
            out = exc
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_4mib_file_with_one_nan_stays_under_the_memory_bound(tmp_path: Path) -> None:
    # Under WHOLE_AT_ONCE_BYTES, 1.4 M events: msgspec refuses the NaN, and the file is read in
    # chunks as any other (json.loads of the whole and its records beside it: 207 MiB).
    head = b'{"schemaVersion":1,"traceEvents":[' + json.dumps(OP).encode()
    n = ((4 << 20) - 400) // 3
    path = tmp_path / "nan.json"
    path.write_bytes(head + b",{}" * n + b',{"x":NaN}]}')
    assert path.stat().st_size <= jsontext.WHOLE_AT_ONCE_BYTES
    out, peak = _peak(path)
    assert not isinstance(out, Exception) or isinstance(out, TraceFormatError), repr(out)
    assert peak < PEAK_BOUND, f"peak {peak >> 20} MiB"


def test_a_streamed_file_that_falls_back_whole_stays_under_the_memory_bound(tmp_path: Path) -> None:
    # 12 MiB, 4 M events, then NaN in the metadata after them: read by the standard library
    # there, not by falling back to the whole document (4 M dicts: over 300 MiB).
    head = b'{"schemaVersion":1,"traceEvents":[' + json.dumps(OP).encode()
    path = tmp_path / "late_nan.json"
    path.write_bytes(head + b",{}" * ((12 << 20) // 3) + b'],"x":NaN}')
    out, peak = _peak(path)
    assert not isinstance(out, Exception) or isinstance(out, TraceFormatError), repr(out)
    assert peak < PEAK_BOUND, f"peak {peak >> 20} MiB"


# ---- numbers -------------------------------------------------------------------------------------
def test_huge_ints_are_the_same_every_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ints past 64 bits stay exact (a parser that made them floats would merge pids 2**70 and
    # 2**70 + 1 into one thread).
    events = [*_ops(600), json.dumps({**OP, "pid": 2**70}), json.dumps({**OP, "pid": 2**70 + 1}), *_ops(600)]
    path = tmp_path / "big.json"
    path.write_text('{"schemaVersion":1,"traceEvents":[' + ",".join(events) + "]}")
    out = _three_ways(path, monkeypatch)
    _assert_agree(out)
    assert [(o["name"], o["calls"]) for o in out["at-once"]["ops"]] == [("aten::mm", 602)]


# ---- where an event of the wrong shape is, and text the reader never reads -----------------------
@pytest.mark.parametrize("at", [3, 70_001])
def test_an_event_of_the_wrong_shape_is_named_by_its_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: int) -> None:
    monkeypatch.setattr(jsontext, "CHUNK_BYTES", 64 << 10)  # many chunks before the bad event
    events = _ops(at + 10)
    events[at] = "5"
    path = tmp_path / "bad.json"
    path.write_text('{"schemaVersion":1,"traceEvents":[' + ",".join(events) + "]}")
    with pytest.raises(TraceFormatError, match=rf"malformed trace event: .*traceEvents\[{at}\]"):
        from_trace(path)


def test_a_nested_trace_events_key_after_the_events_is_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a second top-level "traceEvents" sends a streamed file to the whole-document path
    (which a file over MAX_WHOLE_BYTES could not take)."""
    monkeypatch.setattr(jsontext, "WHOLE_AT_ONCE_BYTES", 0)
    monkeypatch.setattr(jsontext, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(jsontext, "MAX_WHOLE_BYTES", 1024)
    path = tmp_path / "nested.json"
    path.write_text('{"traceEvents":[' + ",".join(_ops(600)) + '],"distributedInfo":{"traceEvents":[], "rank": 0}}')
    assert from_trace(path).op("aten::mm").calls == 600


def test_invalid_utf8_in_a_field_the_reader_skips_is_read_past(tmp_path: Path) -> None:
    """msgspec skips the fields the reader does not read without checking their text."""
    odd = json.dumps({**OP, "ts": 1000}).encode()[:-1] + b', "note": "\xff\xfe"}'
    path = tmp_path / "utf8.json"
    path.write_bytes(b'{"traceEvents":[' + b",".join([*(e.encode() for e in _ops(10)), odd]) + b"]}")
    assert from_trace(path).op("aten::mm").calls == 11


# ---- metadata after the events: the list's end found, else the whole document decoded ---------
@pytest.mark.parametrize(
    "tail",
    [
        ',"INFO":["x.cpp:12] recorded","y.cpp:9] done {a}]"],"traceName":"t"',
        ',"x":[{"a":1},{"b":[2]}]',
        ',"note":"a}]b","n":[1,[2]],"m":{"k":[{}]}',
        "",
    ],
    ids=["kineto-info-lines", "list-of-objects", "brackets-in-strings", "none"],
)
def test_metadata_after_the_events_reads_the_same_every_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: str) -> None:
    path = tmp_path / "tail.json"
    path.write_text('{"schemaVersion":1,"traceEvents":[' + ",".join(_ops(600)) + "]" + tail + "}")
    out = _three_ways(path, monkeypatch)
    _assert_agree(out)
    assert [(o["name"], o["calls"]) for o in out["at-once"]["ops"]] == [("aten::mm", 600)]
    # Every top-level key kept, whichever way the events' list was found.
    data = path.read_bytes()
    events, meta = jsontext._decode(data)
    expected = json.loads(data)
    del expected["traceEvents"]
    assert len(events) == 600 and meta == expected


@pytest.mark.parametrize("events", ["", '{"ph":"M","name":"a]"}'], ids=["empty", "one-metadata-event"])
def test_the_usual_layout_is_decoded_in_one_pass(events: str) -> None:
    """Kineto writes strings with "]" after the events (its INFO lines): the events' text is
    still found, and decoded once, with the other keys decoded apart."""
    data = ('{"schemaVersion":1,"traceEvents":[' + events + '],"INFO":["a.cpp:1] x","b.cpp:2] y"],"traceName":"t"}').encode()
    span = jsontext._events_span(data)
    assert span is not None
    (a, b), meta = span
    assert json.loads(data[a:b]) == json.loads(data)["traceEvents"]
    assert meta == {"schemaVersion": 1, "INFO": ["a.cpp:1] x", "b.cpp:2] y"], "traceName": "t"}


@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "pretty"])
def test_lists_of_objects_after_the_events_leave_them_decoded_in_one_pass(indent: int | None) -> None:
    """A tool that rewrites a trace (``json.dump`` of Kineto's keys, reordered) may write
    ``deviceProperties``, a list of objects, after the events: the events' list is still found
    at its own end (taking the later list's end made the events' text no JSON list, and the
    document was decoded twice more), and not at a list of objects inside the last event."""
    last = {**OP, "args": {"x": [{"y": 1}]}}
    doc = {
        "metadata": {"a": [{"b": 1}]},
        "traceEvents": [OP, last],
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0}, {"id": 1}],
        "traceName": "t",
    }
    data = json.dumps(doc, indent=indent).encode()
    span = jsontext._events_span(data)
    assert span is not None
    (a, b), meta = span
    assert json.loads(data[a:b]) == doc["traceEvents"]
    assert meta == {k: v for k, v in doc.items() if k != "traceEvents"}
