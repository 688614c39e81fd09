"""STAND-IN for TorchNeuron, built from the docs. NOT TorchNeuron.

There is no Trainium here and torch-neuronx cannot be installed, so the tests put the package
in ``gen_config/`` on ``sys.path``. It follows the Neuron 2.32/2.33 docs and the April-2026
TorchNeuron source as read in shared/research/neuron-api.md and neuron-api-2.md, and nothing
more:

- the ``neuron`` device module (``torch.neuron``: is_available, device_count, current_device,
  set_device, get_device_name, synchronize), registered at import as TorchNeuron does;
- the Kineto plugin: a real C++ child profiler (``kineto_plugin.cpp``), compiled once with the
  installed torch's headers and registered with the real ``libkineto`` exactly where
  TorchNeuron's registers. So the REAL torch.profiler and Kineto decide when it starts (also for
  a capture with ``ProfilerActivity.CPU`` only: torch's CPU activity set includes the PRIVATEUSE1
  runtime/driver types and Kineto configures every plugin) and the framework events it emits
  (``privateuse1_runtime`` dispatch on the op's thread, ``privateuse1_driver`` execution with the
  stream id as thread id, flow ids, ``nrt_sequence_id``) reach ``kineto_results``,
  ``key_averages()`` and the Chrome trace through torch's own code;
- the Neuron runtime's trace session, started and stopped by the plugin. On stop it writes what
  the docs' "Expected output" lists: ``<root>/<instance-id>_pid_<pid>/<19-digit ns timestamp>/``
  with ``ntrace.pb``, ``trace_info.pb``, ``cpu_util.pb``, ``host_mem.pb``,
  ``profile_nc_<n>_session_0.ntff`` and, where NEFFs are copied in,
  ``neff_<id>_vnc_<n>.neff``. Without a NeuronConfig (a CPU-only capture) the plugin maps the
  Kineto types as the April-2026 source does (runtime -> system trace, driver -> device trace,
  CPU_OP -> cpu_util) and the runtime writes to its default, ``./output``. File contents are
  placeholder bytes, not protobuf.

What no stand-in can give: ops that run on a NeuronCore (the tests' tensors are CPU tensors),
the real event names, the real NeuronConfig internals, real file contents.

Everything a test may assert is in :data:`RECORD`; knobs are in :data:`BEHAVIOUR`. This module
is loaded fresh (as ``torch_neuronx._standin``) by each import of the stand-in package, so both
start empty; the compiled plugin stays loaded for the process and is disabled by
:func:`uninstall`.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import torch

INSTANCE_ID = "i-0standin00000001"
#: NeuronCores the stand-in device has.
DEVICE_COUNT = 2
PLUGIN_SOURCE = Path(__file__).resolve().parent / "kineto_plugin.cpp"
_HOLDER = "_neuron_standin_kineto"  # sys.modules entry that keeps the loaded plugin

RECORD: dict[str, list[Any]] = {
    "synchronize": [],  # {"profiler_enabled": bool, "caller": module name}
    "nrt_begin": [],  # {"output_dir", "modes", "cores", "via", "max_events_per_nc"}
    "nrt_stop": [],  # session directory written (or None)
    "config_kwargs": [],  # NeuronConfig(...) keyword arguments that succeeded
    "profiler_init": [],  # NeuronProfiler(...) arguments
    "export_trace": [],  # paths export_trace wrote
    "dynamo_compiles": [],  # graphs given to the "neuron" torch.compile backend
}

BEHAVIOUR: dict[str, Any] = {
    "write_nothing": False,  # the runtime writes no files (nothing ran on the device)
    "empty_ntff": None,  # None, "all" or "some": .ntff files written with 0 bytes
    "runtime_writes_neffs": False,  # the runtime puts neff_<id>_vnc_0.neff in the session itself
    "device_events": True,  # the plugin emits privateuse1_driver events
    "runtime_events": True,  # the plugin emits privateuse1_runtime events
    "unlinked_driver": 0,  # driver events launched outside any op
    "device_ns": 40_000,  # duration of each stand-in device execution
    # False: dispatch and execution events carry no link to their op (no External id in the
    # trace, linked correlation 0 live), only the flow (ac2g) joining the two; the dispatch
    # runs on the op's thread inside the op. The docs describe flow ids as the link
    # (SystemProfileEvents.flow_id); whether a real build also sets the op link is not known.
    "link_ops": True,
    # NEFFs the capture compiles (written into TORCH_NEURONX_NEFF_CACHE_DIR while it runs, as
    # TorchNeuron compiles an op's NEFF on its first run with a shape)
    "compiles_neffs": 0,
    "trace_name": "trace.json",  # what export_trace writes; a neuron_framework_trace_rank_*
    # name goes to the top of the output directory, as the troubleshooting page describes
}

_active: dict[str, Any] | None = None
_last_session: dict[str, Path] = {}


# ---- the compiled Kineto plugin ---------------------------------------------------------------


def build_plugin() -> Path:
    """Compile ``kineto_plugin.cpp`` against the installed torch (once per source and torch)."""
    torch_dir = Path(torch.__file__).resolve().parent
    key = hashlib.sha256(PLUGIN_SOURCE.read_bytes() + torch.__version__.encode() + sys.version.encode()).hexdigest()[:16]
    target = Path(tempfile.gettempdir()) / f"neuronscope-standin-kineto-{key}.so"
    if target.is_file():
        return target
    compiler = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("the Neuron stand-in needs a C++ compiler (g++) to build its Kineto plugin")
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    cmd = [
        compiler, "-O1", "-std=c++17", "-shared", "-fPIC", "-DFMT_HEADER_ONLY",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-I{torch_dir / 'include' / 'kineto'}", f"-I{torch_dir / 'include'}",
        str(PLUGIN_SOURCE), f"-L{torch_dir / 'lib'}", "-ltorch_cpu", "-lc10",
        f"-Wl,-rpath,{torch_dir / 'lib'}", "-o", str(tmp),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"building the stand-in Kineto plugin failed:\n{proc.stderr[-3000:]}")
    os.replace(tmp, target)
    return target


_START_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_int)
_STOP_CB = ctypes.CFUNCTYPE(None)


def _holder() -> types.ModuleType:
    """The process-wide plugin: loaded and registered with libkineto once (it cannot be
    unregistered), its callbacks forwarding to whichever stand-in module is current."""
    holder = sys.modules.get(_HOLDER)
    if holder is None:
        holder = types.ModuleType(_HOLDER)
        lib = ctypes.CDLL(str(build_plugin()))
        lib.standin_configure.argtypes = [ctypes.c_int] * 4 + [ctypes.c_longlong] * 3 + [ctypes.c_int]

        def on_start(custom: bytes, runtime: int, driver: int) -> None:
            holder.target._plugin_start(custom.decode(), bool(runtime), bool(driver))

        def on_stop() -> None:
            holder.target._plugin_stop()

        holder.callbacks = (_START_CB(on_start), _STOP_CB(on_stop))  # type: ignore[attr-defined]
        lib.standin_set_callbacks(*holder.callbacks)  # type: ignore[attr-defined]
        lib.standin_register()
        holder.lib = lib  # type: ignore[attr-defined]
        sys.modules[_HOLDER] = holder
    return holder


def _configure_plugin(enabled: bool, max_events: int = 0) -> None:
    holder = sys.modules.get(_HOLDER)
    if holder is None:
        return
    holder.lib.standin_configure(  # type: ignore[attr-defined]
        int(enabled),
        int(BEHAVIOUR["device_events"]),
        int(BEHAVIOUR["runtime_events"]),
        int(BEHAVIOUR["unlinked_driver"]),
        int(BEHAVIOUR["device_ns"]),
        0,
        int(max_events),
        int(BEHAVIOUR["link_ops"]),
    )


# ---- device module ----------------------------------------------------------------------------


def synchronize(device: Any = None) -> None:
    """``torch.neuron.synchronize()``: records who called it and whether a profiler ran."""
    import torch.autograd.profiler as autograd_profiler

    caller = sys._getframe(1).f_globals.get("__name__", "?")
    RECORD["synchronize"].append({"profiler_enabled": bool(autograd_profiler._is_profiler_enabled), "caller": caller})


def make_device_module(package: str) -> types.ModuleType:
    """The ``torch_neuronx.neuron`` module that becomes ``torch.neuron``."""
    module = types.ModuleType(f"{package}.neuron", "STAND-IN torch.neuron device module")

    def device_count() -> int:
        return DEVICE_COUNT

    def is_available() -> bool:
        try:
            return device_count() > 0
        except Exception:
            return False

    module.device_count = device_count  # type: ignore[attr-defined]
    module.is_available = is_available  # type: ignore[attr-defined]
    module.current_device = lambda: 0  # type: ignore[attr-defined]
    module.set_device = lambda device: None  # type: ignore[attr-defined]
    # The April-2026 source returns the device string, not a product name.
    module.get_device_name = lambda device=None: "neuron:0"  # type: ignore[attr-defined]
    module.synchronize = synchronize  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    return module


# ---- runtime trace session --------------------------------------------------------------------


def parse_custom_config(text: str) -> dict[str, str]:
    """``"k:v;k:v"``: pairs split on ';', key from value on the first ':', whitespace trimmed."""
    out: dict[str, str] = {}
    for pair in text.split(";"):
        if ":" in pair:
            key, value = pair.split(":", 1)
            out[key.strip()] = value.strip()
    return out


def parse_cores(spec: str | None) -> list[int] | None:
    if not spec:
        return None
    cores: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            if int(lo) <= int(hi):  # the plugin skips backwards ranges with a warning
                cores.extend(range(int(lo), int(hi) + 1))
        elif part:
            cores.append(int(part))
    return sorted(set(cores))


def _plugin_start(custom: str, runtime: bool, driver: bool) -> None:
    conf = parse_custom_config(custom)
    if "modes" in conf:  # written by the stand-in NeuronConfig
        modes = {m for m in conf["modes"].split(",") if m}
    else:  # April-2026 mapping: RUNTIME -> system trace, DRIVER -> device trace, CPU_OP -> cpu_util
        modes = {"cpu_util"} | ({"runtime"} if runtime else set()) | ({"device"} if driver else set())
    max_events = int(conf.get("max_events_per_nc") or 0)
    nrt_begin(
        conf.get("profile_output_dir") or "./output",
        modes,
        parse_cores(conf.get("capture_enabled_for_nc")),
        via="kineto_plugin",
        neff_cache_dir=conf.get("neff_cache_dir"),
        max_events=max_events,
    )
    _configure_plugin(True, max_events)


def _plugin_stop() -> None:
    cache = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR") or "/tmp/neff_cache"
    for i in range(int(BEHAVIOUR["compiles_neffs"])):
        target = Path(cache) / f"MODULE_{time.time_ns()}_{i}" / "model.neff"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"stand-in NEFF compiled during the capture\n")
    nrt_stop()


def nrt_begin(
    output_dir: str, modes: set[str], cores: list[int] | None, via: str,
    neff_cache_dir: str | None = None, max_events: int = 0,
) -> None:
    global _active
    if _active is not None:
        raise RuntimeError("stand-in NRT: a trace session is already active")
    _active = {"output_dir": output_dir, "modes": set(modes), "cores": cores, "neff_cache_dir": neff_cache_dir}
    RECORD["nrt_begin"].append(
        {"output_dir": output_dir, "modes": sorted(modes), "cores": cores, "via": via, "max_events_per_nc": max_events or None}
    )


def session_dir_name() -> str:
    """The runtime's session directory: a 19-digit nanosecond Unix time (a real run's
    ``1778711290599971590``); made unique in this process."""
    stamp = time.time_ns()
    last = _last_session.get("__stamp__")
    if last is not None and int(last.name) >= stamp:
        stamp = int(last.name) + 1
    _last_session["__stamp__"] = Path(str(stamp))
    return str(stamp)


def nrt_stop() -> Path | None:
    """Write the session files of the active session, as ``nrt_inspect_stop`` does."""
    global _active
    session, _active = _active, None
    if session is None:
        return None
    if BEHAVIOUR["write_nothing"]:
        RECORD["nrt_stop"].append(None)
        return None
    root = Path(session["output_dir"])
    target = root / f"{INSTANCE_ID}_pid_{os.getpid()}" / session_dir_name()
    target.mkdir(parents=True, exist_ok=True)
    modes = session["modes"]
    if "runtime" in modes:
        (target / "ntrace.pb").write_bytes(b"stand-in system trace events\n")
        (target / "trace_info.pb").write_bytes(b"stand-in trace info\n")
    if "cpu_util" in modes:
        (target / "cpu_util.pb").write_bytes(b"stand-in cpu utilisation\n")
    if "host_memory" in modes:
        (target / "host_mem.pb").write_bytes(b"stand-in host memory\n")
    if "device" in modes:
        cores = session["cores"] if session["cores"] is not None else list(range(DEVICE_COUNT))
        for i, nc in enumerate(cores):
            empty = BEHAVIOUR["empty_ntff"] == "all" or (BEHAVIOUR["empty_ntff"] == "some" and i > 0)
            (target / f"profile_nc_{nc}_session_0.ntff").write_bytes(b"" if empty else b"stand-in NTFF device trace\n")
        if BEHAVIOUR["runtime_writes_neffs"]:
            (target / "neff_1001031018598281_vnc_0.neff").write_bytes(b"stand-in NEFF\n")
        cache = session["neff_cache_dir"]
        if cache and Path(cache).is_dir():
            # Docs: "cached NEFFs are copied into the profile artifact directory on stop". Which
            # ones is not documented: the stand-in copies all of them (the worst case).
            for neff in Path(cache).rglob("*.neff"):
                shutil.copyfile(neff, target / neff.name)
    _last_session[str(root.resolve())] = target
    RECORD["nrt_stop"].append(target)
    return target


def last_session_dir(output_dir: str) -> Path | None:
    return _last_session.get(str(Path(output_dir).resolve()))


# ---- registration ----------------------------------------------------------------------------

_MISSING = object()
_saved_attrs: list[tuple[Any, str, Any]] = []


def register(package: types.ModuleType) -> None:
    """What ``import torch_neuronx`` does: device registration and the Kineto plugin.

    TorchNeuron calls ``torch.utils.rename_privateuse1_backend("neuron")``. The rename cannot be
    undone in a process and changes torch's defaults for every later test, so the stand-in does
    it only when ``NEURON_STANDIN_RENAME=1`` (subprocess tests) and otherwise sets
    ``torch.neuron`` the way ``torch._register_device_module`` does.
    """
    from torch._C._autograd import DeviceType
    from torch._C._profiler import ProfilerActivity

    for cls in (ProfilerActivity, DeviceType):
        for attr in ("__repr__", "__str__", "name", "NEURON"):
            _saved_attrs.append((cls, attr, vars(cls).get(attr, _MISSING)))
    _saved_attrs.append((torch, "neuron", getattr(torch, "neuron", _MISSING)))
    if os.environ.get("NEURON_STANDIN_RENAME") == "1" or torch._C._get_privateuse1_backend_name() == "neuron":
        torch.utils.rename_privateuse1_backend("neuron")
        torch._register_device_module("neuron", package.neuron)
    else:
        torch.neuron = package.neuron  # type: ignore[attr-defined]
        sys.modules["torch.neuron"] = package.neuron
    holder = _holder()
    holder.target = sys.modules[__name__]  # type: ignore[attr-defined]
    _configure_plugin(True)


def uninstall() -> None:
    """Undo :func:`register` (the plugin stays loaded but inert; the rename stays)."""
    global _active
    _active = None
    _configure_plugin(False)
    for obj, attr, value in reversed(_saved_attrs):
        if value is _MISSING:
            if attr in vars(obj):
                delattr(obj, attr)
        else:
            setattr(obj, attr, value)
    _saved_attrs.clear()
    sys.modules.pop("torch.neuron", None)


# ---- torch.compile backend --------------------------------------------------------------------


def neuron_backend(gm: Any, example_inputs: Any) -> Any:
    """The ``neuron`` torch.compile backend (an entry point of the real package): records the
    graph and runs it eagerly."""
    RECORD["dynamo_compiles"].append(len(list(gm.graph.nodes)))
    return gm.forward
