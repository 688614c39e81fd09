"""Hostile trace files (issue 21, items 4-7 and 15): each is refused with one clear
TraceFormatError (exit status 2 and one line on the CLI) or read safely, with the work and the
memory it takes bounded.

Memory bound (stated in neuronscope.events.jsontext): the streaming reader holds at most
MAX_EVENT_BYTES (16 MiB) of undecoded text plus one CHUNK_BYTES (1 MiB) chunk's parsed events
(the first chunk: up to WHOLE_AT_ONCE_BYTES, 4 MiB, a small file's whole text); the
whole-document path (layouts the streaming reader does not take) reads at most MAX_WHOLE_BYTES
(64 MiB). The tests below measure Python's peak allocation with tracemalloc
(no timing asserts).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neuronscope.cli import main
from neuronscope.drive.traces import from_trace
from neuronscope.errors import TraceFormatError
from neuronscope.events import jsontext
from neuronscope.events.jsontext import MAX_EVENT_BYTES
from neuronscope.result.types import ProfileResult

#: Peak Python allocation allowed while reading any hostile file here.
PEAK_BOUND = 160 << 20

OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}


def _write(path: Path, doc: Any, raw: bytes | None = None) -> Path:
    data = raw if raw is not None else json.dumps(doc).encode()
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(data, compresslevel=6))
    else:
        path.write_bytes(data)
    return path


def _peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        try:
            out: Any = fn()
        except Exception as exc:  # returned for the caller to check
            out = exc
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _refused(path: Path, capsys: pytest.CaptureFixture[str], match: str) -> None:
    """from_trace raises TraceFormatError (bounded memory); `show` exits 2 with one line."""
    out, peak = _peak(lambda: from_trace(path))
    assert isinstance(out, TraceFormatError), repr(out)
    assert match in str(out)
    assert peak < PEAK_BOUND, f"peak {peak >> 20} MiB"
    capsys.readouterr()
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("neuronscope: error:")


def _trace(*events: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"schemaVersion": 1, **top, "traceEvents": [OP, *events]}


# ---- item 5: types checked before arithmetic ----------------------------------------------------
@pytest.mark.parametrize("ts", ["9" * 200_000, [1] * 100_000, {"a": 1}, True], ids=["long-str", "list", "dict", "bool"])
def test_ts_of_the_wrong_type_is_refused_before_any_arithmetic(tmp_path: Path, capsys: pytest.CaptureFixture[str], ts: Any) -> None:
    path = _write(tmp_path / "t.json.gz", _trace({**OP, "ts": ts}))
    _refused(path, capsys, "'ts' is a")


def test_dur_of_the_wrong_type_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "t.json.gz", _trace({**OP, "dur": "5" * 100_000}))
    _refused(path, capsys, "'dur' is a")


# ---- item 6: bounded work per byte and bounded event size --------------------------------------
def test_one_huge_event_is_refused_with_bounded_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = b'{"traceEvents": [' + json.dumps(OP).encode() + b', {"ph": "X", "name": "' + b"a" * (MAX_EVENT_BYTES + (4 << 20)) + b'"}]}'
    path = _write(tmp_path / "big.json.gz", None, raw=big)
    assert path.stat().st_size < 1 << 20  # a small file that unpacks to 20 MiB
    _refused(path, capsys, "MiB")


def test_a_long_run_of_whitespace_is_refused_with_bounded_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = b'{"traceEvents": [' + json.dumps(OP).encode() + b"," + b" " * (MAX_EVENT_BYTES + (4 << 20)) + json.dumps(OP).encode() + b"]}"
    path = _write(tmp_path / "ws.json.gz", None, raw=raw)
    _refused(path, capsys, "MiB")


# ---- item 7: every kind of bad value is a TraceFormatError ---------------------------------------
@pytest.fixture(params=["at-once", "streamed"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test that takes it runs twice: the file decoded at once, and streamed in small chunks."""
    if request.param == "streamed":
        monkeypatch.setattr(jsontext, "WHOLE_AT_ONCE_BYTES", 0)
        monkeypatch.setattr(jsontext, "CHUNK_BYTES", 4 << 10)
    return str(request.param)


@pytest.mark.parametrize("where", ["last", "middle"])
def test_deeply_nested_args(tmp_path: Path, capsys: pytest.CaptureFixture[str], reading: str, where: str) -> None:
    deep = b'{"ph": "X", "cat": "cpu_op", "args": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    ops = [json.dumps(OP).encode()] * (2000 if where == "middle" else 1)
    events = [ops[0], deep, *ops[1:]] if where == "middle" else [*ops, deep]
    path = _write(tmp_path / "deep.json", None, raw=b'{"traceEvents": [' + b", ".join(events) + b"]}")
    _refused(path, capsys, "nested too deeply")


