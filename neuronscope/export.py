"""The run directory: one new, time-sorted directory per capture, written atomically.

Layout (CONTRACT.md)::

    <output_root>/<name>/<YYYYmmdd-HHMMSS-ffffff>_<host>_pid<pid>[_rank<r>]/
        result.json      the ProfileResult (with schema_version)
        trace.json[.gz]  Chrome trace (Perfetto, TensorBoard)
        summary.txt      the tables and hints as printed

The directory is created with ``mkdir`` (which fails if it exists), so two captures in the same
microsecond, or from two processes, never share one: the later one moves its timestamp on by a
microsecond. Every file is written to a temporary name and renamed into place, and a
``.incomplete`` marker lives in the directory until the last file is in, so a process killed
half-way leaves a directory that says so instead of a half-written ``result.json``.
"""

from __future__ import annotations

import datetime as _dt
import errno
import gzip
import json
import os
import re
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import RunLoadError
from .result import Comparison, ProfileResult

__all__ = [
    "INCOMPLETE_MARKER",
    "RESULT_FILE",
    "SUMMARY_FILE",
    "atomic_write_text",
    "atomic_write_with",
    "find_runs",
    "finish_run",
    "is_run_dir",
    "load",
    "load_json",
    "new_run_dir",
    "write_run",
]

RESULT_FILE = "result.json"
SUMMARY_FILE = "summary.txt"
INCOMPLETE_MARKER = ".incomplete"
TRACE_FILES = ("trace.json.gz", "trace.json")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str) -> str:
    """A directory-safe form of a capture name ('MyModel.forward' stays, 'a/b c' -> 'a_b_c')."""
    cleaned = _SAFE_NAME.sub("_", name).strip("._") or "run"
    return cleaned[:120]


def _host() -> str:
    return safe_name(socket.gethostname().split(".")[0] or "host")


def new_run_dir(
    root: Path | str,
    name: str,
    rank: int | None = None,
    when: _dt.datetime | None = None,
) -> Path:
    """Create and return a new, empty run directory (marked incomplete) under ``root/name``.

    Never returns a directory that existed before: on a collision the timestamp moves on by one
    microsecond, which keeps the directories sorting by time.
    """
    parent = Path(root) / safe_name(name)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = when or _dt.datetime.now()
    suffix = f"_{_host()}_pid{os.getpid()}" + (f"_rank{rank}" if rank is not None else "")
    for _ in range(10_000):
        path = parent / (stamp.strftime("%Y%m%d-%H%M%S-%f") + suffix)
        try:
            path.mkdir()
        except FileExistsError:
            stamp += _dt.timedelta(microseconds=1)
            continue
        try:
            (path / INCOMPLETE_MARKER).write_text("export in progress\n")
        except BaseException:  # disk full: leave no unmarked directory behind
            shutil.rmtree(path, ignore_errors=True)
            raise
        return path
    raise OSError(f"could not create a new run directory under {parent}")  # pragma: no cover


def atomic_write_with(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp_path)``, fsync, then rename ``tmp_path`` onto ``path``.

    A reader sees either no file or the whole file. The temporary file is removed on failure.
    """
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def save_chrome_trace(prof: Any, path: Path) -> None:
    """``prof.export_chrome_trace(path)``, raising when no trace came out.

    On a write error (a full disk) torch's trace writer only logs "Failed to write to log
    file!" on stderr and returns: no file at ``path``, a partial ``<path>.tmp`` of its own
    beside it. Without this check the export failed later with a misleading "No such file".
    """
    prof.export_chrome_trace(str(path))
    if path.is_file():
        return
    leftover = path.with_name(path.name + ".tmp")
    leftover.unlink(missing_ok=True)
    try:
        full = os.statvfs(path.parent).f_bavail == 0
    except OSError:
        full = False
    if full:
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (torch.profiler could not write {path.name})")
    raise OSError(f"torch.profiler wrote no trace to {path} (it reports write errors only on stderr)")


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_with(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def gzip_file(src: Path, dest: Path) -> None:
    """Compress ``src`` into ``dest`` (level 1: traces shrink ~10x at a fraction of level 9's time)."""

    def write(tmp: Path) -> None:
        with open(src, "rb") as fin, gzip.open(tmp, "wb", compresslevel=1) as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)

    atomic_write_with(dest, write)


