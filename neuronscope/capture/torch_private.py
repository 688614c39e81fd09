"""Every private torch name neuronscope uses, in one place, each with why.

torch offers no public way to do these things; each accessor below names the private name, the
torch version it was checked on (2.13.0, and the oldest it is known to work with where that was
checked), and what breaks without it. Every caller goes through here, so a torch release that
moves one of them is fixed in one module. An accessor that cannot find its name degrades the
way its comment says; none raises on another torch.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

__all__ = [
    "clear_profiler_flag", "compile_lock", "default_store", "disable_native_profiler", "discard_replaced_session",
    "dispatch_mode_class", "dynamo_eval_frame", "dynamo_skip", "dynamo_utils", "end_range", "experimental_config_class",
    "forget_thread_session", "kineto_results", "marker_span", "native_profiler_enabled", "native_profiler_on", "own_compile",
    "privateuse1_backend_name", "profile_slice", "profiler_flag_on", "profiler_start_counter", "profiler_starts",
    "record_function_fast", "record_scope_and_event_type", "replaced_sessions", "session_gate", "sessions_elsewhere",
    "thread_session", "tree_leaves",
]


def profiler_starts() -> int:
    """How many torch profiler sessions (ours and the user's) began in this process since this
    was first asked: each session's Kineto preparation and its start count one each (a
    ``schedule``'s warm-up prepares a session steps before it starts it). The module functions
    ``torch.autograd.profiler._prepare_profiler``, ``_run_on_profiler_start`` and
    ``_disable_profiler`` that every session goes through (``torch.profiler.profile`` and
    ``torch.autograd.profiler.profile`` alike; checked on torch 2.13) are wrapped once to count
    them (:func:`profiler_start_counter`), the count kept on the wrappers (torch's module holds
    them; none of ours). Why: a session begun while another runs replaces it in torch's state
    without a word, and a session of ours must know that it is no longer the one running before
    it toggles or stops anything, or it would turn off or end the user's own. On a torch
    without the names: always 0 (a replaced session is then not noticed, as before)."""
    return profiler_start_counter()[0]


def profiler_start_counter() -> list[int]:
    """The one-item list that :func:`profiler_starts` reads (``counter[0]``): a hook that runs
    at every module call keeps it and reads the count without a call. A list of its own
    (always ``[0]``) on a torch without the names. The first call installs the wrappers."""
    hooks = _session_hooks()
    return hooks.starts if hooks is not None else [0]


class _SessionHooks:
    """What the wrappers of torch's session functions share (kept on the wrappers)."""

    def __init__(self) -> None:
        self.starts = [0]
        #: Held by every Kineto preparation in the process (the user's, inside the wrapper) and
        #: by neuronscope around each start, stop and toggle of its own: see :func:`session_gate`.
        self.gate = threading.RLock()
        #: The session each thread holds in torch's state, from its preparation to its
        #: ``_disable_profiler``: the thread's :data:`starts` count at its preparation.
        self.spans: dict[threading.Thread, int] = {}
        #: Ranges begun in a session that another one replaced since: never ended (end_range),
        #: kept alive here (their end would run when they are freed).
        self.stranded: list[Any] = []
        #: Threads whose session (of neuronscope's) another thread's replaced, with its span:
        #: left in their state until capture.base drops it.
        self.replaced: dict[threading.Thread, int] = {}


def _session_hooks() -> _SessionHooks | None:
    """The wrappers' shared state, installing the wrappers on first use; None on a torch
    without the names (or not imported)."""
    torch = sys.modules.get("torch")
    module = getattr(getattr(torch, "autograd", None), "profiler", None)
    names = ("_run_on_profiler_start", "_prepare_profiler", "_disable_profiler")
    if module is None or not all(callable(getattr(module, n, None)) for n in names):
        return None
    hooks = getattr(module._run_on_profiler_start, "neuronscope_hooks", None)
    if isinstance(hooks, _SessionHooks):
        return hooks
    hooks = _SessionHooks()
    on_start, prepare, disable = (getattr(module, n) for n in names)

    def counted() -> Any:
        hooks.starts[0] += 1
        return on_start()

    def gated_prepare(*args: Any, **kwargs: Any) -> Any:
        # Under the gate: neuronscope's "is a session running?" and its start are one step
        # for every other thread's session (a session prepared while another one runs makes
        # the second of their two stops crash: a segmentation fault in Kineto).
        with hooks.gate:
            me = threading.current_thread()
            before = hooks.spans.get(me)
            hooks.starts[0] += 1
            hooks.spans[me] = hooks.starts[0]
            try:
                return prepare(*args, **kwargs)
            except BaseException:
                # Refused (bad arguments, a session already on the thread): nothing of this
                # one is in torch's state. Recorded, it made the thread's next capture stop a
                # session that never began: an empty result, the user's op lost.
                if before is None:
                    hooks.spans.pop(me, None)
                else:
                    hooks.spans[me] = before
                raise

    def ended() -> Any:
        try:
            return disable()
        finally:
            hooks.spans.pop(threading.current_thread(), None)

    def reopen_gate_in_child() -> None:
        # A fork while another thread held the gate (a capture starting, the user's session
        # preparing) leaves it held by a thread the child does not have: every profiler
        # preparation there, the user's own in a DataLoader worker included, waited for ever.
        if hooks.gate.acquire(blocking=False):  # free, or this (the forking) thread's own
            hooks.gate.release()
        else:
            hooks.gate = threading.RLock()

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=reopen_gate_in_child)
    counted.neuronscope_hooks = hooks  # type: ignore[attr-defined]
    module._run_on_profiler_start = counted
    module._prepare_profiler = gated_prepare
    module._disable_profiler = ended
    return hooks


