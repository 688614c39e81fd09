"""Reliability: faults, bad input and concurrency, with nothing lost (issue 8).

A profiler lives inside somebody's long training job: it must never be what kills it, and never
lose what it measured. Each test here states one guarantee and fails without it:

- export failures (unwritable or invalid root, disk full, a root that is a file): the user's
  function returns its value, the result stays in memory with ``run_dir=None``, and one
  ``NeuronscopeWarning`` names the cause;
- atomic files: a process SIGKILLed during an export leaves a complete run or one marked
  incomplete, never a half-written ``result.json``, and no temporary files in complete runs;
- ``load()`` and the CLI on corrupt, truncated, empty, foreign or newer-schema runs raise
  ``NeuronscopeError`` naming the file (exit 2, no traceback); older schemas still load;
- KeyboardInterrupt, SystemExit and errors in nested regions: the same exception object goes
  on, the profiler is stopped, the count is zero, and the partial capture is exported with
  ``status="error"``;
- threads: right values, one capture at a time, and every call that could not be captured is
  counted (``skipped_calls`` on the wrapper, on the region and in each result, on disk too);
- long runs: memory stays bounded over hundreds of captures, ``.results`` is capped, and run
  directories never collide, in one process or two.

Faults come two ways where they can: for real (a small tmpfs that fills up, a read-only mount,
SIGKILL on a real process) and injected (ENOSPC from ``os.fsync`` or a half-done write). The
real ones skip, saying why, where the sandbox does not allow them.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_backends import CountingBackend, faulty_backend

from neuronscope import load, neuron_region, profile_on_neuron
from neuronscope.announce import NeuronscopeWarning
from neuronscope.cli import main as cli_main
from neuronscope.config import build_options
from neuronscope.drive import scope
from neuronscope.drive.owner import MAX_KEPT_RESULTS, Owner
from neuronscope.errors import ConfigError, RunLoadError
from neuronscope.export import run_dir as export
from neuronscope.export import runs, safe_io
from neuronscope.export.safe_io import WORK_PREFIX
from neuronscope.region import ensure_no_capture_running
from neuronscope.result.serial import SCHEMA_VERSION
from neuronscope.result.stats import OpStat
from neuronscope.result.types import ProfileResult

HELPERS = Path(__file__).parent / "reliability_helpers"
WORKER = HELPERS / "export_worker.py"

#: What this module did, for the report (printed when NEURONSCOPE_TALLY=1).
TALLY = {"faults_injected": 0, "bad_inputs": 0, "results_lost": 0, "processes_killed": 0}

#: Temporary names the export uses: ``.<name>.tmp<pid>`` and the raw trace before gzip.
TEMP_NAME = re.compile(r"^\..+\.tmp\d+(\.[0-9a-f]+)?$|^\.trace\.json\.raw$")


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    yield
    if os.environ.get("NEURONSCOPE_TALLY"):
        sys.__stdout__.write(f"\nreliability tally: {json.dumps(TALLY)}\n")


@pytest.fixture
def patch() -> Iterator[pytest.MonkeyPatch]:
    """A monkeypatch of this test's own: ``patch.undo()`` mid-test must not undo conftest's
    NEURONSCOPE_OUTPUT_DIR (the shared ``monkeypatch`` would, and runs would land in cwd)."""
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _work(n: int = 20) -> torch.Tensor:
    x = torch.randn(16, 16)
    for _ in range(n):
        x = torch.tanh(x) * 0.5
    return x


def _ns_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, NeuronscopeWarning)]


def _files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def _run_dirs_on_disk(root: Path) -> list[Path]:
    """Every directory at run depth (root/<name>/<run>), marked or not (a hidden one is a run
    directory not yet named, made and removed by the export)."""
    if not root.is_dir():
        return []
    return [
        run for name in root.iterdir() if name.is_dir() for run in name.iterdir() if run.is_dir() and not run.name.startswith(".")
    ]


def _ls_json(root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    capsys.readouterr()
    assert cli_main(["ls", str(root), "--json"]) == 0
    return {row["run_dir"]: row for row in json.loads(capsys.readouterr().out)}


def audit_runs(root: Path, capsys: pytest.CaptureFixture[str] | None = None) -> tuple[list[Path], list[Path]]:
    """Check every run directory under ``root`` and return (complete, incomplete).

    A complete run has a ``result.json`` that parses in full and loads, and no incomplete marker;
    it holds no temporary file and its trace parses too. Any other directory must carry the
    incomplete marker: one killed after its ``result.json`` (written first) still loads, one
    killed before makes ``load()`` say "incomplete"; ``neuronscope ls`` lists both as
    incomplete. A directory with neither (a stray, unmarked one) fails the audit.
    """
    complete, incomplete = [], []
    listed = set(runs.find_runs(root))
    for run in _run_dirs_on_disk(root):
        assert run in listed, f"{run}: a run directory that is neither complete nor marked incomplete"
        names = {p.name for p in run.iterdir()}
        marked = runs.INCOMPLETE_MARKER in names
        if runs.RESULT_FILE in names:
            json.loads((run / runs.RESULT_FILE).read_text())  # never half-written
            loaded = load(run)
            assert loaded.run_dir == str(run)
        else:
            assert marked, f"{run}: no result.json and no incomplete marker: {names}"
            with pytest.raises(RunLoadError, match="incomplete"):
                load(run)
        if marked:
            incomplete.append(run)
            continue
        temps = sorted(n for n in names if TEMP_NAME.match(n))
        assert not temps, f"{run}: temporary files left in a complete run: {temps}"
        if "trace.json" in names:
            json.loads((run / "trace.json").read_text())
        complete.append(run)
    if capsys is not None and listed:
        rows = _ls_json(root, capsys)
        for run in incomplete:
            assert rows[str(run)]["status"] == "incomplete"
        for run in complete:
            assert rows[str(run)]["status"] in ("ok", "error")
    return complete, incomplete


# ---- export failures: real ones -------------------------------------------------------------


def test_root_is_a_file_decorator_returns_value_and_warns_once(tmp_path: Path) -> None:
    root = tmp_path / "not-a-dir"
    root.write_text("a file where the runs should go")

    @profile_on_neuron(warmup=0, backend="cpu", output_dir=str(root))
    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) + 1

    x = torch.randn(8, 8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = step(x)
    TALLY["faults_injected"] += 1
    assert torch.equal(out, torch.tanh(x) + 1)
    result = step.last_result
    assert result is not None and result.run_dir is None and result.op("aten::tanh") is not None
    msgs = _ns_warnings(record)
    assert len(msgs) == 1, msgs
    assert str(root) in msgs[0] and ("File exists" in msgs[0] or "Not a directory" in msgs[0])
    assert [w.filename for w in record if "could not export" in str(w.message)] == [__file__]  # the user's line
    assert any(n.startswith("not exported:") for n in result.notes)
    assert root.read_text() == "a file where the runs should go"


def test_export_failure_of_a_decorated_forward_names_the_users_line(tmp_path: Path) -> None:
    """Between the capture and the user's ``model(x)`` lie torch's Module.__call__ frames."""
    root = tmp_path / "a-file"
    root.write_text("x")

    class Model(torch.nn.Module):
        @profile_on_neuron(warmup=0, backend="cpu", output_dir=str(root))
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sin()

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        Model()(torch.ones(4))
    TALLY["faults_injected"] += 1
    assert [w.filename for w in record if "could not export" in str(w.message)] == [__file__]


def test_root_below_a_file_region_keeps_result(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with neuron_region("below-file", backend="cpu", output_dir=str(blocker / "runs")) as r:
            _work()
    TALLY["faults_injected"] += 1
    assert r.result is not None and r.result.run_dir is None and r.result.status == "ok"
    msgs = _ns_warnings(record)
    assert len(msgs) == 1 and "Not a directory" in msgs[0], msgs
    assert [w.filename for w in record if "could not export" in str(w.message)] == [__file__]


def test_invalid_root_name_too_long(tmp_path: Path) -> None:
    root = tmp_path / ("x" * 300)  # one path component over NAME_MAX (255)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with neuron_region("long-root", backend="cpu", output_dir=str(root)) as r:
            value = _work().sum().item()
    TALLY["faults_injected"] += 1
    assert isinstance(value, float)
    assert r.result is not None and r.result.run_dir is None
    msgs = _ns_warnings(record)
    assert len(msgs) == 1 and "File name too long" in msgs[0], msgs


def test_nul_in_output_dir_is_refused_when_built_and_never_raises_at_call(tmp_path: Path) -> None:
    """A NUL byte made ``mkdir`` raise ValueError, which escaped the capture (not an OSError)
    and stopped the user's call. Now build_options refuses it, and a root that reaches the
    capture anyway (Options made by hand) is an export failure like any other."""
    with pytest.raises(ConfigError, match="NUL"):
        build_options(output_dir=str(tmp_path / "a\x00b"))
    opts = build_options(backend="cpu")
    bad = opts.__class__(**{**opts.__dict__, "output_dir": str(tmp_path / "a\x00b")})
    got: list[ProfileResult] = []
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        owner = Owner(bad, "nul", None, None)
        owner.on_result = got.append  # type: ignore[method-assign]
        value = scope.run(owner, lambda: 41 + 1, (), {})
    TALLY["faults_injected"] += 2
    assert value == 42 and len(got) == 1 and got[0].run_dir is None
    assert len(_ns_warnings(record)) == 1 and "null" in _ns_warnings(record)[0]


def test_repeated_failures_warn_once_but_every_result_says_why(tmp_path: Path) -> None:
    root = tmp_path / "file-root"
    root.write_text("")

    @profile_on_neuron(warmup=0, active=None, backend="cpu", output_dir=str(root))
    def step(i: int) -> int:
        _work(3)
        return i * 2

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        values = [step(i) for i in range(5)]
    TALLY["faults_injected"] += 5
    assert values == [0, 2, 4, 6, 8]
    assert len(step.results) == 5
    assert all(r.run_dir is None and any("not exported" in n for n in r.notes) for r in step.results)
    assert len(_ns_warnings(record)) == 1


def test_export_failure_and_user_exception_together(tmp_path: Path) -> None:
    root = tmp_path / "file-root"
    root.write_text("")
    boom = ValueError("the user's own error")

    @profile_on_neuron(warmup=0, backend="cpu", output_dir=str(root))
    def step() -> None:
        _work(3)
        raise boom

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(ValueError) as info:
            step()
    TALLY["faults_injected"] += 1
    assert info.value is boom
    assert step.last_result is not None and step.last_result.status == "error"
    assert step.last_result.run_dir is None
    assert len(_ns_warnings(record)) == 1


# ---- disk full and read-only, for real: a small tmpfs ---------------------------------------


@contextlib.contextmanager
def _tmpfs(where: Path, options: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8); the injected-ENOSPC tests cover this path")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"this sandbox does not allow mount ({done.stderr.strip()}); the injected-ENOSPC tests cover this path")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def _fill(fs: Path, leave_bytes: int) -> None:
    """Fill ``fs`` up, leaving about ``leave_bytes`` free."""
    reserve = fs / "reserve"
    if leave_bytes:
        reserve.write_bytes(b"\0" * leave_bytes)
    with open(fs / "filler", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as err:
            assert err.errno == errno.ENOSPC
    reserve.unlink(missing_ok=True)


@pytest.mark.parametrize("free", [0, 16 * 1024], ids=["no-room-at-all", "room-for-the-directory-not-the-trace"])
def test_disk_full_for_real(tmp_path: Path, free: int) -> None:
    with _tmpfs(tmp_path / "small", "size=64k") as fs:
        _fill(fs, free)
        root = fs / "runs"
        seen_dir: list[Path | None] = []
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            with neuron_region("full", backend="cpu", output_dir=str(root), trace_format="json") as r:
                entry = scope.current()
                seen_dir.append(None if entry is None or entry.session is None else entry.session.run_dir)
                value = _work(200).shape
        TALLY["faults_injected"] += 1
        assert value == (16, 16)
        assert seen_dir == [None]  # the run directory is made at the export, not before the capture
        assert r.result is not None and r.result.run_dir is None and r.result.ops
        msgs = _ns_warnings(record)
        assert len(msgs) == 1 and "No space left on device" in msgs[0], msgs
        # Nothing half-written is left: no run directory, marked or not, and no temporary file.
        assert _run_dirs_on_disk(root) == []
        assert [p for p in _files_under(fs) if p.name not in ("filler",)] == []


def test_read_only_root_for_real(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "ro", "ro,size=64k") as fs:

        @profile_on_neuron(warmup=0, backend="cpu", output_dir=str(fs / "runs"))
        def step() -> str:
            _work(3)
            return "done"

        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            assert step() == "done"
        TALLY["faults_injected"] += 1
        assert step.last_result is not None and step.last_result.run_dir is None
        msgs = _ns_warnings(record)
        assert len(msgs) == 1 and "Read-only file system" in msgs[0], msgs


# ---- disk full, injected --------------------------------------------------------------------


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


FSYNC_ORDER = ["result.json", "summary", "trace"]  # the export's order: small files first


@pytest.mark.parametrize("nth", [1, 2, 3], ids=FSYNC_ORDER)
@pytest.mark.parametrize("trace_format", ["json", "gz"])
def test_enospc_from_fsync_at_each_file(patch: pytest.MonkeyPatch, runs_dir: Path, nth: int, trace_format: str) -> None:
    """Network and some local file systems report a full disk only at fsync or close. Up to
    summary.txt the export fails as a whole (the result stays in memory, one warning, nothing on
    disk); at the trace, the small files written first stay and say why the trace is missing."""
    calls = {"n": 0}
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == nth:
            raise _enospc()
        real_fsync(fd)

    logged: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = logged.append  # type: ignore[method-assign]
    logging.getLogger("neuronscope").addHandler(handler)
    patch.setattr(os, "fsync", fsync)
    try:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            with neuron_region("enospc", backend="cpu", trace_format=trace_format) as r:
                _work()
    finally:
        patch.undo()
        logging.getLogger("neuronscope").removeHandler(handler)
    TALLY["faults_injected"] += 1
    assert calls["n"] >= nth, "the fault was not reached"
    assert r.result is not None and r.result.ops
    if FSYNC_ORDER[nth - 1] != "trace":
        assert r.result.run_dir is None
        msgs = _ns_warnings(record)
        assert len(msgs) == 1 and "No space left on device" in msgs[0], msgs
        assert _run_dirs_on_disk(runs_dir) == [] and _files_under(runs_dir) == []
        return
    assert r.result.run_dir is not None
    run = Path(r.result.run_dir)
    assert sorted(p.name for p in run.iterdir()) == ["result.json", "summary.txt"]
    loaded = load(run)
    assert isinstance(loaded, ProfileResult) and len(loaded.ops) == len(r.result.ops)
    assert any("trace not written" in n and "No space left" in n for n in loaded.notes), loaded.notes
    assert "trace not written" in (run / "summary.txt").read_text()
    assert "trace" not in loaded.artifacts
    assert any("trace" in rec.getMessage() and "not written" in rec.getMessage() for rec in logged)


@pytest.mark.parametrize("victim", ["summary.txt", "result.json"])
def test_enospc_half_way_through_a_write(patch: pytest.MonkeyPatch, runs_dir: Path, victim: str) -> None:
    """The disk fills in the middle of a file: half its bytes land, then ENOSPC."""
    real_write_bytes = Path.write_bytes

    def write_bytes(self: Path, data: bytes) -> int:
        if self.name.startswith(f".{victim}.tmp"):
            real_write_bytes(self, data[: len(data) // 2])
            raise _enospc()
        return real_write_bytes(self, data)

    patch.setattr(Path, "write_bytes", write_bytes)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with neuron_region("half", backend="cpu", trace_format="json") as r:
            _work()
    patch.undo()
    TALLY["faults_injected"] += 1
    assert r.result is not None and r.result.run_dir is None
    assert len(_ns_warnings(record)) == 1
    assert _files_under(runs_dir) == []


def test_marker_write_failing_leaves_no_stray_directory(patch: pytest.MonkeyPatch, runs_dir: Path) -> None:
    """``new_run_dir`` made the directory, then the disk was full for its marker: it used to
    stay behind, unmarked and empty, invisible to ``ls``."""
    real = safe_io.create_exclusive

    def create_exclusive(dir_fd: int, name: str, mode: int = 0o644) -> int:
        if name == runs.INCOMPLETE_MARKER:
            raise _enospc()
        return real(dir_fd, name, mode)

    patch.setattr(safe_io, "create_exclusive", create_exclusive)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with neuron_region("marker", backend="cpu") as r:
            _work(3)
    patch.undo()
    TALLY["faults_injected"] += 1
    assert r.result is not None and r.result.run_dir is None
    assert len(_ns_warnings(record)) == 1
    assert _run_dirs_on_disk(runs_dir) == []


# ---- the profiler itself failing ------------------------------------------------------------


def test_profiler_failing_to_start_runs_the_call_unprofiled() -> None:
    def broken_start(_: Any) -> None:
        raise RuntimeError("kineto could not start")

    @profile_on_neuron(warmup=0, backend=faulty_backend(before_start=broken_start), export=False)
    def step(x: int) -> int:
        return x + 1

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert step(1) == 2
    TALLY["faults_injected"] += 1
    msgs = _ns_warnings(record)
    assert len(msgs) == 1 and "kineto could not start" in msgs[0]
    assert ensure_no_capture_running()
    with neuron_region("after", backend="cpu", export=False) as r:
        _work(3)
    assert r.result is not None and r.result.status == "ok"


def test_start_failing_after_the_profiler_started_stops_it() -> None:
    """The torch profiler is running when the failure comes. Left running, it made every
    later capture in the process skip, and the error reached the user."""

    def broken(_: Any) -> None:
        raise RuntimeError("failed after the start")

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with neuron_region("half-started", backend=faulty_backend(after_start=broken)) as r:
            value = 7
    TALLY["faults_injected"] += 1
    assert value == 7 and r.result is None
    assert len(_ns_warnings(record)) == 1
    assert not torch.autograd.profiler._is_profiler_enabled
    assert _run_dirs_on_disk(Path(os.environ["NEURONSCOPE_OUTPUT_DIR"])) == []
    with neuron_region("after", backend="cpu", export=False) as r2:
        _work(3)
    assert r2.result is not None and r2.result.status == "ok"


def test_device_sync_failing_at_stop_keeps_the_result(patch: pytest.MonkeyPatch) -> None:
    from neuronscope.capture.cpu import CpuBackend

    def broken_sync(self: Any) -> None:
        raise RuntimeError("device lost")

    patch.setattr(CpuBackend, "synchronize", broken_sync)
    with neuron_region("sync", backend="cpu", export=False) as r:
        _work(3)
    patch.undo()
    TALLY["faults_injected"] += 1
    assert r.result is not None and r.result.status == "error" and "device lost" in (r.result.error or "")
    assert not torch.autograd.profiler._is_profiler_enabled


# ---- atomic files ---------------------------------------------------------------------------


@pytest.mark.parametrize("trace_format,trace_name", [("json", "trace.json"), ("gz", "trace.json.gz")])
def test_complete_runs_hold_no_temporary_files(runs_dir: Path, trace_format: str, trace_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with neuron_region("clean", backend="cpu", trace_format=trace_format) as r:
        _work()
    assert r.result is not None and r.result.run_dir is not None
    run = Path(r.result.run_dir)
    assert sorted(p.name for p in run.iterdir()) == sorted(["result.json", "summary.txt", trace_name])
    complete, incomplete = audit_runs(runs_dir, capsys)
    assert complete == [run] and incomplete == []


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _wait_for_file(path: Path, proc: subprocess.Popen[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the worker exited ({proc.returncode}) before {path.name}: {proc.stderr.read() if proc.stderr else ''}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the worker did not reach {path.name} in {timeout:.0f} s")
        time.sleep(0.01)
    return path.read_text()


def _sigkill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    TALLY["processes_killed"] += 1


@pytest.mark.parametrize("point", ["trace-mid", "summary-mid", "result-mid", "result-renamed"])
def test_sigkill_at_each_step_of_an_export(tmp_path: Path, point: str, capsys: pytest.CaptureFixture[str]) -> None:
    root, ready = tmp_path / "runs", tmp_path / "ready"
    proc = _spawn("block", str(root), point, str(ready))
    run = Path(_wait_for_file(ready, proc, timeout=60))
    _sigkill(proc)
    TALLY["faults_injected"] += 1
    complete, incomplete = audit_runs(root, capsys)
    names = {p.name for p in run.iterdir()}
    assert incomplete == [run] and complete == []
    # result.json is written first, so from "summary-mid" on the measurement is on disk.
    measured = point != "result-mid"
    assert ("result.json" in names) == measured, names
    # The half-written temporary file is there, inside a directory marked incomplete.
    half = {"trace-mid": "trace.json", "summary-mid": "summary.txt", "result-mid": "result.json"}.get(point)
    if half is not None:
        assert any(n.startswith(f".{half}.tmp") for n in names), names
        if half != "result.json":
            assert half not in names
    capsys.readouterr()
    if not measured:
        assert cli_main(["show", str(run)]) == 2
        assert "incomplete" in capsys.readouterr().err
        return
    loaded = load(run)
    assert isinstance(loaded, ProfileResult) and len(loaded.ops) == 300
    assert cli_main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "incomplete" in out and "aten::op0" in out


@pytest.mark.slow
def test_sigkill_at_random_moments_in_a_loop_of_exports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    rng = random.Random(8)
    kills = 4
    finished = 0
    for _ in range(kills):
        proc = _spawn("loop", str(root))
        assert proc.stdout is not None
        target = rng.randint(1, 4)
        for line in proc.stdout:
            if int(line) >= target:
                break
        time.sleep(rng.uniform(0.0, 0.05))  # lands anywhere in the next export
        _sigkill(proc)
        finished += target
        TALLY["faults_injected"] += 1
    complete, incomplete = audit_runs(root, capsys)
    # Every export that reported itself finished is complete; at most one per kill is not.
    assert len(complete) >= finished
    assert len(incomplete) <= kills


# ---- KeyboardInterrupt, SystemExit and errors in nested regions ------------------------------

EXCEPTIONS: list[Callable[[], BaseException]] = [
    lambda: KeyboardInterrupt(),
    lambda: SystemExit(3),
    lambda: ValueError("inner failed"),
]


def _assert_clean_and_working() -> None:
    assert ensure_no_capture_running()
    assert not torch.autograd.profiler._is_profiler_enabled
    with neuron_region("next", backend="cpu", export=False) as r:
        _work(3)
    assert r.result is not None and r.result.status == "ok"


@pytest.mark.parametrize("make_exc", EXCEPTIONS, ids=["KeyboardInterrupt", "SystemExit", "ValueError"])
@pytest.mark.parametrize("shape", ["region-in-region", "decorated-in-region", "decorated-in-decorated"])
def test_interrupt_in_a_nested_region(make_exc: Callable[[], BaseException], shape: str) -> None:
    exc = make_exc()

    def body() -> None:
        _work(5)
        raise exc

    inner_fn = profile_on_neuron(name="inner", warmup=0, backend="cpu")(body)
    result: ProfileResult | None
    with pytest.raises(type(exc)) as info:
        if shape == "region-in-region":
            outer = neuron_region("outer", backend="cpu")
            with outer, neuron_region("inner", backend="cpu"):
                body()
        elif shape == "decorated-in-region":
            outer = neuron_region("outer", backend="cpu")
            with outer:
                inner_fn()
        else:
            outer_fn = profile_on_neuron(name="outer", warmup=0, backend="cpu")(lambda: inner_fn())
            outer_fn()
    assert info.value is exc  # the very object, not a copy or a wrapper
    result = outer_fn.last_result if shape == "decorated-in-decorated" else outer.result
    assert result is not None and result.status == "error"
    assert (result.error or "").startswith(type(exc).__name__)
    assert "inner" in result.regions
    assert result.run_dir is not None
    on_disk = load(result.run_dir)
    assert isinstance(on_disk, ProfileResult) and on_disk.status == "error" and on_disk.error == result.error
    _assert_clean_and_working()


def test_error_caught_inside_the_outer_region_leaves_it_ok() -> None:
    with neuron_region("outer", backend="cpu", export=False) as outer:
        try:
            with neuron_region("inner", backend="cpu"):
                _work(3)
                raise ValueError("handled")
        except ValueError:
            pass
        _work(3)
    assert outer.result is not None and outer.result.status == "ok" and "inner" in outer.result.regions
    _assert_clean_and_working()


def test_ctrl_c_during_the_export_keeps_the_result(patch: pytest.MonkeyPatch, runs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C landing while a large trace is written: the interrupt goes on (same object), the
    result measured before it stays in memory, and what was written before it (result.json and
    summary.txt come first) stays on disk in a run marked incomplete, with no temporary file."""
    interrupt = KeyboardInterrupt()
    from neuronscope.export import trace_out

    real = trace_out.save_chrome_trace

    def interrupted(prof: Any, path: Path) -> None:  # torch's write done, then Ctrl-C
        real(prof, path)
        raise interrupt

    patch.setattr(trace_out, "save_chrome_trace", interrupted)

    @profile_on_neuron(warmup=0, backend="cpu", trace_format="json")
    def step() -> None:
        _work(5)

    with pytest.raises(KeyboardInterrupt) as info:
        with neuron_region("ctrl-c", backend="cpu", trace_format="json") as r:
            _work(5)
    assert info.value is interrupt
    assert r.result is not None and r.result.ops and r.result.run_dir is None
    with pytest.raises(KeyboardInterrupt):
        step()
    patch.undo()
    TALLY["faults_injected"] += 2
    assert step.last_result is not None and step.last_result.ops and step.last_result.run_dir is None
    kept = sorted(p.relative_to(runs_dir).parts[0] for p in _files_under(runs_dir) if p.name == "result.json")
    assert kept == ["ctrl-c", "step"], _files_under(runs_dir)
    for run in _run_dirs_on_disk(runs_dir):
        assert sorted(p.name for p in run.iterdir()) == [".incomplete", "result.json", "summary.txt"]
        assert len(load(run).ops) > 0
    assert any("interrupted" in n for n in r.result.notes)
    _assert_clean_and_working()


