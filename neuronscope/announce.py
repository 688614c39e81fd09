"""What a capture tells the user as it goes: the one line per capture, and the warnings.

Messages go to the ``neuronscope`` logger without a prefix; when the application configured no
logging, a stderr handler of our own writes them as ``neuronscope: <message>``. With the
application's own logging (``logging.basicConfig``) its format applies and names the logger
once (``INFO:neuronscope:step ok [cpu] ...``), not twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = [
    "NeuronscopeWarning",
    "announce_result",
    "ensure_log_handler",
    "log",
    "on_skipped",
    "warn_once",
    "warn_user",
    "where_text",
]

log = logging.getLogger("neuronscope")

#: The prefix our own stderr handler puts before each message.
PREFIX = "neuronscope: "


class NeuronscopeWarning(UserWarning):
    """Something went wrong that the user should know about, but the program goes on."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class _Prefixed(logging.Formatter):
    """Our stderr format: each line starts with "neuronscope" (added where the message does
    not already say it, as "neuronscope compare: ..." does)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if text.startswith("neuronscope") else PREFIX + text


def ensure_log_handler() -> None:
    """Make the one line per capture visible when the application configured no logging.

    A library normally leaves handlers to the application; but "where did my profile go" must
    reach the user, so neuronscope prints to stderr until the application sets up logging.
    """
    if log.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Prefixed("%(message)s"))
    log.addHandler(handler)
    log.propagate = False
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)


def warn_user(message: str) -> None:
    """Warn with the user's own line as the place: the first frame outside neuronscope, torch
    and contextlib (a capture ends many calls deep, and not as deep from a decorator as from a
    region)."""
    torch = sys.modules.get("torch")
    torch_file = getattr(torch, "__file__", None)
    torch_dir = os.path.dirname(torch_file) + os.sep if torch_file else None
    frame: FrameType | None = sys._getframe(1)
    level = 2
    while frame is not None and _library_frame(frame.f_code.co_filename, torch_dir):
        frame = frame.f_back
        level += 1
    warnings.warn(message, NeuronscopeWarning, stacklevel=level)


def _library_frame(path: str, torch_dir: str | None) -> bool:
    return path.startswith(_PACKAGE_DIR + os.sep) or path == contextlib.__file__ or (
        torch_dir is not None and path.startswith(torch_dir)
    )


class _Once:
    """Keys already said, so that a message repeated every step is said once per process."""

    def __init__(self) -> None:
        self._seen: set[Any] = set()
        self._lock = threading.Lock()

    def first(self, key: Any) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True


# Process-wide by nature: "said once" means once per process, whichever wrapper says it.
_said = _Once()


def first_time(key: Any) -> bool:
    """True the first time ``key`` is seen in this process (for a message said once)."""
    return _said.first(key)


def forget_said() -> None:
    """Forget what was said once (tests start each case from a fresh process's state)."""
    global _said
    _said = _Once()


def warn_once(key: Any, message: str) -> bool:
    """``warn_user(message)`` the first time ``key`` is seen in this process; True if it warned."""
    if not _said.first(key):
        return False
    warn_user(message)
    return True


def where_text(run_dir: str | Path | None) -> str:
    """Where a capture went, naming the run directory once: the command that reopens it."""
    if not run_dir:
        return "(kept in memory, not exported)"
    return f"-> neuronscope show {run_dir}"


def announce_result(result: Any, print_summary: bool) -> None:
    """The one line per capture (rank 0 only in a multi-process run), and the tables on stderr
    with ``print_summary``."""
    if result.rank not in (None, 0) and not print_summary:
        return
    ensure_log_handler()
    where = where_text(result.run_dir)
    view = (result.artifacts.get("neuron") or {}).get("view_command")
    if view:  # the Neuron session files open in Neuron Explorer, not in neuronscope
        where += f"; device trace: {view}"
    top = result.top_op
    top_text = f", top op {top.name}" if top is not None else ""
    log.info(
        "%s %s [%s] %.3f ms%s %s",
        result.name,
        result.status,
        result.backend,
        result.wall_time_us / 1e3,
        top_text,
        where,
    )
    if print_summary:
        print(result.table(), file=sys.stderr)


def announce_window(name: str, warmup: int, active: int | None) -> None:
    """Said at the first warm-up call of a window: what will be captured, and when. In a
    notebook this is the only feedback until the capture comes (nothing is said at exit)."""
    ensure_log_handler()
    first = warmup + 1
    if active is None:
        when = f"every call from call {first} on"
    elif active == 1:
        when = f"call {first}"
    else:
        when = f"calls {first}-{warmup + active}"
    log.info("%s: warm-up (%d call%s, not captured); will capture %s", name, warmup, "" if warmup == 1 else "s", when)


def announce_window_used(name: str, warmup: int, active: int | None, captured: int) -> None:
    """Said in a notebook when a cell calls something whose call window is used up: the call
    ran unprofiled, ``.last_result`` is an older capture, and how to capture again."""
    ensure_log_handler()
    log.info(
        "%s: its window (warmup=%d, active=%s) is used up: this call ran unprofiled, and .results / "
        ".last_result hold the %d earlier capture(s). To capture again: neuronscope.reset(%r), or "
        "decorate it again (re-run the cell that defines it)",
        name, warmup, active, captured, name,
    )


def on_skipped(name: str, count: int | None = None, cause: str | None = None) -> None:
    """Log that a call ran uncaptured because the profiler was not free, and what held it
    (``cause``): the first time per name and cause, then (when the caller counts) at 10, 100,
    1000... calls, with the count."""
    cause = cause or "another capture (or the user's own torch.profiler) was running"
    first = _said.first(("skipped", name, cause))
    if not first and (count is None or count <= 1 or str(count).rstrip("0") != "1"):  # not 10, 100...
        return
    ensure_log_handler()
    log.warning(
        "%s ran uncaptured%s: %s; torch's profiler runs one capture per process at a time",
        name,
        "" if count is None else f" ({count} call(s) so far; see .skipped_calls)",
        cause,
    )


def backend_ignores(backend: str, options: Any) -> None:
    """Say once per process and backend that ``modes`` / ``cores`` were given where they mean
    nothing (only the Neuron profiler has them). A warning, not an error: with
    ``backend="auto"`` one script runs on a Trainium host and on a laptop unchanged."""
    given = [k for k, v in (("modes", options.modes != ("runtime",)), ("cores", options.cores is not None)) if v]
    if backend == "neuron" or not given:
        return
    warn_once(
        ("ignored", backend, tuple(given)),
        f"neuronscope: {' and '.join(given)} apply to the Neuron profiler only; the {backend} "
        f"backend ignores them",
    )
