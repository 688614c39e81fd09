"""Which files a path names, and which rank each file is."""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Union

from neuronscope.capture.neuron_files import without_placed_copies
from neuronscope.errors import TraceFormatError
from neuronscope.events.jsontext import blocks

TracePath = Union[str, "os.PathLike[str]"]

# ---- files and ranks -------------------------------------------------------------------------
_TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json")
_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)
_NAMED_TRACES = ("trace.json", "trace.json.gz", "pytorch_trace.json", "pytorch_trace.json.gz")


def find_trace_files(directory: TracePath) -> list[Path]:
    """The torch.profiler traces in ``directory``, sorted by name.

    First ``*.pt.trace.json[.gz]`` (what ``tensorboard_trace_handler`` writes), searched
    recursively; failing those, Neuron's and neuronscope's ``trace.json``,
    ``pytorch_trace.json`` and ``neuron_framework_trace_rank_*.json``; failing those, the
    ``*.json[.gz]`` files directly in ``directory`` that begin as a Chrome trace does (a folder
    of rank traces named at will: ``r0.json.gz``, ``r1.json.gz``).
    """
    root = Path(directory)
    found = sorted(p for p in root.rglob("*.pt.trace.json*") if p.name.endswith((".json", ".json.gz")))
    if not found:
        found = sorted(
            p
            for p in root.rglob("*.json*")
            if p.is_file()
            and (p.name in _NAMED_TRACES or re.fullmatch(r"neuron_framework_trace_rank_\d+\.json(\.gz)?", p.name))
        )
        found = without_placed_copies(found)  # a Neuron session's trace.json and its original
    if not found:
        found = sorted(p for p in root.glob("*.json*") if p.name.endswith((".json", ".json.gz")) and _begins_as_trace(p))
    return [p for p in found if p.is_file()]


def _begins_as_trace(path: Path) -> bool:
    """Whether the first block of ``path`` looks like a Chrome trace (object or array form)."""
    try:
        head = next(iter(blocks(path)), b"")[:1 << 16]
    except (OSError, EOFError, zlib.error):
        return False
    return b'"traceEvents"' in head or (head.lstrip()[:1] == b"[" and b'"ph"' in head)


def _stem(path: Path) -> str:
    """The default result name: the file's name less its suffixes, or for a generic name
    (``trace.json``, written into a run or session directory) that directory's name."""
    name = path.name
    if name in _NAMED_TRACES and path.resolve().parent.name:
        return path.resolve().parent.name
    for suffix in _TRACE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)] or name
    return name


def _peek_rank(path: Path) -> tuple[int | None, int | None]:
    """(rank, world_size) from ``distributedInfo`` in the file's first megabyte, if there."""
    try:
        head = b""
        for block in blocks(path):
            head += block
            if len(head) >= 1 << 20:
                break
    except (OSError, EOFError, zlib.error):
        return None, None
    cut = head.find(b'"traceEvents"')
    if cut >= 0:
        head = head[:cut]
    at = head.find(b'"distributedInfo"')
    if at < 0:
        return None, None
    info = head[at:]
    # At most 9 digits: a rank of thousands of digits is no rank (and int() would refuse it).
    rank = re.search(rb'"rank"\s*:\s*(\d{1,9})\b', info)
    world = re.search(rb'"world_size"\s*:\s*(\d{1,9})\b', info)
    return (int(rank.group(1)) if rank else None, int(world.group(1)) if world else None)


def group_by_rank(files: Sequence[Path]) -> list[tuple[int, list[Path]]]:
    """Files grouped by rank: ``distributedInfo.rank``, else ``rank<N>`` in the file's or its
    directory's name (``neuron_framework_trace_rank_3.json``, neuronscope's ``..._rank3/``),
    else one rank per worker (``tensorboard_trace_handler`` names files
    ``<worker>.<ms>.pt.trace.json``; a fixed name such as ``trace.json`` is its directory's),
    numbered in name order after the known ranks. One file is one rank: its own reading says
    which (its head is not read twice)."""
    if len(files) == 1:
        return [(0, list(files))]
    known: dict[int, list[Path]] = {}
    unknown: dict[str, list[Path]] = {}
    for p in files:
        rank = _known_rank(p)
        if rank is None:
            worker = str(p.parent) if p.name in _NAMED_TRACES else p.name.split(".", 1)[0]
            unknown.setdefault(worker, []).append(p)
        else:
            known.setdefault(rank, []).append(p)
    nxt = max(known, default=-1) + 1
    for worker in sorted(unknown):
        known[nxt] = unknown[worker]
        nxt += 1
    return sorted(known.items())


def _known_rank(path: Path) -> int | None:
    """The rank a trace says it is: ``distributedInfo.rank``, else ``rank<N>`` in the file's or
    its directory's name; None when neither says."""
    rank, _ = _peek_rank(path)
    if rank is None:
        m = _RANK_IN_NAME.search(path.name) or _RANK_IN_NAME.search(path.parent.name)
        rank = int(m.group(1)) if m else None
    return rank


def _refuse_separate_runs(directory: Path, files: list[Path]) -> None:
    """A directory holding several run directories (neuronscope's, Neuron's) whose traces say
    nothing of a rank holds separate runs, not the ranks of one job: reading them together
    would add up unrelated captures. (A list of such files, given by hand, is read as ranks.)"""
    dirs = {p.parent for p in files if p.name in _NAMED_TRACES}
    if len(dirs) < 2 or any(_known_rank(p) is not None for p in files):
        return
    newest = max(dirs, key=lambda d: d.name)
    raise TraceFormatError(
        f"{directory}: {len(dirs)} run directories, and no trace says which rank it is: these "
        f"look like separate runs; pass one of them (the newest is {newest}), or a list of one "
        f"job's per-rank traces"
    )


def resolve_paths(path: TracePath | Sequence[TracePath]) -> tuple[list[Path], str]:
    """The trace files named by ``path`` (a file, a directory or a list), and a default name."""
    if isinstance(path, (str, os.PathLike)):
        p = Path(path)
        if p.is_dir():
            found = find_trace_files(p)
            if not found:
                raise TraceFormatError(
                    f"{p}: no torch.profiler trace files in this directory (looked for "
                    f"*.pt.trace.json[.gz], trace.json[.gz], pytorch_trace.json)"
                )
            _refuse_separate_runs(p, found)
            return found, p.resolve().name or "trace"
        if not p.exists():
            raise TraceFormatError(f"{p}: no such file or directory")
        return [p], _stem(p)
    try:
        paths = [Path(x) for x in path]
    except TypeError:
        raise TypeError(
            f"from_trace takes a path or a list of paths, got {type(path).__name__}"
        ) from None
    if not paths:
        raise TraceFormatError("from_trace got an empty list of trace files")
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(resolve_paths(p)[0])
        elif not p.exists():
            raise TraceFormatError(f"{p}: no such file or directory")
        else:
            files.append(p)
    return files, _stem(files[0])


