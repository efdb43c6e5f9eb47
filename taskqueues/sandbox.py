"""The payload sandbox's names, shared by submission (validation) and the pilot (:mod:`pilot.agent.sandbox`).

``payload_sandbox`` (setting, pilot option ``--payload-sandbox``): ``"bwrap"`` (default) or ``"none"``.

A job opts in to what its sandbox withholds by two requirements. Like every free-form requirement they are
also matched (RFC #7): a job is only matched at queues whose catalog entry carries the same parameter, so
the site decides where network or a path may be granted.

* ``sandbox_network = "yes"``: the payload shares the node's network (by default it has only its own
  loopback).
* ``sandbox_ro = "/path"`` or a list of paths: absolute, normalised paths bound read-only into the sandbox
  (a path under ``/tmp``, ``/home``... that the sandbox otherwise hides; the rest of the system is
  readable anyway). The pilot refuses (fails the job) a path that is or holds a private path of the
  deployment (state directory, the pilot's work area, home).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from taskqueues.errors import RequirementError, shown

__all__ = [
    "BWRAP",
    "NETWORK",
    "NONE",
    "READ_ONLY",
    "SANDBOXES",
    "check_requirement",
    "network_wanted",
    "none_warning",
    "read_only_paths",
]

BWRAP = "bwrap"
NONE = "none"
SANDBOXES = (BWRAP, NONE)

NETWORK = "sandbox_network"
READ_ONLY = "sandbox_ro"


def none_warning() -> str:
    """The one warning ``pilotfish up``, the director and a pilot print when payloads run unconfined."""
    return (
        'payload_sandbox = "none": payloads run unconfined, as the pilot\'s user: they can read every file that '
        "user can (the state directory and its credentials included), the environment of every process of that "
        "user that is not marked non-dumpable, other payloads' work areas and outputs, and the network"
    )


def check_requirement(name: str, value: object, job: str | None) -> None:
    """Refuse a sandbox requirement that cannot mean what it says (called by requirement validation)."""
    if name == NETWORK:
        if value != "yes":
            raise RequirementError(f'{NETWORK} must be "yes" (or absent), got {shown(value)}', job=job, field=name)
    elif name == READ_ONLY:
        paths = list(value) if isinstance(value, list | tuple) else [value]
        for path in paths:
            if not isinstance(path, str) or not path.startswith("/"):
                raise RequirementError(f"{READ_ONLY} needs absolute paths, got {shown(path)}", job=job, field=name)
            if os.path.normpath(path) != path or path.startswith("//") or path == "/":
                raise RequirementError(
                    f"{READ_ONLY}: {shown(path)} is not a normalised path below / (no .., //, trailing /)",
                    job=job,
                    field=name,
                )


def network_wanted(requirements: Mapping[str, object]) -> bool:
    return requirements.get(NETWORK) == "yes"


def read_only_paths(requirements: Mapping[str, object]) -> list[str]:
    """The paths a job asked to see read-only; ``ValueError`` for a value submission would have refused."""
    value = requirements.get(READ_ONLY)
    if value is None:
        return []
    paths: list[str] = []
    for path in list(value) if isinstance(value, list | tuple) else [value]:
        if not isinstance(path, str) or not path.startswith("/") or os.path.normpath(path) != path or path == "/":
            raise ValueError(f"{READ_ONLY}: not an absolute normalised path: {path!r}")
        paths.append(path)
    return paths