def test_asyncio_tasks_interleaving_keep_the_count_at_zero() -> None:
    """Two decorated coroutines under gather on one thread: the second runs inside the first's
    capture, and the first ends before it. The count went to -1."""

    @profile_on_neuron(warmup=0, active=None, backend="cpu", export=False)
    async def task(delay: float, value: int) -> int:
        await asyncio.sleep(delay)
        _work(3)
        return value

    async def both() -> list[int]:
        return list(await asyncio.gather(task(0.01, 1), task(0.05, 2)))

    assert asyncio.run(both()) == [1, 2]
    _assert_clean_and_working()
    assert asyncio.run(both()) == [1, 2]
    assert task.last_result is not None
    _assert_clean_and_working()


# ---- threads --------------------------------------------------------------------------------


@contextlib.contextmanager
def _count_concurrent_captures() -> Iterator[dict[str, int]]:
    """Track how many torch captures of CountingBackend run at once, and in all."""
    yield CountingBackend.reset()


@pytest.fixture
def fast_thread_switches() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: races show up, if there are any
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def test_threads_get_right_values_one_capture_at_a_time_and_every_skip_counted(
    fast_thread_switches: None, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    base = torch.arange(16.0).reshape(4, 4)

    @profile_on_neuron(warmup=0, active=None, backend=CountingBackend, export=False)
    def work(i: int) -> tuple[int, torch.Tensor]:
        y = base * i
        for _ in range(4):
            y = y + 1
        return i, y

    def call_many(thread: int, n: int, barrier: threading.Barrier) -> int:
        barrier.wait()
        for k in range(n):
            i = thread * 1000 + k
            got, y = work(i)
            assert got == i and torch.equal(y, base * i + 4), f"wrong value for call {i}"
        return n

    logger = logging.getLogger("neuronscope")
    logger.addHandler(caplog.handler)
    request.addfinalizer(lambda: logger.removeHandler(caplog.handler))
    # 1. Deterministic: a capture holds the profiler; 7 threads x 5 calls must all skip.
    with _count_concurrent_captures() as seen, neuron_region("holder", backend=CountingBackend, export=False) as holder:
        barrier = threading.Barrier(7)
        with ThreadPoolExecutor(7) as pool:
            assert sum(pool.map(lambda t: call_many(t, 5, barrier), range(7))) == 35
    assert work.skipped_calls == 35 and work.results == []
    assert holder.result is not None and seen["max"] == 1
    skip_logs = [r.getMessage() for r in caplog.records if "ran uncaptured" in r.getMessage()]
    assert any("(10 call(s) so far" in m for m in skip_logs) and len(set(skip_logs)) <= 2, skip_logs
    # 2. A free-for-all: 8 threads x 8 calls, each call either captured or counted.
    with _count_concurrent_captures() as seen:
        barrier = threading.Barrier(8)
        with ThreadPoolExecutor(8) as pool:
            assert sum(pool.map(lambda t: call_many(t, 8, barrier), range(8))) == 64
    assert seen["max"] == 1, "two torch captures ran at once"
    captured = len(work.results)
    assert captured == seen["total"] and captured + (work.skipped_calls - 35) == 64
    assert work.last_result is not None and work.last_result.skipped_calls <= work.skipped_calls
    TALLY["results_lost"] += 64 - captured - (work.skipped_calls - 35)


def test_skip_counts_are_the_same_in_memory_and_on_disk(fast_thread_switches: None) -> None:
    """``result.skipped_calls`` was set after the export, so result.json always said 0."""

    @profile_on_neuron(warmup=0, active=None, backend="cpu")
    def step(i: int) -> int:
        _work(2)
        return -i

    region = neuron_region("threaded-region", backend="cpu")
    with neuron_region("holder", backend="cpu", export=False):
        with ThreadPoolExecutor(3) as pool:
            assert list(pool.map(step, range(3))) == [0, -1, -2]

            def use_region(_: int) -> int:
                with region:
                    return 1

            assert sum(pool.map(use_region, range(4))) == 4
    assert step.skipped_calls == 3 and region.skipped_calls == 4
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(step, range(4))) == [0, -1, -2, -3]
    captured = step.results
    assert len(captured) + step.skipped_calls - 3 == 4
    run_dirs = [r.run_dir for r in captured]
    assert all(run_dirs) and len(set(run_dirs)) == len(run_dirs)
    for result in captured:
        assert result.skipped_calls >= 3
        assert load(result.run_dir).skipped_calls == result.skipped_calls  # type: ignore[arg-type, union-attr]
    with region:
        _work(2)
    assert region.result is not None and region.result.skipped_calls == 4
    assert load(region.result.run_dir).skipped_calls == 4  # type: ignore[arg-type, union-attr]


