"""The errors neuronscope raises on purpose.

Every one of them derives from :class:`NeuronscopeError`, so a caller can catch the library's
own complaints without catching the user's exceptions, which always pass through unchanged.
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailableError",
    "ConfigError",
    "NeuronscopeError",
    "RunLoadError",
    "TraceFormatError",
]


class NeuronscopeError(Exception):
    """Base class of every error that neuronscope raises on purpose."""


class ConfigError(NeuronscopeError, ValueError):
    """An option has a bad value; raised when the decorator or region is built."""


class BackendUnavailableError(NeuronscopeError):
    """The requested backend (``neuron`` or ``cuda``) is not present on this machine."""


class RunLoadError(NeuronscopeError):
    """A run directory or ``result.json`` cannot be read: missing, corrupt, foreign or too new."""


class TraceFormatError(NeuronscopeError):
    """A file given to ``from_trace`` is not a readable Chrome trace written by torch.profiler."""
