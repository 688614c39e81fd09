"""Where a trace's ``python_function`` frame sits in the user's code.

Whether a file is the user's is answered in one place, :mod:`neuronscope.capture.frames`
(one list of library roots and helpers, one bounded cache), so a trace and a live capture
agree on the same frame; this module reads the profiler's frame names with it.
"""

from __future__ import annotations

import re

from neuronscope.capture.frames import def_line, is_user_file

__all__ = ["user_location"]

_FRAME_NAME = re.compile(r"^(.+?)\((\d+)\): ")


def user_location(frame_name: str) -> str | None:
    """'file:line' of a ``python_function`` frame (``path/file.py(LINE): func``) in user code,
    None for library frames, builtins and module markers."""
    if frame_name.startswith(("<built-in", "<frozen", "nn.Module:", "<string>")):
        return None
    m = _FRAME_NAME.match(frame_name)
    if m is None or not is_user_file(m.group(1)):
        return None
    # A function's frame names its first line: a decorator's, for a decorated one.
    return f"{m.group(1)}:{def_line(m.group(1), int(m.group(2)))}"