def session_gate() -> Any:
    """The lock that every torch profiler session's preparation takes in this process (the
    user's too, through the wrapper of ``_prepare_profiler``): neuronscope holds it around
    each start, stop and toggle of its own, so that no other thread's session begins between
    its check and its act. Reentrant (a start prepares inside it). A lock of its own, doing
    nothing for anyone else, on a torch without the names."""
    hooks = _session_hooks()
    return hooks.gate if hooks is not None else threading.RLock()


def thread_session() -> int | None:
    """The session this thread holds in torch's state (its count at its preparation), or None:
    none since the wrappers were installed, or its ``_disable_profiler`` ran."""
    hooks = _session_hooks()
    return None if hooks is None else hooks.spans.get(threading.current_thread())


def replaced_sessions() -> dict[threading.Thread, int]:
    """The threads that hold a dead session of neuronscope's (another thread's replaced it),
    each with its span: not living sessions, for :func:`sessions_elsewhere`. Kept on the
    wrappers; an empty dict of its own on a torch without the names."""
    hooks = _session_hooks()
    return hooks.replaced if hooks is not None else {}


def sessions_elsewhere() -> list[threading.Thread]:
    """The live threads other than this one that hold a living session in torch's state
    (prepared or running; the user's or another capture's; not a :func:`replaced_sessions`)."""
    hooks = _session_hooks()
    if hooks is None:
        return []
    me = threading.current_thread()
    for thread in [t for t in list(hooks.spans) if not t.is_alive()]:  # its state went with it
        hooks.spans.pop(thread, None)
        hooks.replaced.pop(thread, None)
    return [t for t in list(hooks.spans) if t is not me and t not in hooks.replaced]


def discard_replaced_session() -> None:
    """Drop this thread's profiler state, left by a session that another thread's session
    replaced, once that one ended: ``_prepare_profiler`` (a fresh Kineto trace) and then
    ``_disable_profiler``. Checked on torch 2.13: a plain ``_disable_profiler`` here is the
    second stop of two overlapping sessions, and crashes in Kineto (``transferCpuTrace``,
    ``processTraceInternal``: a segmentation fault); with a trace of its own prepared first it
    does not. Without it the thread keeps the dead session: every later start on it raises
    "Profiler is already enabled on this thread". The caller holds :func:`session_gate` and
    knows that no other thread holds a session."""
    import torch.autograd.profiler as autograd_profiler

    helper = autograd_profiler.profile(use_kineto=True)
    autograd_profiler._prepare_profiler(helper.config(create_trace_id=True), helper.kineto_activities)
    autograd_profiler._disable_profiler()


def end_range(rng: Any, starts: int) -> None:
    """Exit the ``record_function`` range ``rng``, entered when :func:`profiler_starts` was
    ``starts``; unless a session started since. Ending a range begun in a session that the
    user's own ``torch.profiler`` replaced runs the old session's end callbacks inside theirs,
    and corrupts what they record (torch 2.13: ``MemoryError: std::bad_alloc`` reading their
    ``prof.events()``, one fresh process in two): such a range is left open, and kept alive on
    the counting wrapper. Never raises."""
    if rng is None:
        return
    if profiler_starts() != starts:
        hooks = _session_hooks()
        if hooks is not None:
            hooks.stranded.append(rng)
        return
    try:
        rng.__exit__(None, None, None)
    except Exception:  # the profiler it belonged to already stopped
        pass


