"""The run directory: one new, time-sorted directory per capture, written safely.

Layout (CONTRACT.md)::

    <output_root>/<name>/<YYYYmmdd-HHMMSS-ffffff>_<host>_pid<pid>[_rank<r>]/
        result.json      the ProfileResult (with schema_version)
        summary.txt      the tables and hints as printed
        trace.json[.gz]  Chrome trace (Perfetto, TensorBoard)

:func:`export_result` takes a finished result and makes and fills its directory. Reading runs back
(``load``, ``find_runs``) lives in :mod:`neuronscope.runs` and is re-exported here. The directory
is created with ``mkdir`` (which fails if it exists), so two captures in the same microsecond,
or from two processes, never share one: the later one moves its timestamp on by a microsecond.
Every write goes through :mod:`neuronscope.safe_io` (no symlinks, no other user's directories,
writes through the directory's descriptor, exclusive temporary files renamed into place).

Order: a ``.incomplete`` marker first, then the small, precious files (``result.json``,
``summary.txt``), then the trace, which can be large and is the one to fail on a full disk;
``result.json`` is rewritten once the trace is in (to name it), and the marker goes last. A
process killed half-way leaves a directory that says so, with the measurement already in it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import errno
import hashlib
import logging
import os
import re
import socket
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from neuronscope.export import safe_io
from neuronscope.export.runs import (
    INCOMPLETE_MARKER,
    RESULT_FILE,
    SUMMARY_FILE,
)
from neuronscope.export.safe_io import atomic_write_with
from neuronscope.export.trace_out import (
    RAW_TRACE,
    TraceWriter,
)
from neuronscope.result.comparison import Comparison
from neuronscope.result.types import ProfileResult

__all__ = [
    "export_result",
    "fill_run",
    "finish_run",
    "new_run_dir",
    "safe_name",
    "save_result",
]

log = logging.getLogger("neuronscope")

#: Characters kept in a directory name: letters and digits of any script (``\w``), '.', '-'.
_UNSAFE_CHARS = re.compile(r"[^\w.\-]+")
#: Names Windows reserves for devices, with or without an extension (a run copied there).
_RESERVED = frozenset({"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))})
#: Longest directory name made from a capture name, in characters and UTF-8 bytes (file systems
#: allow 255 bytes; the run directory's own name and a hash suffix must fit beside it).
MAX_NAME_CHARS = 96
_MAX_NAME_BYTES = 180

_R = TypeVar("_R", ProfileResult, Comparison)


def safe_name(name: str) -> str:
    """A directory-safe form of a capture name: letters of every script stay ('ünïødé'), other
    characters become '_' ('a/b c' -> 'a_b_c'), Windows device names get a leading '_'
    ('CON' -> '_CON'), and a long name is cut, with a hash of the whole so that two long names
    stay apart."""
    text = unicodedata.normalize("NFC", str(name))
    cleaned = _UNSAFE_CHARS.sub("_", text).strip("._ ") or "run"
    if cleaned.split(".", 1)[0].upper() in _RESERVED:
        cleaned = "_" + cleaned
    if len(cleaned) > MAX_NAME_CHARS or len(cleaned.encode("utf-8", "replace")) > _MAX_NAME_BYTES:
        digest = hashlib.sha1(str(name).encode("utf-8", "surrogatepass")).hexdigest()[:10]
        cut = cleaned[: MAX_NAME_CHARS - 11]
        while len(cut.encode("utf-8", "replace")) > _MAX_NAME_BYTES - 11:
            cut = cut[:-1]
        cleaned = f"{cut}_{digest}"
    return cleaned


def _host() -> str:
    return safe_name(socket.gethostname().split(".")[0] or "host")


_RUN_NAME = re.compile(r"^\d{8}-\d{6}-\d{6}_(?P<host>.+)_pid(?P<pid>\d{1,10})(?:_rank\d+)?$")


def _create_run(root: Path | str, name: str, rank: int | None, when: _dt.datetime | None) -> tuple[Path, int]:
    """Make a new run directory, marked incomplete; return its path and an open descriptor."""
    parent = Path(root) / safe_name(name)
    parent_fd = safe_io.open_dir(parent, create=True, private_tail=1)
    try:
        _remove_stale_raw_traces(parent_fd)
        stamp = when or _dt.datetime.now()
        suffix = f"_{_host()}_pid{os.getpid()}" + (f"_rank{rank}" if rank is not None else "")
        for _ in range(10_000):
            dirname = stamp.strftime("%Y%m%d-%H%M%S-%f") + suffix
            fd = _make_marked_dir(parent_fd, dirname)
            if fd is None:  # taken: the next microsecond keeps the order
                stamp += _dt.timedelta(microseconds=1)
                continue
            return parent / dirname, fd
        raise OSError(f"could not create a new run directory under {parent}")  # pragma: no cover
    finally:
        os.close(parent_fd)


def _make_marked_dir(parent_fd: int, dirname: str) -> int | None:
    """Make ``dirname`` with the incomplete marker already inside, or return None if the name is
    taken. The directory is made under a hidden name and renamed into place, so a process killed
    at any moment never leaves an unmarked run directory (only a hidden one, which the next
    export of the name on this host removes)."""
    hidden = f".{dirname}.new"
    try:
        fd = safe_io.make_dir_at(parent_fd, hidden)
    except FileExistsError:  # another thread of this process is making the same name
        return None
    try:
        marker = safe_io.create_exclusive(fd, INCOMPLETE_MARKER)
        with os.fdopen(marker, "wb") as fh:
            fh.write(b"export in progress\n")
        os.rename(hidden, dirname, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    except BaseException as err:  # a full disk, a name taken, Ctrl-C: leave no directory behind
        os.close(fd)
        _remove_empty_run(parent_fd, hidden)
        if isinstance(err, OSError) and err.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            return None
        raise
    return fd


def _remove_empty_run(parent_fd: int, dirname: str) -> None:
    try:
        fd = os.open(dirname, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError:
        return
    try:
        for entry in os.listdir(fd):
            safe_io.unlink_quietly(fd, entry)
    finally:
        os.close(fd)
    try:
        os.rmdir(dirname, dir_fd=parent_fd)
    except OSError:
        pass


def _remove_stale_raw_traces(parent_fd: int) -> None:
    """Remove ``.trace.json.raw`` files that processes of this host, now gone, left behind in
    their incomplete runs (a SIGKILL while the trace was being gzipped), and hidden directories
    they never got to name."""
    host = _host()
    try:
        entries = os.listdir(parent_fd)
    except OSError:
        return
    for entry in entries:
        m = _RUN_NAME.match(entry.removeprefix(".").removesuffix(".new"))
        if m is None or m["host"] != host or _alive(int(m["pid"])):
            continue
        if entry.startswith("."):  # a directory its process never got to name
            _remove_empty_run(parent_fd, entry)
            continue
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid == os.geteuid():
                safe_io.unlink_quietly(fd, RAW_TRACE)
                for left in os.listdir(fd):  # private directories torch was writing in
                    if left.startswith(safe_io.WORK_PREFIX):
                        _remove_empty_run(fd, left)
        finally:
            os.close(fd)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's process (EPERM): alive
        return True
    return True


def new_run_dir(
    root: Path | str,
    name: str,
    rank: int | None = None,
    when: _dt.datetime | None = None,
) -> Path:
    """Create and return a new, empty run directory (marked incomplete) under ``root/name``.

    Never returns a directory that existed before: on a collision the timestamp moves on by one
    microsecond, which keeps the directories sorting by time. Prefer :func:`export_result`,
    which makes the directory once the result is finished and writes it in one go.
    """
    path, fd = _create_run(root, name, rank, when)
    os.close(fd)
    return path


# Text is encoded with "backslashreplace": a lone surrogate (a name from os.fsdecode of a
# non-UTF-8 file name) is written as '\\udc..' instead of failing the export.
def _write_text(path: Path, text: str) -> None:
    atomic_write_with(path, lambda tmp: tmp.write_bytes(text.encode("utf-8", "backslashreplace")))


def _summary_text(summary: str | Callable[[Any], str], result: Any, added: list[str] | None = None) -> str:
    """The summary of ``result``; a summary given as text gets the notes the export ``added``."""
    if not isinstance(summary, str):
        return summary(result)
    return summary + "".join(f"note: {n}\n" for n in added or [])


def _fill(
    fd: int,
    run_dir: Path,
    result: Any,
    summary: str | Callable[[Any], str],
    trace_writer: TraceWriter | None,
) -> Any:
    """Write a run into the directory held open as ``fd``; return the result as written."""
    base = safe_io.fd_path(fd, run_dir)
    # The trace's name, where the writer says it in advance (make_trace_writer's do): then
    # result.json names it from its first write and is written once when the trace comes out.
    expected = getattr(trace_writer, "filename", None)
    changes: dict[str, Any] = {"run_dir": str(run_dir), "notes": list(result.notes)}
    if isinstance(result, ProfileResult):
        changes["artifacts"] = {"trace": expected, **result.artifacts} if expected is not None else dict(result.artifacts)
    out: Any = dataclasses.replace(result, **changes)
    _write_text(base / RESULT_FILE, out.to_json())  # the measurement first: it is small
    _write_text(base / SUMMARY_FILE, _summary_text(summary, out))
    if trace_writer is None:
        safe_io.unlink_quietly(fd, INCOMPLETE_MARKER)
        return out
    first = out
    try:
        trace_path = trace_writer(base)
    except Exception as err:  # a full disk: keep the result and summary already written
        artifacts = {k: v for k, v in getattr(out, "artifacts", {}).items() if not (k == "trace" and v == expected)}
        changes = {"artifacts": artifacts} if isinstance(out, ProfileResult) else {}
        out = dataclasses.replace(out, notes=[*out.notes, f"trace not written: {type(err).__name__}: {err}"], **changes)
        log.warning("neuronscope: the trace of %r was not written (%s: %s); result.json and summary.txt are in %s",
                    out.name, type(err).__name__, err, run_dir)
        trace_path = None
    if trace_path is not None and isinstance(out, ProfileResult) and "trace" not in out.artifacts:
        out = dataclasses.replace(out, artifacts={**out.artifacts, "trace": trace_path.name})
    if out is not first:  # name the trace, or say why there is none
        try:
            _write_text(base / RESULT_FILE, out.to_json())
            if out.notes != first.notes:  # the summary shows notes, not the trace's name
                _write_text(base / SUMMARY_FILE, _summary_text(summary, out, out.notes[len(first.notes) :]))
        except OSError as err:
            # Still a full disk: the files written first stay, whole (each write is a rename),
            # in a run still marked incomplete, so that show and ls say the trace is missing.
            log.warning("neuronscope: %s could not be rewritten to say why the trace is missing (%s); "
                        "the run stays marked incomplete", run_dir, err)
            return out
    safe_io.unlink_quietly(fd, INCOMPLETE_MARKER)
    return out


def export_result(
    result: _R,
    root: Path | str,
    *,
    summary: str | Callable[[_R], str],
    trace_writer: TraceWriter | None = None,
    name: str | None = None,
    rank: int | None = None,
    when: _dt.datetime | None = None,
) -> _R:
    """Make a new run directory under ``root/<name>`` and write ``result`` into it; return a copy
    of ``result`` with ``run_dir`` (and ``artifacts["trace"]``) set. ``result`` itself is not
    changed.

    ``summary`` is the text of ``summary.txt``, or a function that renders it from the result as
    written (with its notes). ``name`` defaults to ``result.name``; ``rank`` and ``when`` (one
    timestamp for all ranks of a job) name the directory. A failing trace writer costs only the
    trace (a note says why); anything else raises, and a Ctrl-C leaves the files already written
    in a directory still marked incomplete.
    """
    run_dir, fd = _create_run(root, name or result.name, rank, when)
    try:
        written: _R = _fill(fd, run_dir, result, summary, trace_writer)
        return written
    except Exception:
        # result.json or summary.txt could not be written (a full disk: the trace's failure is
        # handled in _fill): the export fails as a whole and leaves nothing half-written. An
        # interrupt (BaseException) leaves what was written, in a run still marked incomplete.
        _remove_run(run_dir, fd)
        raise
    finally:
        os.close(fd)


def _remove_run(run_dir: Path, fd: int) -> None:
    """Remove a run directory this process made and holds open as ``fd`` (its temporary files
    included): through the parent's descriptor, so nothing outside it is touched."""
    try:
        parent_fd = safe_io.open_dir(run_dir.parent, private_tail=1)
    except Exception:  # the parent is gone or was swapped: leave it
        return
    try:
        _remove_empty_run(parent_fd, run_dir.name)
    finally:
        os.close(parent_fd)


