"""The Neuron backend: AWS Trainium through TorchNeuron (``torch-neuronx``, device ``neuron``).

It does by itself what a careful engineer does by hand (see shared/research/neuron-api.md):
``torch.profiler`` with ``ProfilerActivity.CPU`` + ``ProfilerActivity.PrivateUse1``, a Neuron
profiler configuration built from the ``modes`` / ``cores`` options whose output directory is the
scratch directory inside the run directory, the device synchronised inside the capture, the
framework trace written next to the Neuron session files, and afterwards the session files found,
listed, checked for the signs of a failed capture and completed with the NEFFs that stayed in the
compile cache.

TorchNeuron's profiling API changed shape between builds, so the API is detected, never assumed:

``"config"``  the documented API: ``torch_neuronx.profiling.NeuronConfig`` (an
              ``_ExperimentalConfig``) and ``ProfileMode``, passed as ``experimental_config``;
              ``NeuronProfiler(config).export_trace`` as ``on_trace_ready``. Keywords this build's
              ``NeuronConfig`` does not take (``correlate_device_time``, ``neff_cache_dir``) are
              left out and the result says so.
``"legacy"``  an early build with only ``NeuronProfiler(pytorch_activities=..., record_shapes=...,
              neuron_output_dir=..., event_filters=...)``: a start/stop object that starts the
              Neuron runtime trace itself and wraps its own ``torch.profiler.profile`` (kept in
              ``_pytorch_profiler``). neuronscope starts and stops that object (through
              :meth:`~.base.Backend.make_profiler`) and hands its finished inner profiler to the
              rest of the pipeline.
``"raw"``     a build with neither, whose Kineto plugin reads
              ``_ExperimentalConfig(custom_profiler_config="profile_output_dir:...;...")``.

torch-neuronx is imported only when this backend is chosen or ``backend="auto"`` looks for it;
``import neuronscope`` never imports it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Options
from ..errors import BackendUnavailableError, ConfigError, NeuronscopeError
from .base import Backend

__all__ = [
    "NeuronApi",
    "NeuronBackend",
    "cores_spec",
    "detect_api",
    "find_session_files",
    "neuron_available",
    "require_neuron",
]

log = logging.getLogger("neuronscope")

#: Where TorchNeuron keeps compiled NEFFs, and its fallback (TorchNeuron docs, env-vars page).
NEFF_CACHE_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"
DEFAULT_NEFF_CACHE = "/tmp/neff_cache"
#: Device-level capture reserves about this much HBM on Trn2/Trn3 for hardware notifications.
DEVICE_MODE_HBM_GB = 5
#: NEFFs copied in from the compile cache are capped: an eager-mode cache can hold thousands of
#: per-op NEFFs, and a run directory should not silently grow by gigabytes. Newest first, so
#: the ones built by the warm-up of this run come first.
MAX_NEFF_COPY_BYTES = 1 << 30
MAX_NEFF_COPY_FILES = 2000
#: ``result.json`` lists at most this many session files (an eager run can write thousands of
#: NEFFs); the count of the rest is recorded.
MAX_LISTED_FILES = 1000

INSTALL_HINT = (
    "install torch-neuronx on a Trainium (Trn2/Trn3) host from the Neuron repository "
    "(pip install torch-neuronx --extra-index-url https://pip.repos.neuron.amazonaws.com, or "
    "pip install 'neuronscope[neuron]' with that index), or pass backend='cpu'"
)

# Session file names -> kind, as the Neuron runtime and TorchNeuron write them.
_NAMED_KINDS = {
    "ntrace.pb": "system_trace",
    "trace_info.pb": "trace_info",
    "cpu_util.pb": "cpu_util",
    "host_mem.pb": "host_memory",
    "trace.json": "framework_trace",
    "pytorch_trace.json": "framework_trace",
}
_SESSION_MARKERS = ("trace_info.pb", "ntrace.pb")
_FRAMEWORK_TRACE_NAMES = ("trace.json", "pytorch_trace.json")


def _file_kind(name: str) -> str:
    if name in _NAMED_KINDS:
        return _NAMED_KINDS[name]
    if name.endswith(".ntff"):
        return "device_trace"
    if name.endswith(".neff"):
        return "neff"
    if name.startswith("neuron_framework_trace_rank_") and name.endswith(".json"):
        return "framework_trace"
    if name.startswith("framework_mapping_") and name.endswith(".json"):
        return "framework_mapping"
    if name.endswith(".pb"):
        return "runtime_data"
    return "other"


# ---- detection ----------------------------------------------------------------------------


def _torch_neuron_module() -> Any:
    import torch

    return getattr(torch, "neuron", None)


def _import_torch_neuronx() -> Any:
    """Import torch-neuronx; every failure becomes a BackendUnavailableError with the fix."""
    if importlib.util.find_spec("torch_neuronx") is None:
        raise BackendUnavailableError(f"backend 'neuron' needs torch-neuronx, which is not installed here; {INSTALL_HINT}")
    try:
        import torch_neuronx
    except Exception as err:  # a C extension built for another torch, a missing runtime library
        raise BackendUnavailableError(
            f"backend 'neuron': torch-neuronx is installed but importing it failed "
            f"({type(err).__name__}: {err}); check that its version matches torch and that the "
            f"Neuron runtime (aws-neuronx-runtime-lib) is installed, or pass backend='cpu'"
        ) from err
    return torch_neuronx


_broken_install_logged = False


def neuron_available() -> bool:
    """True when torch-neuronx is installed and ``torch.neuron.is_available()`` says a Neuron
    device is visible. Never raises; imports torch-neuronx only when it is installed."""
    global _broken_install_logged
    if importlib.util.find_spec("torch_neuronx") is None:
        return False
    try:
        _import_torch_neuronx()
        module = _torch_neuron_module()
        return bool(module is not None and module.is_available())
    except Exception as err:
        if not _broken_install_logged:  # "auto" quietly profiling the CPU would mislead
            _broken_install_logged = True
            log.warning("neuronscope: backend 'auto' skips Neuron: %s", err)
        return False


def require_neuron() -> None:
    """Raise :class:`BackendUnavailableError` with the fix unless Neuron capture can run here.

    Called when a decorator or region with ``backend="neuron"`` is built, so the error comes at
    decoration time, not an hour into training.
    """
    _import_torch_neuronx()
    module = _torch_neuron_module()
    if module is None:
        raise BackendUnavailableError(
            "backend 'neuron': torch-neuronx imported but registered no torch.neuron device module; "
            f"this build is not TorchNeuron (the native PyTorch backend); {INSTALL_HINT}"
        )
    try:
        available = bool(module.is_available())
    except Exception as err:
        available = False
        why = f" ({type(err).__name__}: {err})"
    else:
        why = ""
    if not available:
        raise BackendUnavailableError(
            f"backend 'neuron': torch-neuronx is installed but torch.neuron.is_available() is False{why}: "
            "no NeuronCore is visible to this process (check neuron-ls, NEURON_RT_VISIBLE_CORES, and "
            "that no other process holds the cores), or pass backend='cpu'"
        )
    detect_api()


@dataclass
class NeuronApi:
    """Which TorchNeuron profiling API this build offers (see the module docstring)."""

    generation: str  # "config", "legacy" or "raw"
    version: str | None = None
    NeuronConfig: Any = None
    ProfileMode: Any = None
    NeuronProfiler: Any = None
    #: ``NeuronProfiler(config)`` with ``export_trace`` (generation "config" only).
    has_exporter: bool = False
    #: Keyword names the constructor takes, or None where they cannot be read (``**kwargs``,
    #: a C++ constructor): then unknown keywords are found by trying.
    config_params: frozenset[str] | None = None
    profiler_params: frozenset[str] | None = None


def _params(obj: Any) -> frozenset[str] | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return frozenset(n for n in sig.parameters if n != "self")


def _legacy_signature(params: frozenset[str] | None) -> bool:
    return params is not None and ("neuron_output_dir" in params or "pytorch_activities" in params)


def _experimental_config_takes_custom() -> bool:
    from torch._C._profiler import _ExperimentalConfig

    try:
        _ExperimentalConfig(custom_profiler_config="")
    except TypeError:
        return False
    return True


def detect_api() -> NeuronApi:
    """Find out which profiling API the installed torch-neuronx offers.

    Raises :class:`NeuronscopeError` when it offers none that neuronscope can drive.
    """
    torch_neuronx = _import_torch_neuronx()
    try:
        profiling = importlib.import_module("torch_neuronx.profiling")
    except ImportError:  # early builds have no profiling module: the raw plugin config remains
        profiling = None
    except Exception as err:
        raise NeuronscopeError(
            f"torch-neuronx {getattr(torch_neuronx, '__version__', None)}: importing "
            f"torch_neuronx.profiling failed ({type(err).__name__}: {err}); pass backend='cpu'"
        ) from err
    version = getattr(torch_neuronx, "__version__", None)
    config_cls = getattr(profiling, "NeuronConfig", None)
    mode_enum = getattr(profiling, "ProfileMode", None)
    profiler_cls = getattr(profiling, "NeuronProfiler", None) or getattr(torch_neuronx, "NeuronProfiler", None)
    profiler_params = _params(profiler_cls) if profiler_cls is not None else None
    if config_cls is not None:
        if mode_enum is None:
            raise NeuronscopeError(
                f"torch-neuronx {version}: torch_neuronx.profiling has NeuronConfig but no ProfileMode; "
                "neuronscope cannot say which traces to capture; upgrade torch-neuronx or pass backend='cpu'"
            )
        return NeuronApi(
            "config",
            version,
            NeuronConfig=config_cls,
            ProfileMode=mode_enum,
            NeuronProfiler=profiler_cls,
            has_exporter=profiler_cls is not None
            and not _legacy_signature(profiler_params)
            and hasattr(profiler_cls, "export_trace"),
            config_params=_params(config_cls),
            profiler_params=profiler_params,
        )
    if profiler_cls is not None and _legacy_signature(profiler_params):
        return NeuronApi("legacy", version, NeuronProfiler=profiler_cls, profiler_params=profiler_params)
    if _experimental_config_takes_custom():
        return NeuronApi("raw", version)
    raise NeuronscopeError(
        f"torch-neuronx {version} offers no profiling API neuronscope knows (no "
        "torch_neuronx.profiling.NeuronConfig, no NeuronProfiler(neuron_output_dir=...), and this "
        "torch's _ExperimentalConfig takes no custom_profiler_config); upgrade torch-neuronx, or "
        "pass backend='cpu'"
    )


# ---- configuration ------------------------------------------------------------------------


def cores_spec(cores: tuple[int, ...] | None) -> str | None:
    """``(0, 1, 4, 5, 6, 7)`` -> ``"0,1,4-7"``: the ``capture_enabled_for_nc`` form of the docs
    (runs of three or more cores become an inclusive range)."""
    if not cores:
        return None
    runs: list[list[int]] = []
    for c in sorted(set(cores)):
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    parts: list[str] = []
    for run in runs:
        parts.extend([f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(c) for c in run])
    return ",".join(parts)


def neff_cache_dir() -> Path:
    """Where this process's NEFFs are cached (``TORCH_NEURONX_NEFF_CACHE_DIR`` or /tmp/neff_cache)."""
    return Path(os.environ.get(NEFF_CACHE_ENV) or DEFAULT_NEFF_CACHE)