def profiler_flag_on() -> bool:
    """``torch.autograd.profiler._is_profiler_enabled``: is any torch profiler running in this
    process (ours or the user's)? Checked on torch 2.4-2.13. Without it a capture would start a
    second profiler inside the user's own, which torch refuses with a RuntimeError; False on a
    torch without it (or not imported)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.autograd.profiler._is_profiler_enabled)
    except AttributeError:  # pragma: no cover - another torch
        return False


def native_profiler_enabled() -> bool:
    """``torch._C._autograd._profiler_enabled()``: is the native (Kineto) profiler on, whatever
    the Python flag says? Checked on torch 2.13. Without it an interrupted stop that left the
    native profiler on could not be told apart (see :func:`disable_native_profiler`)."""
    from torch._C._autograd import _profiler_enabled

    return bool(_profiler_enabled())


def native_profiler_on() -> bool:
    """:func:`native_profiler_enabled`, True where it cannot be told (another torch): a caller
    that would stop a session stops it, as it would without the check."""
    try:
        return native_profiler_enabled()
    except Exception:  # pragma: no cover - another torch
        return True


def disable_native_profiler() -> None:
    """``torch.autograd.profiler._disable_profiler()``: stop this thread's native profiler
    where it is on, whatever the Python flag says. Checked on torch 2.13. Without it a Ctrl-C
    between the two halves of ``profile.__exit__`` (or before both) leaves the thread's
    session running, and every later start on the thread raises."""
    import torch.autograd.profiler as autograd_profiler

    if native_profiler_enabled():
        autograd_profiler._disable_profiler()


def clear_profiler_flag() -> None:
    """``torch.autograd.profiler._set_is_profiler_enabled(False)``: reset the Python flag that
    :func:`profiler_flag_on` reads. Checked on torch 2.13. Without it a Ctrl-C between the
    halves of ``profile.__exit__`` leaves the flag set, and every later capture in the process
    skips ("a profiler is running"). The caller knows that no session runs."""
    import torch.autograd.profiler as autograd_profiler

    autograd_profiler._set_is_profiler_enabled(False)


def forget_thread_session() -> None:
    """Forget this thread's session where its preparation never became a start (the start
    failed half-way): nothing in torch's thread state to stop, and it must not look running."""
    hooks = _session_hooks()
    if hooks is not None:
        hooks.spans.pop(threading.current_thread(), None)


def record_function_fast() -> Any:
    """``torch._C._profiler._RecordFunctionFast``: a labelled range with no Python frame of its
    own (``record_function`` costs several microseconds a call). Checked on torch 2.2-2.13.
    The observation pass opens one per user line; without it that pass would cost several
    times the call it observes."""
    import torch

    return torch._C._profiler._RecordFunctionFast


def privateuse1_backend_name() -> str:
    """``torch._C._get_privateuse1_backend_name()``: the name the PrivateUse1 device goes by
    ("neuron" under TorchNeuron, else "privateuseone"). Checked on torch 2.1-2.13. Without it
    device events of a renamed PrivateUse1 backend (Neuron) are not read as device time."""
    import torch

    return str(torch._C._get_privateuse1_backend_name())


def experimental_config_class() -> Any:
    """``torch._C._profiler._ExperimentalConfig``: the class torch's profiler takes for
    ``experimental_config``, which TorchNeuron's ``NeuronConfig`` must be an instance of.
    Checked on torch 2.13. Without it a NeuronConfig of the wrong type could not be refused
    with a message before torch's own failure deep in the profiler's start."""
    from torch._C._profiler import _ExperimentalConfig

    return _ExperimentalConfig


def kineto_results(prof: Any) -> Any:
    """``prof.profiler.kineto_results``: the raw Kineto results of a finished
    ``torch.profiler.profile`` (``.events()`` gives the ``_KinetoEvent`` list whose methods
    :mod:`neuronscope.events.live` reads; ``.experimental_event_tree()`` the event tree the
    data-flow analysis reads). Checked on torch 1.8-2.13. ``key_averages()``, the public way,
    builds a Python object per event (about 10 s per 100,000 events); without this, captures
    would be that slow to read. None where ``prof`` is not a finished profiler."""
    return getattr(getattr(prof, "profiler", None), "kineto_results", None)


