"""Placement hints: the requirement names a job uses to ask for a pilot of a given kind.

A job may name one of its queue's pilot shapes (``InstanceType``) or pass batch-system options to the pilot
that runs it (``BackendOptions``, in the grammar of :mod:`taskqueues.backend_options`). The submission checks
them and stores them in the task queue's definition (``matcher.submission``); the director reads them from
there to submit the pilot they ask for (``pilot.director``). Both sides name them from here, and the mark
(``SubmitPool``) that splits a requirement class by the queues its jobs' exact values fit.
"""

from __future__ import annotations

#: The requirement naming the pilot shape a job wants.
INSTANCE_TYPE = "InstanceType"

#: The requirement carrying batch-system options for the job's pilot.
BACKEND_OPTIONS = "BackendOptions"

#: The mark of a task queue split off its requirement class because its jobs' exact consumables fit more
#: queues than the class's bucket does: the first 12 hex digits of SHA-256 of the sorted eligible queue ids
#: (``matcher.submission.place``). Not a requirement: readers of a definition drop it.
SUBMIT_POOL = "SubmitPool"

__all__ = ["BACKEND_OPTIONS", "INSTANCE_TYPE", "SUBMIT_POOL"]
