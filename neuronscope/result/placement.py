"""Hints placed on the modules that own them (:attr:`ModuleStat.hints`).

A hint whose ops' run is known (``details[OP_SPANS]``: the thread and time of each
occurrence, which the fusion rules record) goes to the deepest module call that holds those ops
on their thread: the ``self_attn`` whose ``forward`` called ``apply_rotary_pos_emb``, a helper
function written outside any module, gets the rotary hint, and its location stays the line of
the helper that the user would edit. A hint without them (a rule that reads no op times) goes
to the modules whose class's ``forward`` holds its line.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from neuronscope.events.modules import ModuleRanges
from neuronscope.result.modules import ModuleStat

__all__ = ["OP_SPANS", "place_hints", "without_spans"]

#: A hint's ``details`` key for where its ops ran: ``[[tid, start ns, end ns], ...]``, one per
#: occurrence. Read here, then dropped from the result (:func:`without_spans`).
OP_SPANS = "op_spans"


def place_hints(
    modules: Sequence[ModuleStat],
    hints: Sequence[Any],
    sources: Mapping[str, Sequence[Any]],
    ranges: ModuleRanges | None = None,
    root: str | None = None,
) -> list[ModuleStat]:
    """``modules`` with each hint (by index) given to the modules that ran its ops (see the
    module docstring); ``root`` takes ops outside every module call (a decorated
    ``forward``'s instance, whose own call has no range)."""
    owners: dict[str, set[int]] = defaultdict(set)
    by_type: dict[str, set[int]] = defaultdict(set)
    find = _Innermost(ranges) if ranges is not None and len(ranges) else None
    for h, hint in enumerate(hints):
        spans = (getattr(hint, "details", None) or {}).get(OP_SPANS)
        if spans and find is not None:
            for tid, start, end in spans:
                owner = find(int(tid), int(start), int(end)) or root
                if owner is not None:
                    owners[owner].add(h)
            continue
        for cls in _classes_holding(getattr(hint, "location", None), sources):
            by_type[cls].add(h)
    if not owners and not by_type:
        return list(modules)
    out = []
    for m in modules:
        mine = owners.get(m.name, set()) | by_type.get(m.type, set())
        out.append(replace(m, hints=tuple(sorted(mine))) if mine else m)
    return out


def without_spans(hints: Sequence[Any]) -> list[Any]:
    """``hints`` without :data:`OP_SPANS` in their details (new objects where dropped): the
    times of a capture's ops mean nothing once the hint is placed."""
    return [replace(h, details={k: v for k, v in h.details.items() if k != OP_SPANS}) if OP_SPANS in h.details else h for h in hints]


class _Innermost:
    """The deepest module call on a thread holding a time span: on one thread the calls nest,
    so it is the latest-starting call that holds the span."""

    def __init__(self, r: ModuleRanges) -> None:
        per: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
        for name, tid, start, end in zip(r.names, r.tids, r.starts, r.ends):
            per[tid].append((start, end, name))
        self._calls = {tid: sorted(calls) for tid, calls in per.items()}
        self._starts = {tid: [c[0] for c in calls] for tid, calls in self._calls.items()}

    def __call__(self, tid: int, start: int, end: int) -> str | None:
        calls = self._calls.get(tid)
        if not calls:
            return None
        k = bisect.bisect_right(self._starts[tid], start)
        while k > 0:
            k -= 1
            _c_start, c_end, name = calls[k]
            if c_end >= end:
                return name
            # a call that ended before the span (a sibling) holds nothing after it: look further up
        return None


def _classes_holding(location: str | None, sources: Mapping[str, Sequence[Any]]) -> list[str]:
    """The module classes whose ``forward`` (``sources``: class -> (file, first, last)) holds
    ``location`` (``file:line``)."""
    if not location:
        return []
    found = re.match(r"^(.*?):(\d+)", location)
    if found is None:
        return []
    file, line = found.group(1), int(found.group(2))
    out = []
    for cls, src in sources.items():
        sfile, first, last = src[0], int(src[1]), int(src[2])
        if first <= line <= last and (sfile == file or sfile.endswith("/" + file.lstrip("./")) or file.endswith("/" + sfile.rsplit("/", 1)[-1])):
            out.append(cls)
    return out
