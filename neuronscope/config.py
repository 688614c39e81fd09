"""The options of a capture, as one frozen dataclass, validated when a wrapper is built.

A bad option fails when the decorator or region is built (usually at import time of the
user's script), not an hour into training. The environment variables ``NEURONSCOPE_DISABLE``
and ``NEURONSCOPE_OUTPUT_DIR`` are read here too.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from neuronscope.errors import ConfigError

__all__ = [
    "BACKENDS",
    "DEFAULT_OUTPUT_DIR",
    "NEURON_MODES",
    "Options",
    "build_options",
    "disabled_by_env",
    "env_true",
    "parse_cores",
    "parse_modes",
    "rank_info",
]

BACKENDS = ("auto", "neuron", "cuda", "cpu")
#: TorchNeuron's ProfileMode members, by the lower-case names users pass.
NEURON_MODES = ("runtime", "device", "cpu_util", "host_memory")
#: Where runs go when neither ``output_dir`` nor ``NEURONSCOPE_OUTPUT_DIR`` says otherwise.
DEFAULT_OUTPUT_DIR = "neuronscope-runs"
#: The decorator's default call window. One warm-up call keeps compilation (torch.compile,
#: Neuron's per-op NEFF builds, cuDNN autotuning) and first-touch allocation out of the
#: measurement; one active call is what a look at "where does the time go" needs, and keeps a
#: decorated ``forward`` in a 10,000-step training loop from profiling 10,000 steps.
DEFAULT_WARMUP = 1
DEFAULT_ACTIVE = 1

#: The values an on/off environment variable reads as "on" (any case, spaces ignored).
TRUE_VALUES = frozenset({"1", "true", "yes", "on"})
DISABLE_ENV = "NEURONSCOPE_DISABLE"


def env_true(name: str) -> bool:
    """True when the environment variable ``name`` is set to 1, true, yes or on (any case)."""
    value = os.environ.get(name)
    return value is not None and value.strip().lower() in TRUE_VALUES


def disabled_by_env() -> bool:
    """True when ``NEURONSCOPE_DISABLE`` is set to a true value; read afresh at each call
    (``os.environ``, about 0.7 us), so that setting or unsetting it takes effect at the next
    call of every wrapper and region."""
    return env_true(DISABLE_ENV)


def rank_info() -> tuple[int, int] | None:
    """``(rank, world_size)`` when torch.distributed is initialised in this process, else None.

    Imports nothing new: a process that never imported torch.distributed is not distributed.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a half-torn-down process group: treat as one process
        pass
    return None


def default_output_root() -> Path:
    return Path(os.environ.get("NEURONSCOPE_OUTPUT_DIR") or DEFAULT_OUTPUT_DIR)


@dataclass(frozen=True)
class Options:
    """What the user asked for. Built and validated by :func:`build_options`.

    ``warmup`` calls run unprofiled, then ``active`` calls are captured (each one its own
    capture), then the wrapper is a pass-through. ``active=None`` captures every call (the
    default for ``neuron_region``, whose block the user placed by hand).
    """

    name: str | None = None
    #: One of :data:`BACKENDS`, or a ``capture.Backend`` subclass (built with these options).
    backend: str | type = "auto"
    output_dir: str | None = None
    export: bool = True
    record_shapes: bool = True
    with_stack: bool = False
    profile_memory: bool = False
    enabled: bool = True
    modes: tuple[str, ...] = ("runtime",)
    cores: tuple[int, ...] | None = None
    #: Neuron: the runtime's ring buffer of trace events per NeuronCore (None: its default).
    max_events_per_nc: int | None = None
    #: Neuron: the ``neuron-explorer`` run after a capture for the device-level profile: None
    #: finds it (PATH, /opt/aws/neuron/bin), a path names it, False runs none.
    neuron_explorer: str | bool | None = None
    warmup: int = 0
    active: int | None = None
    #: A call window's captures in one profiler session, split per capture (their results
    #: come at the window's end): True, False, or None for CUDA only, where every session
    #: after a process's first can return kernel records on another clock (pytorch#192021).
    one_session: bool | None = None
    hints: bool = True
    print_summary: bool = False
    trace_format: str = "auto"

    @property
    def output_root(self) -> Path:
        """The export root: ``output_dir``, else ``NEURONSCOPE_OUTPUT_DIR``, else the default."""
        return Path(self.output_dir) if self.output_dir else default_output_root()

    def with_name(self, name: str) -> Options:
        return replace(self, name=name)

    @property
    def backend_name(self) -> str:
        """``backend`` as a name: a Backend subclass gives its ``name``."""
        return self.backend if isinstance(self.backend, str) else str(getattr(self.backend, "name", "custom"))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["backend"] = self.backend_name
        d["modes"] = list(self.modes)
        d["cores"] = None if self.cores is None else list(self.cores)
        return d


