"""Reading exported runs back: ``load()``, the runs under a root, and what an incomplete run holds.

The writing side is :mod:`neuronscope.export`, which re-exports these names (``export.load``).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

from neuronscope.errors import RunLoadError
from neuronscope.result.comparison import Comparison
from neuronscope.result.types import ProfileResult

__all__ = [
    "INCOMPLETE_MARKER",
    "MAX_RESULT_BYTES",
    "RESULT_FILE",
    "SUMMARY_FILE",
    "TRACE_FILES",
    "find_runs",
    "incomplete_trace_text",
    "is_incomplete",
    "is_run_dir",
    "load",
    "load_json",
]

RESULT_FILE = "result.json"
SUMMARY_FILE = "summary.txt"
INCOMPLETE_MARKER = ".incomplete"
TRACE_FILES = ("trace.json.gz", "trace.json")
#: A result.json larger than this is refused unread: the largest real ones (thousands of ops,
#: every shape) are a few MB, and reading a huge or sparse file whole would take the machine.
MAX_RESULT_BYTES = 64 * 1024 * 1024


def is_run_dir(path: Path) -> bool:
    return (path / RESULT_FILE).is_file()


def load_json(path: Path) -> dict[str, Any]:
    """Read ``result.json`` (a UTF-8 BOM is accepted); any problem becomes a
    :class:`RunLoadError` naming the file, a file over :data:`MAX_RESULT_BYTES` too."""
    try:
        # Opened without blocking and checked before a byte is read: a FIFO (or a device) named
        # result.json would otherwise hang show, report and diff until something wrote to it.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise RunLoadError(f"{path}: is not a regular file (a pipe, a device or a socket); not a neuronscope result.json")
            size = st.st_size
            if size > MAX_RESULT_BYTES:
                raise RunLoadError(
                    f"{path}: is {size / 2**20:,.0f} MiB, far larger than any neuronscope result.json "
                    f"(at most {MAX_RESULT_BYTES // 2**20} MiB are read); the file is corrupt or not a result"
                )
            raw = fh.read(MAX_RESULT_BYTES + 1)
    except FileNotFoundError as exc:
        raise RunLoadError(f"{path}: no such file") from exc
    except OSError as exc:
        raise RunLoadError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from exc
    if len(raw) > MAX_RESULT_BYTES:  # a file that grew, or a device
        raise RunLoadError(f"{path}: longer than {MAX_RESULT_BYTES // 2**20} MiB; not a neuronscope result.json")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if raw[:2] == b"\x1f\x8b":
            raise RunLoadError(
                f"{path}: is a gzip file, not a neuronscope result.json; if it is a trace, open it "
                f"with neuronscope.from_trace() or `neuronscope show {path}`"
            ) from exc
        raise RunLoadError(f"{path}: cannot be read: not UTF-8 text ({exc}); the file is corrupt") from exc
    if not text.strip():
        raise RunLoadError(f"{path}: the file is empty (the export was interrupted?)")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, or an int too long
        raise RunLoadError(
            f"{path}: not valid JSON ({_first_sentence(exc)}): not a neuronscope run or trace, or one cut short "
            "(give a run directory, its result.json, or a Chrome trace)"
        ) from exc
    if not isinstance(data, dict):
        raise RunLoadError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _first_sentence(exc: BaseException) -> str:
    """An error's text up to its first ';' (Python's int-digits error goes on to suggest
    ``sys.set_int_max_str_digits()``, which is no advice for a corrupt file)."""
    return str(exc).split(";", 1)[0]


def _kind(path: Path) -> str:
    """What a path that is no regular file is, in words."""
    try:
        mode = path.lstat().st_mode
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}"
    if stat.S_ISLNK(mode):
        return "a link to no regular file"
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket"))
    return next((word for test, word in kinds if test(mode)), "a device")


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
            if os.path.lexists(result_file):  # a FIFO, a directory, a dangling link...
                raise RunLoadError(f"{path}: its {RESULT_FILE} is not a regular file ({_kind(result_file)}); not a neuronscope run")
            if (path / INCOMPLETE_MARKER).exists():
                raise RunLoadError(f"{path}: this run is incomplete (its export was interrupted){incomplete_trace_text(path)}")
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
    where = str(result_file.parent)
    if isinstance(loaded, Comparison):  # the variants live in the comparison's directory
        results = {label: replace(variant, run_dir=where) for label, variant in loaded.results.items()}
        return replace(loaded, run_dir=where, results=results)
    return replace(loaded, run_dir=where)


def is_incomplete(run_dir: Path | str) -> bool:
    """True for a run directory still marked incomplete (its export did not finish)."""
    return (Path(run_dir) / INCOMPLETE_MARKER).exists()


def incomplete_trace_text(run_dir: Path | str) -> str:
    """For an incomplete run: '; its trace is complete: neuronscope show DIR/trace.json' where
    a finished trace lies beside it (files appear under their final name only when whole),
    else '; its trace was not written'."""
    for name in TRACE_FILES:
        trace = Path(run_dir) / name
        if trace.is_file():
            return f"; its trace is complete: neuronscope show {trace}"
    return "; its trace was not written"


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
