"""A capture's Chrome trace into its run directory: torch's writer, kept where nobody can
plant a name, and a full disk that costs the trace only (run_dir.py writes the rest)."""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neuronscope.export import safe_io
from neuronscope.export.safe_io import atomic_write_with

__all__ = [
    "GZIP_TRACE_ABOVE_EVENTS",
    "RAW_TRACE",
    "TraceWriter",
    "gzip_file",
    "make_trace_writer",
    "save_chrome_trace",
]

#: The uncompressed trace torch writes before it is gzipped; a process killed meanwhile leaves
#: it behind, and the next export of the same name on this host removes it.
RAW_TRACE = ".trace.json.raw"
#: Above this many events a trace is gzipped (``trace_format="auto"``): ~10x smaller, and
#: level 1 costs a fraction of the time of writing it.
GZIP_TRACE_ABOVE_EVENTS = 20_000

#: Writes a trace into the run directory it is given and returns its path, or None.
TraceWriter = Callable[[Path], "Path | None"]


def save_chrome_trace(prof: Any, path: Path) -> None:
    """``prof.export_chrome_trace(path)``, raising when no trace came out.

    On a write error (a full disk) torch's trace writer only logs "Failed to write to log
    file!" on stderr and returns: no file at ``path``, a partial ``<path>.tmp`` of its own
    beside it. Without this check the export failed later with a misleading "No such file".
    """
    prof.export_chrome_trace(str(path))
    if path.is_file() and path.stat().st_size > 0:
        return
    try:
        full = os.statvfs(path.parent).f_bavail == 0
    except OSError:
        full = False
    # torch keeps its partial file open after the failed write: removing the name alone would
    # keep the space taken for the life of the profile object (the next capture's export then
    # fails too); truncated first, the space comes back at once.
    _release(path.with_name(path.name + ".tmp"))
    if full:
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (torch.profiler could not write {path.name})")
    raise OSError(f"torch.profiler wrote no trace ({path.name}; it reports write errors only on stderr)")


def _release(path: Path) -> None:
    """Truncate and remove the file ``path`` (never through a link), if it is there."""
    try:
        fd = os.open(path, os.O_WRONLY | safe_io.NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.ftruncate(fd, 0)
            path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def gzip_file(src: Path, dest: Path) -> None:
    """Compress ``src`` into ``dest`` (level 1: traces shrink ~10x at a fraction of level 9's time)."""

    def write(tmp: Path) -> None:
        with open(src, "rb") as fin, gzip.open(tmp, "wb", compresslevel=1) as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)

    atomic_write_with(dest, write)


def make_trace_writer(prof: Any, trace_format: str, event_count: int, saved: Path | None = None) -> TraceWriter | None:
    """The trace-format policy: how a capture's trace goes into its run directory.

    ``trace_format`` is ``"json"``, ``"gz"``, ``"none"`` or ``"auto"`` (gzip above
    :data:`GZIP_TRACE_ABOVE_EVENTS` events). ``saved`` is a trace the profiler already wrote
    (torch refuses a second save); else ``prof.export_chrome_trace`` writes it.

    Every file is written inside a private directory (mode 0700) in the run directory and
    renamed into place from there: torch opens names of its own (``<path>.tmp``, with
    ``O_TRUNC``, following links) that nobody else can plant there, and whatever a failed write
    leaves (a partial ``.tmp`` that torch still holds open) is truncated and removed with it.
    """
    fmt = trace_format
    if fmt == "auto":
        fmt = "gz" if event_count > GZIP_TRACE_ABOVE_EVENTS else "json"
    if fmt == "none":
        return None
    final = "trace.json.gz" if fmt == "gz" else "trace.json"

    def write(run_dir: Path) -> Path:
        run_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with safe_io.private_dir_at(run_fd) as work_fd:
                work = safe_io.fd_path(work_fd, run_dir)
                source = saved
                if source is None:
                    source = work / "trace.json"
                    save_chrome_trace(prof, source)
                if fmt == "gz":
                    _gzip_into(source, work / final)
                elif source != work / final:
                    shutil.copyfile(source, work / final)
                fd = os.open(final, os.O_RDONLY | safe_io.NOFOLLOW, dir_fd=work_fd)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(final, final, src_dir_fd=work_fd, dst_dir_fd=run_fd)
        finally:
            os.close(run_fd)
        return run_dir / final

    write.filename = final  # type: ignore[attr-defined]
    return write


def _gzip_into(src: Path, dest: Path) -> None:
    """Compress ``src`` into ``dest`` (level 1: traces shrink ~10x at a fraction of level 9's time)."""
    with open(src, "rb") as fin, gzip.open(dest, "wb", compresslevel=1) as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