def test_calls_under_the_users_own_profiler_are_counted() -> None:
    @profile_on_neuron(warmup=0, backend="cpu", export=False)
    def step(x: int) -> int:
        return x * 3

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert [step(i) for i in range(1)] == [0]
    assert step.skipped_calls == 1 and step.results == []


def test_module_and_disabled_wrappers_have_skipped_calls() -> None:
    model = profile_on_neuron(torch.nn.Linear(2, 2), warmup=0, backend="cpu", export=False)
    off = profile_on_neuron(lambda: 1, enabled=False)
    assert model.skipped_calls == 0 and off.skipped_calls == 0


# ---- long runs ------------------------------------------------------------------------------


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.slow
def test_memory_stays_bounded_over_hundreds_of_captures(runs_dir: Path) -> None:
    x = torch.randn(8, 8)

    @profile_on_neuron(warmup=0, active=None, backend="cpu", export=False)
    def step() -> torch.Tensor:
        return torch.tanh(x @ x).sum()

    for _ in range(MAX_KEPT_RESULTS + 20):  # fill .results and every cache first
        step()
    gc.collect()
    rss0, objects0 = _rss_mib(), len(gc.get_objects())
    for _ in range(300):
        step()
    gc.collect()
    rss1, objects1 = _rss_mib(), len(gc.get_objects())
    assert len(step.results) == MAX_KEPT_RESULTS and step.results[-1] is step.last_result
    # Measured here: +0 objects and +3.5 MiB over 300 captures (allocator noise). Keeping one
    # object per capture would add 300; keeping each result (or its profiler) far more.
    assert objects1 - objects0 < 150, f"{objects1 - objects0} Python objects more after 300 captures"
    assert rss1 - rss0 < 64, f"RSS grew {rss1 - rss0:.1f} MiB over 300 captures"
    # Some exported ones too: bounded, and never the same directory twice.
    dirs = set()
    for _ in range(40):
        with neuron_region("exported", backend="cpu") as r:
            torch.tanh(x @ x)
        assert r.result is not None and r.result.run_dir is not None
        dirs.add(r.result.run_dir)
    gc.collect()
    assert len(dirs) == 40 and _rss_mib() - rss0 < 96


