"""Placement hints: the requirement names a job uses to ask for a pilot of a given kind.

A job may name one of its queue's pilot shapes (``InstanceType``) or pass batch-system options to the pilot
that runs it (``BackendOptions``, in the grammar of :mod:`taskqueues.backend_options`). The submission checks
them and stores them in the task queue's definition (``matcher.submission``); the director reads them from
there to submit the pilot they ask for (``pilot.director``). Both sides name them from here.
"""

from __future__ import annotations

#: The requirement naming the pilot shape a job wants.
INSTANCE_TYPE = "InstanceType"

#: The requirement carrying batch-system options for the job's pilot.
BACKEND_OPTIONS = "BackendOptions"

__all__ = ["BACKEND_OPTIONS", "INSTANCE_TYPE"]