def test_nesting_millions_deep_is_refused_not_a_crash(tmp_path: Path) -> None:
    """A JSON parser that recurses on the C stack without a bound dies on such a value (orjson
    before 3.9.15 did: CVE-2024-27454). Run in a child process, so that a crash fails this test
    instead of the suite."""
    deep = b'{"ph": "X", "cat": "cpu_op", "args": ' + b"[" * 2_000_000 + b"]" * 2_000_000 + b"}"
    raw = b'{"traceEvents": [' + json.dumps(OP).encode() + b", " + deep + b", " + json.dumps(OP).encode() + b"]}"
    path = _write(tmp_path / "deeper.json.gz", None, raw=raw)
    code = (
        "import sys\nfrom neuronscope.errors import TraceFormatError\nfrom neuronscope.drive.traces import from_trace\n"
        "try:\n    from_trace(sys.argv[1])\nexcept TraceFormatError as exc:\n    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "nested too deeply" in proc.stdout


@pytest.mark.parametrize("event", [5, "x", [OP], {**OP, "args": 5}, {**OP, "args": [1]}], ids=["int", "str", "list", "args-int", "args-list"])
def test_an_event_or_its_args_that_is_no_object(tmp_path: Path, capsys: pytest.CaptureFixture[str], reading: str, event: Any) -> None:
    path = _write(tmp_path / "e.json.gz", _trace(*[OP] * 500, event, *[OP] * 500))
    _refused(path, capsys, "malformed trace event")


@pytest.mark.parametrize("ts", ["1e999", "-1e999", "9" * 4000, "NaN", "Infinity"], ids=["1e999", "-1e999", "4000-digits", "nan", "inf"])
def test_infinite_nan_or_huge_timestamps(tmp_path: Path, capsys: pytest.CaptureFixture[str], ts: str) -> None:
    raw = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ' + ts.encode() + b', "dur": 1}]}'
    path = _write(tmp_path / "ts.json", None, raw=raw)
    out, _ = _peak(lambda: from_trace(path))
    assert isinstance(out, TraceFormatError), repr(out)
    assert main(["show", str(path)]) == 2


@pytest.mark.parametrize(
    "event",
    [
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "args": {"correlation": 7}},
        {"cat": "cuda_runtime", "name": "[memory]", "args": {"correlation": 7}},
        {"cat": "python_function", "name": "x.py(1): f"},
        {"cat": "cuda_sync", "name": "Stream Sync"},
        {"cat": "kernel", "name": "k", "args": {"correlation": 7}},
    ],
    ids=["launch", "runtime-call-of-an-ignored-name", "python-frame", "sync", "kernel"],
)
@pytest.mark.parametrize("ts", [1e20, -1e20])
def test_a_timestamp_out_of_range_on_any_event_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], event: dict[str, Any], ts: float
) -> None:
    # Each kind of event goes into int64 arrays somewhere (links, nesting, breakdown).
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 5, "args": {"correlation": 7}}
    odd = {"ph": "X", "pid": 1, "tid": 1, "ts": ts, "dur": 1, **event}
    path = _write(tmp_path / "t.json", _trace({**OP, "ts": 10, "dur": 50}, odd, kernel))
    _refused(path, capsys, "out of range")


@pytest.mark.parametrize(
    "event",
    [
        {"cat": "cpu_op", "name": "aten::add"},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "args": {"correlation": 7}},
        {"cat": "python_function", "name": "x.py(1): f"},
        {"cat": "cuda_sync", "name": "Stream Sync"},
        {"cat": "kernel", "name": "k", "args": {"correlation": 7}},
        {"cat": "cuda_runtime", "name": "[memory]", "args": {"correlation": 7}},
    ],
    ids=["op", "launch", "python-frame", "sync", "kernel", "launch-of-an-ignored-name"],
)
@pytest.mark.parametrize("far", ["starts", "lasts"])
def test_events_spanning_more_than_104_days_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], event: dict[str, Any], far: str
) -> None:
    # Within int64, but durations past 2**53 ns lose nanoseconds in float64, and their sums
    # leave int64: an op's self time read -15.2 us, a region's device time negative.
    day_us = 86_400e6
    odd = {"ph": "X", "pid": 1, "tid": 1, **({"ts": 200 * day_us, "dur": 1} if far == "starts" else {"ts": 5, "dur": 200 * day_us}), **event}
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 5, "args": {"correlation": 7}}
    path = _write(tmp_path / "t.json", _trace(odd, kernel))
    _refused(path, capsys, "span 200 days")
    # An epoch-based trace is far from zero, not long: read.
    epoch_us = 1.7e15
    path = _write(tmp_path / "e.json", {"traceEvents": [{**OP, "ts": epoch_us, "dur": 50}, {**odd, "ts": epoch_us + 20, "dur": 3}]})
    assert from_trace(path).op("aten::mm").calls == 1


