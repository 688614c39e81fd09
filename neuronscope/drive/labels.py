"""The labelled ranges of a capture: a region inside a capture is a ``record_function`` range.

Opened and closed by :mod:`neuronscope.drive.scope`; torch refusing a range (a name it cannot
take, a profiler already stopped) costs the label, never the user's call.
"""

from __future__ import annotations

from typing import Any

from neuronscope.announce import warn_once
from neuronscope.capture import torch_private

__all__ = ["close_range", "open_range"]


def _printable(name: str) -> str:
    """``name`` as text that torch's record_function accepts (no lone surrogates, as
    ``os.fsdecode`` gives for a file name that is not UTF-8)."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def open_range(name: str) -> Any:
    """A ``record_function`` range named ``name``, entered; None when torch refuses it."""
    import torch.autograd.profiler as autograd_profiler

    rf = autograd_profiler.record_function(_printable(name))
    try:
        rf.__enter__()
    except Exception as err:
        warn_once(("range", name), f"neuronscope: region {name!r} is not labelled in the capture ({type(err).__name__}: {err})")
        return None
    try:
        rf.neuronscope_starts = torch_private.profiler_starts()  # type: ignore[attr-defined]
    except AttributeError:  # pragma: no cover - another torch's record_function
        pass
    return rf


def close_range(rf: Any) -> None:
    """Exit the range ``rf`` (from :func:`open_range`; None does nothing); not where another
    profiler session (the user's own) started since it opened: see
    :func:`~neuronscope.capture.torch_private.end_range`."""
    if rf is not None:
        torch_private.end_range(rf, getattr(rf, "neuronscope_starts", torch_private.profiler_starts()))
