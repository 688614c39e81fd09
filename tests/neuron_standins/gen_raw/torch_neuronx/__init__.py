"""STAND-IN for torch-neuronx, generation "raw": no NeuronConfig and no NeuronProfiler. NOT TorchNeuron.

Only the Kineto plugin, which reads
``_ExperimentalConfig(custom_profiler_config="profile_output_dir:...;capture_enabled_for_nc:0,1;
max_events_per_nc:N;host_memory:true")`` (keys of the research notes, S1 Session.cpp /
NConfigParser.cpp). Modes cannot be chosen: the plugin captures the system and the device trace;
``host_memory:true`` adds cpu_util.pb and host_mem.pb. The runtime writes its files directly under
``<dir>/i-<id>_pid_<pid>/``. See ../../common.py for what is emulated.
"""

import importlib.util as _util
import sys as _sys
from pathlib import Path as _Path

_spec = _util.spec_from_file_location(f"{__name__}._standin", _Path(__file__).resolve().parents[2] / "common.py")
_standin = _util.module_from_spec(_spec)
_sys.modules[_spec.name] = _standin
_spec.loader.exec_module(_standin)

__version__ = "0.0.9+standin.raw"
GENERATION = "raw"

_standin.BEHAVIOUR["layout"] = "flat"

neuron = _standin.make_device_module(__name__)
synchronize = _standin.synchronize

_standin.register(_sys.modules[__name__])
