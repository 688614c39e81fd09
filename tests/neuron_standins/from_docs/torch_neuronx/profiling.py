"""STAND-IN ``torch_neuronx.profiling``, built from the docs. NOT TorchNeuron.

``NeuronConfig`` takes exactly the keywords of the docs table (modes, max_events_per_nc,
capture_enabled_for_nc, profile_output_dir, neff_cache_dir, precache_node_info); the
third-party ``correlate_device_time`` is refused, as a Python class refuses an unknown keyword.
How the real class serialises itself is not documented; this one writes "k:v;k:v" into
``custom_profiler_config``, which Kineto hands to the plugin.
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


class NeuronConfig(_ExperimentalConfig):
    def __init__(
        self,
        modes=None,
        max_events_per_nc=None,
        capture_enabled_for_nc=None,
        profile_output_dir=None,
        neff_cache_dir=None,
        precache_node_info=True,
    ):
        if modes is None:
            modes = [ProfileMode.DEVICE, ProfileMode.RUNTIME]  # the documented default
        modes = list(modes)
        for m in modes:
            if not isinstance(m, ProfileMode):
                raise TypeError(f"modes must hold ProfileMode members, got {m!r}")
        if capture_enabled_for_nc is not None and not isinstance(capture_enabled_for_nc, str):
            raise TypeError("capture_enabled_for_nc must be a str such as '0,1,2-5'")
        kwargs = {
            "modes": modes,
            "max_events_per_nc": max_events_per_nc,
            "capture_enabled_for_nc": capture_enabled_for_nc,
            "profile_output_dir": profile_output_dir,
            "neff_cache_dir": neff_cache_dir,
            "precache_node_info": precache_node_info,
        }
        parts = ["modes:" + ",".join(m.value for m in modes)]
        for key in ("profile_output_dir", "capture_enabled_for_nc", "max_events_per_nc", "neff_cache_dir"):
            if kwargs[key] is not None:
                parts.append(f"{key}:{kwargs[key]}")
        super().__init__(custom_profiler_config=";".join(parts))
        _standin.RECORD["config_kwargs"].append(kwargs)
        self.modes = modes
        self.profile_output_dir = profile_output_dir


class NeuronProfiler:
    """``exporter = NeuronProfiler(config)``; ``on_trace_ready=exporter.export_trace``."""

    def __init__(self, config):
        if not isinstance(config, NeuronConfig):
            raise TypeError(f"NeuronProfiler needs a NeuronConfig, got {type(config).__name__}")
        self.config = config
        _standin.RECORD["profiler_init"].append({"config": config})

    def export_trace(self, prof):
        """Write the framework trace beside the system trace files (docs: "export_trace()
        places the framework trace in the same directory as Neuron system traces")."""
        out = Path(self.config.profile_output_dir or "./output")
        name = _standin.BEHAVIOUR["trace_name"]
        session = _standin.last_session_dir(str(out))
        # A neuron_framework_trace_rank_<N>.json goes to the top (troubleshooting page); a
        # plugins/<name>/trace.json.gz (the profile schema skill's layout) into the session,
        # compressed (torch's export compresses a .gz path).
        target = out / name if name.startswith("neuron_framework_trace_rank_") or session is None else session / name
        target.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(target))
        _standin.RECORD["export_trace"].append(target)
