"""The Neuron backend: AWS Trainium through public TorchNeuron (``torch-neuronx`` 2.13.3 /
2.14.3 and later, Neuron 2.33; device ``neuron``).

What a careful engineer does by hand (Neuron docs, "Profile PyTorch workloads"):
``torch.profiler`` with ``ProfilerActivity.CPU`` + ``ProfilerActivity.PrivateUse1``, a
``torch_neuronx.profiling.NeuronConfig`` (passed as ``experimental_config``) built from the
``modes`` / ``cores`` / ``max_events_per_nc`` options with its output directory inside the run,
``NeuronProfiler(config).export_trace`` as ``on_trace_ready``, the device synchronised inside
the capture; afterwards the session files found, listed, checked and completed with the NEFFs
the capture needs (see :mod:`.neuron_files`).

Which API the installed build offers and which keywords it takes is found out in
:mod:`.neuron_api` (builds without ``NeuronConfig`` get one error naming the minimum version).

TorchNeuron hands torch.profiler its framework events as ``privateuse1_runtime`` (operator
dispatch, on the op's thread) and ``privateuse1_driver`` (device execution, stream id as
thread id), linked to the op that launched them. :mod:`neuronscope.events` reads driver events
as device work, so per-op device time comes from them, as it comes from kernels on CUDA.

neuronscope imports torch-neuronx only when this backend is chosen or ``backend="auto"`` looks
for it; on a host where it is installed, ``import torch`` autoloads it anyway (its
``torch.backends`` entry point), with the effect on CPU captures that
:class:`.neuron_files.StrayRuntimeOutput` contains.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronscope.announce import first_time
from neuronscope.capture import torch_private
from neuronscope.capture.base import Backend
from neuronscope.capture.neuron_api import (
    build_neuron_config,
    detect_api,
    torch_neuron_module,
)
from neuronscope.capture.neuron_explorer import device_profile, explorer_dir_name, find_explorer
from neuronscope.capture.neuron_files import (
    DEFAULT_MAX_EVENTS_PER_NC,
    FRAMEWORK_TRACE_NAME,
    MAX_LISTED_FILES,
    MAX_NEFF_COPY_BYTES,
    MAX_NEFF_COPY_FILES,
    NEFF_CACHE_ENV,
    check_session,
    copy_neffs,
    dropped_events_note,
    explorer_notes,
    file_kind,
    find_session_files,
    neff_cache_dir,
    neff_cache_size,
    neffs_written_since,
    own_framework_trace,
    place_framework_trace,
    session_dirs,
    within_caps,
)
from neuronscope.config import Options, env_true, rank_info

__all__ = [
    "NeuronBackend",
]

log = logging.getLogger("neuronscope")

#: Device-level capture reserves about this much HBM on Trn2/Trn3 for hardware notifications.
DEVICE_MODE_HBM_GB = 5
# ---- the backend --------------------------------------------------------------------------


@dataclass
class _Capture:
    """Where one capture's files go and what was found there."""

    root: Path
    #: The directory is shared (all ranks of a run): list only this process's files.
    shared: bool = False
    temporary: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    trace_notes: list[str] = field(default_factory=list)
    saved_trace: Path | None = None
    #: The framework trace as found, under whichever documented name (saved_trace is its plain
    #: copy beside the system trace where it was written elsewhere or compressed).
    found_trace: Path | None = None
    device_profile: dict[str, Any] | None = None
    #: When the capture started (time.time(), the clock file times are on).
    started: float = 0.0
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
        if opts.with_stack and not env_true("NEURON_FRAMEWORK_DEBUG"):
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
        if first_time(("neuron-first-capture", name)) and opts.warmup == 0:
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
        if scratch_dir is None:
            # export=False (compare() captures, for instance): the runtime still writes its files,
            # and they must not land in ./output beside the user's script.
            cap = _Capture(Path(tempfile.mkdtemp(prefix="neuronscope-neuron-")), temporary=True)
        elif rank_info() is not None:
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
        cap.started = time.time() - 1.0  # file times may be coarse: a second's slack
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
        module = torch_neuron_module()
        if module is not None and hasattr(module, "synchronize"):
            module.synchronize()
            return
        import torch_neuronx

        torch_neuronx.synchronize()

    def device_name(self) -> str | None:
        module = torch_neuron_module()
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
        ranks = rank_info()
        return own_framework_trace(self._files(), None if ranks is None else ranks[0])

    def _adopt_trace(self, prof: Any, trace: Path | None) -> None:
        """Record the saved trace, put it beside the runtime trace as ``trace.json`` where
        Neuron Explorer looks for it, and let later ``export_chrome_trace`` calls copy it."""
        if trace is None or not trace.is_file():
            return
        assert self.cap is not None
        self.cap.found_trace = trace
        sessions = session_dirs(self._files())
        if sessions:
            # A rank-named file or a plugins/*/trace.json.gz written elsewhere is put beside
            # the system trace as trace.json (decompressed): the run's copy is read from it.
            trace = place_framework_trace(trace, sessions[0])
        elif trace.name.endswith(".gz"):
            trace = place_framework_trace(trace, trace.parent)
        self.cap.saved_trace = trace

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
        compiled = self._compiled_in_capture(cap)
        if compiled:
            info["neffs_compiled_in_capture"] = compiled
            notes.append(
                f"this capture compiled {compiled:,}{'+' if compiled >= MAX_NEFF_COPY_FILES else ''} NEFF(s) "
                f"(new in the compile cache {neff_cache_dir()}): its times include neuronx-cc compilation, "
                "not only execution; warm up before capturing (warmup=N on the decorator, or run the "
                "code once first), with the same input shapes"
            )
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
        found = cap.found_trace or cap.saved_trace
        if found is not None and found.is_file():
            info["framework_trace"] = found.relative_to(root).as_posix()
        ranks = rank_info()
        rank = None if ranks is None else ranks[0]
        if rank is not None:
            info["rank"] = rank
        if any(file_kind(f.name) != "framework_trace" for f in files):
            command, lines = explorer_notes(root.resolve(), self.options.name or "neuronscope")
            info["view_command"] = command
            notes.extend(lines)
        if sessions and any(file_kind(f.name) != "framework_trace" for f in files):
            notes.extend(self._device_profile(cap, sessions[0]))
        if cap.temporary:
            notes.append(f"export=False: the Neuron session files stay in {root}")
        for problem in info["problems"]:
            log.warning("neuronscope: Neuron capture: %s", problem)
        cap.notes = notes + [f"Neuron capture problem: {p}" for p in info["problems"]]
        return info

    def _compiled_in_capture(self, cap: _Capture) -> int:
        """NEFFs the compile cache gained while the capture ran (eager ops and compiled graphs
        alike are compiled into it on their first run with a shape; Neuron docs)."""
        cache = neff_cache_dir()
        return neffs_written_since(cache, cap.started) if cap.started and cache.is_dir() else 0

    def _device_profile(self, cap: _Capture, session: Path) -> list[str]:
        """Neuron Explorer's device-level profile of ``session``, into the run (``explorer/``
        beside the session files); notes for what could not be had. Never raises."""
        setting = getattr(self.options, "neuron_explorer", None)
        exe = find_explorer(setting)
        if exe is None:
            if setting not in (None, False):
                return [f"neuron_explorer={setting!r} is no executable file: no device-level profile"]
            if setting is None and first_time(("neuron-explorer-missing",)):
                return [
                    (
                        "no neuron-explorer on PATH or in /opt/aws/neuron/bin (aws-neuronx-tools): the "
                        "result has no device-level profile (MFU, engine activity, device time per "
                        "NeuronCore); install it or pass neuron_explorer='/path/to/neuron-explorer'"
                    )
                ]
            return []
        try:
            cap.device_profile = device_profile(
                exe, session, cap.root / explorer_dir_name(os.getpid() if cap.shared else None),
                self.options.name or "neuronscope", cap.saved_trace,
            )
        except Exception as err:  # the device profile is extra: never the capture's loss
            return [f"neuron-explorer could not be read: {type(err).__name__}: {err}"]
        return list(cap.device_profile.get("notes", ()))

    def _dropped_events_note(self, counts: dict[str, int]) -> str | None:
        limit = getattr(self.options, "max_events_per_nc", None) or DEFAULT_MAX_EVENTS_PER_NC
        return dropped_events_note(counts.get("privateuse1_driver", 0), limit)

    def extra_notes(self, table_has_device: bool) -> list[str]:
        notes: list[str] = []
        try:
            self._collect_session(self._prof)
        except Exception as err:  # listing files must never cost the measurement
            notes.append(f"could not list the Neuron session files: {type(err).__name__}: {err}")
        if not table_has_device:
            profile = None if self.cap is None else self.cap.device_profile
            where = (
                "the device time per op from Neuron Explorer's system profile (joined by flow ids) is "
                "in the result's device profile"
                if profile and profile.get("ops")
                else "the device timeline is in the Neuron session files (open them in Neuron Explorer, "
                "command below)"
            )
            notes.append(
                f"per-op Neuron device time is None (not 0): this torch-neuronx ({self.api.version}) "
                "gave torch.profiler no device-execution (privateuse1_driver) events, so only host "
                f"time is known per op in the op table; {where}"
            )
        return notes + ([] if self.cap is None else list(self.cap.notes))

    def collect_artifacts(self, prof: Any, scratch_dir: Path | None) -> dict[str, Any]:
        out: dict[str, Any] = {"neuron": self._collect_session(prof)}
        if self.cap is not None and self.cap.device_profile is not None:
            out["device_profile"] = self.cap.device_profile
        return out


def privateuse1_event_counts(prof: Any) -> dict[str, int]:
    """How many PrivateUse1 framework events of each activity type the capture holds."""
    kineto = torch_private.kineto_results(prof)
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
