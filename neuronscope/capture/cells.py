"""Notebook cells: where code typed into Jupyter lives, in words a reader finds it by.

ipykernel compiles each cell into a temporary file (``/tmp/ipykernel_<pid>/<hash>.py``), so
a frame in a cell names that file. IPython's compiler maps each such file to its execution
count (what the notebook shows as ``In [2]``); :func:`readable_location` turns
``<that file>:4`` into ``In [2], line 4``. Outside IPython nothing changes.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["cell_label", "execution_count", "in_kernel", "readable_location"]


def _shell() -> Any:
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    try:
        return get() if get is not None else None
    except Exception:  # an IPython that is half imported or shut down
        return None


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (ipykernel imported, a shell running)."""
    return "ipykernel" in sys.modules and _shell() is not None


def execution_count() -> int | None:
    """The running cell's execution count in a kernel, else None."""
    shell = _shell()
    count = getattr(shell, "execution_count", None)
    return count if isinstance(count, int) else None


def cell_label(filename: str) -> str | None:
    """``In [2]`` for a file IPython compiled a cell into, else None."""
    shell = _shell()
    fmt = getattr(getattr(shell, "compile", None), "format_code_name", None)
    if fmt is None:
        return None
    try:
        named = fmt(filename)
    except Exception:
        return None
    if not named or len(named) != 2 or not str(named[1]).startswith("In["):
        return None
    return "In [" + str(named[1])[3:]


def readable_location(location: str | None) -> str | None:
    """``In [2], line 4`` for ``<cell file>:4``; any other location as it is."""
    if not location or "ipykernel" not in location:
        return location
    file, _, line = location.rpartition(":")
    label = cell_label(file) if line.isdigit() else None
    return location if label is None else f"{label}, line {line}"
