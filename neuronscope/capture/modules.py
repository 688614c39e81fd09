"""Module calls labelled in the capture: global ``nn.Module`` forward hooks, only while it runs.

For the module breakdown (:mod:`neuronscope.result.modules`), each module call inside a capture
becomes a range of the profiler named ``nn.Module: <qualified name>`` (``model.layers.1.mlp``),
so the breakdown is read from the same events as the ops, with the same clock, from a live
capture and from its saved trace alike (Perfetto shows the ranges too). The hooks are torch's
process-wide ones (``register_module_forward_pre_hook``), registered when the capture starts
and removed when it stops: nothing is patched, and no module outside a capture pays for them.
Both changes wait for any other thread's ``torch.compile`` of a frame to end (Dynamo's compile
lock): a compile whose hooks changed under it failed in the user's call (``KeyError``).

Qualified names come from the call nesting: a module called inside another module's forward
is looked up among that module's ``named_modules()``; a module called outside any other is a
root, named by its class (or by its path in the module given as the capture's root: the
instance whose decorated ``forward`` started the capture, whose own hooks ran before it).
Names are those of ``named_modules()``, so ``model.layers.1.mlp.down_proj`` reads as in the
user's ``state_dict``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from neuronscope.capture import torch_private

__all__ = ["MODULE_RANGE_PREFIX", "ModuleFacts", "ModuleHooks"]

#: The profiler range name of a module call: this prefix, then the module's qualified name.
MODULE_RANGE_PREFIX = "nn.Module: "

#: torch warns once a process when torch.compile(module) runs under global module hooks: the
#: OptimizedModule's hooks fire as well as the inner module's. Ours skip the OptimizedModule,
#: so the warning says nothing true of the user's code while a capture runs.
_COMPILE_HOOK_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"
#: How long a capture waits for another thread's compile of one frame to end: at its start,
#: before it goes on without module names; at its end, before it leaves its hooks registered,
#: switched off, for the first module call that finds no compile running to take out. Short:
#: the user's thread is stalled no longer than this for a compile that is none of its own (a
#: compile's tracing takes seconds), and a parked hook costs one attribute read per call.
_START_WAIT_S = 0.1
_END_WAIT_S = 0.1


@dataclass(frozen=True)
class ModuleFacts:
    """What the hooks learnt besides the ranges: each qualified name's class, and where each
    class's ``forward`` is written (``{type: (file, first line, last line)}``), so that a hint's
    ``file:line`` can be placed on the module whose code it is."""

    types: dict[str, str] = field(default_factory=dict)
    sources: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    #: the class of the module given as the capture's root (a decorated ``forward``'s
    #: instance, whose own call has no range: it is the whole capture), or None
    root: str | None = None


class ModuleHooks:
    """Label every module call while installed (between :meth:`install` and :meth:`remove`)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._handles: list[Any] = []
        self._roots: dict[int, str] = {}  # id(module) -> path, from the root given
        self._root_label: str | None = None
        self._root_id = 0
        #: (id(parent), id(module)) -> (name, children's prefix, range name)
        self._names: dict[tuple[int, int], tuple[str, ...]] = {}
        self._keep: list[Any] = []  # modules named: their ids stay valid while named
        self._types: dict[str, type] = {}
        self._lock = threading.Lock()
        self._warning_filter: Any = None
        self._record: Any = None
        self._starts: list[int] = [0]  # torch's count of profiler starts (see torch_private)
        self._parked = False  # removal put off: switched off, still registered (see remove)
        #: why :meth:`install` registered nothing, where a note should say so (else None)
        self.refused: str | None = None

    # ---- lifetime ---------------------------------------------------------------------
    def install(self) -> bool:
        """Register the hooks; False (and nothing registered) where torch lacks them, or where
        another thread's ``torch.compile`` held Dynamo's lock for :data:`_START_WAIT_S`."""
        try:
            import torch
            from torch.nn.modules import module as torch_module

            self._record = torch_private.record_function_fast()
            self._starts = torch_private.profiler_start_counter()
            self._compiling = functools.partial(_compiling_here, torch.compiler.is_dynamo_compiling, torch.compiler.is_compiling)
            torch_private.dynamo_skip((self._pre, self._post))
            with _between_compiles(_START_WAIT_S) as free:
                if not free:
                    self.refused = (
                        "no module names: another thread's torch.compile held Dynamo's lock as "
                        "the capture started (module hooks added then would break that compile)"
                    )
                    return False
                pre = torch_module.register_module_forward_pre_hook(self._pre)
                post = torch_module.register_module_forward_hook(self._post, always_call=True)
        except (ImportError, AttributeError, TypeError):
            return False
        self._handles = [pre, post]
        warnings.filterwarnings("ignore", message=_COMPILE_HOOK_WARNING)
        self._warning_filter = warnings.filters[0]
        return True

    def set_root(self, module: Any) -> None:
        """Name the module calls outside any other module call by their path in ``module``
        (the instance whose decorated ``forward`` is being captured), under its class name."""
        cls = module.__class__  # the module's class through a weakref proxy too (Lightning's)
        label = cls.__name__
        self._root_label = label
        self._root_id = id(module)
        self._types[label] = cls
        for path, sub in module.named_modules():
            if path:  # not the root itself (which a proxy is not ``is``)
                self._roots[id(sub)] = path
                self._keep.append(sub)

    @property
    def root_label(self) -> str | None:
        """The class name of the module given to :meth:`set_root`, or None."""
        return self._root_label

    def remove(self) -> ModuleFacts:
        """Unregister the hooks, close the ranges left open (a capture that ended inside a
        module call), and return the names' classes and sources. Where another thread's
        compile holds Dynamo's lock for :data:`_END_WAIT_S`, the hooks are switched off and
        left registered, for the first module call run outside any compile to take out."""
        # Off before the wait: a Ctrl-C while waiting leaves them off too, for the first module
        # call outside a compile to take out, not firing on every module call for ever.
        self._parked = True
        with _between_compiles(_END_WAIT_S) as free:
            if free:
                self._unregister()
        stack = getattr(self._local, "stack", None) or []
        while stack:
            _close(stack.pop())
        facts = ModuleFacts(
            types={name: cls.__name__ for name, cls in self._types.items()},
            sources={cls.__name__: src for cls in set(self._types.values()) if (src := _source(cls)) is not None},
            root=self._root_label,
        )
        self._keep = []
        return facts

    def _unregister(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        # The warning goes with the hooks, not with the capture: parked hooks are still
        # registered, and torch would warn a user who compiles a module of hooks not theirs.
        filtered, self._warning_filter = self._warning_filter, None
        if filtered is not None:
            try:
                warnings.filters.remove(filtered)  # type: ignore[attr-defined]
            except ValueError:
                pass
            warnings._filters_mutated()  # type: ignore[attr-defined]

    # ---- the hooks --------------------------------------------------------------------
    def _pre(self, module: Any, args: Any) -> None:
        if self._compiling():
            return  # traced by torch.compile: a range would break its graph
        if self._parked:  # the capture is over: out at the first moment no compile runs
            with _between_compiles(0) as free:
                if free and self._handles:
                    self._unregister()
            return
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        parent = stack[-1] if stack else None
        # torch.compile(module) wraps it in an OptimizedModule whose call is the module's: it
        # takes the inner module's name, and the inner call, where it still runs eagerly
        # inside it, adds no second range of that name.
        target = getattr(module, "_orig_mod", module) if type(module).__name__ == "OptimizedModule" else module
        if parent is not None and parent[0] is not module and getattr(parent[0], "_orig_mod", None) is module:
            return
        key = (id(parent[3]) if parent else 0, id(target))
        named = self._names.get(key)
        if named is None:
            named = self._name(parent, target, key)
        rf = self._record(named[2])
        try:
            rf.__enter__()
        except Exception:
            rf = None
        stack.append((module, named[1], rf, target, self._starts[0]))

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self._compiling() or self._parked:
            # Traced by torch.compile (a model compiling inside the capture): the pre hook
            # pushed nothing here, and reading the stack would have Dynamo track modules the
            # user's compiled module already holds (it raised AssertionError in their call).
            return
        stack = getattr(self._local, "stack", None)
        # Only the call this hook opened: the root whose hooks ran before the capture started
        # (a decorated forward) closes nothing.
        if stack and stack[-1][0] is module:
            _close(stack.pop())

    def _name(self, parent: tuple[Any, ...] | None, module: Any, key: tuple[int, int]) -> tuple[str, ...]:
        """``module``'s qualified name, the prefix of its children's names, its range's name."""
        with self._lock:
            pair: tuple[str, str]
            if parent is None and id(module) == self._root_id and self._root_label is not None:
                pair = (self._root_label, "")  # the root called inside the capture after all
            elif parent is None and id(module) in self._roots:
                name = self._roots[id(module)]
                pair = (name, name + ".")
            elif parent is None:
                pair = self._new_root(module)
            else:
                name = parent[1] + _child_path(parent[3], module)
                pair = (name, name + ".")
            named = (*pair, MODULE_RANGE_PREFIX + _range_text(pair[0]))
            self._names[key] = named
            self._keep.append(module)
            self._types.setdefault(_range_text(named[0]), type(module))
            return named

    def _new_root(self, module: Any) -> tuple[str, str]:
        """A root's name (its class, ``#2``, ``#3`` for other instances of the class) and its
        children's prefix: none for the first root, as in its ``named_modules()``; the root's
        name for later ones (a second model), so that no two modules share a name."""
        label = type(module).__name__
        taken = {named[0] for (p, _), named in self._names.items() if p == 0}
        name, k = label, 1
        while name in taken or name == self._root_label:
            k += 1
            name = f"{label}#{k}"
        first = not taken and self._root_label is None
        return name, "" if first else name + "."


def _compiling_here(is_dynamo_compiling: Any, is_compiling: Any) -> bool:
    """Is this thread compiling? Traced by Dynamo (a constant there, so nothing below is
    traced), or running inside its own compile (AOTAutograd tracing, a backend's code). torch's
    ``is_compiling()`` alone is one flag for the whole process, True in every thread while one
    compiles (in a child forked then, for ever): a module called meanwhile lost its range, or
    kept it open with the calls after it named as its children. The compiling thread holds
    Dynamo's compile lock."""
    if is_dynamo_compiling():
        return True
    if not is_compiling():
        return False
    lock = torch_private.compile_lock()
    return lock is None or lock._is_owned()


@contextlib.contextmanager
def _between_compiles(wait_s: float) -> Iterator[bool]:
    """Hold Dynamo's compile lock for the block, so that no thread compiles a frame while the
    global hooks change; yields False (lock not taken) where another thread kept it ``wait_s``
    seconds. Reentrant: a capture that ends inside a compile of its own thread goes on."""
    lock = torch_private.compile_lock()
    if lock is None or lock._is_owned():
        yield True  # no Dynamo, or this thread's own compile: none runs elsewhere meanwhile
        return
    try:
        yield lock.acquire(timeout=wait_s)
    finally:
        # Whether this thread holds it, not what acquire() said: an interrupt noticed as the
        # acquire returns (a Ctrl-C) skips the name, and a lock left taken hangs every compile.
        if lock._is_owned():
            lock.release()


def _child_path(parent: Any, module: Any) -> str:
    """``module``'s path among ``parent``'s submodules, or (a module the parent calls but
    does not own) its class name."""
    for path, sub in parent.named_children():
        if sub is module:
            return path
    for path, sub in parent.named_modules():
        if sub is module and path:
            return path
    return type(module).__name__


def _range_text(name: str) -> str:
    """``name`` as a range name: torch writes range names into its Chrome trace unescaped, so a
    quote, a backslash or a control character (an ``add_module`` name can hold any) would
    make the saved trace invalid JSON; each becomes a harmless stand-in."""
    if name.isprintable() and '"' not in name and "\\" not in name:
        return name
    return "".join("'" if c == '"' else "/" if c == "\\" else c if c.isprintable() else "?" for c in name)


def _close(entry: tuple[Any, ...]) -> None:
    """End a module call's range (a stack entry: its range third, the count of profiler
    starts when it opened last); left open where a session (the user's own, started inside
    the module's call) replaced the one it began in: see ``torch_private.end_range``."""
    torch_private.end_range(entry[2], entry[4])


@functools.lru_cache(maxsize=512)
def _source(cls: type) -> tuple[str, int, int] | None:
    """Where ``cls.forward`` is written: (file, first line, last line), or None (cached: a
    model's few classes are looked at once a process, not once a capture).

    Read from the function's code objects where Python records where each instruction ends
    (3.11 on), not from its file: the first line is the code's own (its first decorator, as
    ``inspect.getsourcelines`` gives it), the last the furthest any of its instructions
    reaches, nested functions and comprehensions included: the lines tokenizing the source
    block gives, without reading and tokenizing the model's files as the capture stops (5-14
    ms for a small transformer's classes, once a process).
    """
    try:
        fn = inspect.unwrap(cls.forward)  # type: ignore[attr-defined]
        code = fn.__code__
        if not hasattr(code, "co_positions"):  # Python 3.10: read the source block
            lines, first = inspect.getsourcelines(fn)
            return (inspect.getsourcefile(fn) or "", first, first + len(lines) - 1)
        file = inspect.getsourcefile(fn)
    except (TypeError, OSError, AttributeError):
        return None  # a builtin or a C function: no Python source to place a hint in
    except ValueError:  # a loop of ``__wrapped__``: raised here, it lost every module's name
        return None
    if not file:
        return None
    return (file, code.co_firstlineno, _last_line(code))


def _last_line(code: CodeType) -> int:
    """The last source line any instruction of ``code`` (or of code nested in it) comes from."""
    last = code.co_firstlineno
    stack = [code]
    while stack:
        c = stack.pop()
        for line, end_line, _col, _end_col in c.co_positions():  # type: ignore[attr-defined]  # 3.11 on: see _source
            reach = end_line if end_line is not None else line  # None: -X no_debug_ranges
            if reach is not None and reach > last:
                last = reach
        stack.extend(k for k in c.co_consts if isinstance(k, CodeType))
    return last
