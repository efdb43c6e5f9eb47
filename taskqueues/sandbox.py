"""The payload sandbox's names, shared by submission (validation) and the pilot (:mod:`pilot.agent.sandbox`).

``payload_sandbox`` (setting, pilot option ``--payload-sandbox``): ``"bwrap"`` (default) or ``"none"``.

A job opts in to what its sandbox withholds by three requirements. They are directions to the pilot, not
matched against the catalog (:data:`DIRECTIVES`; like the consumables, they still make the task queue):

* ``sandbox_network = "yes"``: the payload shares the node's network (by default it has only its own
  loopback).
* ``sandbox_ro = "/path"`` or a list of paths: absolute, normalised paths bound read-only into the sandbox
  (a path under ``/tmp``, ``/home``... that the sandbox otherwise hides; the rest of the system is
  readable anyway).
* ``sandbox_rw = "/path"`` or a list: paths bound writable (created, mode 0755, when missing), e.g. the
  directory a workflow's jobs share files through.

The pilot refuses (fails the job with the reason) a path outside the site's ``payload_shared_paths``, one of
the hidden system places itself (``/tmp``, ``/home``...), or one that is, holds or lies inside a private
path of the deployment (the state directory, the pilot's work area, its home).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from taskqueues.errors import RequirementError, shown

__all__ = [
    "BWRAP",
    "DIRECTIVES",
    "NETWORK",
    "NONE",
    "READ_ONLY",
    "READ_WRITE",
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
READ_WRITE = "sandbox_rw"
#: Requirements that direct the pilot's sandbox: never matched against a queue's parameters.
DIRECTIVES = frozenset({NETWORK, READ_ONLY, READ_WRITE})


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
    elif name in (READ_ONLY, READ_WRITE):
        paths = list(value) if isinstance(value, list | tuple) else [value]
        for path in paths:
            if not isinstance(path, str) or not path.startswith("/"):
                raise RequirementError(f"{name} needs absolute paths, got {shown(path)}", job=job, field=name)
            if os.path.normpath(path) != path or path.startswith("//") or path == "/":
                raise RequirementError(
                    f"{name}: {shown(path)} is not a normalised path below / (no .., //, trailing /)",
                    job=job,
                    field=name,
                )


def network_wanted(requirements: Mapping[str, object]) -> bool:
    return requirements.get(NETWORK) == "yes"


def read_only_paths(requirements: Mapping[str, object], name: str = READ_ONLY) -> list[str]:
    """The paths a job asked to see read-only (``name`` READ_WRITE: writable); ``ValueError`` for a value
    submission would have refused."""
    value = requirements.get(name)
    if value is None:
        return []
    paths: list[str] = []
    for path in list(value) if isinstance(value, list | tuple) else [value]:
        if not isinstance(path, str) or not path.startswith("/") or os.path.normpath(path) != path or path == "/":
            raise ValueError(f"{name}: not an absolute normalised path: {path!r}")
        paths.append(path)
    return paths