def test_files_of_one_rank_far_apart_are_read(tmp_path: Path) -> None:
    # Each file spans microseconds (the limit is per file); between them, 250 years.
    a = _write(tmp_path / "w.1.pt.trace.json", {"traceEvents": [{**OP, "ts": -4e15, "dur": 50}]})
    b = _write(tmp_path / "w.2.pt.trace.json", {"traceEvents": [{**OP, "ts": 4e15, "dur": 50}]})
    r = from_trace([a, b])
    assert r.op("aten::mm").calls == 2 and r.op("aten::mm").cpu_total_us == 100.0


def test_ops_inside_ranges_of_many_names_nested_deep_take_bounded_memory(tmp_path: Path) -> None:
    # 300 ranges of distinct names nested, 20,000 ops inside the innermost: each region lists
    # the ops, from 6 x 10^6 (range name, op) pairs, once made all at once (420 MiB at peak
    # here, 3 GiB for 1,000 names and 50,000 ops from a 153 KB file), now a chunk at a time.
    depth, n_ops = 300, 20_000
    ranges = [{**OP, "cat": "user_annotation", "name": f"block{d}", "ts": d, "dur": 4 * n_ops + 1000 - 2 * d} for d in range(depth)]
    ops = [{**OP, "name": f"aten::op{k % 3}", "ts": depth + 2 * k, "dur": 1} for k in range(n_ops)]
    path = _write(tmp_path / "deep.json.gz", {"traceEvents": ranges + ops})
    out, peak = _peak(lambda: from_trace(path))
    assert not isinstance(out, Exception), repr(out)
    assert peak < PEAK_BOUND, f"peak {peak >> 20} MiB"
    for d in (0, depth // 2, depth - 1):
        assert {o.name: o.calls for o in out.regions[f"block{d}"].ops} == {f"aten::op{k}": len(range(k, n_ops, 3)) for k in range(3)}


@pytest.mark.parametrize(
    "dims, shown",
    [(5, []), ("abc", []), ({"a": 1}, []), ([5], [[[]]]), ([[2, 3], 5], [[[2, 3], []]]), ([[[1, 2], [3]]], [[[[1, 2], [3]]]])],
    ids=["int", "str", "object", "list-of-int", "int-among-dims", "tensor-list"],
)
def test_input_dims_of_any_json_type(tmp_path: Path, capsys: pytest.CaptureFixture[str], dims: Any, shown: Any) -> None:
    # Only a list of lists is dims (a list of tensors' dims inside is kept as it is); anything
    # else reads as no shape, not an error and not a string split into characters.
    path = _write(tmp_path / "d.json", _trace({**OP, "ts": 100, "args": {"Input Dims": dims}}))
    r = from_trace(path)
    assert r.op("aten::mm").input_shapes == shown
    assert ProfileResult.from_dict(json.loads(r.to_json())).op("aten::mm").input_shapes == shown
    assert main(["show", str(path)]) == 0


def test_a_dict_as_correlation_id(tmp_path: Path) -> None:
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 1, "args": {"correlation": {"x": 1}}}
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 3, "args": {"correlation": {"x": 1}, "External id": [1]}}
    path = _write(tmp_path / "c.json", _trace(launch, kernel))
    with pytest.raises(TraceFormatError, match="unhashable"):
        from_trace(path)
    # A dict only on the device side: the kernel is read, linked to nothing.
    launch["args"] = {"correlation": 5}
    r = from_trace(_write(tmp_path / "c2.json", _trace(launch, kernel)))
    assert r.device_unattributed_us == 3.0


@pytest.mark.parametrize("name", [12, None, ["aten::mm"], {"n": 1}])
def test_a_name_that_is_not_a_string(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: Any) -> None:
    path = _write(tmp_path / "n.json", _trace({**OP, "name": name}))
    _refused(path, capsys, "malformed trace event")


def test_lone_surrogates_in_names_are_read_and_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = json.dumps(_trace({**OP, "name": "bad\udc80name"})).encode()
    path = _write(tmp_path / "s.json", None, raw=raw)
    r = from_trace(path)
    assert r.op("bad?name") is not None
    r.to_json().encode("utf-8")
    assert main(["show", str(path)]) == 0
    assert "bad?name" in capsys.readouterr().out


