"""The task-queue store: the one part of Pilotfish that talks to Redis, and its only door.

Code outside this package imports from here and nowhere deeper (``tests/test_layers.py`` holds ``matcher/``
and ``pilot/`` to it): :class:`Store` (jobs, leases, the match: every operation one atomic Lua script,
errors converted by one guard) and its rooms, each reached from it by one property (``store.shares``,
``store.pilots``, ``store.control``, ``store.registry``…; :mod:`taskqueues.store.part`); the record types;
and the few pure helpers named in ``__all__`` (account names, the shares file, ACL rules, URL forms).
Nothing here hands out a raw Redis client.
"""

from .access import (
    CONTROL_USER,
    control_rules,
    is_secret,
    new_password,
    pilot_rules,
    pilot_selectors,
    pilot_user,
    scrubbed,
)
from .census import Census
from .cluster import is_cluster
from .connection import Connection, Subscription
from .control import Control
from .counters import MATCH_BUCKETS, LatencyHistogram, StatField
from .exchange import PendingExchange
from .facade import Store
from .fairshare import (
    FairState,
    Policy,
    Shares,
    default_owner,
    job_account,
    limit_hit,
    parse_policy,
    rank,
    read_policy,
)
from .fairshare import check_name as check_account_name
from .guard import shown_url
from .keys import DEFAULT_GROUP, Keys, account_of, account_tq
from .lifecycle import JobEvent, JobUpdate, Placed
from .lock import Lock, LockError
from .moves import CHUNK as MOVE_CHUNK
from .moves import move_community
from .notices import Claim
from .outage import Outage, OutageLogFilter
from .payload_logs import STREAMS, AttemptLog, Logs, StreamTail, escaped, shown
from .pilots import LIVE_LEASES, LivePilots, Pilots, StopRequest
from .records import (
    Job,
    JobState,
    JobUsage,
    Largest,
    NewJob,
    Parked,
    PilotOffer,
    RunResult,
    canonical_json,
    placed_spec,
    release_refusal,
    request_record,
    time_needed,
)
from .registry import Registry
from .rescore import Rescored
from .retention import Forgotten
from .sentinel import MASTER_VARIABLE as SENTINEL_MASTER_VARIABLE
from .sentinel import is_sentinel
from .sentinel import master_name as sentinel_master_name
from .sentinel import transport_options as sentinel_transport_options
from .views import Place, RecordCache, RecordView, Views

__all__ = [
    "CONTROL_USER",
    "DEFAULT_GROUP",
    "LIVE_LEASES",
    "MATCH_BUCKETS",
    "MOVE_CHUNK",
    "SENTINEL_MASTER_VARIABLE",
    "STREAMS",
    "AttemptLog",
    "Census",
    "Claim",
    "Connection",
    "Control",
    "FairState",
    "Forgotten",
    "Job",
    "JobEvent",
    "JobState",
    "JobUpdate",
    "JobUsage",
    "Keys",
    "Largest",
    "LatencyHistogram",
    "LivePilots",
    "Lock",
    "LockError",
    "Logs",
    "NewJob",
    "Outage",
    "OutageLogFilter",
    "Parked",
    "PendingExchange",
    "PilotOffer",
    "Pilots",
    "Place",
    "Placed",
    "Policy",
    "RecordCache",
    "RecordView",
    "Registry",
    "Rescored",
    "RunResult",
    "Shares",
    "StatField",
    "StopRequest",
    "Store",
    "StreamTail",
    "Subscription",
    "Views",
    "account_of",
    "account_tq",
    "canonical_json",
    "check_account_name",
    "control_rules",
    "default_owner",
    "escaped",
    "is_cluster",
    "is_secret",
    "is_sentinel",
    "job_account",
    "limit_hit",
    "move_community",
    "new_password",
    "parse_policy",
    "pilot_rules",
    "pilot_selectors",
    "pilot_user",
    "placed_spec",
    "rank",
    "read_policy",
    "release_refusal",
    "request_record",
    "scrubbed",
    "sentinel_master_name",
    "sentinel_transport_options",
    "shown",
    "shown_url",
    "time_needed",
]