def _unexpected_keyword(err: TypeError, candidates: list[str]) -> str | None:
    text = str(err)
    for name in candidates:
        if f"'{name}'" in text or f'"{name}"' in text or name in text.split():
            return name
    return None


def _build_neuron_config(
    api: NeuronApi, options: Options, output_dir: Path
) -> tuple[Any, dict[str, Any]]:
    """``NeuronConfig`` from the options; returns it and a record of what it was given."""
    members = []
    for mode in options.modes:
        member = getattr(api.ProfileMode, mode.upper(), None)
        if member is None:
            known = ", ".join(m.lower() for m in dir(api.ProfileMode) if m.isupper())
            raise ConfigError(
                f"modes={list(options.modes)!r}: this torch-neuronx's ProfileMode has no "
                f"{mode.upper()} (it has: {known or 'none'}); pass modes among those"
            )
        members.append(member)
    wanted: dict[str, Any] = {"modes": members, "profile_output_dir": str(output_dir)}
    spec = cores_spec(options.cores)
    if spec is not None:
        wanted["capture_enabled_for_nc"] = spec
    # Optional keywords: left out where this build does not take them.
    optional: dict[str, Any] = {"correlate_device_time": True}
    if "device" in options.modes:
        # The device trace is unreadable without its NEFFs; this makes TorchNeuron copy them in.
        optional["neff_cache_dir"] = str(neff_cache_dir())
    dropped: list[str] = []
    params = api.config_params
    if params is not None:
        for key in list(wanted):
            if key not in params:
                raise NeuronscopeError(
                    f"torch-neuronx {api.version}: NeuronConfig takes no {key!r} keyword (it takes "
                    f"{', '.join(sorted(params))}); neuronscope cannot configure this build; upgrade "
                    "torch-neuronx or pass backend='cpu'"
                )
        for key in list(optional):
            if key not in params:
                dropped.append(key)
                del optional[key]
    kwargs = {**wanted, **optional}
    while True:
        try:
            config = api.NeuronConfig(**kwargs)
            break
        except TypeError as err:
            bad = _unexpected_keyword(err, [k for k in optional if k in kwargs])
            if bad is None:
                raise NeuronscopeError(
                    f"torch-neuronx {api.version}: NeuronConfig({', '.join(kwargs)}) failed: {err}; "
                    "upgrade torch-neuronx or pass backend='cpu'"
                ) from err
            dropped.append(bad)
            del kwargs[bad]
    record: dict[str, Any] = {
        "modes": list(options.modes),
        "profile_output_dir": str(output_dir),
        "capture_enabled_for_nc": spec,
        "correlate_device_time": kwargs.get("correlate_device_time"),
        "neff_cache_dir": kwargs.get("neff_cache_dir"),
        "not_accepted": dropped,
    }
    return config, record