def test_results_are_capped() -> None:
    @profile_on_neuron(warmup=0, active=None, backend="cpu", export=False, hints=False)
    def step(i: int) -> int:
        return i

    for i in range(MAX_KEPT_RESULTS + 5):
        assert step(i) == i
    assert len(step.results) == MAX_KEPT_RESULTS
    assert step.results[-1] is step.last_result
    assert step.results[0].wall_time_us >= 0 and step.results[0] is not step.results[-1]


def test_run_directories_never_collide(tmp_path: Path) -> None:
    """The same timestamp asked for 64 times, from 8 threads: 64 directories, in order."""
    import datetime as dt

    when = dt.datetime(2025, 1, 2, 3, 4, 5, 999_990)
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: export.new_run_dir(tmp_path, "same", when=when), range(64)))
    assert len(set(made)) == 64 and all((p / runs.INCOMPLETE_MARKER).is_file() for p in made)
    sequential = [export.new_run_dir(tmp_path, "seq", when=when) for _ in range(5)]
    assert sequential == sorted(sequential)  # a collision moves the stamp on, still sorting by time


# ---- load() and the CLI on bad runs ---------------------------------------------------------


def _good_dict() -> dict[str, Any]:
    result = ProfileResult(
        name="good",
        backend="cpu",
        wall_time_us=1234.5,
        ops=[OpStat("aten::mul", 3, 10.0, 12.0, input_shapes=[[[2, 2], [2, 2]]]), OpStat("aten::add", 1, 5.0, 5.0)],
    )
    return result.to_dict()


