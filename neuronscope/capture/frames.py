"""Is this Python frame the user's code? The one list of library names that answers it.

A hint's location is the line of the model's own source that computes (issue: a decorator's
line, or a helper inside a library the model calls, tells the reader nothing). Live captures,
the observation pass and trace files all ask :func:`is_user_file`, so they agree on a frame.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = [
    "CACHE_SIZE",
    "LIBRARY_HELPERS",
    "LIBRARY_ROOTS",
    "MAX_DECORATOR_LINES",
    "def_line",
    "function_of",
    "is_user_file",
    "modules_of",
]

#: Top-level packages whose frames are never the user's code: torch and what runs it,
#: neuronscope itself, the wrappers and test runners that sit between a call and the model.
LIBRARY_ROOTS = frozenset(
    {"torch", "neuronscope", "torchgen", "functorch", "torch_neuronx", "wrapt", "_pytest", "pluggy", "lightning", "pytorch_lightning"}
)
#: Files and folders of model libraries that are helpers, not a model's own source: the
#: activation modules, attention back ends, mask builders and layer wrappers a model calls.
#: A hint points at the model line that called into them instead.
LIBRARY_HELPERS = (
    "transformers/activations.py",
    "transformers/integrations/",
    "transformers/masking_utils.py",
    "transformers/modeling_utils.py",
    "transformers/modeling_layers.py",
    "transformers/pytorch_utils.py",
    "transformers/utils/",
    "timm/layers/activations",
    "timm/layers/create_act",
)

_STDLIB_DIR = re.compile(r"/lib/python3\.\d+/")
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))).replace("\\", "/") + "/"
#: Paths remembered by :func:`is_user_file`: a capture names a few source files, asked about
#: once per op; a hostile trace can name millions, so the cache is bounded.
CACHE_SIZE = 65_536


@functools.lru_cache(maxsize=CACHE_SIZE)
def is_user_file(path: str) -> bool:
    """False for torch, neuronscope, standard-library and library-helper files.

    Works on absolute paths (Python frames) and on the shortened ones torch's profiler
    records, where the site-packages / stdlib prefix is cut and the first path component is
    the package.
    """
    norm = path.replace("\\", "/")
    tail = norm
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in norm:
            tail = norm.rsplit(marker, 1)[1]
            break
    stdlib = _STDLIB_DIR.search(norm) if tail is norm else None
    if stdlib is not None:
        tail = norm[stdlib.end() :]
    root = tail.lstrip("/").split("/", 1)[0].removesuffix(".py")
    return not (
        norm.startswith(("<", _PACKAGE_DIR))
        or root in LIBRARY_ROOTS
        or (root in _STDLIB and (stdlib is not None or not norm.startswith("/")))
        or any(h in tail for h in LIBRARY_HELPERS)
    )


#: Most lines of decorators (with their arguments) read past to a function's ``def``.
MAX_DECORATOR_LINES = 40


def def_line(path: str, line: int) -> int:
    """The ``def`` line of the function whose first line is ``line`` of ``path``. A function's
    frame names its code's first line, which for a decorated function is its first decorator
    (``@use_kernel_forward_from_hub(...)`` above transformers' ``apply_rotary_pos_emb``): the
    decorators are read past where the file can be read here; ``line`` itself otherwise."""
    import linecache

    if not linecache.getline(path, line).lstrip().startswith("@"):
        return line
    for n in range(line + 1, line + MAX_DECORATOR_LINES):
        text = linecache.getline(path, n).lstrip()
        if not text:
            break  # past the end of the file, or a blank line: no def where a decorator ends
        if text.startswith(("def ", "async def ", "class ")):
            return n
    return line


def function_of(path: str, line: int) -> int | None:
    """The ``def`` line of the innermost function of ``path`` whose body holds ``line`` (a
    ``def`` line is its own function's), or None: module-level code, or a file that cannot be
    read or parsed here. Tells a line of the code that computes an idiom's result from one in a
    helper it calls, where a line is all that was recorded (an observation, a trace)."""
    spans = _function_spans(path)
    inner = [start for start, end in spans if start <= line <= end]
    return max(inner) if inner else None


@functools.lru_cache(maxsize=64)  # a capture's idioms lie in a few source files
def _function_spans(path: str) -> tuple[tuple[int, int], ...]:
    import ast
    import linecache

    try:
        tree = ast.parse("".join(linecache.getlines(path)))
    except (SyntaxError, ValueError):
        return ()
    # A def is a statement: walking the statement bodies alone finds every one (nested ones
    # too) without visiting the expressions, most of a file's nodes (1.8 ms -> 0.1 ms for
    # transformers' modeling_llama.py).
    spans: list[tuple[int, int]] = []
    bodies: list[Sequence[ast.AST]] = [tree.body]
    while bodies:
        for node in bodies.pop():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                spans.append((node.lineno, node.end_lineno or node.lineno))
            for name in _BODIES:
                inner = getattr(node, name, None)
                if inner:
                    bodies.append(inner)
    return tuple(spans)


#: The fields of a statement (or of an ``except`` handler, a ``match`` case) that hold
#: statements.
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def modules_of(path: str) -> list[ModuleType]:
    """The imported modules whose ``__file__`` is ``path``. Looked up first by the names the
    import system gives a file under a ``sys.path`` folder (``pkg/sub/mod.py``:
    ``pkg.sub.mod``), and ``__main__``; where none of those is it, by a scan of every module
    (a process with transformers holds 3,000: 3 ms, more than the rest of a first capture's
    attention hint). A file also imported under a name of its own choosing
    (``importlib.util.spec_from_file_location``) beside its usual one is the same code."""
    named = (sys.modules.get(name) for name in _import_names(path))
    found = [m for m in named if m is not None and getattr(m, "__file__", None) == path]
    return found or [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path]


def _import_names(path: str) -> dict[str, None]:
    """The module names ``path`` has where a ``sys.path`` folder holds it, and ``__main__``."""
    names = dict.fromkeys(["__main__"])
    stem, ext = os.path.splitext(path)
    if ext != ".py" or not os.path.isabs(path):
        return names
    for entry in sys.path:
        if not isinstance(entry, str):
            continue
        folder = os.path.join(os.path.abspath(entry), "")
        if stem.startswith(folder):
            parts = stem[len(folder) :].split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            if parts and all(part.isidentifier() for part in parts):
                names[".".join(parts)] = None
    return names