_KNOWN = frozenset(Options.__dataclass_fields__)


def _check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be True or False, got {value!r}")
    return value


def _check_count(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{key} must be >= {minimum}, got {value}; pass {key}={minimum} or more")
    return value


def parse_modes(value: Any) -> tuple[str, ...]:
    """Normalise ``modes``: names in any case, or TorchNeuron ``ProfileMode`` members."""
    if value is None:
        return ("runtime",)
    items: Iterable[Any] = [value] if isinstance(value, str) or hasattr(value, "name") else value
    out: list[str] = []
    try:
        for item in items:
            raw = getattr(item, "name", item)  # ProfileMode.DEVICE -> "DEVICE"
            if not isinstance(raw, str):
                raise ConfigError(f"modes must be names or ProfileMode members, got {item!r}")
            key = raw.strip().lower().replace("-", "_")
            if key not in NEURON_MODES:
                raise ConfigError(
                    f"unknown Neuron profile mode {raw!r}; use one of {', '.join(NEURON_MODES)}"
                )
            if key not in out:
                out.append(key)
    except TypeError as exc:
        raise ConfigError(f"modes must be a name or a list of names, got {value!r}") from exc
    if not out:
        raise ConfigError("modes is empty; pass modes=['runtime'] (the default) or more")
    return tuple(out)


_CORE_RANGE = re.compile(r"^\s*([0-9]{1,9})\s*(?:-\s*([0-9]{1,9})\s*)?$")
#: Highest NeuronCore index accepted. A trn2.48xlarge has 128 NeuronCores (16 devices x 8);
#: the bound leaves ample room and keeps "0-999999999" from building a billion-entry list.
MAX_CORE_INDEX = 4095


def parse_cores(value: Any) -> tuple[int, ...] | None:
    """Normalise ``cores``: an int, a list of ints, or a string such as ``"0,1,4-7"``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(f"cores must be an int, a list of ints or a string like '0,1,4-7', got {value!r}")
    if isinstance(value, int):
        cores = [value]
    elif isinstance(value, str):
        cores = []
        for part in value.split(","):
            m = _CORE_RANGE.match(part)
            if not m:
                raise ConfigError(f"cannot read cores={value!r}: {part!r} is not N or N-M; write e.g. '0,1,4-7'")
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) is not None else lo
            if hi < lo:
                raise ConfigError(f"cores range {part.strip()!r} runs backwards; write {hi}-{lo}")
            if hi > MAX_CORE_INDEX:
                raise ConfigError(f"cores={value!r}: core {hi} is above {MAX_CORE_INDEX}, the highest index accepted")
            cores.extend(range(lo, hi + 1))
    else:
        try:
            cores = list(value)
        except TypeError as exc:
            raise ConfigError(f"cores must be an int, a list of ints or a string, got {value!r}") from exc
        for c in cores:
            if isinstance(c, bool) or not isinstance(c, int):
                raise ConfigError(f"cores must hold ints, got {c!r}")
    if any(c > MAX_CORE_INDEX for c in cores):
        raise ConfigError(f"cores={value!r}: indices must be at most {MAX_CORE_INDEX}")
    if any(c < 0 for c in cores):
        raise ConfigError(f"cores must be >= 0, got {value!r}")
    if not cores:
        raise ConfigError("cores is empty; leave it out to capture every NeuronCore")
    return tuple(sorted(set(cores)))


#: Entries a memo of :func:`remember` holds before it starts again from empty.
MEMO_LIMIT = 256


def remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    """Store ``value`` in a bounded memo (validated options, region set-ups): a long job that
    builds regions of ever new names must not grow it for ever."""
    if len(memo) >= MEMO_LIMIT:
        memo.clear()
    memo[key] = value


def build_options(defaults: dict[str, Any] | None = None, **given: Any) -> Options:
    """Validate ``given`` over ``defaults`` and return frozen :class:`Options`.

    Raises :class:`ConfigError` (a ``NeuronscopeError``) naming the option and the fix.
    """
    unknown = sorted(set(given) - _KNOWN)
    if unknown:
        raise ConfigError(
            f"unknown option(s) {', '.join(unknown)}; known options are {', '.join(sorted(_KNOWN))}"
        )
    merged: dict[str, Any] = dict(defaults or {})
    merged.update(given)
    return _validated(merged)


_PLAIN_TYPES = frozenset({str, bool, int, float, type(None)})


def options_key(given: dict[str, Any]) -> tuple[Any, ...] | None:
    """A cache key for options that are plain values (str, bool, int, float, None), else None.

    The types are part of it (``enabled=1`` equals ``enabled=True`` but is refused), and only
    plain values qualify: a tuple compares its items by value (``(0, True) == (0, 1)``), and a
    path object can change what it points to.
    """
    types = tuple(map(type, given.values()))
    return (*given.items(), types) if _PLAIN_TYPES.issuperset(types) else None


def _validated(merged: dict[str, Any]) -> Options:
    name = merged.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ConfigError(f"name must be a non-empty string, got {name!r}")
    backend = merged.get("backend", "auto")
    if isinstance(backend, type) and callable(getattr(backend, "make_profiler", None)):
        pass  # a Backend subclass of the caller's own (a test's fake, a custom profiler)
    elif not isinstance(backend, str) or backend.lower() not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    else:
        merged["backend"] = backend.lower()
    out_dir = merged.get("output_dir")
    if out_dir is not None:
        if not isinstance(out_dir, (str, os.PathLike)) or not str(out_dir):
            raise ConfigError(f"output_dir must be a path, got {out_dir!r}")
        merged["output_dir"] = os.fspath(out_dir)
        if not isinstance(merged["output_dir"], str) or "\x00" in merged["output_dir"]:
            raise ConfigError(f"output_dir must be a text path without NUL characters, got {out_dir!r}")
    for key in ("export", "record_shapes", "with_stack", "profile_memory", "enabled", "hints", "print_summary"):
        if key in merged:
            _check_bool(key, merged[key])
    if "warmup" in merged:
        _check_count("warmup", merged["warmup"], 0)
    if merged.get("active") is not None:
        _check_count("active", merged["active"], 1)
    if merged.get("one_session") is not None:
        _check_bool("one_session", merged["one_session"])
    if merged.get("max_events_per_nc") is not None:
        _check_count("max_events_per_nc", merged["max_events_per_nc"], 1)
    explorer = merged.get("neuron_explorer")
    if explorer is not None and not isinstance(explorer, bool):
        if not isinstance(explorer, (str, os.PathLike)) or not str(explorer) or "\x00" in str(explorer):
            raise ConfigError(f"neuron_explorer must be a path to neuron-explorer, or False, got {explorer!r}")
        merged["neuron_explorer"] = os.fspath(explorer)
    elif explorer is True:
        merged["neuron_explorer"] = None
    merged["modes"] = parse_modes(merged.get("modes"))
    merged["cores"] = parse_cores(merged.get("cores"))
    fmt = merged.get("trace_format", "auto")
    if fmt not in ("auto", "json", "gz", "none"):
        raise ConfigError(f"trace_format must be 'auto', 'json', 'gz' or 'none', got {fmt!r}")
    return Options(**merged)