def fill_run(
    run_dir: Path | str,
    result: _R,
    *,
    summary: str | Callable[[_R], str],
    trace_writer: TraceWriter | None = None,
) -> _R:
    """Fill a directory made by :func:`new_run_dir` (before a capture whose backend writes
    files into it) and return ``result`` as written; ``result`` itself is not changed.

    The directory is opened again with the same checks, so one swapped for a symbolic link or
    another user's directory since it was made is refused (nothing is written there).
    """
    fd = safe_io.open_dir(run_dir, private_tail=2)
    try:
        written: _R = _fill(fd, Path(run_dir), result, summary, trace_writer)
        return written
    finally:
        os.close(fd)


def save_result(
    result: _R,
    root: Path | str,
    *,
    summary: str | Callable[[_R], str],
    trace_writer: TraceWriter | None = None,
    rank: int | None = None,
    when: _dt.datetime | None = None,
) -> _R:
    """:func:`export_result` for a result not exported yet (``run_dir`` None); for one that was,
    rewrite its ``result.json`` and ``summary.txt`` in place (rank 0 once the per-rank table is
    in). The ``save`` that :func:`neuronscope.distributed.gather` takes is this, with the
    options bound."""
    if result.run_dir is None:
        return export_result(result, root, summary=summary, trace_writer=trace_writer, rank=rank, when=when)
    fd = safe_io.open_dir(result.run_dir, private_tail=2)
    try:
        safe_io.write_bytes_at(fd, RESULT_FILE, result.to_json().encode("utf-8", "backslashreplace"))
        safe_io.write_bytes_at(fd, SUMMARY_FILE, _summary_text(summary, result).encode("utf-8", "backslashreplace"))
    finally:
        os.close(fd)
    return result


def finish_run(run_dir: Path, result: ProfileResult | Comparison) -> None:
    """Write ``result.json`` atomically and drop the incomplete marker."""
    fd = safe_io.open_dir(run_dir, private_tail=2)
    try:
        safe_io.write_bytes_at(fd, RESULT_FILE, result.to_json().encode("utf-8", "backslashreplace"))
        safe_io.unlink_quietly(fd, INCOMPLETE_MARKER)
    finally:
        os.close(fd)