def test_a_rank_of_thousands_of_digits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = b'{"distributedInfo": {"rank": ' + b"7" * 5000 + b'}, "traceEvents": [' + json.dumps(OP).encode() + b"]}"
    path = _write(tmp_path / "rank.json", None, raw=raw)
    _refused(path, capsys, "not valid JSON")
    raw = b'{"distributedInfo": {"rank": ' + b"7" * 4000 + b', "world_size": -3}, "traceEvents": [' + json.dumps(OP).encode() + b"]}"
    r = from_trace(_write(tmp_path / "rank2.json", None, raw=raw))
    assert r.rank is None and r.world_size is None


def test_negative_durations_are_read_as_zero_with_a_note(tmp_path: Path) -> None:
    path = _write(tmp_path / "neg.json", _trace({**OP, "name": "aten::relu", "ts": 30, "dur": -20}))
    r = from_trace(path)
    relu = r.op("aten::relu")
    assert relu is not None and relu.self_cpu_us == 0.0 and relu.cpu_total_us == 0.0
    assert all(o.self_cpu_us >= 0 for o in r.ops)
    assert any("negative duration" in n for n in r.notes)


# ---- item 4: printable text only ----------------------------------------------------------------
def test_show_and_diff_print_no_terminal_escapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evil = "aten::mm\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"
    a = _write(tmp_path / "a.json", _trace({**OP, "name": evil}, {**OP, "cat": "user_annotation", "name": "\x1b]52;c;ZXZpbA==\x07", "ts": 0, "dur": 100}))
    b = _write(tmp_path / "b.json", _trace({**OP, "name": evil, "dur": 9}))
    for argv in (["show", str(a)], ["diff", str(a), str(b)], ["show", str(a), "--json"]):
        capsys.readouterr()
        assert main(argv) == 0, argv
        out = capsys.readouterr().out
        assert not any(ch in out for ch in "\x1b\x07\x9b\u202e"), argv
    capsys.readouterr()
    main(["show", str(a)])
    assert "\\x1b]0;pwned\\x07" in capsys.readouterr().out  # shown, escaped


# ---- item 15: array-format traces ---------------------------------------------------------------
def test_show_reads_array_format_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "array.json"
    path.write_text(json.dumps([OP, {**OP, "name": "aten::relu", "ts": 20}]))
    r = from_trace(path)
    assert {o.name for o in r.ops} == {"aten::mm", "aten::relu"}
    assert main(["show", str(path)]) == 0
    assert "aten::relu" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["before", "after"])
def test_huge_metadata_around_the_events_is_left_out_not_decoded(tmp_path: Path, where: str) -> None:
    """Millions of empty lists in a top-level key (a gzip of a few kilobytes) once took about
    75 bytes of Python objects each: the value is left out, named by its size, and the
    events are read. Measured (1.5 M lists here; 21.5 M in the attack: 1.7 GB, 5.3 s before,
    0.24 GB, 0.9 s after)."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(50)]
    pad = '"pad": [' + ",".join(["[]"] * 1_500_000) + "]"
    body = f'"traceEvents": {json.dumps(events)}'
    text = "{" + (f"{pad}, {body}" if where == "before" else f"{body}, {pad}") + ', "schemaVersion": 1}'
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    tracemalloc.start()
    try:
        r = from_trace(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [o.name for o in r.ops] == ["aten::mm"] and r.ops[0].calls == 50
    # Decoded, the lists alone are over 100 MB of objects; left out, what is held is the text.
    assert peak < 8 * len(text), (peak, len(text))  # 18-23 MB here; 120-130 MB decoded
    meta = jsontext.stream(path, "t", lambda evs, name: None)
    assert meta["pad"].startswith("left out:") and meta["schemaVersion"] == 1


def test_one_process_per_kernel_is_broken_down_in_linear_time(tmp_path: Path) -> None:
    """Kernels each on a pid of their own (a device per kernel, as a hostile or broken writer
    makes them) once made the breakdown quadratic: every kernel still counts as its op's device
    time, the busiest devices are broken down and the rest counted. 20,000 kernels: 0.46 s here
    (5,000: 0.11 s), where one device per kernel took over 100 s before."""
    n = 5000
    events = []
    for i in range(n):
        ts, link = 10 * i, {"correlation": i + 1, "External id": i + 1}
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": ts, "dur": 5, "args": {"External id": i + 1}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 1, "dur": 2, "args": link})
        events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 100 + i, "tid": 7, "ts": ts + 4, "dur": 3, "args": link})
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events, "schemaVersion": 1}).encode()))
    r = from_trace(path)
    add = next(o for o in r.ops if o.name == "aten::add")
    assert add.calls == n and add.self_device_us == pytest.approx(3.0 * n)
    assert r.breakdown is not None
    shown = len(r.breakdown.get("devices") or [])
    assert 0 < shown < n and shown + r.breakdown["devices_left_out"] == n
