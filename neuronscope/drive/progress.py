"""A progress bar on standard error for long trace reads, drawn by tqdm where it is installed
(``pip install 'neuronscope[progress]'``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["DELAY_S", "progress_bar"]

#: A bar appears only once a read has taken this long: short reads print nothing.
DELAY_S = 2.0


def _wanted(progress: bool | None) -> bool:
    """``progress``: True draws the bar, False never, None where standard error is a terminal."""
    if progress is None:
        isatty = getattr(sys.stderr, "isatty", None)
        return bool(isatty and isatty())
    return bool(progress)


@contextmanager
def progress_bar(total: int, unit: str, desc: str, progress: bool | None) -> Iterator[Callable[[int], Any]]:
    """A function that advances a bar of ``total`` ``unit`` by its argument; a function that does
    nothing where no bar is wanted (see :func:`_wanted`) or tqdm is not installed. ``unit`` "B"
    counts bytes (shown as kB, MB)."""
    if not _wanted(progress):
        yield _nothing
        return
    try:
        from tqdm import tqdm
    except ImportError:
        if progress:  # asked for, and not there: say why once, go on without it
            print("neuronscope: no progress bar: tqdm is not installed (pip install tqdm)", file=sys.stderr)
        yield _nothing
        return
    scaled = unit == "B"
    with tqdm(
        total=total, unit=unit, desc=desc, file=sys.stderr, delay=DELAY_S, leave=False,
        unit_scale=scaled, unit_divisor=1024 if scaled else 1000, dynamic_ncols=True,
    ) as bar:
        yield bar.update


def _nothing(n: int) -> None:
    """What a bar's update does where there is no bar."""