def default_store() -> Any:
    """``torch.distributed.distributed_c10d._get_default_store()``: the key-value store of the
    default process group, which every rank reaches. Checked on torch 2.13. The ranks of a
    torchrun job agree on one capture (and rank 0 gathers their results) through it; a
    collective would block a rank that is not capturing. Without it the ranks are not gathered
    (each keeps its own result, with a note)."""
    from torch.distributed import distributed_c10d

    return distributed_c10d._get_default_store()


def dynamo_utils() -> Any:
    """``torch._dynamo.utils`` if the program imported Dynamo, else None (never imports it):
    ``get_compilation_metrics()``, ``counters`` and ``graph_break_reasons`` are the only record
    of what ``torch.compile`` did during a capture. Checked on torch 2.4-2.13. Without it no
    recompile or graph-break hint."""
    return sys.modules.get("torch._dynamo.utils")


def dynamo_eval_frame(import_it: bool = False) -> Any:
    """``torch._dynamo.eval_frame`` if imported (or ``import_it``), else None: its ``cached_backends`` tells
    whether ``torch.compile`` was used in this process. Checked on torch 2.4-2.13. Without it the
    observation pass could run its torch function mode around compiled code, which Dynamo's
    guards would recompile at the next call (a false recompile hint)."""
    if import_it:
        from torch._dynamo import eval_frame

        return eval_frame
    return sys.modules.get("torch._dynamo.eval_frame")


def own_compile(fn: Any, **kwargs: Any) -> Any:
    """``torch.compile(fn, **kwargs)`` for our own use (``verify()``, probes), its entry left out of
    ``cached_backends`` (which :mod:`.observe` reads as the user's use of torch.compile); a user's compile
    meanwhile in another thread keeps its own. torch 2.4-2.13 registers as torch.compile is called."""
    import torch

    found = getattr(dynamo_eval_frame(import_it=True), "cached_backends", None)
    registry: dict[Any, Any] = found if isinstance(found, dict) else {}
    before = set(registry)
    try:
        return torch.compile(fn, **kwargs)
    finally:
        for key in set(registry) - before:  # the registry only feeds torch._dynamo.reset()
            registry.pop(key, None)


def compile_lock() -> Any:
    """``torch._dynamo.convert_frame.compile_lock``, held over each frame's whole compile (torch
    2.13): global module hooks changed while another thread compiles break its guards, which
    read the hooks it traced (``KeyError`` in its call). None where Dynamo is not imported."""
    return getattr(sys.modules.get("torch._dynamo.convert_frame"), "compile_lock", None)


def dynamo_skip(functions: Any) -> None:
    """Dynamo never compiles these functions' frames (``eval_frame.skip_code``; torch 2.13):
    the capture's module hooks, run inside a compiled module's call (a traced call inlines them)."""
    skip: Any = getattr(sys.modules.get("torch._dynamo.eval_frame"), "skip_code", None)
    for fn in functions if skip is not None else ():
        skip(fn.__func__.__code__)


