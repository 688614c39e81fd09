"""Readable names for torch.compile's rows in the op table: ``Torch-Compiled Region: 0/0`` and
``## Call CompiledFxGraph <hash> ##`` renamed after the user's function they compiled
(:func:`labelled_compiled_ops`), and Dynamo's bookkeeping ranges dropped from the regions.
The pipeline builds the result's op table with them after the hint rules, which read torch's
own names; the hints on the same facts (:mod:`neuronscope.analysis.compile`) name compiled
code as the table does, with :func:`compiled_label`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import TYPE_CHECKING, Any

from neuronscope.events.nesting import enclosing
from neuronscope.events.table import COMPILED_CODE_PREFIXES
from neuronscope.result.stats import OpStat, RegionStat

if TYPE_CHECKING:
    from neuronscope.events import EventTable

__all__ = ["REGION", "REGION_PREFIX", "RESUME", "compiled_label", "labelled_compiled_ops"]

REGION_PREFIX = "Torch-Compiled Region: "
#: Dynamo's region around one call of compiled code; its compile id ("F/A": frame F, attempt A).
REGION = re.compile(r"^Torch-Compiled Region: (\d+/\d+)")
#: The frame Dynamo compiles for the rest of a function after a graph break at a line.
RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")
_GRAPH = re.compile(r"^## Call CompiledFxGraph (\w+) ##$")
_BACKWARD = "CompiledFunctionBackward"
_COMPILE_DATA = re.compile(r"^\S+_data: (?:.*, )?compile_id=\S+$")


def _display_function(co_name: str | None) -> str | None:
    """``g`` for ``g``, and ``g (after the graph break at line 6)`` for Dynamo's resume frames."""
    m = RESUME.match(co_name or "")
    return f"{m.group(1)} (after the graph break at line {m.group(2)})" if m else co_name or None


def compiled_label(compile_id: str, functions: dict[str, dict[str, Any]] | None, graph: bool = False) -> str:
    """The op-table name of a compiled region (or, with ``graph``, of its compiled graph)."""
    info = (functions or {}).get(compile_id) or {}
    fn = _display_function(info.get("function"))
    head = "compiled graph" if graph else "compiled"
    return f"{head}: {fn} [{compile_id}]" if fn else f"{head}: [{compile_id}]"


def _graph_owners(table: EventTable) -> dict[str, str]:
    """Compiled-graph hash -> the compile id of the region it ran in, or ``"backward"``.

    One sweep per thread over the compiled regions and graph calls, parents first.
    """
    names = table.names
    rows = [i for i, name in enumerate(names) if name.startswith(COMPILED_CODE_PREFIXES) or name == _BACKWARD]
    owners: dict[str, str] = {}
    graphs = {i: g.group(1) for i in rows if (g := _GRAPH.match(names[i]))}
    # Only regions and backward are on the stack: the innermost one around a graph call (a graph
    # in a graph: its region) is the top, however deep graph calls nest (a hostile trace).
    for i, stack in enclosing(table, rows, opens=lambda i: i not in graphs):
        graph = graphs.get(i)
        if graph is None or graph in owners:
            continue
        parent = names[stack[-1]] if stack else None
        if parent == _BACKWARD:
            owners[graph] = "backward"
        elif parent is not None and (m := REGION.match(parent)):
            owners[graph] = m.group(1)
    return owners


def _merged(a: OpStat, b: OpStat) -> OpStat:
    """``a`` with ``b``'s calls and times added (device times where both have one)."""

    def added(x: float | None, y: float | None) -> float | None:
        return x + y if x is not None and y is not None else x

    return dataclasses.replace(
        a,
        calls=a.calls + b.calls,
        self_cpu_us=a.self_cpu_us + b.self_cpu_us,
        cpu_total_us=a.cpu_total_us + b.cpu_total_us,
        self_device_us=added(a.self_device_us, b.self_device_us),
        device_total_us=added(a.device_total_us, b.device_total_us),
    )


def labelled_compiled_ops(
    ops: list[OpStat], regions: dict[str, RegionStat], table: EventTable, fx: dict[str, Any] | None
) -> tuple[list[OpStat], dict[str, RegionStat]]:
    """The op table and regions with the compiled code's rows renamed, for the result to be
    built with: a new list and dict; a renamed row, and a region holding one, is a new object;
    nothing given is changed.

    - ``Torch-Compiled Region: 0/0`` becomes ``compiled: f [0/0]``: one call of the compiled
      function ``f`` (frame 0, attempt 0; ``f (after the graph break at line N)`` for the part
      after a graph break). Its self time is Dynamo's own runtime around the graph (entering
      the compiled code, wrappers); its CPU total is the whole compiled call.
    - ``## Call CompiledFxGraph <hash> ##`` becomes ``compiled graph: f [0/0]`` (or
      ``compiled graph: backward [<hash>]`` for a backward graph): its self time is the
      generated code itself (Inductor's fused kernels on CPU, their launches on a GPU); aten
      ops it calls (a matmul, allocations) keep their own rows.

    So self times still add up to the capture, as for every other row, and the fused work
    sits under a name that says which function it is. Dynamo's bookkeeping ranges of a
    compile that ran in the capture (``build_guards_data: compile_id=0/1`` ...) are dropped
    from ``regions``: they hold no ops, and the compile hints carry the compile time. Where
    the function is not known (a trace file, or a compile no longer in Dynamo's records) the
    name keeps the compile id only.
    """
    functions = (fx or {}).get("functions") or {}
    owners = _graph_owners(table) if any(o.name.startswith("## Call CompiledFxGraph") for o in ops) else {}

    @functools.cache  # None: the name stays
    def new_name(name: str) -> str | None:
        m = REGION.match(name)
        if m:
            return compiled_label(m.group(1), functions)
        g = _GRAPH.match(name)
        if g is None:
            return None
        owner = owners.get(g.group(1))
        if owner is None:
            return f"compiled graph: [{g.group(1)[:8]}]"
        if owner == "backward":
            return f"compiled graph: backward [{g.group(1)[:8]}]"
        return compiled_label(owner, functions, graph=True)

    def relabel(ops: list[OpStat]) -> list[OpStat]:
        merged: dict[str, int] = {}  # label -> its row's index in out
        out: list[OpStat] = []
        for op in ops:
            label = new_name(op.name)
            if label is None:
                out.append(op)
                continue
            op = dataclasses.replace(op, name=label)
            if label in merged:  # two graphs under one label (a compile id reused after a reset)
                out[merged[label]] = _merged(out[merged[label]], op)
            else:
                merged[label] = len(out)
                out.append(op)
        return out

    # Dynamo's bookkeeping ranges while it compiles ("build_guards_data: compile_id=0/1"): no
    # ops inside, dozens per compile; the compile hints report the compile time instead.
    kept = {
        name: dataclasses.replace(region, ops=relabel(region.ops))
        for name, region in regions.items()
        if not _COMPILE_DATA.match(name)
    }
    return relabel(ops), kept

