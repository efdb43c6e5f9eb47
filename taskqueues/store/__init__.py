"""The task-queue store: the one part of Pilotfish that talks to Redis.

Everything else reads and writes the store through this package: the facade (:class:`Store`, every
operation on jobs one atomic Lua script, errors converted by one guard), the key names (``keys``), the typed
records (``records``), read models for the operator's views and re-pressure (``reads``), the write of what
re-pressure computed (``rescore``), the director's pilot registry (``registry``), subscriptions, pings and
connections of their own (``connection``), and the helpers the long-running components share (``lock``,
``alive``, ``stops``, ``outage``). ``access`` holds the ACL rules of its users, ``redis_server`` starts a
server of our own. ``sentinel`` and ``cluster`` read the URL forms
of a Sentinel-managed primary and of a Redis Cluster (a community's client there talks to the primary owning
its slot).
"""

from .facade import Store
from .lifecycle import JobEvent, Placed
from .records import Job, JobState

__all__ = ["Job", "JobEvent", "JobState", "Placed", "Store"]
