"""The Neuron backend: AWS Trainium through public TorchNeuron (``torch-neuronx`` 2.13.3 /
2.14.3 and later, Neuron 2.33; device ``neuron``).

What a careful engineer does by hand (Neuron docs, "Profile PyTorch workloads"):
``torch.profiler`` with ``ProfilerActivity.CPU`` + ``ProfilerActivity.PrivateUse1``, a
``torch_neuronx.profiling.NeuronConfig`` (passed as ``experimental_config``) built from the
``modes`` / ``cores`` / ``max_events_per_nc`` options with its output directory inside the run,
``NeuronProfiler(config).export_trace`` as ``on_trace_ready``, the device synchronised inside
the capture; afterwards the session files found, listed, checked and completed with the NEFFs
the capture needs (see :mod:`.neuron_files`).

What the installed build accepts is read, never assumed: ``NeuronConfig``'s signature where it
can be read; otherwise each optional keyword is tried on its own and kept only when the
constructor succeeds with it (error text is never parsed). Builds without ``NeuronConfig``
(the private April-2026 ones, the XLA-based torch-neuronx 2.9 line) get one error that names
the minimum version and the install command.

TorchNeuron hands torch.profiler its framework events as ``privateuse1_runtime`` (operator
dispatch, on the op's thread) and ``privateuse1_driver`` (device execution, stream id as
thread id), linked to the op that launched them. :mod:`neuronscope.events` reads driver events
as device work, so per-op device time comes from them, as it comes from kernels on CUDA.

torch-neuronx is imported only when this backend is chosen or ``backend="auto"`` looks for it.
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
from .neuron_files import (
    FRAMEWORK_TRACE_NAME,
    MAX_LISTED_FILES,
    MAX_NEFF_COPY_BYTES,
    MAX_NEFF_COPY_FILES,
    NEFF_CACHE_ENV,
    check_session,
    copy_neffs,
    explorer_notes,
    file_kind,
    find_session_files,
    neff_cache_dir,
    neff_cache_size,
    session_dirs,
    within_caps,
)

__all__ = [
    "INSTALL_HINT",
    "MIN_TORCH_NEURONX",
    "NeuronApi",
    "NeuronBackend",
    "build_neuron_config",
    "cores_spec",
    "detect_api",
    "neuron_available",
    "require_neuron",
]

log = logging.getLogger("neuronscope")

#: The first public TorchNeuron with ``torch_neuronx.profiling.NeuronConfig`` (Neuron 2.33).
MIN_TORCH_NEURONX = "2.13.3.0"
#: Device-level capture reserves about this much HBM on Trn2/Trn3 for hardware notifications.
DEVICE_MODE_HBM_GB = 5
#: The runtime's default ring buffer per NeuronCore (Neuron docs, troubleshooting).
DEFAULT_MAX_EVENTS_PER_NC = 1_000_000

INSTALL_HINT = (
    f"install TorchNeuron {MIN_TORCH_NEURONX} or later on a Trn2/Trn3 host (Neuron 2.33): "
    'pip install --upgrade "torch-neuronx==2.14.*" "neuronx-cc==2.*" nki '
    "--extra-index-url https://pip.repos.neuron.amazonaws.com "
    "--extra-index-url https://download.pytorch.org/whl/cpu "
    "(or use the Neuron DLAMI), or pass backend='cpu'"
)

#: NeuronConfig keywords neuronscope always passes; a build that refuses them is unusable.
REQUIRED_KEYWORDS = ("modes", "profile_output_dir")


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
    """The profiling API of the installed TorchNeuron."""

    version: str | None
    NeuronConfig: Any
    ProfileMode: Any
    NeuronProfiler: Any
    #: Keyword names NeuronConfig takes, or None where they cannot be read (``**kwargs``, a
    #: C++ constructor): then optional keywords are found by trying each on its own.
    config_params: frozenset[str] | None = None


def signature_params(obj: Any) -> frozenset[str] | None:
    """The keyword names ``obj`` takes, or None where its signature cannot be read or it takes
    ``**kwargs``."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return frozenset(n for n in sig.parameters if n != "self")


