"""Batch-system backends that start pilots: local processes, Slurm, Grid Engine.

The site director uses :func:`make_backend` and the :class:`Backend` interface only; see
:mod:`pilot.backends.base` for the states and the request, and each backend module for how it maps a
pilot onto its batch system.
"""

from __future__ import annotations

from taskqueues.backend_options import BackendOptionError, parse_options, parse_sge_options, parse_slurm_options

from .base import (
    FINAL_STATES,
    Backend,
    BackendCommandError,
    PilotRequest,
    PilotState,
    PilotStatus,
    submit_rate,
)
from .factory import make_backend, reset_conversion_warnings
from .local import LocalBackend, LocalSettings
from .sge import SgeBackend, SgeSettings
from .slurm import SlurmBackend, SlurmSettings

__all__ = [
    "FINAL_STATES",
    "Backend",
    "BackendCommandError",
    "BackendOptionError",
    "LocalBackend",
    "LocalSettings",
    "PilotRequest",
    "PilotState",
    "PilotStatus",
    "SgeBackend",
    "SgeSettings",
    "SlurmBackend",
    "SlurmSettings",
    "make_backend",
    "parse_options",
    "parse_sge_options",
    "parse_slurm_options",
    "reset_conversion_warnings",
    "submit_rate",
]
