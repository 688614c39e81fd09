"""Is this Python frame the user's code? One answer for live captures and trace files.

torch's profiler writes a frame's file with its site-packages or standard-library prefix cut
(``torch/nn/modules/module.py``), so the first path component tells library code from the
user's. One list of library roots, so a trace and a live capture agree on the same frame.
"""

from __future__ import annotations

import os
import re
import sys

__all__ = ["LIBRARY_ROOTS", "is_user_file", "user_location"]

#: Top-level packages whose frames are never the user's code: torch and its generators,
#: neuronscope itself, the Neuron plugin, decorators' wrappers, and the test runner.
LIBRARY_ROOTS = frozenset({"torch", "neuronscope", "torchgen", "functorch", "torch_neuronx", "wrapt", "_pytest", "pluggy"})
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
_STDLIB_DIR = re.compile(r"/lib/python3\.\d+/(?!site-packages/|dist-packages/)")
_FRAME_NAME = re.compile(r"^(.+?)\((\d+)\): ")
# neuronscope's own directory, for absolute paths into it (an editable install).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))).replace("\\", "/") + "/"
_user_file_cache: dict[str, bool] = {}  # path -> answer: a capture repeats a few files


def is_user_file(path: str) -> bool:
    """False for torch, neuronscope, the other :data:`LIBRARY_ROOTS` and standard-library
    files, as the profiler writes their paths (prefix cut) or as absolute paths."""
    hit = _user_file_cache.get(path)
    if hit is None:
        norm = path.replace("\\", "/")
        for marker in ("/site-packages/", "/dist-packages/"):
            if marker in norm:
                norm = norm.rsplit(marker, 1)[1]  # as torch shortens it
                break
        root = norm.lstrip("/").split("/", 1)[0].removesuffix(".py")
        hit = not (
            norm.startswith(("<", _PACKAGE_DIR))
            or _STDLIB_DIR.search(norm) is not None
            or root in LIBRARY_ROOTS
            or (root in _STDLIB and not norm.startswith("/"))
        )
        if len(_user_file_cache) < 100_000:  # bounded: a hostile trace names files at will
            _user_file_cache[path] = hit
    return hit


def user_location(frame_name: str) -> str | None:
    """'file:line' of a ``python_function`` frame (``path/file.py(LINE): func``) in user code,
    None for library frames, builtins and module markers."""
    if frame_name.startswith(("<built-in", "<frozen", "nn.Module:", "<string>")):
        return None
    m = _FRAME_NAME.match(frame_name)
    if m is None or not is_user_file(m.group(1)):
        return None
    return f"{m.group(1)}:{m.group(2)}"
