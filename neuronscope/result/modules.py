"""Where the time went by ``nn.Module``: the module tree of a capture, as plain data.

Built from the module-call ranges of the capture (:mod:`neuronscope.events.modules`): each
qualified name (``model.layers.1.mlp.down_proj``) gets its calls, inclusive and self time (CPU,
and device where the backend records it: the device time of the ops launched inside it), its
share of the capture, its top ops (by their self time inside the module, its children's left
out) and the hints on its ops (:mod:`neuronscope.result.placement`). :func:`collapse_repeats` folds repeated
layers (``layers.0`` ... ``layers.31``) into one row with their spread.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from neuronscope.events.modules import BACKWARD_PREFIX, ModuleRanges
from neuronscope.result.serial import as_dict, float_or, known_fields, opt_float, opt_str

__all__ = ["ModuleGroup", "ModuleStat", "build_modules", "collapse_repeats"]

#: Ops kept per module: the few that say what the module spends its time on.
TOP_OPS = 5


@dataclass(frozen=True)
class ModuleStat:
    """One module instance (by qualified name) over a capture; times summed over its calls.

    ``self_*`` is the time not spent in a child module (its own ops, and the Python between
    them); ``share`` is its inclusive time, forward and backward, over the capture's (device
    time where there is one, else CPU time over the wall time). ``top_ops`` are ``[name, self CPU us, self device
    us or None, calls]`` of the ops run by the module itself. ``hints`` index the result's
    ``hints`` whose ops this module ran (its children's included, helper functions it called
    too), or, for a hint with no ops placed, whose line its ``forward`` holds.
    """

    name: str
    type: str
    parent: str | None
    depth: int
    calls: int
    cpu_total_us: float
    self_cpu_us: float
    device_total_us: float | None = None
    self_device_us: float | None = None
    share: float = 0.0
    top_ops: tuple[tuple[Any, ...], ...] = ()
    hints: tuple[int, ...] = ()
    #: Backward time (inclusive, and its own): the backward functions autograd ran for the
    #: ops of this module's forward (their CPU time, and the device time of their ops);
    #: None where the capture ran no backward it could give to a module.
    backward_cpu_us: float | None = None
    self_backward_cpu_us: float | None = None
    backward_device_us: float | None = None
    self_backward_device_us: float | None = None

    @property
    def backward_us(self) -> float | None:
        """The inclusive backward time that goes with :attr:`time_us` (device where recorded)."""
        return self.backward_device_us if self.device_total_us is not None else self.backward_cpu_us

    @property
    def time_us(self) -> float:
        """The inclusive time that ranks it: device where recorded, else CPU."""
        return self.device_total_us if self.device_total_us is not None else self.cpu_total_us

    @property
    def short_name(self) -> str:
        """The last part of the name (``down_proj``), for a tree that shows the nesting."""
        return self.name if self.parent is None else self.name.rsplit(".", 1)[-1]

    def to_dict(self) -> dict[str, Any]:
        d = as_dict(self)
        d["top_ops"] = [list(t) for t in self.top_ops]
        d["hints"] = list(self.hints)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModuleStat:
        d = known_fields(cls, data)
        return cls(
            name=str(d["name"]),
            type=str(d.get("type", "")),
            parent=opt_str(d.get("parent")),
            depth=int(d.get("depth", 0)),
            calls=int(d.get("calls", 0)),
            cpu_total_us=float_or(d.get("cpu_total_us"), 0.0),
            self_cpu_us=float_or(d.get("self_cpu_us"), 0.0),
            device_total_us=opt_float(d.get("device_total_us")),
            self_device_us=opt_float(d.get("self_device_us")),
            share=float_or(d.get("share"), 0.0),
            top_ops=tuple(tuple(t) for t in d.get("top_ops") or ()),
            hints=tuple(int(h) for h in d.get("hints") or ()),
            backward_cpu_us=opt_float(d.get("backward_cpu_us")),
            self_backward_cpu_us=opt_float(d.get("self_backward_cpu_us")),
            backward_device_us=opt_float(d.get("backward_device_us")),
            self_backward_device_us=opt_float(d.get("self_backward_device_us")),
        )


def build_modules(
    ranges: ModuleRanges,
    *,
    types: Mapping[str, str] | None = None,
    root: str | None = None,
    wall_time_us: float = 0.0,
    calls: int = 1,
) -> list[ModuleStat]:
    """The module tree of a capture, parents before children, costliest sibling first.

    ``root`` names a module whose own call has no range (a decorated ``forward``'s instance:
    the capture is its call, ``calls`` times): it becomes the parent of the top-level modules,
    with the capture's wall time as its inclusive time.
    """
    if not len(ranges):
        return []
    agg = _sweep(ranges)
    names = list(agg.calls)
    parent = {n: agg.parent.get(n) for n in names}
    if root is not None and root not in agg.calls:
        tops = [n for n in names if parent[n] is None]
        for n in tops:
            parent[n] = root
        child_cpu = sum(agg.cpu[n] for n in tops)
        agg.calls[root] = calls
        agg.cpu[root] = int(max(wall_time_us * 1e3, child_cpu))
        agg.self_cpu[root] = agg.cpu[root] - child_cpu
        parent[root] = None
        names.insert(0, root)
    children: dict[str | None, list[str]] = defaultdict(list)
    for n in names:
        children[parent[n]].append(n)
    # Device time: what a module's own ops launched, plus its children's.
    dev_incl: dict[str, int] = {}

    def device_of(n: str) -> int:
        if n not in dev_incl:
            dev_incl[n] = agg.self_dev.get(n, 0) + sum(device_of(c) for c in children.get(n, ()))
        return dev_incl[n]

    bwd_cpu, bwd_dev = _backward(ranges, agg.fwd_owner, root)
    bwd_incl: dict[str, tuple[int, int]] = {}

    def backward_of(n: str) -> tuple[int, int]:
        if n not in bwd_incl:
            kids = [backward_of(c) for c in children.get(n, ())]
            bwd_incl[n] = (bwd_cpu.get(n, 0) + sum(k[0] for k in kids), bwd_dev.get(n, 0) + sum(k[1] for k in kids))
        return bwd_incl[n]

    has_backward = bool(bwd_cpu)
    has_device = ranges.has_device
    total_dev = sum(ranges.op_device_ns)
    total_cpu = max(wall_time_us * 1e3, max((agg.cpu[n] for n in children[None]), default=0))
    out: list[ModuleStat] = []

    def visit(n: str, depth: int) -> None:
        dev = device_of(n) if has_device else None
        bwd = backward_of(n) if has_backward else None
        # Forward and backward: in a training step the share of the model's work it caused.
        if dev is not None:
            share = (dev + (bwd[1] if bwd else 0)) / total_dev if total_dev else 0.0
        else:
            share = (agg.cpu[n] + (bwd[0] if bwd else 0)) / total_cpu if total_cpu else 0.0
        out.append(
            ModuleStat(
                name=n,
                type=(types or {}).get(n, ""),
                parent=parent[n],
                depth=depth,
                calls=agg.calls[n],
                cpu_total_us=agg.cpu[n] / 1e3,
                self_cpu_us=max(agg.self_cpu[n], 0) / 1e3,
                device_total_us=None if dev is None else dev / 1e3,
                self_device_us=None if dev is None else agg.self_dev.get(n, 0) / 1e3,
                share=min(share, 1.0),
                top_ops=_top_ops(agg.ops.get(n, {}), has_device),
                backward_cpu_us=None if bwd is None else bwd[0] / 1e3,
                self_backward_cpu_us=None if bwd is None else bwd_cpu.get(n, 0) / 1e3,
                backward_device_us=None if bwd is None or not has_device else bwd[1] / 1e3,
                self_backward_device_us=None if bwd is None or not has_device else bwd_dev.get(n, 0) / 1e3,
            )
        )
        for c in sorted(children.get(n, ()), key=lambda c: -(device_of(c) if has_device else agg.cpu[c])):
            visit(c, depth + 1)

    for top in sorted(children[None], key=lambda c: -(device_of(c) if has_device else agg.cpu[c])):
        visit(top, 0)
    return out


@dataclass
class _Sums:
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    cpu: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    self_cpu: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    self_dev: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    parent: dict[str, str | None] = field(default_factory=dict)
    #: module -> op -> [self cpu ns, device ns, calls]
    ops: dict[str, dict[str, list[int]]] = field(default_factory=lambda: defaultdict(dict))
    #: (thread, autograd sequence number) of a forward op -> the module call it ran in
    fwd_owner: dict[tuple[int, int], str] = field(default_factory=dict)


def _sweep(r: ModuleRanges) -> _Sums:
    """One pass over each thread's module calls and ops in time order, with a stack: each op
    goes to the innermost module call open around it, each call to the one around it."""
    sums = _Sums()
    # (start, -end, is_op, index): at one start the longer event encloses the shorter; a module
    # call and an op that start together (a module whose first op starts at once) nest the op.
    events = [(r.starts[i], -r.ends[i], 0, i, r.tids[i]) for i in range(len(r.names))]
    events += [(r.op_starts[j], -r.op_ends[j], 1, j, r.op_tids[j]) for j in range(len(r.op_names))]
    events.sort(key=lambda e: (e[4], e[0], e[1], e[2]))
    stack: list[list[Any]] = []  # [end, is_op, index, child module ns, child op ns]
    tid = None
    for start, neg_end, is_op, k, t in events:
        if t != tid:
            while stack:
                _finish(stack, sums, r)
            tid = t
        while stack and stack[-1][0] <= start:
            _finish(stack, sums, r)
        if not is_op:
            sums.calls[r.names[k]] += 1
            sums.cpu[r.names[k]] += r.ends[k] - r.starts[k]
            outer = _innermost_module(stack)
            sums.parent.setdefault(r.names[k], None if outer is None else r.names[outer])
        stack.append([-neg_end, is_op, k, 0, 0])
    while stack:
        _finish(stack, sums, r)
    return sums


def _innermost_module(stack: list[list[Any]]) -> int | None:
    for frame in reversed(stack):
        if not frame[1]:
            return int(frame[2])
    return None


def _finish(stack: list[list[Any]], sums: _Sums, r: ModuleRanges) -> None:
    _end, is_op, k, child_mod, child_op = stack.pop()
    if not is_op:
        dur = r.ends[k] - r.starts[k]
        sums.self_cpu[r.names[k]] += dur - child_mod
        outer = _innermost_module(stack)
        if outer is not None:
            for frame in reversed(stack):
                if not frame[1]:
                    frame[3] += dur
                    break
        return
    dur = r.op_ends[k] - r.op_starts[k]
    if stack and stack[-1][1]:
        stack[-1][4] += dur  # an op inside an op: the outer op's self time leaves it out
    owner = _innermost_module(stack)
    if owner is None:
        return
    name = r.names[owner]
    if r.op_seq and r.op_seq[k] >= 0 and not r.op_fwd_tids[k]:  # a forward op autograd numbered
        sums.fwd_owner.setdefault((r.op_tids[k], r.op_seq[k]), name)
    dev = r.op_device_ns[k]
    sums.self_dev[name] += dev
    row = sums.ops[name].setdefault(r.op_names[k], [0, 0, 0])
    row[0] += dur - child_op
    row[1] += dev
    row[2] += 1


def _backward(r: ModuleRanges, fwd_owner: Mapping[tuple[int, int], str], root: str | None) -> tuple[dict[str, int], dict[str, int]]:
    """Each module's own backward time (CPU ns, device ns): every backward function autograd
    ran (``evaluate_function`` ranges, the outermost on their thread) goes to the module whose
    forward op has its sequence number, else to ``root`` (the decorated module, whose own call
    holds every op), else to none; its device time is that of the ops inside it."""
    cpu: dict[str, int] = defaultdict(int)
    dev: dict[str, int] = defaultdict(int)
    if not r.op_seq or not fwd_owner and root is None:
        return cpu, dev
    per_tid: dict[int, list[int]] = defaultdict(list)
    for j in range(len(r.op_names)):
        per_tid[r.op_tids[j]].append(j)
    for ops in per_tid.values():
        ops.sort(key=lambda j: (r.op_starts[j], -r.op_ends[j]))
        starts = [r.op_starts[j] for j in ops]
        device = [0, *accumulate(r.op_device_ns[j] for j in ops)]
        open_until = -1
        for pos, j in enumerate(ops):
            if not r.op_names[j].startswith(BACKWARD_PREFIX) or r.op_starts[j] < open_until:
                continue  # not a backward function, or one run inside another (reentrant)
            open_until = r.op_ends[j]
            owner = fwd_owner.get((r.op_fwd_tids[j], r.op_seq[j])) if r.op_seq[j] >= 0 else None
            owner = owner or root
            if owner is None:
                continue
            cpu[owner] += r.op_ends[j] - r.op_starts[j]
            last = bisect.bisect_left(starts, r.op_ends[j], lo=pos)
            dev[owner] += device[last] - device[pos]
    return cpu, dev


def _top_ops(ops: Mapping[str, list[int]], has_device: bool) -> tuple[tuple[Any, ...], ...]:
    rank = (lambda kv: -kv[1][1]) if has_device else (lambda kv: -kv[1][0])
    return tuple(
        (name, cpu / 1e3, dev / 1e3 if has_device else None, calls)
        for name, (cpu, dev, calls) in sorted(ops.items(), key=rank)[:TOP_OPS]
    )


@dataclass(frozen=True)
class ModuleGroup:
    """A row of the collapsed tree: one module, or siblings of one class told apart only by an
    index (``layers.0`` ... ``layers.31`` shown as ``layers.0-31``), with their summed times and
    the spread (least and most inclusive time of one of them)."""

    label: str
    depth: int
    members: tuple[ModuleStat, ...]

    @property
    def first(self) -> ModuleStat:
        return self.members[0]

    @property
    def time_us(self) -> float:
        return sum(m.time_us for m in self.members)

    @property
    def self_time_us(self) -> float:
        dev = [m.self_device_us for m in self.members]
        if all(d is not None for d in dev):
            return float(sum(d or 0.0 for d in dev))
        return sum(m.self_cpu_us for m in self.members)

    @property
    def share(self) -> float:
        return sum(m.share for m in self.members)

    @property
    def calls(self) -> int:
        return sum(m.calls for m in self.members)

    @property
    def backward_us(self) -> float:
        """The members' inclusive backward time (0 where none was given to them)."""
        return sum(m.backward_us or 0.0 for m in self.members)

    @property
    def spread(self) -> tuple[float, float] | None:
        """(least, most) inclusive time of one member; None for a single module."""
        if len(self.members) < 2:
            return None
        times = [m.time_us for m in self.members]
        return min(times), max(times)

    @property
    def hints(self) -> tuple[int, ...]:
        return tuple(sorted({h for m in self.members for h in m.hints}))


