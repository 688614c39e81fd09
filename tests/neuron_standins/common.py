"""STAND-IN machinery shared by the three fake ``torch_neuronx`` packages. NOT TorchNeuron.

There is no Trainium here and torch-neuronx cannot be installed, so the tests put one of these
stand-ins on ``sys.path``. Each follows the TorchNeuron documentation and source notes in
shared/research/neuron-api.md, and nothing more:

- the ``neuron`` device module (``torch.neuron``: is_available, device_count, current_device,
  set_device, get_device_name, synchronize), registered at import as TorchNeuron does;
- the Neuron runtime's trace session (``nrt_inspect_begin`` / ``nrt_inspect_stop``), which writes
  the session files a real run writes: ``ntrace.pb``, ``trace_info.pb``, ``cpu_util.pb``,
  ``host_mem.pb``, one ``.ntff`` per captured NeuronCore and, where the runtime copies them,
  ``.neff`` files; under ``<dir>/i-<id>_pid_<pid>/<timestamp>/`` or (early builds) directly
  under ``<dir>/i-<id>_pid_<pid>/``. Their content is placeholder bytes, not protobuf;
- the Kineto plugin. The real one is C++ registered with ``libkineto``; Python cannot register
  one, so this stand-in wraps ``torch.profiler``'s ``_KinetoProfile.start_trace`` / ``stop_trace``
  and starts / stops the runtime session when ``ProfilerActivity.PrivateUse1`` is among the
  activities, reading ``experimental_config.custom_profiler_config`` ("k:v;k:v") as the real
  plugin does. :func:`uninstall` puts torch back.

What a real build does that the stand-ins cannot: run ops on a NeuronCore (tests use CPU tensors),
and hand device events to torch.profiler (so per-op device time is always None here).

Registration: TorchNeuron calls ``torch.utils.rename_privateuse1_backend("neuron")`` and then
``torch._register_device_module("neuron", ...)``. The rename cannot be undone in a process and
changes torch's defaults (``supported_activities()`` gains PrivateUse1) for every later test, so
the stand-in does it only when ``NEURON_STANDIN_RENAME=1`` (the subprocess test) and otherwise
sets ``torch.neuron`` the way ``_register_device_module`` does, minus its device-name check.

Everything a test may want to assert is in :data:`RECORD`; behaviour knobs are in
:data:`BEHAVIOUR`. This module is loaded fresh (as ``torch_neuronx._standin``) on each import of
a stand-in, so both start empty.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import torch

INSTANCE_ID = "i-0standin0000000001"
#: NeuronCores the stand-in device has.
DEVICE_COUNT = 2

RECORD: dict[str, list[Any]] = {
    "synchronize": [],  # {"profiler_enabled": bool, "caller": module name}
    "nrt_begin": [],  # {"output_dir", "modes", "cores", "via"}
    "nrt_stop": [],  # session directory written (or None)
    "config_kwargs": [],  # NeuronConfig(...) keyword arguments
    "profiler_init": [],  # NeuronProfiler(...) arguments
    "export_trace": [],  # paths export_trace wrote
    "dynamo_compiles": [],  # graphs given to the "neuron" torch.compile backend
}

BEHAVIOUR: dict[str, Any] = {
    "layout": "timestamp",  # "timestamp": <pid dir>/<timestamp>/...; "flat": files in <pid dir>
    "write_nothing": False,  # the runtime writes no files (nothing ran on the device)
    "empty_ntff": False,  # .ntff files are written with 0 bytes
    "runtime_writes_neffs": False,  # the runtime itself puts neff_<hash>.neff in the session
    "trace_name": "trace.json",  # what export_trace writes; a neuron_framework_trace_rank_*
    # name is written to the top of the output directory, as the troubleshooting page describes
}

_active: dict[str, Any] | None = None
_last_session: dict[str, Path] = {}


# ---- device module ----------------------------------------------------------------------------


def synchronize(device: Any = None) -> None:
    """``torch.neuron.synchronize()`` / ``torch_neuronx.synchronize()``: records who called it
    and whether a profiler was running at that moment."""
    import torch.autograd.profiler as autograd_profiler

    caller = sys._getframe(1).f_globals.get("__name__", "?")
    RECORD["synchronize"].append(
        {"profiler_enabled": bool(autograd_profiler._is_profiler_enabled), "caller": caller}
    )


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
    module.get_device_name = lambda device=None: "Trainium2 (stand-in)"  # type: ignore[attr-defined]
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
            if int(lo) > int(hi):
                continue  # the plugin skips backwards ranges with a warning
            cores.extend(range(int(lo), int(hi) + 1))
        elif part:
            cores.append(int(part))
    return sorted(set(cores))


def nrt_begin(output_dir: str, modes: set[str], cores: list[int] | None, via: str, neff_cache_dir: str | None = None) -> None:
    global _active
    if _active is not None:
        raise RuntimeError("stand-in NRT: a trace session is already active (nrt_inspect_begin called twice)")
    _active = {"output_dir": output_dir, "modes": set(modes), "cores": cores, "neff_cache_dir": neff_cache_dir}
    RECORD["nrt_begin"].append({"output_dir": output_dir, "modes": sorted(modes), "cores": cores, "via": via})


def nrt_stop() -> Path | None:
    """Write the session files of the active session, as ``nrt_inspect_stop`` does."""
    global _active
    session, _active = _active, None
    if session is None:
        raise RuntimeError("stand-in NRT: no active trace session")
    if BEHAVIOUR["write_nothing"]:
        RECORD["nrt_stop"].append(None)
        return None
    root = Path(session["output_dir"])
    pid_dir = root / f"{INSTANCE_ID}_pid_{os.getpid()}"
    if BEHAVIOUR["layout"] == "timestamp":
        now = _dt.datetime.now()
        target = pid_dir / (now.strftime("%Y%m%d_%H%M%S") + f"_{now.microsecond // 1000:03d}")
    else:
        target = pid_dir
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
        body = b"" if BEHAVIOUR["empty_ntff"] else b"stand-in NTFF device trace\n"
        for nc in cores:
            (target / f"profile_nc_{nc}_session_0.ntff").write_bytes(body)
        if BEHAVIOUR["runtime_writes_neffs"]:
            (target / "neff_1234567890_vnc_0.neff").write_bytes(b"stand-in NEFF\n")
        cache = session["neff_cache_dir"]
        if cache and Path(cache).is_dir():  # NeuronConfig(neff_cache_dir=...): copied in on stop
            for neff in Path(cache).rglob("*.neff"):
                shutil.copyfile(neff, target / neff.name)
    _last_session[str(root)] = target
    RECORD["nrt_stop"].append(target)
    return target


def last_session_dir(output_dir: str) -> Path | None:
    return _last_session.get(str(Path(output_dir)))


# ---- Kineto plugin ---------------------------------------------------------------------------

_originals: dict[str, Any] = {}


def _plugin_session_args(experimental_config: Any) -> tuple[str, set[str], list[int] | None, str | None]:
    text = getattr(experimental_config, "custom_profiler_config", "") if experimental_config is not None else ""
    conf = parse_custom_config(text or "")
    if "modes" in conf:  # written by the stand-in NeuronConfig
        modes = {m for m in conf["modes"].split(",") if m}
    else:  # early plugin: PRIVATEUSE1_RUNTIME -> system trace, PRIVATEUSE1_DRIVER -> device trace
        modes = {"runtime", "device"}
        if conf.get("host_memory", "").lower() == "true":
            modes |= {"cpu_util", "host_memory"}
    return conf.get("profile_output_dir", "./output"), modes, parse_cores(conf.get("capture_enabled_for_nc")), conf.get("neff_cache_dir")


def install_kineto_plugin() -> None:
    """Emulate ``torch_neuronx._C._register_profiler()``: start and stop the runtime session with
    a torch.profiler capture that asks for ``ProfilerActivity.PrivateUse1``."""
    from torch.profiler import ProfilerActivity
    from torch.profiler.profiler import _KinetoProfile

    if "start_trace" in _originals:
        return
    _originals["start_trace"] = _KinetoProfile.start_trace
    _originals["stop_trace"] = _KinetoProfile.stop_trace
    start, stop = _KinetoProfile.start_trace, _KinetoProfile.stop_trace

    def start_trace(self: Any) -> None:
        start(self)
        if ProfilerActivity.PrivateUse1 in self.activities:
            out, modes, cores, cache = _plugin_session_args(self.experimental_config)
            nrt_begin(out, modes, cores, via="kineto_plugin", neff_cache_dir=cache)
            self._standin_nrt = True

    def stop_trace(self: Any) -> None:
        try:
            stop(self)
        finally:
            if getattr(self, "_standin_nrt", False):
                self._standin_nrt = False
                nrt_stop()

    _KinetoProfile.start_trace = start_trace  # type: ignore[method-assign]
    _KinetoProfile.stop_trace = stop_trace  # type: ignore[method-assign]


# ---- registration ----------------------------------------------------------------------------

_MISSING = object()
_saved_attrs: list[tuple[Any, str, Any]] = []


def register(package: types.ModuleType) -> None:
    """What ``import torch_neuronx`` does: device registration, the Kineto plugin."""
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
    install_kineto_plugin()


def uninstall() -> None:
    """Undo :func:`register` (all but a process-wide rename, which torch cannot undo)."""
    from torch.profiler.profiler import _KinetoProfile

    global _active
    _active = None
    if "start_trace" in _originals:
        _KinetoProfile.start_trace = _originals.pop("start_trace")  # type: ignore[method-assign]
        _KinetoProfile.stop_trace = _originals.pop("stop_trace")  # type: ignore[method-assign]
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
    """The ``neuron`` torch.compile backend (registered by the real package through an entry
    point): records the graph and runs it eagerly."""
    RECORD["dynamo_compiles"].append(len(list(gm.graph.nodes)))
    return gm.forward
