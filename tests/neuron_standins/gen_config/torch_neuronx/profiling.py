"""STAND-IN ``torch_neuronx.profiling``, documented generation. NOT TorchNeuron.

``NeuronConfig`` takes the keywords of the docs table (modes, max_events_per_nc,
capture_enabled_for_nc, profile_output_dir, neff_cache_dir, precache_node_info) plus
``correlate_device_time``, which only third-party scripts show. ``NeuronConfigDocTable`` is the
docs table alone, for the tests of a build that rejects ``correlate_device_time``. How the real
class serialises itself is not documented; this one writes "k:v;k:v" into
``custom_profiler_config`` for the stand-in Kineto plugin.
"""

import enum
from pathlib import Path

from torch._C._profiler import _ExperimentalConfig

from . import _standin


class NRTProfilerError(Exception):
    """Raised for Neuron runtime profiling errors."""


class ProfileMode(enum.Enum):
    DEVICE = "device"
    RUNTIME = "runtime"
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"


class _ConfigBase(_ExperimentalConfig):
    def _setup(self, modes, max_events_per_nc, capture_enabled_for_nc, profile_output_dir, neff_cache_dir, precache_node_info, **extra):
        if modes is None:
            modes = [ProfileMode.DEVICE, ProfileMode.RUNTIME]  # the documented default
        modes = list(modes)
        for m in modes:
            if not isinstance(m, ProfileMode):
                raise TypeError(f"modes must hold ProfileMode members, got {m!r}")
        if capture_enabled_for_nc is not None and not isinstance(capture_enabled_for_nc, str):
            raise TypeError("capture_enabled_for_nc must be a str such as '0,1,2-5'")
        kwargs = dict(
            modes=modes,
            max_events_per_nc=max_events_per_nc,
            capture_enabled_for_nc=capture_enabled_for_nc,
            profile_output_dir=profile_output_dir,
            neff_cache_dir=neff_cache_dir,
            precache_node_info=precache_node_info,
            **extra,
        )
        _standin.RECORD["config_kwargs"].append(kwargs)
        self.modes = modes
        self.profile_output_dir = profile_output_dir
        self.kwargs = kwargs
        parts = ["modes:" + ",".join(m.value for m in modes)]
        if profile_output_dir is not None:
            parts.append(f"profile_output_dir:{profile_output_dir}")
        if capture_enabled_for_nc is not None:
            parts.append(f"capture_enabled_for_nc:{capture_enabled_for_nc}")
        if max_events_per_nc is not None:
            parts.append(f"max_events_per_nc:{int(max_events_per_nc)}")
        if neff_cache_dir is not None:
            parts.append(f"neff_cache_dir:{neff_cache_dir}")
        return ";".join(parts)


class NeuronConfig(_ConfigBase):
    def __init__(
        self,
        modes=None,
        max_events_per_nc=None,
        capture_enabled_for_nc=None,
        profile_output_dir=None,
        neff_cache_dir=None,
        precache_node_info=True,
        correlate_device_time=False,
    ):
        text = self._setup(
            modes, max_events_per_nc, capture_enabled_for_nc, profile_output_dir, neff_cache_dir,
            precache_node_info, correlate_device_time=correlate_device_time,
        )
        super().__init__(custom_profiler_config=text)


class NeuronConfigDocTable(_ConfigBase):
    """The 2.31/2.32 docs table exactly: no ``correlate_device_time``."""

    def __init__(
        self,
        modes=None,
        max_events_per_nc=None,
        capture_enabled_for_nc=None,
        profile_output_dir=None,
        neff_cache_dir=None,
        precache_node_info=True,
    ):
        text = self._setup(modes, max_events_per_nc, capture_enabled_for_nc, profile_output_dir, neff_cache_dir, precache_node_info)
        super().__init__(custom_profiler_config=text)


class NeuronProfiler:
    """``exporter = NeuronProfiler(config)``; ``on_trace_ready=exporter.export_trace``."""

    def __init__(self, config):
        if not isinstance(config, _ConfigBase):
            raise TypeError(f"NeuronProfiler needs a NeuronConfig, got {type(config).__name__}")
        self.config = config
        _standin.RECORD["profiler_init"].append({"config": config})

    def export_trace(self, prof):
        out = Path(self.config.profile_output_dir or "./output")
        name = _standin.BEHAVIOUR["trace_name"]
        session = _standin.last_session_dir(str(out))
        if name.startswith("neuron_framework_trace_rank_") or session is None:
            target = out / name
        else:
            target = session / name
        target.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(target))
        _standin.RECORD["export_trace"].append(target)
