"""STAND-IN ``torch_neuronx.profiling`` of an early build (no NeuronConfig). NOT TorchNeuron.

``NeuronProfiler`` behaves as the research notes describe the April 2026 source: a start/stop
object (also a context manager) that starts the runtime trace through the private bindings,
then, when ``pytorch_activities`` are given, builds and enters its own
``torch.profiler.profile(activities=..., record_shapes=...)`` (kept in ``_pytorch_profiler``).
``stop()`` leaves the torch profiler, exports it to ``<neuron_output_dir>/pytorch_trace.json``,
writes ``framework_mapping_<YYYYmmdd_HHMMSS_mmm>.json`` when both ran, then stops the runtime.
Errors in stop are gathered into one ``RuntimeError("Profiling errors: ...")``.
"""

import datetime as _dt
import json
import os

from torch.profiler import profile

from . import _C, _standin


class NRTProfilerError(Exception):
    """Raised for Neuron runtime profiling errors."""


class NeuronProfiler:
    def __init__(
        self,
        pytorch_activities=None,
        record_shapes=False,
        pytorch_trace_file=None,
        neuron_output_dir="./output",
        event_filters=None,
    ):
        _standin.RECORD["profiler_init"].append(
            {
                "pytorch_activities": pytorch_activities,
                "record_shapes": record_shapes,
                "pytorch_trace_file": pytorch_trace_file,
                "neuron_output_dir": neuron_output_dir,
                "event_filters": event_filters,
            }
        )
        self.pytorch_activities = pytorch_activities or []
        self.record_shapes = record_shapes
        self.neuron_output_dir = neuron_output_dir
        if self.pytorch_activities:
            self.pytorch_trace_file = f"{neuron_output_dir}/{pytorch_trace_file or 'pytorch_trace.json'}"
        else:
            self.pytorch_trace_file = None
        self.event_filters = event_filters
        self._is_active = False
        self._nrt_active = False
        self._pytorch_active = False
        self._pytorch_profiler = None

    def start(self):
        if self._is_active:
            raise RuntimeError("Profiler is already active")
        config = _C._nrt_inspect_config_allocate()
        _C._nrt_inspect_config_set_defaults(config)
        _C._nrt_inspect_config_set_output_dir(config, self.neuron_output_dir)
        _C._nrt_inspect_config_set_enable_inspect(config, True)
        for spec in (self.event_filters or {}).get("nc", []):
            for nc in _standin.parse_cores(str(spec)) or []:
                _C._nrt_inspect_config_set_capture_enabled_for_nc(config, nc, True)
        if _C._nrt_inspect_begin_with_options(config) != 0:
            raise NRTProfilerError("Failed to start NRT profiling")
        self._nrt_active = True
        if self.pytorch_activities:
            self._pytorch_profiler = profile(activities=self.pytorch_activities, record_shapes=self.record_shapes)
            self._pytorch_profiler.__enter__()
            self._pytorch_active = True
        self._is_active = True

    def stop(self):
        if not self._is_active:
            raise RuntimeError("Profiler is not active")
        errors = []
        mapping = self._nrt_active and self._pytorch_active
        if self._pytorch_active:
            try:
                self._pytorch_profiler.__exit__(None, None, None)
                self._pytorch_profiler.export_chrome_trace(self.pytorch_trace_file)
            except Exception as e:
                errors.append(e)
            finally:
                self._pytorch_active = False
        if mapping:
            now = _dt.datetime.now()
            stamp = now.strftime("%Y%m%d_%H%M%S") + f"_{now.microsecond // 1000:03d}"
            os.makedirs(self.neuron_output_dir, exist_ok=True)
            with open(os.path.join(self.neuron_output_dir, f"framework_mapping_{stamp}.json"), "w") as fh:
                json.dump(_C._get_profiler_mappings(), fh)
        if self._nrt_active:
            self._nrt_active = False
            try:
                if _C._nrt_inspect_stop() != 0:
                    raise NRTProfilerError("Failed to stop NRT profiling")
            except Exception as e:
                errors.append(e)
        self._is_active = False
        if errors:
            raise RuntimeError("Profiling errors:\n" + "\n".join(f"  - {type(e).__name__}: {e}" for e in errors))

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        return False

    def is_active(self):
        return self._is_active