def write_run(
    run_dir: Path,
    result: ProfileResult | Comparison,
    summary: str,
    trace_writer: Callable[[Path], Path | None] | None = None,
) -> None:
    """Write ``summary.txt``, the trace (through ``trace_writer``) and ``result.json``, then
    remove the incomplete marker. ``result.json`` is written last: its presence means the run
    is complete."""
    result.run_dir = str(run_dir)
    if trace_writer is not None:
        trace_path = trace_writer(run_dir)
        if trace_path is not None and isinstance(result, ProfileResult):
            result.artifacts.setdefault("trace", trace_path.name)
    atomic_write_text(run_dir / SUMMARY_FILE, summary)
    finish_run(run_dir, result)


def finish_run(run_dir: Path, result: ProfileResult | Comparison) -> None:
    """Write ``result.json`` atomically and drop the incomplete marker."""
    atomic_write_text(run_dir / RESULT_FILE, result.to_json())
    try:
        (run_dir / INCOMPLETE_MARKER).unlink()
    except FileNotFoundError:
        pass


def is_run_dir(path: Path) -> bool:
    return (path / RESULT_FILE).is_file()


def load_json(path: Path) -> dict[str, Any]:
    """Read ``result.json``; any problem becomes a :class:`RunLoadError` naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise RunLoadError(f"{path}: no such file") from exc
    except UnicodeDecodeError as exc:
        with path.open("rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        if gzipped:
            raise RunLoadError(
                f"{path}: is a gzip file, not a neuronscope result.json; if it is a trace, open it "
                f"with neuronscope.from_trace() or `neuronscope show {path}`"
            ) from exc
        raise RunLoadError(f"{path}: cannot be read: not UTF-8 text ({exc}); the file is corrupt") from exc
    except OSError as exc:
        raise RunLoadError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from exc
    if not text.strip():
        raise RunLoadError(f"{path}: the file is empty (the export was interrupted?)")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, or an int too long
        raise RunLoadError(f"{path}: not valid JSON ({exc}); the file is corrupt or truncated") from exc
    if not isinstance(data, dict):
        raise RunLoadError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def load(run_dir: str | os.PathLike[str]) -> ProfileResult | Comparison:
    """Re-open an exported run (its directory, or its ``result.json``) as a ``ProfileResult``
    or ``Comparison``. Raises :class:`RunLoadError` for a missing path, a directory that is
    not a run, or a corrupt, foreign or newer-schema ``result.json``."""
    path = Path(run_dir)
    try:
        exists = path.exists()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        raise RunLoadError(f"{str(path)[:200]!r}: not a usable path ({type(exc).__name__}: {exc})") from exc
    if not exists:
        raise RunLoadError(f"{path}: no such file or directory")
    if path.is_dir():
        result_file = path / RESULT_FILE
        if not result_file.is_file():
            if (path / INCOMPLETE_MARKER).exists():
                raise RunLoadError(f"{path}: this run is incomplete (its export was interrupted)")
            runs = find_runs(path)
            if runs:
                raise RunLoadError(
                    f"{path}: not a neuronscope run itself, but holds {len(runs)} "
                    f"run{'s' if len(runs) > 1 else ''}; pass one of them (the newest is {runs[0]})"
                )
            raise RunLoadError(f"{path}: not a neuronscope run (no {RESULT_FILE}); pass a run directory")
    else:
        result_file = path
    data = load_json(result_file)
    if "traceEvents" in data and "schema_version" not in data:
        raise RunLoadError(
            f"{result_file}: is a Chrome trace, not a neuronscope run; open it with "
            f"neuronscope.from_trace() or `neuronscope show {result_file}`"
        )
    if "schema_version" not in data:
        raise RunLoadError(
            f"{result_file}: neither a neuronscope result (no schema_version) nor a torch.profiler "
            f"trace (no traceEvents); pass a run directory, its result.json or a trace file"
        )
    try:
        if data.get("type") == "Comparison":
            loaded: ProfileResult | Comparison = Comparison.from_dict(data)
        else:
            loaded = ProfileResult.from_dict(data)
    except RunLoadError as exc:
        raise RunLoadError(f"{result_file}: {exc}") from exc
    loaded.run_dir = str(result_file.parent)
    if isinstance(loaded, Comparison):  # the variants live in the comparison's directory
        for variant in loaded.results.values():
            variant.run_dir = loaded.run_dir
    return loaded


def find_runs(root: Path | str) -> list[Path]:
    """Every run directory under ``root`` (complete or marked incomplete), newest first."""
    base = Path(root)
    if not base.is_dir():
        return []
    found: set[Path] = set()
    for marker in (RESULT_FILE, INCOMPLETE_MARKER):
        for p in base.rglob(marker):
            if p.is_file():
                found.add(p.parent)
    return sorted(found, key=lambda p: p.name, reverse=True)