def _raw_config_string(options: Options, output_dir: Path) -> str:
    """The ``custom_profiler_config`` that TorchNeuron's Kineto plugin parses ("k:v;k:v")."""
    if ";" in str(output_dir):
        raise ConfigError(
            f"the Neuron output directory {output_dir} contains ';', which this torch-neuronx "
            "cannot read in custom_profiler_config; pick an output_dir without ';'"
        )
    parts = [f"profile_output_dir:{output_dir}"]
    spec = cores_spec(options.cores)
    if spec is not None:
        parts.append(f"capture_enabled_for_nc:{spec}")
    if "host_memory" in options.modes or "cpu_util" in options.modes:
        parts.append("host_memory:true")  # turns on cpu_util.pb and host_mem.pb together
    return ";".join(parts)


# ---- session files ------------------------------------------------------------------------


def find_session_files(root: Path) -> list[Path]:
    """Every file under ``root``, recursively: layouts differ between builds
    (``<root>/<instance>_pid_<pid>/<timestamp>/...`` or without the timestamp level)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _session_dirs(files: list[Path]) -> list[Path]:
    """Directories holding a runtime trace (``trace_info.pb``/``ntrace.pb``) or device traces,
    newest first."""
    dirs: dict[Path, float] = {}
    for f in files:
        if f.name in _SESSION_MARKERS or f.suffix == ".ntff":
            try:
                dirs[f.parent] = max(dirs.get(f.parent, 0.0), f.stat().st_mtime)
            except OSError:
                continue
    return sorted(dirs, key=lambda d: (dirs[d], str(d)), reverse=True)


def _neff_candidates(cache: Path) -> list[Path]:
    try:
        found = [p for p in cache.rglob("*.neff") if p.is_file()]
    except OSError:
        return []

    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0

    return sorted(found, key=mtime, reverse=True)


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)  # same filesystem: no extra space
    except OSError:
        shutil.copy2(src, dest)


def copy_neffs(cache: Path, dest: Path) -> tuple[list[str], str | None]:
    """Copy the NEFFs of the compile cache into ``dest``, newest first, within the caps.

    Returns the copied names and, when the caps stopped the copy, why.
    """
    copied: list[str] = []
    total = 0
    names: set[str] = set()
    candidates = _neff_candidates(cache)
    for src in candidates:
        size = src.stat().st_size
        if len(copied) >= MAX_NEFF_COPY_FILES or total + size > MAX_NEFF_COPY_BYTES:
            return copied, (
                f"copied {len(copied)} of {len(candidates)} NEFFs from {cache} (cap: "
                f"{MAX_NEFF_COPY_FILES} files, {MAX_NEFF_COPY_BYTES >> 20} MiB); copy the rest by hand"
            )
        name = src.name
        if name in names or (dest / name).exists():
            name = f"{src.parent.name}_{src.name}"  # caches keep one model.neff per hash directory
        if name in names or (dest / name).exists():
            continue
        _link_or_copy(src, dest / name)
        names.add(name)
        copied.append(name)
        total += size
    return copied, None


# ---- warm-up bookkeeping ------------------------------------------------------------------

_captured_names: set[str] = set()
_captured_lock = threading.Lock()


def _first_capture_of(name: str) -> bool:
    with _captured_lock:
        first = name not in _captured_names
        _captured_names.add(name)
        return first


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


# ---- the backend --------------------------------------------------------------------------


class NeuronBackend(Backend):
    """TorchNeuron capture: CPU + PrivateUse1 activities, Neuron config from the options,
    framework trace beside the session files, session files recorded in the result."""

    name = "neuron"

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.api = detect_api()
        self.output_dir: Path | None = None
        self._output_is_temp = False
        self._config_record: dict[str, Any] = {}
        self._exporter: Any = None
        self._saved_trace: Path | None = None
        self._trace_notes: list[str] = []
        self._session: dict[str, Any] | None = None
        self._session_notes: list[str] = []

    # -- before the capture --------------------------------------------------------------------
    def activities(self) -> list[Any]:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]

    def environment_warnings(self) -> list[str]:
        out: list[str] = []
        opts = self.options
        if _env_true("NEURON_RT_INSPECT_ENABLE"):
            out.append(
                "NEURON_RT_INSPECT_ENABLE is set: the Neuron runtime's environment-variable capture "
                "conflicts with torch.profiler capture (Neuron docs); unset it when profiling with "
                "neuronscope"
            )
        if opts.with_stack and not (os.environ.get("XLA_IR_DEBUG") and os.environ.get("XLA_HLO_DEBUG")):
            out.append(
                "with_stack=True but XLA_IR_DEBUG=1 and XLA_HLO_DEBUG=1 are not both set: the Neuron "
                "traces will show bare op names; set both before anything compiles (NEFFs cached "
                f"without them keep the bare names; clear {NEFF_CACHE_ENV} or {DEFAULT_NEFF_CACHE})"
            )
        if "device" in opts.modes:
            out.append(
                f"modes includes 'device': device-level capture reserves about {DEVICE_MODE_HBM_GB} GB "
                "of HBM per Neuron device (Trn2/Trn3) and can make a model that fills HBM run out of "
                "memory; leave modes=['runtime'] unless you need the instruction-level trace"
            )
        if self.api.generation == "raw" and "device" not in opts.modes:
            out.append(
                f"torch-neuronx {self.api.version} has no NeuronConfig: modes cannot be chosen, and its "
                f"profiler plugin may capture the device trace too (reserving about {DEVICE_MODE_HBM_GB} "
                "GB of HBM); upgrade torch-neuronx to choose modes"
            )
        name = opts.name or "<unnamed>"
        if _first_capture_of(name) and opts.warmup == 0:
            out.append(
                f"capture {name!r} starts without warm-up (warmup=0, first capture of this name): if "
                "this code has not run on the neuron device before, the capture holds NEFF "
                "compilation (minutes) and the device trace may be empty (0-byte .ntff); run it once "
                "before capturing, or pass warmup=N to the decorator"
            )
        return out

    def _prepare_output_dir(self, scratch_dir: Path | None) -> Path:
        if self.output_dir is not None:
            return self.output_dir
        if scratch_dir is None:
            # export=False (compare() captures, for instance): the runtime still writes its files,
            # and they must not land in ./output beside the user's script.
            self.output_dir = Path(tempfile.mkdtemp(prefix="neuronscope-neuron-"))
            self._output_is_temp = True
        else:
            scratch_dir.mkdir(parents=True, exist_ok=True)
            self.output_dir = scratch_dir
        return self.output_dir

    def profiler_kwargs(self, scratch_dir: Path | None) -> dict[str, Any]:
        out = self._prepare_output_dir(scratch_dir).resolve()
        generation = self.api.generation
        if generation == "legacy":
            self._config_record = {
                "neuron_output_dir": str(out),
                "pytorch_activities": ["CPU"],
                "event_filters": self._event_filters(),
            }
            return {}  # make_profiler builds the legacy NeuronProfiler, which owns the torch profiler
        if generation == "config":
            config, self._config_record = _build_neuron_config(self.api, self.options, out)
            if self.api.has_exporter:
                try:
                    self._exporter = self.api.NeuronProfiler(config)
                except Exception as err:
                    self._trace_notes.append(
                        f"NeuronProfiler(config) failed ({type(err).__name__}: {err}); neuronscope "
                        "wrote the framework trace itself"
                    )
        else:
            from torch._C._profiler import _ExperimentalConfig

            text = _raw_config_string(self.options, out)
            config = _ExperimentalConfig(custom_profiler_config=text)
            self._config_record = {"custom_profiler_config": text, "modes": list(self.options.modes)}
        return {"experimental_config": config, "on_trace_ready": self._on_trace_ready}

    def _event_filters(self) -> dict[str, list[str]] | None:
        spec = cores_spec(self.options.cores)
        return None if spec is None else {"nc": spec.split(",")}

    def make_profiler(self, kwargs: dict[str, Any]) -> Any:
        if self.api.generation == "legacy":
            return _LegacyRunner(self)
        return super().make_profiler(kwargs)

    # -- end of the capture ----------------------------------------------------------------------
    def synchronize(self) -> None:
        module = _torch_neuron_module()
        if module is not None and hasattr(module, "synchronize"):
            module.synchronize()
            return
        import torch_neuronx

        torch_neuronx.synchronize()

    def device_name(self) -> str | None:
        module = _torch_neuron_module()
        try:
            return str(module.get_device_name())
        except Exception:
            return "neuron"

    def _on_trace_ready(self, prof: Any) -> None:
        """Save the framework trace next to the session files, once (a second save raises)."""
        assert self.output_dir is not None
        try:
            if self._exporter is not None:
                self._exporter.export_trace(prof)
                found = self._find_framework_trace()
                if found is None:
                    found = self._save_own(prof, "NeuronProfiler.export_trace wrote no trace neuronscope could find")
            else:
                found = self._save_own(prof, None)
        except Exception as err:  # the measurement must survive a failing exporter
            self._trace_notes.append(f"the Neuron trace exporter failed ({type(err).__name__}: {err})")
            try:
                found = self._find_framework_trace() or self._save_own(prof, None)
            except Exception as err2:
                self._trace_notes.append(f"no framework trace was saved ({type(err2).__name__}: {err2})")
                return
        try:
            self._adopt_trace(prof, found)
        except OSError as err:
            self._trace_notes.append(f"could not place the framework trace ({err})")

    def _save_own(self, prof: Any, why: str | None) -> Path | None:
        assert self.output_dir is not None
        sessions = _session_dirs(find_session_files(self.output_dir))
        target = (sessions[0] if sessions else self.output_dir) / "trace.json"
        try:
            prof.export_chrome_trace(str(target))
        except RuntimeError as err:  # "Trace is already saved.": saved somewhere we cannot see
            self._trace_notes.append(f"{why or 'the framework trace was saved elsewhere'}: {err}")
            return None
        if why:
            self._trace_notes.append(f"{why}; neuronscope saved it as {target.name}")
        return target

    def _find_framework_trace(self) -> Path | None:
        assert self.output_dir is not None
        found = [
            f
            for f in find_session_files(self.output_dir)
            if f.name in _FRAMEWORK_TRACE_NAMES or _file_kind(f.name) == "framework_trace"
        ]
        if not found:
            return None
        return max(found, key=lambda p: p.stat().st_mtime)

    def _adopt_trace(self, prof: Any, trace: Path | None) -> None:
        """Record the saved trace, put a copy beside the runtime trace where Neuron Explorer
        looks for it, and let later ``export_chrome_trace`` calls copy it instead of raising."""
        if trace is None or not trace.is_file():
            return
        self._saved_trace = trace
        assert self.output_dir is not None
        sessions = _session_dirs(find_session_files(self.output_dir))
        if sessions and trace.parent != sessions[0]:
            session = sessions[0]
            if not any((session / n).exists() for n in _FRAMEWORK_TRACE_NAMES):
                # Neuron docs (troubleshooting): framework events are missing in Explorer unless
                # the framework trace sits in the session directory.
                name = trace.name if trace.name.startswith("neuron_framework_trace_rank_") else "trace.json"
                shutil.copyfile(trace, session / name)

        saved = trace

        def export_copy(path: str, *args: Any, **kwargs: Any) -> None:
            shutil.copyfile(saved, path)

        # torch saves a capture's trace once and raises on a second save; compare() and user
        # code that export again get a copy of the file the Neuron exporter wrote.
        try:
            prof.export_chrome_trace = export_copy
        except AttributeError:
            pass

    def saved_trace(self) -> Path | None:
        return self._saved_trace

    # -- after the capture -----------------------------------------------------------------------
    def _collect_session(self) -> dict[str, Any]:
        """Find, check and complete the session files; cached, so notes and artifacts agree."""
        if self._session is not None:
            return self._session
        out = self.output_dir
        info: dict[str, Any] = {
            "api": self.api.generation,
            "torch_neuronx_version": self.api.version,
            "config": self._config_record,
        }
        self._session = info
        if out is None:
            info["problems"] = ["the Neuron capture did not start; no session files"]
            return info
        problems: list[str] = []
        notes: list[str] = list(self._trace_notes)
        files = find_session_files(out)
        sessions = _session_dirs(files)
        device_asked = "device" in self.options.modes
        ntffs = [f for f in files if f.suffix == ".ntff"]
        neffs = [f for f in files if f.suffix == ".neff"]
        if (device_asked or ntffs) and not neffs:
            cache = Path(self._config_record.get("neff_cache_dir") or neff_cache_dir())
            if cache.is_dir():
                dest = sessions[0] if sessions else out
                try:
                    copied, capped = copy_neffs(cache, dest)
                except OSError as err:
                    copied, capped = [], f"could not copy NEFFs from {cache}: {err}"
                if copied:
                    info["neffs_copied_from"] = str(cache)
                    notes.append(f"copied {len(copied)} NEFF(s) from the compile cache {cache} into the session")
                if capped:
                    notes.append(capped)
                files = find_session_files(out)
                neffs = [f for f in files if f.suffix == ".neff"]
        runtime_files = [f for f in files if _file_kind(f.name) not in ("framework_trace", "framework_mapping")]
        if not runtime_files:  # the framework trace alone is torch's, not the runtime's
            problems.append(
                "the Neuron profiler wrote nothing: no op ran on the neuron device inside the capture "
                "(are the tensors on device 'neuron'?), or the runtime trace did not start "
                "(NEURON_RT_INSPECT_ENABLE set?)"
            )
        else:
            if not sessions and "runtime" in self.options.modes:
                problems.append("no runtime trace (ntrace.pb / trace_info.pb) was written")
            empty = [f for f in ntffs if f.stat().st_size == 0]
            if empty:
                problems.append(
                    f"{len(empty)} of {len(ntffs)} .ntff device traces are empty (0 bytes): nothing warm "
                    "ran on those NeuronCores inside the capture, or cores were initialised but unused; "
                    "warm up before capturing and restrict cores (cores=..., NEURON_RT_NUM_CORES)"
                )
            if device_asked and not ntffs:
                problems.append("modes includes 'device' but no .ntff device trace was written")
            if (device_asked or ntffs) and not neffs:
                problems.append(
                    f"no .neff in the session and none found in the compile cache ({neff_cache_dir()}): "
                    f"Neuron Explorer cannot decode the device trace; set {NEFF_CACHE_ENV} to the cache "
                    "the run used"
                )
        listed = [
            {"path": f.relative_to(out).as_posix(), "bytes": f.stat().st_size, "kind": _file_kind(f.name)}
            for f in files[:MAX_LISTED_FILES]
        ]
        info["output_dir"] = str(out) if self._output_is_temp else out.name
        info["files"] = listed
        if len(files) > MAX_LISTED_FILES:
            info["files_not_listed"] = len(files) - MAX_LISTED_FILES
        info["session_dirs"] = [d.relative_to(out).as_posix() or "." for d in sessions]
        if self._saved_trace is not None and self._saved_trace.is_file():
            info["framework_trace"] = self._saved_trace.relative_to(out).as_posix()
        rank = _rank()
        if rank is not None:
            info["rank"] = rank
        view_dir = sessions[0] if sessions else out
        if runtime_files:
            command = f"neuron-explorer view -d {view_dir.resolve()}"
            info["view_command"] = command
            notes.append(f"Neuron session files: {command}  (aws-neuronx-tools, /opt/aws/neuron/bin)")
        if self._output_is_temp:
            notes.append(f"export=False: the Neuron session files stay in {out}")
        if self.api.generation == "legacy":
            if self.options.with_stack or self.options.profile_memory:
                notes.append(
                    "this torch-neuronx's NeuronProfiler runs its own torch profiler with activities and "
                    "record_shapes only: with_stack and profile_memory were not applied"
                )
            if tuple(self.options.modes) != ("runtime",):
                notes.append("this torch-neuronx's NeuronProfiler has no modes; the runtime's defaults applied")
        info["problems"] = problems
        for problem in problems:
            log.warning("neuronscope: Neuron capture: %s", problem)
        self._session_notes = notes + [f"Neuron capture problem: {p}" for p in problems]
        return info

    def extra_notes(self, table_has_device: bool) -> list[str]:
        notes: list[str] = []
        if not table_has_device:
            notes.append(self._device_time_note())
        try:
            self._collect_session()
        except Exception as err:  # listing files must never cost the measurement
            notes.append(f"could not list the Neuron session files: {type(err).__name__}: {err}")
        return notes + self._session_notes

    def _device_time_note(self) -> str:
        head = "per-op Neuron device time is None (not 0): no Neuron device events reached torch.profiler"
        where = "; the device timeline is in the session files (neuron-explorer view)"
        api = self.api
        if api.generation == "config":
            if self._config_record.get("correlate_device_time"):
                return (
                    f"{head} although NeuronConfig(correlate_device_time=True) was passed: did the ops "
                    f"run on the neuron device (tensors on 'neuron')?{where}"
                )
            return (
                f"{head}: torch-neuronx {api.version}'s NeuronConfig does not take correlate_device_time; "
                f"upgrade torch-neuronx for per-op device time{where}"
            )
        return (
            f"{head}: torch-neuronx {api.version} (no NeuronConfig) gives torch.profiler no device "
            f"events; upgrade torch-neuronx to a build with NeuronConfig (neuronscope then asks for "
            f"correlate_device_time=True){where}"
        )

    def collect_artifacts(self, prof: Any, scratch_dir: Path | None) -> dict[str, Any]:
        info = self._collect_session()
        counts = _privateuse1_event_counts(prof)
        if counts:
            info["privateuse1_events"] = counts
        return {"neuron": info}


def _rank() -> int | None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    return None


def _privateuse1_event_counts(prof: Any) -> dict[str, int]:
    """How many PrivateUse1 events of each activity type the capture holds: which kinds a
    torch-neuronx build hands to torch.profiler is not documented, so the result records it."""
    kineto = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if kineto is None:
        return {}
    counts: dict[str, int] = {}
    try:
        for ev in kineto.events():
            activity = ev.activity_type()
            if activity.startswith("privateuse1"):
                counts[activity] = counts.get(activity, 0) + 1
    except Exception:
        return counts
    return counts


@dataclass
class _LegacyRunner:
    """Drives an early ``NeuronProfiler(pytorch_activities=..., neuron_output_dir=...)``.

    That object starts the Neuron runtime trace through its own bindings and wraps a
    ``torch.profiler.profile`` it builds itself, and only while both run does it record the
    mapping from runtime executions to PyTorch ops (``framework_mapping_*.json``). So neuronscope
    lets it own the torch profiler and takes the finished one from ``_pytorch_profiler``. Its
    torch profiler gets ``ProfilerActivity.CPU`` only: on those builds ``PrivateUse1`` would make
    TorchNeuron's Kineto plugin start a second runtime trace (its own integration test uses CPU).
    """

    backend: NeuronBackend
    profiler: Any = None
    torch_profiler: Any = None
    _kwargs: dict[str, Any] = field(default_factory=dict)

    def start(self) -> None:
        from torch.profiler import ProfilerActivity

        api = self.backend.api
        out = self.backend.output_dir
        assert out is not None
        kwargs: dict[str, Any] = {
            "pytorch_activities": [ProfilerActivity.CPU],
            "record_shapes": self.backend.options.record_shapes,
            "neuron_output_dir": str(out.resolve()),
        }
        filters = self.backend._event_filters()
        if filters is not None:
            kwargs["event_filters"] = filters
        params = api.profiler_params
        if params is not None:
            missing = [k for k in ("pytorch_activities", "neuron_output_dir") if k not in params]
            if missing:
                raise NeuronscopeError(
                    f"torch-neuronx {api.version}: NeuronProfiler takes no {', '.join(missing)}; "
                    "neuronscope cannot drive this build; upgrade torch-neuronx or pass backend='cpu'"
                )
            kwargs = {k: v for k, v in kwargs.items() if k in params}
        try:
            self.profiler = api.NeuronProfiler(**kwargs)
            self.profiler.start()
        except Exception as err:
            raise NeuronscopeError(
                f"torch-neuronx {api.version}: NeuronProfiler failed to start ({type(err).__name__}: "
                f"{err}); check that NEURON_RT_INSPECT_ENABLE is unset and no other Neuron profiler "
                "runs in this process"
            ) from err
        self.torch_profiler = getattr(self.profiler, "_pytorch_profiler", None)
        if self.torch_profiler is None:
            try:
                self.profiler.stop()
            except Exception:
                pass
            raise NeuronscopeError(
                f"torch-neuronx {api.version}: NeuronProfiler keeps no _pytorch_profiler, so "
                "neuronscope cannot read its torch profiler; upgrade torch-neuronx or pass backend='cpu'"
            )

    def stop(self) -> None:
        error: BaseException | None = None
        try:
            self.profiler.stop()
        except Exception as err:
            error = err
        self.torch_profiler = getattr(self.profiler, "_pytorch_profiler", None) or self.torch_profiler
        trace = getattr(self.profiler, "pytorch_trace_file", None)
        path = Path(trace) if trace else None
        if path is None or not path.is_file():
            path = self.backend._find_framework_trace()
        if self.torch_profiler is not None:
            self.backend._adopt_trace(self.torch_profiler, path)
        if error is not None:
            raise NeuronscopeError(
                f"torch-neuronx NeuronProfiler failed to stop ({type(error).__name__}: {error})"
            ) from error