def detect_api() -> NeuronApi:
    """The installed TorchNeuron's profiling API; :class:`BackendUnavailableError` naming the
    minimum version and the install command for a build without ``NeuronConfig``."""
    torch_neuronx = _import_torch_neuronx()
    version = getattr(torch_neuronx, "__version__", None)
    try:
        profiling = importlib.import_module("torch_neuronx.profiling")
    except Exception as err:
        profiling = None
        why = f"torch_neuronx.profiling does not import ({type(err).__name__}: {err})"
    else:
        why = ""
    names = ("NeuronConfig", "ProfileMode", "NeuronProfiler")
    missing = [n for n in names if getattr(profiling, n, None) is None]
    profiler_cls = getattr(profiling, "NeuronProfiler", None)
    if not missing and not callable(getattr(profiler_cls, "export_trace", None)):
        missing.append("NeuronProfiler.export_trace")
    if why or missing:
        raise BackendUnavailableError(
            f"torch-neuronx {version} is older than the public TorchNeuron profiling API "
            f"({why or 'torch_neuronx.profiling has no ' + ', '.join(missing)}); neuronscope needs "
            f"torch-neuronx {MIN_TORCH_NEURONX} or later; {INSTALL_HINT}"
        )
    assert profiling is not None
    return NeuronApi(
        version,
        NeuronConfig=profiling.NeuronConfig,
        ProfileMode=profiling.ProfileMode,
        NeuronProfiler=profiler_cls,
        config_params=signature_params(profiling.NeuronConfig),
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


def _members(api: NeuronApi, modes: tuple[str, ...]) -> list[Any]:
    members = []
    for mode in modes:
        member = getattr(api.ProfileMode, mode.upper(), None)
        if member is None:
            known = ", ".join(m.lower() for m in dir(api.ProfileMode) if m.isupper())
            raise ConfigError(
                f"modes={list(modes)!r}: this torch-neuronx's ProfileMode has no {mode.upper()} "
                f"(it has: {known or 'none'}); pass modes among those"
            )
        members.append(member)
    return members


def build_neuron_config(
    api: NeuronApi, options: Options, output_dir: Path, neff_cache: Path | None = None
) -> tuple[Any, dict[str, Any]]:
    """``NeuronConfig`` from the options; returns it and a record of what it was given.

    Required keywords (``modes``, ``profile_output_dir``) must be taken. Optional ones
    (``capture_enabled_for_nc`` for ``cores``, ``max_events_per_nc``, ``neff_cache_dir``) are
    left out where the signature shows the build does not take them, or, where the signature
    cannot be read, where the constructor fails with that one keyword added. ``cores`` and
    ``max_events_per_nc`` were asked for by the user, so a build that takes neither is an error.
    """
    from torch._C._profiler import _ExperimentalConfig

    base: dict[str, Any] = {"modes": _members(api, options.modes), "profile_output_dir": str(output_dir)}
    optional: dict[str, Any] = {}
    spec = cores_spec(options.cores)
    if spec is not None:
        optional["capture_enabled_for_nc"] = spec
    max_events = getattr(options, "max_events_per_nc", None)
    if max_events is not None:
        optional["max_events_per_nc"] = int(max_events)
    if neff_cache is not None:
        optional["neff_cache_dir"] = str(neff_cache)
    params = api.config_params
    where = f"torch-neuronx {api.version}: NeuronConfig"
    if params is not None:
        refused = [k for k in base if k not in params]
        if refused:
            raise NeuronscopeError(
                f"{where} takes no {', '.join(refused)} (it takes {', '.join(sorted(params))}); "
                f"neuronscope needs torch-neuronx {MIN_TORCH_NEURONX} or later; {INSTALL_HINT}"
            )
    try:
        config = api.NeuronConfig(**base)
    except Exception as err:
        raise NeuronscopeError(f"{where}({', '.join(base)}) failed ({type(err).__name__}: {err}); {INSTALL_HINT}") from err
    accepted: dict[str, Any] = {}
    refused_optional: dict[str, str] = {}
    for key, value in optional.items():
        if params is not None:
            if key in params:
                accepted[key] = value
            else:
                refused_optional[key] = "not in the signature"
            continue
        try:
            config = api.NeuronConfig(**{**base, **accepted, key: value})
        except Exception as err:  # one keyword at a time: the failure is that keyword's
            refused_optional[key] = type(err).__name__
        else:
            accepted[key] = value
    if params is not None and accepted:
        try:
            config = api.NeuronConfig(**base, **accepted)
        except Exception as err:
            raise NeuronscopeError(
                f"{where}({', '.join([*base, *accepted])}) failed ({type(err).__name__}: {err}); {INSTALL_HINT}"
            ) from err
    if not isinstance(config, _ExperimentalConfig):
        raise NeuronscopeError(
            f"{where} is not a torch._C._profiler._ExperimentalConfig ({type(config).__mro__!r}), so "
            f"torch.profiler cannot take it as experimental_config; {INSTALL_HINT}"
        )
    asked = [k for k in ("capture_enabled_for_nc", "max_events_per_nc") if k in refused_optional]
    if asked:
        option = {"capture_enabled_for_nc": "cores", "max_events_per_nc": "max_events_per_nc"}
        raise ConfigError(
            f"{where} does not take {', '.join(asked)}, so "
            f"{', '.join(option[k] + '=' for k in asked)}... cannot be applied; leave it out, or "
            f"upgrade torch-neuronx ({INSTALL_HINT})"
        )
    record: dict[str, Any] = {
        "modes": list(options.modes),
        "profile_output_dir": str(output_dir),
        **{k: v for k, v in accepted.items()},
        "not_accepted": refused_optional,
        "signature_read": params is not None,
    }
    return config, record


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


def _rank() -> int | None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    return None


# ---- the backend --------------------------------------------------------------------------


@dataclass
class _Capture:
    """Where one capture's files go and what was found there."""

    root: Path
    #: The directory is shared (all ranks of a run): list only this process's files.
    shared: bool = False
    temporary: bool = False
    started: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    trace_notes: list[str] = field(default_factory=list)
    saved_trace: Path | None = None
    session: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


class NeuronBackend(Backend):
    """TorchNeuron capture: CPU + PrivateUse1 activities, NeuronConfig from the options,
    framework trace beside the session files, session files recorded in the result."""

    name = "neuron"

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.api = detect_api()
        self.cap: _Capture | None = None
        self._exporter: Any = None
        self._prof: Any = None

    @property
    def output_dir(self) -> Path | None:
        return None if self.cap is None else self.cap.root

    # -- before the capture --------------------------------------------------------------------
    def activities(self) -> list[Any]:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]

    def environment_warnings(self) -> list[str]:
        out: list[str] = []
        opts = self.options
        if os.environ.get("NEURON_RT_INSPECT_ENABLE", "").strip() not in ("", "0"):
            out.append(
                "NEURON_RT_INSPECT_ENABLE is set: it must be UNSET for torch.profiler capture (the "
                "runtime's environment-variable capture conflicts with it, Neuron docs); unset it "
                "before the process starts"
            )
        if opts.with_stack and not _env_true("NEURON_FRAMEWORK_DEBUG"):
            out.append(
                "with_stack=True records Python source in the framework events; mapping device "
                "instructions to source in Neuron Explorer also needs NEURON_FRAMEWORK_DEBUG=1, set "
                "before anything compiles (NEFFs cached without it lack the mapping)"
            )
        if "device" in opts.modes:
            out.append(
                f"modes includes 'device': device-level capture reserves about {DEVICE_MODE_HBM_GB} GB "
                "of HBM per Neuron device (Trn2/Trn3) and can make a model that fills HBM run out of "
                "memory; leave modes=['runtime'] unless you need the instruction-level trace"
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

    def _prepare(self, scratch_dir: Path | None) -> _Capture:
        if self.cap is not None:
            return self.cap
        import time

        if scratch_dir is None:
            # export=False (compare() captures, for instance): the runtime still writes its files,
            # and they must not land in ./output beside the user's script.
            cap = _Capture(Path(tempfile.mkdtemp(prefix="neuronscope-neuron-")), temporary=True)
        elif _rank() is not None:
            # Every rank of a run under one root (Neuron docs, multi-rank): Explorer shows all
            # <instance>_pid_<pid> directories of one root together. Ranks share the run's
            # timestamp, which starts every rank's run directory name.
            stamp = scratch_dir.parent.name.split("_", 1)[0]
            root = scratch_dir.parent.parent / f"neuron_{stamp}"
            root.mkdir(parents=True, exist_ok=True)
            cap = _Capture(root, shared=True)
        else:
            scratch_dir.mkdir(parents=True, exist_ok=True)
            cap = _Capture(scratch_dir)
        cap.started = time.time()
        self.cap = cap
        return cap

    def _neff_cache_for_config(self, cap: _Capture) -> Path | None:
        """The NEFF cache TorchNeuron may copy in on stop, when that copy stays small: it copies
        the cache it is given (how much is not documented), and the host-wide cache is shared
        by every run. A larger cache is copied by neuronscope, capped, after the capture."""
        if "device" not in self.options.modes:
            return None
        cache = neff_cache_dir()
        if not cache.is_dir():
            return None
        if not within_caps(*neff_cache_size(cache)):
            cap.trace_notes.append(
                f"the NEFF cache {cache} holds more than {MAX_NEFF_COPY_FILES} NEFFs or "
                f"{MAX_NEFF_COPY_BYTES >> 20} MiB: TorchNeuron was not asked to copy it into the run "
                "(it would copy all of it); neuronscope copies the newest NEFFs, capped"
            )
            return None
        return cache

    def profiler_kwargs(self, scratch_dir: Path | None) -> dict[str, Any]:
        cap = self._prepare(scratch_dir)
        out = cap.root.resolve()
        config, cap.config = build_neuron_config(self.api, self.options, out, self._neff_cache_for_config(cap))
        try:
            self._exporter = self.api.NeuronProfiler(config)
        except Exception as err:
            cap.trace_notes.append(
                f"NeuronProfiler(config) failed ({type(err).__name__}: {err}); neuronscope wrote the "
                "framework trace itself"
            )
        return {"experimental_config": config, "on_trace_ready": self._on_trace_ready}

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

    def _files(self) -> list[Path]:
        assert self.cap is not None
        return find_session_files(self.cap.root, pid=os.getpid() if self.cap.shared else None)

    def _on_trace_ready(self, prof: Any) -> None:
        """Save the framework trace next to the session files, once (a second save raises)."""
        cap = self.cap
        assert cap is not None
        self._prof = prof
        try:
            if self._exporter is not None:
                self._exporter.export_trace(prof)
                found = self._find_framework_trace()
                if found is None:
                    found = self._save_own(prof, "NeuronProfiler.export_trace wrote no trace neuronscope could find")
            else:
                found = self._save_own(prof, None)
        except Exception as err:  # the measurement must survive a failing exporter
            cap.trace_notes.append(f"the Neuron trace exporter failed ({type(err).__name__}: {err})")
            try:
                found = self._find_framework_trace() or self._save_own(prof, None)
            except Exception as err2:
                cap.trace_notes.append(f"no framework trace was saved ({type(err2).__name__}: {err2})")
                return
        try:
            self._adopt_trace(prof, found)
        except OSError as err:
            cap.trace_notes.append(f"could not place the framework trace ({err})")

    def _save_own(self, prof: Any, why: str | None) -> Path | None:
        assert self.cap is not None
        sessions = session_dirs(self._files())
        target = (sessions[0] if sessions else self.cap.root) / FRAMEWORK_TRACE_NAME
        try:
            prof.export_chrome_trace(str(target))
        except RuntimeError as err:  # "Trace is already saved.": saved somewhere we cannot see
            self.cap.trace_notes.append(f"{why or 'the framework trace was saved elsewhere'}: {err}")
            return None
        if why:
            self.cap.trace_notes.append(
                f"{why}; neuronscope saved torch's own trace as {target.name} (it may lack the data "
                "Neuron Explorer uses to link ops to device executions)"
            )
        return target

    def _find_framework_trace(self) -> Path | None:
        found = [f for f in self._files() if file_kind(f.name) == "framework_trace"]
        if not found:
            return None
        return max(found, key=lambda p: p.stat().st_mtime)

    def _adopt_trace(self, prof: Any, trace: Path | None) -> None:
        """Record the saved trace, put it beside the runtime trace as ``trace.json`` where
        Neuron Explorer looks for it, and let later ``export_chrome_trace`` calls copy it."""
        if trace is None or not trace.is_file():
            return
        assert self.cap is not None
        self.cap.saved_trace = trace
        sessions = session_dirs(self._files())
        if sessions and trace.parent != sessions[0] and not (sessions[0] / FRAMEWORK_TRACE_NAME).exists():
            # Docs (glossary): the framework trace "must be in the same directory as system
            # trace files"; a rank-named file written elsewhere is copied in under that name.
            shutil.copyfile(trace, sessions[0] / FRAMEWORK_TRACE_NAME)

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
        return None if self.cap is None else self.cap.saved_trace

    # -- after the capture -----------------------------------------------------------------------
    def _complete_neffs(self, files: list[Path], sessions: list[Path], info: dict[str, Any], notes: list[str]) -> list[Path]:
        """NEFFs for the device trace: Explorer cannot decode an NTFF without them."""
        assert self.cap is not None
        neffs = [f for f in files if f.suffix == ".neff"]
        ntffs = [f for f in files if f.suffix == ".ntff"]
        if neffs or not ("device" in self.options.modes or ntffs):
            return files
        cache = neff_cache_dir()
        if cache.is_dir():
            dest = sessions[0] if sessions else self.cap.root
            try:
                copied, capped = copy_neffs(cache, dest)
            except OSError as err:
                copied, capped = [], f"could not copy NEFFs from {cache}: {err}"
            if copied:
                info["neffs_copied_from"] = str(cache)
                notes.append(f"copied {len(copied)} NEFF(s) from the compile cache {cache} into the session")
            if capped:
                notes.append(capped)
            files = self._files()
        if not [f for f in files if f.suffix == ".neff"]:
            info.setdefault("problems", []).append(
                f"no .neff in the session and none in the compile cache ({cache}): Neuron Explorer "
                f"cannot decode the device trace; set {NEFF_CACHE_ENV} to the cache the run used"
            )
        return files

    def _collect_session(self, prof: Any = None) -> dict[str, Any]:
        """Find, check and complete the session files; cached, so notes and artifacts agree."""
        cap = self.cap
        if cap is not None and cap.session is not None:
            return cap.session
        info: dict[str, Any] = {"api": "NeuronConfig", "torch_neuronx_version": self.api.version}
        if cap is None:
            info["problems"] = ["the Neuron capture did not start; no session files"]
            return info
        cap.session = info
        info["config"] = cap.config
        notes: list[str] = list(cap.trace_notes)
        info["problems"] = []
        files = self._files()
        sessions = session_dirs(files)
        files = self._complete_neffs(files, sessions, info, notes)
        problems, checked = check_session(files, tuple(self.options.modes))
        info["problems"].extend(problems)
        notes.extend(checked)
        counts = privateuse1_event_counts(prof)
        if counts:
            info["privateuse1_events"] = counts
        drop = self._dropped_events_note(counts)
        if drop:
            notes.append(drop)
        root = cap.root
        listed = [
            {"path": f.relative_to(root).as_posix(), "bytes": f.stat().st_size, "kind": file_kind(f.name)}
            for f in files[:MAX_LISTED_FILES]
        ]
        info["output_dir"] = str(root) if (cap.temporary or cap.shared) else root.name
        info["shared_root"] = cap.shared
        info["files"] = listed
        if len(files) > MAX_LISTED_FILES:
            info["files_not_listed"] = len(files) - MAX_LISTED_FILES
        info["session_dirs"] = [d.relative_to(root).as_posix() or "." for d in sessions]
        if cap.saved_trace is not None and cap.saved_trace.is_file():
            info["framework_trace"] = cap.saved_trace.relative_to(root).as_posix()
        rank = _rank()
        if rank is not None:
            info["rank"] = rank
        if any(file_kind(f.name) != "framework_trace" for f in files):
            command, lines = explorer_notes(root.resolve(), self.options.name or "neuronscope")
            info["view_command"] = command
            notes.extend(lines)
        if cap.temporary:
            notes.append(f"export=False: the Neuron session files stay in {root}")
        for problem in info["problems"]:
            log.warning("neuronscope: Neuron capture: %s", problem)
        cap.notes = notes + [f"Neuron capture problem: {p}" for p in info["problems"]]
        return info

    def _dropped_events_note(self, counts: dict[str, int]) -> str | None:
        """The runtime keeps at most ``max_events_per_nc`` events per NeuronCore and overwrites
        the oldest beyond it; Neuron Explorer reports drops only when it processes the files. A
        capture whose device executions reach the limit has most likely lost events."""
        limit = getattr(self.options, "max_events_per_nc", None) or DEFAULT_MAX_EVENTS_PER_NC
        driver = counts.get("privateuse1_driver", 0)
        if driver < limit:
            return None
        return (
            f"the capture holds {driver} Neuron device executions, at the max_events_per_nc limit "
            f"({limit}): the runtime overwrote the oldest events; capture fewer steps or raise "
            "max_events_per_nc (costs host memory)"
        )

    def extra_notes(self, table_has_device: bool) -> list[str]:
        notes: list[str] = []
        try:
            self._collect_session(self._prof)
        except Exception as err:  # listing files must never cost the measurement
            notes.append(f"could not list the Neuron session files: {type(err).__name__}: {err}")
        if not table_has_device:
            notes.append(
                f"per-op Neuron device time is None (not 0): this torch-neuronx ({self.api.version}) "
                "gave torch.profiler no device-execution (privateuse1_driver) events, so only host "
                "time is known per op; the device timeline is in the Neuron session files (open "
                "them in Neuron Explorer, command below)"
            )
        return notes + ([] if self.cap is None else list(self.cap.notes))

    def collect_artifacts(self, prof: Any, scratch_dir: Path | None) -> dict[str, Any]:
        return {"neuron": self._collect_session(prof)}


def privateuse1_event_counts(prof: Any) -> dict[str, int]:
    """How many PrivateUse1 framework events of each activity type the capture holds."""
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
