"""Who may do what (issue 30): the owner of a submission is the caller, its group one of the caller's groups; a
user acts on its own requests and jobs, a group admin on its groups', an operator on everything and alone on
shares, drains, tokens and the audit log. Whether users may see others' requests and jobs is
``api_users_see_all`` (Slurm's PrivateData; default: they may not). Each refusal is :class:`Forbidden` naming
who, what and why."""

from __future__ import annotations

from taskqueues.errors import Forbidden
from taskqueues.store import Store, account_of

from ..job_release import account_of_job
from .identity import GROUP_ADMIN, Identity


def owner_of_submission(caller: Identity, owner: str, group: str, default_group: str = "default") -> tuple[str, str]:
    """The (owner, group) a submission is stored with: the caller and its group (``group``, else the workflow's,
    else the caller's first); :class:`Forbidden` when a non-operator names another owner or a group not its own."""
    owner = owner or caller.user
    group = group or (caller.groups[0] if caller.groups else default_group)
    if caller.operator:
        return owner, group
    if owner != caller.user:
        raise Forbidden(f"{caller.user} may not submit as {owner}: a submission's owner is its submitter")
    if group not in caller.groups:
        raise Forbidden(f"{caller.user} is not in group {group} (their groups: {', '.join(caller.groups) or 'none'})")
    return owner, group


def may_act(caller: Identity, group: str, owner: str) -> bool:
    """Whether ``caller`` may act on (cancel, kill) what ``owner`` submitted in ``group``."""
    return caller.operator or owner == caller.user or (caller.role == GROUP_ADMIN and group in caller.groups)


def may_see(caller: Identity, group: str, owner: str, users_see_all: bool) -> bool:
    return users_see_all or may_act(caller, group, owner)


def check_act(caller: Identity, what: str, group: str, owner: str) -> None:
    if not may_act(caller, group, owner):
        raise Forbidden(
            f"{caller.user} may not act on {what}: it belongs to {owner} (group {group}); only its owner, "
            "the group's admins and operators may"
        )


def check_see(caller: Identity, what: str, group: str, owner: str, users_see_all: bool) -> None:
    if not may_see(caller, group, owner, users_see_all):
        raise Forbidden(f"{caller.user} may not see {what} of {owner} in group {group} (private: api_users_see_all)")


def require_operator(caller: Identity, what: str) -> None:
    if not caller.operator:
        raise Forbidden(f"{caller.user} ({caller.role}) may not {what}: operators only")


def task_queue_account(tq_id: str) -> tuple[str, str]:
    """A task queue's (group, owner): its id names them (``taskqueues.store.keys.account_of``)."""
    group, owner, _ = account_of(tq_id)
    return group, owner


def job_account(store: Store, job: str) -> tuple[str, str]:
    """A job's (group, owner); NotFound for an unknown job."""
    return account_of_job(store, store.job(job))


def request_account(store: Store, request: str) -> tuple[str, str]:
    """A request's (group, owner); NotFound for an unknown request."""
    record = store.request(request)
    return str(record.get("group") or "default"), str(record.get("owner") or "default")


__all__ = [
    "check_act",
    "check_see",
    "job_account",
    "may_act",
    "may_see",
    "owner_of_submission",
    "request_account",
    "require_operator",
    "task_queue_account",
]