def collapse_repeats(modules: Sequence[ModuleStat], max_depth: int | None = None) -> list[ModuleGroup]:
    """The tree as rows, with repeated siblings folded: modules of one class under one parent
    whose names differ only in a trailing index (``layers.0`` ... ``layers.31``) become one
    group, and so do their parts (each layer's ``mlp``: one row for all of them), so every
    row's time is the whole model's. ``max_depth`` leaves out deeper rows."""
    children: dict[str | None, list[ModuleStat]] = defaultdict(list)
    for m in modules:
        children[m.parent].append(m)
    rows: list[ModuleGroup] = []

    def visit(parents: Sequence[ModuleStat | None], depth: int) -> None:
        if max_depth is not None and depth > max_depth:
            return
        groups: dict[tuple[str, str], list[ModuleStat]] = {}
        for p in parents:
            cut = 0 if p is None else len(p.name) + 1
            for m in children.get(None if p is None else p.name, ()):
                if cut and m.name.startswith(p.name + "."):  # type: ignore[union-attr]
                    rel = m.name[cut:]
                elif p is not None and p.parent is None:
                    rel = m.name  # a root's children are named as in its named_modules()
                else:
                    rel = m.short_name
                found = _INDEXED.match(rel)
                key = (found.group(1), m.type) if found and found.group(1).endswith(".") else (rel, m.type)
                groups.setdefault(key, []).append(m)
        for (rel, _), group in sorted(groups.items(), key=lambda kv: -sum(m.time_us for m in kv[1])):
            rows.append(ModuleGroup(label=_label(rel, group, len(parents)), depth=depth, members=tuple(group)))
            visit(group, depth + 1)

    visit([None], 0)
    return rows


def _label(rel: str, group: Sequence[ModuleStat], parents: int) -> str:
    """``layers.0-31`` for indexed siblings; a part's own name (``mlp``) otherwise. The same
    index under several folded parents (each stage's ``downsample.0``) stays one index."""
    if not rel.endswith("."):
        return rel
    idx = sorted({int(_INDEXED.match(m.name).group(2)) for m in group})  # type: ignore[union-attr]
    if len(idx) == 1:
        return f"{rel}{idx[0]}"
    run = f"{idx[0]}-{idx[-1]}" if idx == list(range(idx[0], idx[-1] + 1)) else ",".join(map(str, idx))
    return f"{rel}{run}"


_INDEXED = re.compile(r"^(.*?)(\d+)$")