def dispatch_mode_class() -> Any:
    """``torch.utils._python_dispatch.TorchDispatchMode``: a mode that sees each aten op (the
    public ``TorchFunctionMode`` sees only Python-level calls). Checked on torch 2.0-2.13.
    The cost probes count the aten ops of a fused form with it; without it they cannot."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def tree_leaves(tree: Any) -> list[Any]:
    """``torch.utils._pytree.tree_leaves``: the tensors inside nested arguments. Checked on
    torch 2.0-2.13; used beside :func:`dispatch_mode_class`."""
    from torch.utils._pytree import tree_leaves as leaves

    return list(leaves(tree))


def record_scope_and_event_type() -> tuple[Any, Any]:
    """``torch._C._profiler.RecordScope`` and ``_EventType``: the kinds of nodes in the event
    tree of :func:`kineto_results` (a torch op, a Python function, an allocation). Checked on
    torch 2.0-2.13. Without them the event tree's nodes cannot be told apart, and the
    data-flow graph (the fusion hints' exact links) cannot be read."""
    from torch._C._profiler import RecordScope, _EventType

    return RecordScope, _EventType


class _ResultsSlice:
    """One time range of a finished session's Kineto results (:func:`profile_slice`)."""

    def __init__(self, results: Any, lo_ns: int, hi_ns: int, marker: str, trace_cache: str) -> None:
        self._results, self._lo, self._hi, self._marker = results, lo_ns, hi_ns, marker
        self._cache = trace_cache

    def __getattr__(self, name: str) -> Any:
        return getattr(self._results, name)

    def _inside(self, start_ns: int, name: str) -> bool:
        return self._lo <= start_ns <= self._hi and name != self._marker

    def events(self) -> list[Any]:
        return [e for e in self._results.events() if self._inside(e.start_ns(), e.name())]

    def experimental_event_tree(self) -> list[Any]:
        # The nodes inside the range whose parent is not: the roots a session of the range's own
        # would have had (the marker's children among them).
        roots: list[Any] = []
        stack = list(reversed(self._results.experimental_event_tree()))
        while stack:
            node = stack.pop()
            if self._inside(node.start_time_ns, node.name):
                roots.append(node)
            elif node.start_time_ns <= self._hi:
                stack.extend(reversed(node.children))
        return roots

    def save(self, path: str) -> None:
        """The session's Chrome trace, less the events outside the range (metadata kept).
        torch saves a session's trace once: the first slice saves it into ``trace_cache``
        (a directory the session keeps), and every slice reads it from there."""
        import json

        full = os.path.join(self._cache, "session_trace.json")
        if not os.path.isfile(full):
            self._results.save(full)
        with open(full, encoding="utf-8") as fh:
            trace = json.load(fh)
        base = int(trace.get("baseTimeNanoseconds", 0) or 0)
        lo_us, hi_us = (self._lo - base) / 1e3, (self._hi - base) / 1e3

        def keep(e: Any) -> bool:
            if not isinstance(e, dict) or e.get("ph") == "M" or not isinstance(e.get("ts"), (int, float)):
                return True
            if e.get("cat") == "Trace" and e.get("ph") == "X":  # the session's span: this capture's
                e["ts"], e["dur"] = lo_us, round(hi_us - lo_us, 3)
                return True
            return lo_us - 1e-3 <= e["ts"] <= hi_us + 1e-3 and e.get("name") != self._marker

        trace["traceEvents"] = [e for e in trace.get("traceEvents", []) if keep(e)]
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(trace, fh)


class _ProfilerSlice:
    def __init__(self, profiler: Any, results: _ResultsSlice) -> None:
        self._profiler = profiler
        self.kineto_results = results

    def __getattr__(self, name: str) -> Any:
        return getattr(self._profiler, name)

    def export_chrome_trace(self, path: str) -> None:
        self.kineto_results.save(path)


class _ProfileSlice:
    """A finished ``torch.profiler.profile`` seen through one time range: what a session of
    that range alone would have given to the readers here (``events()``, the event tree, the
    Chrome trace); everything else is the session's."""

    def __init__(self, prof: Any, results: _ResultsSlice) -> None:
        self._prof = prof
        self.profiler = _ProfilerSlice(prof.profiler, results)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._prof, name)

    def export_chrome_trace(self, path: str) -> None:
        self.profiler.export_chrome_trace(path)


def profile_slice(prof: Any, lo_ns: int, hi_ns: int, marker: str, trace_cache: str) -> Any:
    """``prof`` (a finished ``torch.profiler.profile``) restricted to the events that start
    within [``lo_ns``, ``hi_ns``] (Kineto's clock), less the ``marker`` range that bounds them:
    one capture of a session kept over several (:class:`neuronscope.capture.record.SharedSession`).
    Wraps ``prof.profiler.kineto_results`` (torch 1.8-2.13: ``events()``,
    ``experimental_event_tree()``, ``save()``); None where ``prof`` has none. ``trace_cache``:
    a directory where the session's one Chrome trace is saved for all its slices."""
    results = kineto_results(prof)
    if results is None:
        return None
    return _ProfileSlice(prof, _ResultsSlice(results, lo_ns, hi_ns, marker, trace_cache))


def marker_span(prof: Any, marker: str) -> tuple[int, int] | None:
    """(start, end) in ns of the range named ``marker`` in a finished session, or None."""
    results = kineto_results(prof)
    if results is None:
        return None
    for e in results.events():
        if e.name() == marker:
            return int(e.start_ns()), int(e.end_ns())
    return None
