"""TorchNeuron detection and ``NeuronConfig`` construction for the Neuron backend.

Public TorchNeuron (``torch-neuronx`` 2.13.3 / 2.14.3 and later, Neuron 2.33) offers
``torch_neuronx.profiling.NeuronConfig`` / ``ProfileMode`` / ``NeuronProfiler``. What the
installed build accepts is read, never assumed: ``NeuronConfig``'s signature where it can be
read; otherwise each optional keyword is tried on its own and kept only when the constructor
succeeds with it (error text is never parsed). Builds without ``NeuronConfig`` get one error
naming the minimum version and the install command.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronscope.announce import first_time
from neuronscope.capture import torch_private
from neuronscope.config import Options
from neuronscope.errors import BackendUnavailableError, ConfigError, NeuronscopeError

__all__ = [
    "INSTALL_HINT",
    "MIN_TORCH_NEURONX",
    "NeuronApi",
    "build_neuron_config",
    "cores_spec",
    "detect_api",
    "neuron_available",
    "require_neuron",
    "signature_params",
    "torch_neuron_module",
]

log = logging.getLogger("neuronscope")

#: The runtime's environment-variable capture switch; must be unset for torch.profiler capture.
INSPECT_ENV = "NEURON_RT_INSPECT_ENABLE"
#: The first public TorchNeuron with ``torch_neuronx.profiling.NeuronConfig`` (Neuron 2.33).
MIN_TORCH_NEURONX = "2.13.3.0"

INSTALL_HINT = (
    f"install TorchNeuron {MIN_TORCH_NEURONX} or later on a Trn2/Trn3 host (Neuron 2.33): "
    'pip install --upgrade "torch-neuronx==2.14.*" "neuronx-cc==2.*" nki '
    "--extra-index-url https://pip.repos.neuron.amazonaws.com "
    "--extra-index-url https://download.pytorch.org/whl/cpu "
    "(or use the Neuron DLAMI), or pass backend='cpu'"
)


# ---- detection ----------------------------------------------------------------------------


def torch_neuron_module() -> Any:
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


def neuron_available() -> bool:
    """True when torch-neuronx is installed and ``torch.neuron.is_available()`` says a Neuron
    device is visible. Never raises; imports torch-neuronx only when it is installed."""
    if importlib.util.find_spec("torch_neuronx") is None:
        return False
    try:
        _import_torch_neuronx()
        module = torch_neuron_module()
        return bool(module is not None and module.is_available())
    except Exception as err:
        if first_time(("neuron-broken-install",)):  # "auto" quietly profiling the CPU would mislead
            log.warning("neuronscope: backend 'auto' skips Neuron: %s", err)
        return False


def require_neuron() -> None:
    """Raise :class:`BackendUnavailableError` with the fix unless Neuron capture can run here.

    Called when a decorator or region with ``backend="neuron"`` is built, so the error comes at
    decoration time, not an hour into training. ``NEURON_RT_INSPECT_ENABLE`` set is refused
    here too (a :class:`ConfigError`): the runtime's environment-variable capture conflicts
    with torch.profiler capture (Neuron docs, environment variables: "They conflict").
    """
    inspect_env = os.environ.get(INSPECT_ENV, "").strip()
    if inspect_env not in ("", "0"):
        raise ConfigError(
            f"{INSPECT_ENV}={inspect_env} is set: the Neuron runtime's environment-variable capture "
            "conflicts with torch.profiler capture, which backend 'neuron' uses (Neuron docs); unset "
            f"it before the process starts (or run `neuron-explorer inspect` without neuronscope)"
        )
    _import_torch_neuronx()
    module = torch_neuron_module()
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
    _ExperimentalConfig = torch_private.experimental_config_class()

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
