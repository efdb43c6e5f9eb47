"""The task-queue store: the one part of Pilotfish that talks to Redis, and its only door.

Code outside this package imports from here and nowhere deeper: :class:`Store` (jobs, leases, the match:
every operation one atomic Lua script, errors converted by one guard) and its rooms, reached from it by
one property each (``store.shares``…, :mod:`taskqueues.store.part`); the record types; and the few pure
helpers named in ``__all__`` (account names, the shares file). Nothing here hands out a raw Redis client.
"""

from .facade import Store
from .fairshare import (
    DEFAULT_GROUP,
    FairState,
    Policy,
    Shares,
    account_of,
    account_tq,
    default_owner,
    job_account,
    limit_hit,
    rank,
    read_policy,
)
from .fairshare import check_name as check_account_name

__all__ = [
    "DEFAULT_GROUP",
    "FairState",
    "Policy",
    "Shares",
    "Store",
    "account_of",
    "account_tq",
    "check_account_name",
    "default_owner",
    "job_account",
    "limit_hit",
    "rank",
    "read_policy",
]