def _write(run: Path, name: str, content: bytes | str) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    path = run / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def _trace_text() -> str:
    return json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mul", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]})


GOOD = json.dumps(_good_dict(), indent=2)
BAD_RUNS: dict[str, tuple[Callable[[Path], Path], str]] = {
    # case: (make it under a directory; returns what to pass to load / show), the problem named
    "empty": (lambda d: _write(d, "result.json", "").parent, "empty"),
    "whitespace": (lambda d: _write(d, "result.json", " \n\t ").parent, "empty"),
    "truncated": (lambda d: _write(d, "result.json", GOOD[: len(GOOD) // 2]).parent, "not valid JSON"),
    "corrupt-bytes": (lambda d: _write(d, "result.json", b"\x89PNG\r\n\x1a\n\x00\xff").parent, "cannot be read"),
    "not-an-object": (lambda d: _write(d, "result.json", "[1, 2, 3]").parent, "expected a JSON object"),
    "foreign-json": (lambda d: _write(d, "result.json", '{"hello": "world"}').parent, "neither a neuronscope result"),
    "trace-as-result": (lambda d: _write(d, "result.json", _trace_text()).parent, "Chrome trace"),
    "trace-file-given": (lambda d: _write(d, "trace.json", _trace_text()), "Chrome trace"),
    "trace-directory-given": (lambda d: _write(d, "trace.json", _trace_text()) and d, "no result.json"),
    "newer-schema": (
        lambda d: _write(d, "result.json", json.dumps({**_good_dict(), "schema_version": SCHEMA_VERSION + 1})).parent,
        "newer neuronscope",
    ),
    "schema-not-int": (lambda d: _write(d, "result.json", json.dumps({**_good_dict(), "schema_version": "1"})).parent, "schema_version"),
    "other-type": (lambda d: _write(d, "result.json", json.dumps({**_good_dict(), "type": "Banana"})).parent, "Banana"),
    "missing-name": (
        lambda d: _write(d, "result.json", json.dumps({k: v for k, v in _good_dict().items() if k != "name"})).parent,
        "malformed",
    ),
    "ops-wrong-type": (lambda d: _write(d, "result.json", json.dumps({**_good_dict(), "ops": [1, 2]})).parent, "malformed"),
    "calls-infinite": (
        lambda d: _write(d, "result.json", GOOD.replace('"calls": 3', '"calls": 1e999')).parent,
        "malformed",
    ),
    "huge-integer": (lambda d: _write(d, "result.json", GOOD.replace('"calls": 3', '"calls": ' + "9" * 5000)).parent, "not valid JSON"),
    "deep-nesting": (lambda d: _write(d, "result.json", '{"schema_version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}").parent, "not valid JSON"),
    "ranks-wrong-type": (lambda d: _write(d, "result.json", json.dumps({**_good_dict(), "ranks": [1]})).parent, "ranks"),
    "result-is-a-directory": (lambda d: (d / "result.json").mkdir(parents=True) or d, "result.json is not a regular file (a directory)"),
    "result-is-a-fifo": (lambda d: d.mkdir(parents=True) or os.mkfifo(d / "result.json") or d, "result.json is not a regular file (a pipe)"),
    "missing": (lambda d: d / "does-not-exist", "no such file"),
    "empty-directory": (lambda d: d.mkdir(parents=True) or d, "not a neuronscope run"),
    "incomplete": (lambda d: _write(d, ".incomplete", "export in progress\n").parent, "incomplete"),
    "name-too-long": (lambda d: d / ("x" * 5000), "not a usable path"),
}


@pytest.mark.parametrize("case", sorted(BAD_RUNS))
def test_load_and_cli_on_bad_runs(tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    make, problem = BAD_RUNS[case]
    target = make(tmp_path / "run")
    TALLY["bad_inputs"] += 1
    with pytest.raises(RunLoadError) as info:
        load(target)
    message = str(info.value)
    assert problem in message, message
    assert str(target)[:100] in message or repr(str(target))[1:100] in message, "the message must name the file"
    # `show` opens a trace file as a trace (from_trace), by design; argv cannot carry 5000 chars.
    if case != "trace-file-given" and len(str(target)) < 4000:
        capsys.readouterr()
        assert cli_main(["show", str(target)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("neuronscope: error:") and problem in err and "Traceback" not in err


def test_ls_lists_bad_runs_without_failing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    for case in ("truncated", "foreign-json", "newer-schema", "incomplete", "empty"):
        BAD_RUNS[case][0](root / "name" / f"20250101-000000-00000{len(case)}_{case}")
    _write(root / "name" / "20250101-000000-999999_good", "result.json", GOOD)
    rows = _ls_json(root, capsys)
    status = {Path(k).name.split("_", 1)[1]: v["status"] for k, v in rows.items()}
    assert status == {
        "truncated": "unreadable",
        "foreign-json": "unreadable",
        "newer-schema": "unreadable",
        "incomplete": "incomplete",
        "empty": "unreadable",
        "good": "ok",
    }
    TALLY["bad_inputs"] += 5


def _schema1_by_hand() -> dict[str, Any]:
    """What an early schema-1 writer produced: no options, artifacts, notes, skipped_calls,
    event_count, regions or hints, and ops without device fields or shapes."""
    return {
        "schema_version": 1,
        "type": "ProfileResult",
        "name": "old",
        "backend": "cpu",
        "status": "ok",
        "wall_time_us": 500.0,
        "ops": [{"name": "aten::mm", "calls": 2, "self_cpu_us": 100.0, "cpu_total_us": 120.0}],
        "run_dir": "/somewhere/else",
    }


@pytest.mark.parametrize("drop_type", [False, True], ids=["with-type", "without-type"])
def test_older_schema_still_loads(tmp_path: Path, drop_type: bool, capsys: pytest.CaptureFixture[str]) -> None:
    data = _schema1_by_hand()
    if drop_type:
        del data["type"]
    run = _write(tmp_path / "old-run", "result.json", json.dumps(data)).parent
    loaded = load(run)
    assert isinstance(loaded, ProfileResult)
    assert loaded.name == "old" and loaded.run_dir == str(run)  # where it is now, not where it was
    op = loaded.op("aten::mm")
    assert op is not None and op.calls == 2 and op.self_device_us is None and op.input_shapes == []
    assert loaded.hints == [] and loaded.regions == {} and loaded.skipped_calls == 0 and loaded.options == {}
    capsys.readouterr()
    assert cli_main(["show", str(run)]) == 0
    assert "aten::mm" in capsys.readouterr().out


# ---- two real processes: same root at the same moment, then a kill during a real trace -------


class _RealWorkers:
    """Two processes with real torch captures, started with the module (torch takes seconds to
    import) and meeting at a barrier, so that both export at the same moment."""

    N = 8

    def __init__(self, base: Path) -> None:
        self.root = base / "runs"
        self.ready = base / "blocked"
        barrier = base / "barrier"
        self.procs = [
            _spawn("captures", str(self.root), str(self.N), str(barrier), "2", "--then-block", str(self.ready)),
            _spawn("captures", str(self.root), str(self.N), str(barrier), "2"),
        ]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


_real_workers: _RealWorkers | None = None


@pytest.fixture(scope="module", autouse=True)
def _start_real_workers_early(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Start the two torch processes when the module starts, if a test selected here needs
    them, so their start-up overlaps the in-process tests."""
    global _real_workers
    wanted = any("real_workers" in getattr(item, "fixturenames", ()) for item in request.session.items)
    if wanted:
        _real_workers = _RealWorkers(tmp_path_factory.mktemp("real-workers"))
    yield
    if _real_workers is not None:
        _real_workers.stop()
        _real_workers = None


@pytest.fixture
def real_workers() -> _RealWorkers:
    assert _real_workers is not None
    return _real_workers


@pytest.mark.slow
def test_two_processes_export_to_one_root_at_once(real_workers: _RealWorkers, capsys: pytest.CaptureFixture[str]) -> None:
    w1, w2 = real_workers.procs
    assert w2.wait(timeout=240) == 0, w2.stderr.read() if w2.stderr else ""
    assert w1.stdout is not None and w1.stdout.readline().strip() == "done"
    shared = [r for r in _run_dirs_on_disk(real_workers.root) if r.parent.name == "shared"]
    assert len(shared) == 2 * real_workers.N and len({r.name for r in shared}) == len(shared)
    by_pid: dict[str, int] = {}
    for run in shared:
        loaded = load(run)
        assert isinstance(loaded, ProfileResult) and loaded.status == "ok" and loaded.ops
        by_pid[str(loaded.pid)] = by_pid.get(str(loaded.pid), 0) + 1
        assert f"pid{loaded.pid}" in run.name
    assert sorted(by_pid.values()) == [real_workers.N, real_workers.N]


@pytest.mark.slow
def test_sigkill_while_a_real_trace_is_being_written(real_workers: _RealWorkers, capsys: pytest.CaptureFixture[str]) -> None:
    w1 = real_workers.procs[0]
    run = Path(_wait_for_file(real_workers.ready, w1, timeout=240))
    _sigkill(w1)
    TALLY["faults_injected"] += 1
    names = {p.name for p in run.iterdir()}
    # The measurement was written before the trace: it is kept, in a run marked incomplete.
    assert runs.INCOMPLETE_MARKER in names and {"result.json", "summary.txt"} <= names
    assert any(n.startswith(WORK_PREFIX) for n in names), names  # torch's half-written trace
    complete, incomplete = audit_runs(real_workers.root, capsys)
    assert run in incomplete
    assert load(run).ops
    assert all(r.parent.name == "shared" for r in complete)


# ---- fork, names, stale files (issue 21, item 15) --------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_child_forked_during_a_capture_is_told_once(tmp_path: Path) -> None:
    from neuronscope.drive import forking

    out = tmp_path / "child.txt"
    with neuron_region("forking", backend="cpu", export=False):
        pid = os.fork()
        if pid == 0:  # the child: report what it saw, then leave without running pytest's exit
            try:
                with warnings.catch_warnings(record=True) as record:
                    warnings.simplefilter("always")
                    results = []
                    for _ in range(2):  # a region in the child: runs its block, captures nothing
                        with neuron_region("in-child", backend="cpu", export=False) as child:
                            _work(2)
                        results.append(child.result)
                    by_region = len([w for w in record if "forked" in str(w.message)])  # said on entry
                    first, second = forking.check_forked_child(), forking.check_forked_child()
                msgs = [str(w.message) for w in record if "forked" in str(w.message)]
                out.write_text(json.dumps({"first": first, "second": second, "msgs": msgs, "none": results == [None, None], "by_region": by_region}))
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    seen = json.loads(out.read_text())
    assert seen["first"] and seen["second"] and seen["none"] and seen["by_region"] == 1 and len(seen["msgs"]) == 1
    assert "forked" in seen["msgs"][0] and "spawn" in seen["msgs"][0]
    assert not forking.check_forked_child()  # the parent is not a forked child


@pytest.mark.parametrize(
    "name,expected",
    [
        ("ünï©ødé✓", "ünï_ødé"),
        ("CON", "_CON"),
        ("nul.txt", "_nul.txt"),
        ("LPT1", "_LPT1"),
        ("a/b c", "a_b_c"),
        ("..", "run"),
        ("model\ud800x", "model_x"),
    ],
)
def test_names_keep_their_letters_and_are_safe_on_every_file_system(name: str, expected: str) -> None:
    assert export.safe_name(name) == expected


def test_a_huge_name_is_bounded_and_two_huge_names_stay_apart(tmp_path: Path) -> None:
    a, b = export.safe_name("x" * 50_000 + "a"), export.safe_name("x" * 50_000 + "b")
    assert a != b and len(a) <= export.MAX_NAME_CHARS and len(a.encode()) <= 180
    assert len(export.safe_name("é" * 500).encode()) <= 180
    with neuron_region("y" * 50_000, backend="cpu", output_dir=str(tmp_path)) as r:
        _work(2)
    assert r.result is not None and r.result.run_dir is not None
    assert len(Path(r.result.run_dir).parent.name) <= export.MAX_NAME_CHARS


def test_stale_raw_traces_of_dead_processes_are_removed(tmp_path: Path) -> None:
    """A SIGKILL while the trace was gzipped left a hidden 100+ MB .trace.json.raw forever."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    host = export.safe_name(__import__("socket").gethostname().split(".")[0] or "host")
    name_dir = tmp_path / "runs" / "stale"
    old = name_dir / f"20250101-000000-000000_{host}_pid{dead_pid}"
    mine = name_dir / f"20250101-000000-000001_{host}_pid{os.getpid()}"
    other_host = name_dir / f"20250101-000000-000002_elsewhere_pid{dead_pid}"
    hidden = name_dir / f".20250101-000000-000003_{host}_pid{dead_pid}.new"
    for d in (old, mine, other_host, hidden):
        d.mkdir(parents=True)
        (d / export.RAW_TRACE).write_bytes(b"x" * 1000)
    work = old / f"{WORK_PREFIX}{dead_pid}.abcd"  # torch's private directory, mid-write
    work.mkdir()
    (work / "trace.json.tmp").write_bytes(b"x" * 1000)
    for d in (old, mine, other_host):
        (d / runs.INCOMPLETE_MARKER).write_text("")
    export.export_result(ProfileResult(name="stale", backend="cpu"), tmp_path / "runs", summary="s")
    assert not (old / export.RAW_TRACE).exists() and not hidden.exists() and not work.exists()
    assert (mine / export.RAW_TRACE).exists()  # a live process (this one) may still be writing it
    assert (other_host / export.RAW_TRACE).exists()  # another host's pids say nothing here
